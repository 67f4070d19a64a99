"""The one interface every policy backend offers, so the proxy never knows which one it runs on.

Rules every backend keeps:
- each method is one transaction; a reader never sees half a statement;
- policy names are unique per table and compare case-insensitively, like Spark identifiers
  (`p` and `P` on one table are the same policy); the name keeps the spelling of the
  CREATE that last wrote it;
- the store owns the timestamps (UTC): `created_at` is kept by OR REPLACE, `updated_at`
  is set on every write; the timestamps of the policy handed to `create` are ignored;
- `version()` grows with every committed change and never otherwise, so a cache can tell
  "nothing changed" from one cheap read;
- every committed change is recorded in the store's history in its own transaction: one
  entry per policy it created, replaced or dropped, all under the version the change made,
  with who made it and through which door (`Provenance`), and the policy before and after.
  So the history is complete from `history_since()` on, and `state_at(v)` can give back the
  policies exactly as they were at any version since (`rowgate policies rollback`).
"""

from __future__ import annotations

import builtins
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Self

from rowgate.policy.model import RowAccessPolicy, TableName

ChangeListener = Callable[[], None]

log = logging.getLogger(__name__)


class PolicyStoreError(Exception):
    pass


class PolicyExists(PolicyStoreError):
    def __init__(self, table: TableName, name: str):
        super().__init__(f"row access policy {name} already exists on {table}")
        self.table, self.name = table, name


class PolicyNotFound(PolicyStoreError):
    def __init__(self, table: TableName, name: str):
        super().__init__(f"row access policy {name} does not exist on {table}")
        self.table, self.name = table, name


class PolicyConflict(PolicyStoreError):
    """The policies changed between reading them and a write that was planned on them."""

    def __init__(self, expected: int, found: int):
        super().__init__(
            f"the row access policies changed meanwhile (version {found}, the change was planned on version {expected});"
            " nothing was written"
        )
        self.expected, self.found = expected, found


class HistoryUnavailable(PolicyStoreError):
    """A version the history cannot give back: not reached yet, or older than the history."""


@dataclass(frozen=True)
class Provenance:
    """Who made a change, and through which door: recorded with the change in the history.

    `via` is one of `VIAS`; `detail` says more where it helps (the statement, the rollback's
    target version, the table that was dropped).
    """

    author: str
    via: str
    detail: str = ""


VIAS = ("sql", "admin_api", "apply", "rollback", "table_drop", "table_rename", "store")
UNATTRIBUTED = Provenance("unknown", "store")


@dataclass(frozen=True)
class Put:
    """Store `policy` in its slot (its table and case-insensitive name): create or replace.

    The store sets `updated_at`; `created_at` is the existing policy's, or now, unless
    `restore` (a rollback, a policy following its renamed table) keeps the one `policy`
    carries. With `if_absent` an existing policy of that name is `PolicyExists` and the whole
    change is refused.
    """

    policy: RowAccessPolicy
    restore: bool = False
    if_absent: bool = False


@dataclass(frozen=True)
class Remove:
    """Drop the policy `name` on `table`, if there is one."""

    table: TableName
    name: str


PolicyChange = Put | Remove


@dataclass(frozen=True)
class HistoryEntry:
    """One policy's change: `before` and `after` are None where there was or is no policy.

    Entries of one change share its `version` (the store version it made), time, author and
    door; `seq` orders them within it.
    """

    version: int
    seq: int
    changed_at: datetime
    author: str
    via: str
    detail: str
    table: TableName
    policy_name: str
    before: RowAccessPolicy | None
    after: RowAccessPolicy | None

    @property
    def action(self) -> str:
        """`create`, `replace` or `drop`."""
        if self.before is None:
            return "create"
        return "drop" if self.after is None else "replace"


Slot = tuple[RowAccessPolicy | None, RowAccessPolicy | None]
"""What one change did to one policy slot: (before, after)."""


class PolicyStore(ABC):
    def __init__(self) -> None:
        self._listeners: list[ChangeListener] = []
        self._listeners_lock = threading.Lock()

    # Every write takes `by`, recorded in the history; `UNATTRIBUTED` only for tools and
    # tests that write the store directly: each door of the proxy says who and how.

    @abstractmethod
    def create(
        self, policy: RowAccessPolicy, *, replace: bool = False, if_not_exists: bool = False, by: Provenance = UNATTRIBUTED
    ) -> RowAccessPolicy:
        """Store `policy`; returns what is stored (with the store's timestamps).

        An existing policy of that name is a `PolicyExists` error, is overwritten with
        `replace`, or is returned unchanged with `if_not_exists` (as BigQuery does).
        """

    @abstractmethod
    def drop(self, table: TableName, name: str, *, if_exists: bool = False, by: Provenance = UNATTRIBUTED) -> bool:
        """Remove one policy; False if it did not exist and `if_exists`, else `PolicyNotFound`."""

    @abstractmethod
    def drop_all(self, table: TableName, *, by: Provenance = UNATTRIBUTED) -> int:
        """Remove every policy on `table` (the table is unprotected afterwards); returns how many."""

    @abstractmethod
    def rename_table(self, old: TableName, new: TableName, *, by: Provenance = UNATTRIBUTED) -> int:
        """Move the policies with a renamed table, so protection survives ALTER TABLE ... RENAME.

        A name clash with policies already on `new` is `PolicyExists` and moves nothing:
        silently merging two tables' policies could widen access.
        """

    @abstractmethod
    def apply(self, changes: Sequence[PolicyChange], *, by: Provenance = UNATTRIBUTED, expect_version: int | None = None) -> int:
        """Make every change in one transaction, recorded as one version; returns the version.

        A `Put` of a policy identical to the stored one (name spelling, grantees, filter) and
        a `Remove` of a missing policy change nothing; when nothing changes the version stays.
        With `expect_version`, a store whose version differs is a `PolicyConflict` and
        nothing is written (the changes were planned on policies that are gone).
        """

    @abstractmethod
    def history(self, table: TableName | None = None, *, after_version: int = 0) -> list[HistoryEntry]:
        """The recorded changes with a version above `after_version`, on `table` or on every
        table, oldest first (by version, then `seq`)."""

    @abstractmethod
    def history_since(self) -> int:
        """The version the history starts from: every change after it is recorded (0 for a
        store made with history; a store upgraded to it starts at its version then)."""

    @abstractmethod
    def _undo_read(self, version: int) -> tuple[int, int, builtins.list[RowAccessPolicy], builtins.list[HistoryEntry]]:
        """One consistent read: (version, history_since, every policy, history after `version`)."""

    def state_at(self, version: int, table: TableName | None = None) -> builtins.list[RowAccessPolicy]:
        """The policies (on `table`, or all) exactly as they were when the store was at `version`.

        Computed from the policies now by undoing, newest first, every recorded change after
        `version`. A version the history does not cover is `HistoryUnavailable`.
        """
        return self.load_at(version, table)[2]

    def load_at(
        self, version: int, table: TableName | None = None
    ) -> tuple[int, builtins.list[RowAccessPolicy], builtins.list[RowAccessPolicy]]:
        """From one consistent read: (the version now, every policy now, the policies on
        `table` (or all) at `version`), so a rollback is planned on what it replaces."""
        current, since, policies, entries = self._undo_read(version)
        return current, policies, policies_at(version, current, since, policies, entries, table)

    @abstractmethod
    def list(self, table: TableName | None = None) -> list[RowAccessPolicy]:
        """Policies on `table`, or on every table; ordered by table, then name."""

    @abstractmethod
    def version(self) -> int:
        """The change counter; cheap enough to poll twice a second from every replica."""

    def load(self) -> tuple[int, builtins.list[RowAccessPolicy]]:
        """Every policy with the version it belongs to.

        Backends override this with one consistent read. This fallback reads the version
        first, so a concurrent write can only make the version look older than the
        policies, which costs one extra refresh, never a missed change.
        """
        version = self.version()
        return version, self.list()

    def subscribe(self, listener: ChangeListener) -> None:
        """Call `listener` after each change committed through this object, and on backends
        that push (PostgreSQL), after changes by other processes too. It runs on the writing
        thread or on a background thread and must not block for long.
        """
        with self._listeners_lock:
            self._listeners.append(listener)

    def _changed(self) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener()
            except Exception:  # a broken listener must not turn a committed write into an error
                log.exception("policy change listener failed")

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def utc_now() -> datetime:
    return datetime.now(UTC)


def policies_at(
    version: int,
    current: int,
    since: int,
    policies: Iterable[RowAccessPolicy],
    entries: Sequence[HistoryEntry],
    table: TableName | None = None,
) -> list[RowAccessPolicy]:
    """`policies` (the store at `current`) with `entries` (every change after `version`) undone.

    >>> from rowgate.policy.model import TableName
    >>> t = TableName("c", "s", "t")
    >>> old = RowAccessPolicy(t, "p", ("allUsers",), "a", EPOCH, EPOCH)
    >>> new = RowAccessPolicy(t, "p", ("allUsers",), "b", EPOCH, EPOCH)
    >>> e = HistoryEntry(2, 0, EPOCH, "user:x@y.z", "sql", "", t, "p", old, new)
    >>> [p.filter_sql for p in policies_at(1, 2, 0, [new], [e])]
    ['a']
    >>> policies_at(0, 2, 1, [new], [e])
    Traceback (most recent call last):
    ...
    rowgate.policy.store.base.HistoryUnavailable: the history starts at version 1 ...
    """
    if version < 0 or version > current:
        raise HistoryUnavailable(f"version {version} does not exist; the policies are at version {current}")
    if version < since:
        raise HistoryUnavailable(
            f"the history starts at version {since} (the store was upgraded to keep history then);"
            f" version {version} cannot be restored"
        )
    recorded = {e.version for e in entries}
    missing = sorted(set(range(version + 1, current + 1)) - recorded)
    if missing:
        # A writer that keeps no history (an older rowgate on the same store) made these.
        raise HistoryUnavailable(
            f"version {missing[0]} was written without history (an older rowgate sharing the store?);"
            f" the policies of version {version} cannot be restored"
        )
    slots = {(p.table, policy_key(p.name)): p for p in policies}
    for entry in sorted(entries, key=lambda e: (e.version, e.seq), reverse=True):
        key = (entry.table, policy_key(entry.policy_name))
        if entry.before is None:
            slots.pop(key, None)
        else:
            slots[key] = entry.before
    kept = [p for p in slots.values() if table is None or p.table == table]
    return sorted(kept, key=lambda p: (p.table, policy_key(p.name)))


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def same_policy(a: RowAccessPolicy | None, b: RowAccessPolicy | None) -> bool:
    """Whether storing `b` over `a` changes nothing but timestamps."""
    if a is None or b is None:
        return a is b
    return (a.table, a.name, tuple(a.grantees), a.filter_sql) == (b.table, b.name, tuple(b.grantees), b.filter_sql)


def planned_slots(
    current: dict[str, RowAccessPolicy], table: TableName, changes: Iterable[PolicyChange], now: datetime
) -> dict[str, Slot]:
    """What `changes` (all on `table`) do to its slots (by policy key), given the policies there.

    Later changes to a slot see earlier ones; a slot that ends as it began is left out.
    """
    state: dict[str, RowAccessPolicy | None] = dict(current)
    for change in changes:
        if isinstance(change, Put):
            key = policy_key(change.policy.name)
            existing = state.get(key)
            if existing is not None and change.if_absent:
                raise PolicyExists(table, existing.name)
            if same_policy(existing, change.policy) and not change.restore:
                continue
            p = change.policy
            created = p.created_at if change.restore else (existing.created_at if existing is not None else now)
            state[key] = RowAccessPolicy(p.table, p.name, tuple(p.grantees), p.filter_sql, created, now)
        else:
            state[policy_key(change.name)] = None
    slots: dict[str, Slot] = {}
    for key, after in state.items():
        before = current.get(key)
        if before is None and after is None:
            continue
        if before is not None and after is not None and before == after:
            continue
        slots[key] = (before, after)
    return slots


def change_table(change: PolicyChange) -> TableName:
    return change.policy.table if isinstance(change, Put) else change.table


def policy_json(policy: RowAccessPolicy | None) -> dict[str, Any] | None:
    """A policy as the history keeps it (its table is the entry's)."""
    if policy is None:
        return None
    return {
        "name": policy.name,
        "grantees": list(policy.grantees),
        "filter": policy.filter_sql,
        "created_at": policy.created_at.isoformat(),
        "updated_at": policy.updated_at.isoformat(),
    }


def policy_from_json(table: TableName, data: dict[str, Any] | None) -> RowAccessPolicy | None:
    if data is None:
        return None
    return RowAccessPolicy(
        table=table,
        name=data["name"],
        grantees=tuple(data["grantees"]),
        filter_sql=data["filter"],
        created_at=datetime.fromisoformat(data["created_at"]).astimezone(UTC),
        updated_at=datetime.fromisoformat(data["updated_at"]).astimezone(UTC),
    )


def policy_key(name: str) -> str:
    """What makes two policy names the same: Spark's case-insensitive identifier rule."""
    return name.lower()


def check_create_flags(replace: bool, if_not_exists: bool) -> None:
    if replace and if_not_exists:
        raise ValueError("OR REPLACE and IF NOT EXISTS cannot be combined")


def planned_create(
    existing: RowAccessPolicy | None, policy: RowAccessPolicy, *, replace: bool, if_not_exists: bool
) -> tuple[RowAccessPolicy, bool]:
    """What a create leaves stored, and whether it changes anything: one rule for every
    store, so OR REPLACE keeps the creation time and IF NOT EXISTS is a no-op everywhere."""
    if existing is not None and not replace:
        if if_not_exists:
            return existing, False
        raise PolicyExists(policy.table, existing.name)
    now = utc_now()
    stored = RowAccessPolicy(
        table=policy.table,
        name=policy.name,
        grantees=tuple(policy.grantees),
        filter_sql=policy.filter_sql,
        created_at=existing.created_at if existing else now,
        updated_at=now,
    )
    return stored, True

"""The one interface every policy backend offers, so the proxy never knows which one it runs on.

Rules every backend keeps:
- each method is one transaction; a reader never sees half a statement;
- policy names are unique per table and compare case-insensitively, like Spark identifiers
  (`p` and `P` on one table are the same policy); the name keeps the spelling of the
  CREATE that last wrote it;
- the store owns the timestamps (UTC): `created_at` is kept by OR REPLACE, `updated_at`
  is set on every write; the timestamps of the policy handed to `create` are ignored;
- `version()` grows with every committed change and never otherwise, so a cache can tell
  "nothing changed" from one cheap read.
"""

from __future__ import annotations

import builtins
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import UTC, datetime

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


class PolicyStore(ABC):
    def __init__(self) -> None:
        self._listeners: list[ChangeListener] = []
        self._listeners_lock = threading.Lock()

    @abstractmethod
    def create(self, policy: RowAccessPolicy, *, replace: bool = False, if_not_exists: bool = False) -> RowAccessPolicy:
        """Store `policy`; returns what is stored (with the store's timestamps).

        An existing policy of that name is a `PolicyExists` error, is overwritten with
        `replace`, or is returned unchanged with `if_not_exists` (as BigQuery does).
        """

    @abstractmethod
    def drop(self, table: TableName, name: str, *, if_exists: bool = False) -> bool:
        """Remove one policy; False if it did not exist and `if_exists`, else `PolicyNotFound`."""

    @abstractmethod
    def drop_all(self, table: TableName) -> int:
        """Remove every policy on `table` (the table is unprotected afterwards); returns how many."""

    @abstractmethod
    def rename_table(self, old: TableName, new: TableName) -> int:
        """Move the policies with a renamed table, so protection survives ALTER TABLE ... RENAME.

        A name clash with policies already on `new` is `PolicyExists` and moves nothing:
        silently merging two tables' policies could widen access.
        """

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

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def utc_now() -> datetime:
    return datetime.now(UTC)


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

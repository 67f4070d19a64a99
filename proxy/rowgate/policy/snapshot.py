"""The policies the hot path enforces: an immutable in-memory copy of the store, kept current.

Every query of every caller needs the policies of every table it reads, so reads must never
wait for the store. A `PolicySnapshot` is immutable and replaced whole (one reference
assignment, atomic in CPython), so a query sees one consistent set of policies even while a
refresh runs.

When the store cannot be reached the cache keeps serving the last snapshot - policies
change rarely, and refusing every query because PostgreSQL blinked would be an outage - but
reports it through `healthy` and `stale_since`. Callers that must not enforce an old
snapshot (the proxy does this before answering a query) use `fresh_snapshot()`, which
raises `PolicyStoreUnavailable` once the store has been unreachable for longer than
`max_stale` seconds: past that bound, failing closed is the safe answer.

"Unreachable" includes a store that does not answer at all: a refresh still waiting for the
store counts from the moment it began, so a hung connection (a frozen server, a network
partition the kernel has not noticed yet) cannot keep an old snapshot enforced forever.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType

from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy.store.base import PolicyStore

log = logging.getLogger(__name__)


class PolicyStoreUnavailable(RuntimeError):
    pass


# A refresh waiting this long for the store turns `healthy` False (readiness NOT_SERVING)
# before `max_stale` refuses queries; normal refreshes take milliseconds.
HUNG_AFTER = 2.0


@dataclass(frozen=True)
class PolicySnapshot:
    version: int
    _by_table: Mapping[TableName, tuple[RowAccessPolicy, ...]] = field(repr=False)

    @classmethod
    def build(cls, version: int, policies: Iterable[RowAccessPolicy]) -> PolicySnapshot:
        grouped: dict[TableName, list[RowAccessPolicy]] = {}
        for p in policies:
            grouped.setdefault(p.table, []).append(p)
        by_table = {t: tuple(sorted(ps, key=lambda p: (p.name.lower(), p.name))) for t, ps in grouped.items()}
        return cls(version, MappingProxyType(by_table))

    def policies_for(self, table: TableName) -> tuple[RowAccessPolicy, ...]:
        """Every policy on `table`, whoever it grants; empty means unprotected."""
        return self._by_table.get(table, ())

    def protected_tables(self) -> frozenset[TableName]:
        return frozenset(self._by_table)

    def has_any(self) -> bool:
        """False lets the proxy skip analysis work entirely when no table is protected."""
        return bool(self._by_table)

    def all(self) -> tuple[RowAccessPolicy, ...]:
        return tuple(p for t in sorted(self._by_table) for p in self._by_table[t])


class PolicyCache:
    """Holds the current `PolicySnapshot` and refreshes it when the store's version moves.

    Refreshes come from three places: right after a write through this process (the store
    calls back on the writing thread, so the DDL normally answers only once its effect is
    enforced here; if that refresh fails, `healthy` turns False and the poll retries), from the store's push notifications (PostgreSQL NOTIFY), and from a version poll
    every `poll_interval` seconds that catches everything else (other SQLite processes,
    notifications lost while a listener reconnected).
    """

    def __init__(
        self,
        store: PolicyStore,
        *,
        poll_interval: float = 0.5,
        max_stale: float = 5.0,
        start: bool = True,
    ):
        self.store = store
        self.poll_interval = poll_interval
        self.max_stale = max_stale
        self._refresh_lock = threading.Lock()
        # Loaded before serving: a proxy that cannot read its policies must not start.
        self._snapshot = PolicySnapshot.build(*store.load())
        self._failing_since: float | None = None  # monotonic clock, for the staleness bound
        self.stale_since: datetime | None = None  # wall clock, for operators
        # When the refresh now waiting for the store began (monotonic, wall clock); None when
        # no refresh is in flight. A hung refresh never reaches _mark_failed, so this is how
        # the staleness bound still holds while the store does not answer.
        self._pending_since: tuple[float, datetime] | None = None
        self.last_error: BaseException | None = None
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._installed_listeners: list[Callable[[PolicySnapshot], None]] = []
        store.subscribe(self._on_change)
        if start:
            self._poller = threading.Thread(target=self._poll, name="rowgate-policy-poll", daemon=True)
            self._poller.start()

    @property
    def snapshot(self) -> PolicySnapshot:
        return self._snapshot

    @property
    def version(self) -> int:
        return self._snapshot.version

    @property
    def healthy(self) -> bool:
        """False while refreshes fail or hang: the snapshot may be missing recent changes."""
        if self._failing_since is not None:
            return False
        pending = self._pending_since
        return pending is None or time.monotonic() - pending[0] <= min(HUNG_AFTER, self.max_stale)

    def _unreachable_since(self) -> tuple[float, datetime] | None:
        """Since when the store has not answered: the first failure, or the refresh in flight."""
        failing_since, stale_since, pending = self._failing_since, self.stale_since, self._pending_since
        if failing_since is not None:
            return failing_since, stale_since or datetime.now(UTC)
        return pending

    def policies_for(self, table: TableName) -> tuple[RowAccessPolicy, ...]:
        return self._snapshot.policies_for(table)

    def fresh_snapshot(self) -> PolicySnapshot:
        """The snapshot, unless the store has been unreachable for longer than `max_stale`."""
        snapshot, since = self._snapshot, self._unreachable_since()
        if since is not None and time.monotonic() - since[0] > self.max_stale:
            why = self.last_error if self._failing_since is not None else "no answer yet"
            raise PolicyStoreUnavailable(
                f"the policy store has been unreachable since {since[1]:%Y-%m-%dT%H:%M:%SZ}"
                f" ({why}); refusing to enforce possibly outdated policies"
            )
        return snapshot

    def refresh(self, *, force: bool = False) -> bool:
        """Reload if the store's version moved (or `force`); True if a new snapshot was installed.

        Never raises: a failure is recorded in `healthy`/`stale_since`/`last_error`.
        """
        with self._refresh_lock:
            self._pending_since = (time.monotonic(), datetime.now(UTC))
            try:
                if not force and self.store.version() == self._snapshot.version:
                    self._mark_ok()
                    return False
                fresh = PolicySnapshot.build(*self.store.load())
            except Exception as e:  # noqa: BLE001 - any store failure makes the snapshot stale
                self._mark_failed(e)
                return False
            finally:
                self._pending_since = None
            # Installed before the failure mark is cleared: a reader never pairs "healthy"
            # with the snapshot from before the outage.
            self._snapshot = fresh
            self._mark_ok()
        for listener in list(self._installed_listeners):
            try:
                listener(fresh)
            except Exception:  # a listener's failure must not stop the others or the refresh
                log.exception("a policy snapshot listener failed")
        return True

    def on_installed(self, listener: Callable[[PolicySnapshot], None]) -> None:
        """Calls `listener(snapshot)` after each new snapshot is installed, on the refreshing
        thread (the poller, the store's listener, or the thread of a write); it must be quick."""
        self._installed_listeners.append(listener)

    def _mark_ok(self) -> None:
        if self._failing_since is not None:
            log.info("policy store reachable again")
        self._failing_since, self.stale_since, self.last_error = None, None, None

    def _mark_failed(self, error: BaseException) -> None:
        if self._failing_since is None:
            log.warning("policy refresh failed, serving version %d: %s", self._snapshot.version, error)
            self._failing_since = time.monotonic()
            self.stale_since = datetime.now(UTC)
        self.last_error = error

    def _on_change(self) -> None:
        if not self._stop.is_set():
            self.refresh()

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_interval):
            self.refresh()

    def close(self) -> None:
        """Stop polling; the store stays open (it is the caller's)."""
        self._stop.set()
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join(timeout=2)

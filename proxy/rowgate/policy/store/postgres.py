"""Policies in PostgreSQL: for several proxy replicas that must enforce the same policies.

Every write bumps a version row and sends `NOTIFY` in the same transaction, so the
notification exists exactly when the change is committed. Replicas LISTEN on their own
connection to refresh at once, and also poll the version, because a notification sent while
a listener was reconnecting is lost for good.

When PostgreSQL cannot be reached every method raises `PostgresUnreachable`, a
`PolicyStoreError` (so callers report it as the store being unavailable, not as a bug), and
says whether a write may have been committed. Connections use TCP keepalives and a TCP user
timeout, so a silent network partition becomes an error within seconds instead of a call
that hangs until the kernel gives up (minutes).
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy.store.base import (
    UNATTRIBUTED,
    ChangeListener,
    HistoryEntry,
    PolicyChange,
    PolicyConflict,
    PolicyExists,
    PolicyNotFound,
    PolicyStore,
    PolicyStoreError,
    Provenance,
    Slot,
    change_table,
    check_create_flags,
    planned_create,
    planned_slots,
    policy_from_json,
    policy_json,
    policy_key,
    utc_now,
)

T = TypeVar("T")

log = logging.getLogger(__name__)

CHANNEL = "rowgate_policies"

# libpq connection parameters that bound how long a dead peer goes unnoticed; a DSN that
# sets any of them itself wins.
_TCP_DEFAULTS = {
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "5000",  # ms that sent data may stay unacknowledged
}


class PostgresUnreachable(PolicyStoreError, psycopg.OperationalError):
    """PostgreSQL could not be reached, or dropped the connection.

    Also a `psycopg.OperationalError`, for code that catches the driver's error.
    """


# Each entry migrates the schema from version i to i + 1; never edit a released entry.
# `{s}` is the store's schema.
_MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE {s}.policy_version (
               id integer PRIMARY KEY CHECK (id = 1),
               version bigint NOT NULL)""",
        "INSERT INTO {s}.policy_version (id, version) VALUES (1, 0)",
        """CREATE TABLE {s}.row_access_policies (
               table_catalog text NOT NULL,
               table_schema text NOT NULL,
               table_name text NOT NULL,
               policy_key text NOT NULL,
               policy_name text NOT NULL,
               grantees text[] NOT NULL,
               filter_sql text NOT NULL,
               created_at timestamptz NOT NULL,
               updated_at timestamptz NOT NULL,
               PRIMARY KEY (table_catalog, table_schema, table_name, policy_key))""",
    ],
    [
        # Every change from here on is recorded; a store that had policies before starts its
        # history at the version it had then.
        "ALTER TABLE {s}.policy_version ADD COLUMN history_since bigint NOT NULL DEFAULT 0",
        "UPDATE {s}.policy_version SET history_since = version",
        """CREATE TABLE {s}.policy_history (
               version bigint NOT NULL,
               seq integer NOT NULL,
               changed_at timestamptz NOT NULL,
               author text NOT NULL,
               via text NOT NULL,
               detail text NOT NULL,
               table_catalog text NOT NULL,
               table_schema text NOT NULL,
               table_name text NOT NULL,
               policy_key text NOT NULL,
               policy_name text NOT NULL,
               before_policy jsonb,
               after_policy jsonb,
               PRIMARY KEY (version, seq))""",
        "CREATE INDEX policy_history_by_table ON {s}.policy_history (table_catalog, table_schema, table_name, version)",
    ],
]

_HISTORY_COLUMNS = (
    "version, seq, changed_at, author, via, detail, table_catalog, table_schema, table_name, policy_name,"
    " before_policy, after_policy"
)

_COLUMNS = "table_catalog, table_schema, table_name, policy_name, grantees, filter_sql, created_at, updated_at"
_ORDER = "ORDER BY table_catalog, table_schema, table_name, policy_key"
_WHERE_TABLE = "table_catalog = %s AND table_schema = %s AND table_name = %s"


class PostgresPolicyStore(PolicyStore):
    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "rowgate",
        channel: str = CHANNEL,
        connect_timeout: float = 5.0,
        max_backoff: float = 5.0,
    ):
        super().__init__()
        self.dsn = dsn
        self.schema = schema
        self.channel = channel
        self._connect_timeout = connect_timeout
        self._max_backoff = max_backoff
        self._lock = threading.RLock()
        self._conn: psycopg.Connection | None = None
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None
        params = conninfo_to_dict(dsn)
        self._tcp_params: dict[str, Any] = {k: v for k, v in _TCP_DEFAULTS.items() if k not in params}
        # Where the store is, for error messages: never the password.
        self._where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}/{params.get('dbname') or ''}"
        self._migrate()

    # -- connections

    def _connect(self, purpose: str) -> psycopg.Connection:
        return psycopg.connect(
            self.dsn,
            autocommit=True,
            connect_timeout=max(1, int(self._connect_timeout)),
            application_name=f"rowgate-{purpose}:{self.schema}"[:63],
            **self._tcp_params,
        )

    def _run(self, work: Callable[[psycopg.Connection], T], *, retry: bool) -> T:
        try:
            return self._run_on_connection(work, retry=retry)
        except PostgresUnreachable:
            raise
        except psycopg.OperationalError as e:
            detail = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise PostgresUnreachable(f"the PostgreSQL policy store at {self._where} is unreachable: {detail}") from e

    def _run_on_connection(self, work: Callable[[psycopg.Connection], T], *, retry: bool) -> T:
        """Run `work` on the shared connection, reconnecting if the server dropped it.

        Only reads retry after a failure: a write that failed in flight may have committed,
        so it is reported instead of being applied twice. Writes still get a fresh
        connection first when the old one is known to be dead.
        """
        with self._lock:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._reset()
                self._conn = self._connect("store")
            try:
                return work(self._conn)
            except psycopg.OperationalError:
                self._reset()
                if not retry:
                    raise
            self._conn = self._connect("store")
            return work(self._conn)

    def _reset(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection may fail; it is dropped anyway
                pass
        self._conn = None

    def _q(self, text: str) -> sql.Composed:
        return sql.SQL(text).format(s=sql.Identifier(self.schema))

    def _migrate(self) -> None:
        def work(conn: psycopg.Connection) -> None:
            with conn.transaction():
                # Replicas starting together would otherwise race on CREATE ... IF NOT EXISTS.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"rowgate.migrate.{self.schema}",))
                conn.execute(self._q("CREATE SCHEMA IF NOT EXISTS {s}"))
                conn.execute(self._q("CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer NOT NULL)"))
                current = _scalar(conn, self._q("SELECT max(version) FROM {s}.schema_version")) or 0
                if current > len(_MIGRATIONS):
                    raise RuntimeError(
                        f"schema {self.schema} has policy schema version {current}; this rowgate knows up to {len(_MIGRATIONS)}"
                    )
                for statements in _MIGRATIONS[current:]:
                    for statement in statements:
                        conn.execute(self._q(statement))
                if current < len(_MIGRATIONS):
                    conn.execute(self._q("DELETE FROM {s}.schema_version"))
                    conn.execute(self._q("INSERT INTO {s}.schema_version (version) VALUES (%s)"), (len(_MIGRATIONS),))

        self._run(work, retry=True)

    # -- writes

    def _write(self, change: Callable[[psycopg.Connection, int], tuple[T, list[Slot]]], by: Provenance) -> T:
        """Run `change(conn, version)` in one transaction; it returns (result, the slots it
        changed), which are recorded in the history under the version the change makes, in
        the same transaction.

        The version row is locked first, which serialises all writers across replicas,
        so the existence check and the change cannot interleave with another writer's.
        """

        def work(conn: psycopg.Connection) -> tuple[T, bool]:
            with conn.transaction():
                locked = _scalar(conn, self._q("SELECT version FROM {s}.policy_version WHERE id = 1 FOR UPDATE"))
                result, slots = change(conn, locked)
                if slots:
                    version = _scalar(
                        conn, self._q("UPDATE {s}.policy_version SET version = version + 1 WHERE id = 1 RETURNING version")
                    )
                    self._record(conn, version, slots, by)
                    conn.execute("SELECT pg_notify(%s, %s)", (self.channel, f"{self.schema}:{version}"))
            return result, bool(slots)

        try:
            self._run(lambda conn: conn.execute("SELECT 1"), retry=True)  # notice a dead connection before writing
        except PostgresUnreachable as e:
            raise PostgresUnreachable(f"{e}; nothing was written") from e.__cause__
        try:
            result, changed = self._run(work, retry=False)
        except PostgresUnreachable as e:
            raise PostgresUnreachable(
                f"{e}; the connection failed during the write, which may or may not have been committed"
            ) from e.__cause__
        if changed:
            self._changed()
        return result

    def _put(self, conn: psycopg.Connection, stored: RowAccessPolicy) -> None:
        conn.execute(
            self._q(
                f"INSERT INTO {{s}}.row_access_policies ({_COLUMNS}, policy_key)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (table_catalog, table_schema, table_name, policy_key) DO UPDATE SET"
                " policy_name = EXCLUDED.policy_name, grantees = EXCLUDED.grantees,"
                " filter_sql = EXCLUDED.filter_sql, created_at = EXCLUDED.created_at,"
                " updated_at = EXCLUDED.updated_at"
            ),
            (
                *_table(stored.table),
                stored.name,
                list(stored.grantees),
                stored.filter_sql,
                stored.created_at,
                stored.updated_at,
                policy_key(stored.name),
            ),
        )

    def _delete(self, conn: psycopg.Connection, table: TableName, name: str) -> None:
        conn.execute(
            self._q(f"DELETE FROM {{s}}.row_access_policies WHERE {_WHERE_TABLE} AND policy_key = %s"),
            (*_table(table), policy_key(name)),
        )

    def _record(self, conn: psycopg.Connection, version: int, slots: list[Slot], by: Provenance) -> None:
        now = utc_now()
        with conn.cursor() as cur:
            cur.executemany(
                self._q(
                    f"INSERT INTO {{s}}.policy_history ({_HISTORY_COLUMNS}, policy_key)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                ),
                [
                    (
                        version,
                        seq,
                        now,
                        by.author,
                        by.via,
                        by.detail,
                        *_table(p.table),
                        p.name,
                        _jsonb(before),
                        _jsonb(after),
                        policy_key(p.name),
                    )
                    for seq, (before, after) in enumerate(slots)
                    for p in [after if after is not None else before]
                    if p is not None
                ],
            )

    def create(
        self, policy: RowAccessPolicy, *, replace: bool = False, if_not_exists: bool = False, by: Provenance = UNATTRIBUTED
    ) -> RowAccessPolicy:
        check_create_flags(replace, if_not_exists)

        def change(conn: psycopg.Connection, version: int) -> tuple[RowAccessPolicy, list[Slot]]:
            found = self._select(conn, policy.table, policy_key(policy.name))
            existing = found[0] if found else None
            stored, changed = planned_create(existing, policy, replace=replace, if_not_exists=if_not_exists)
            if not changed:
                return stored, []
            self._put(conn, stored)
            return stored, [(existing, stored)]

        return self._write(change, by)

    def drop(self, table: TableName, name: str, *, if_exists: bool = False, by: Provenance = UNATTRIBUTED) -> bool:
        def change(conn: psycopg.Connection, version: int) -> tuple[bool, list[Slot]]:
            found = self._select(conn, table, policy_key(name))
            if not found:
                if not if_exists:
                    raise PolicyNotFound(table, name)
                return False, []
            self._delete(conn, table, name)
            return True, [(found[0], None)]

        return self._write(change, by)

    def drop_all(self, table: TableName, *, by: Provenance = UNATTRIBUTED) -> int:
        def change(conn: psycopg.Connection, version: int) -> tuple[int, list[Slot]]:
            existing = self._select(conn, table)
            conn.execute(self._q(f"DELETE FROM {{s}}.row_access_policies WHERE {_WHERE_TABLE}"), _table(table))
            return len(existing), [(p, None) for p in existing]

        return self._write(change, by)

    def rename_table(self, old: TableName, new: TableName, *, by: Provenance = UNATTRIBUTED) -> int:
        if old == new:
            return 0

        def change(conn: psycopg.Connection, version: int) -> tuple[int, list[Slot]]:
            moving = self._select(conn, old)
            keys = {policy_key(p.name) for p in moving}
            clash = [p.name for p in self._select(conn, new) if policy_key(p.name) in keys]
            if clash:
                raise PolicyExists(new, clash[0])
            conn.execute(
                self._q(
                    "UPDATE {s}.row_access_policies SET table_catalog = %s, table_schema = %s, table_name = %s"
                    f" WHERE {_WHERE_TABLE}"
                ),
                (*_table(new), *_table(old)),
            )
            slots: list[Slot] = [(p, None) for p in moving]
            slots += [(None, dataclasses.replace(p, table=new)) for p in moving]
            return len(moving), slots

        return self._write(change, by)

    def apply(self, changes: Sequence[PolicyChange], *, by: Provenance = UNATTRIBUTED, expect_version: int | None = None) -> int:
        def change(conn: psycopg.Connection, version: int) -> tuple[int, list[Slot]]:
            if expect_version is not None and version != expect_version:
                raise PolicyConflict(expect_version, version)
            slots: list[Slot] = []
            now = utc_now()
            for table in sorted({change_table(c) for c in changes}):
                current = {policy_key(p.name): p for p in self._select(conn, table)}
                planned = planned_slots(current, table, [c for c in changes if change_table(c) == table], now)
                for key in sorted(planned):
                    before, after = planned[key]
                    if after is None:
                        self._delete(conn, table, key)
                    else:
                        self._put(conn, after)
                    slots.append((before, after))
            return version + (1 if slots else 0), slots

        return self._write(change, by)

    # -- reads

    def _select(self, conn: psycopg.Connection, table: TableName | None, key: str | None = None) -> list[RowAccessPolicy]:
        if table is None:
            rows = conn.execute(self._q(f"SELECT {_COLUMNS} FROM {{s}}.row_access_policies {_ORDER}"))
        elif key is None:
            rows = conn.execute(
                self._q(f"SELECT {_COLUMNS} FROM {{s}}.row_access_policies WHERE {_WHERE_TABLE} {_ORDER}"), _table(table)
            )
        else:
            rows = conn.execute(
                self._q(f"SELECT {_COLUMNS} FROM {{s}}.row_access_policies WHERE {_WHERE_TABLE} AND policy_key = %s"),
                (*_table(table), key),
            )
        return [_policy(r) for r in rows.fetchall()]

    def list(self, table: TableName | None = None) -> list[RowAccessPolicy]:
        return self._run(lambda conn: self._select(conn, table), retry=True)

    def _history(self, conn: psycopg.Connection, table: TableName | None, after_version: int) -> builtins.list[HistoryEntry]:
        if table is None:
            rows = conn.execute(
                self._q(f"SELECT {_HISTORY_COLUMNS} FROM {{s}}.policy_history WHERE version > %s ORDER BY version, seq"),
                (after_version,),
            )
        else:
            rows = conn.execute(
                self._q(
                    f"SELECT {_HISTORY_COLUMNS} FROM {{s}}.policy_history WHERE version > %s AND {_WHERE_TABLE}"
                    " ORDER BY version, seq"
                ),
                (after_version, *_table(table)),
            )
        entries = []
        for version, seq, changed_at, author, via, detail, catalog, schema, name, policy_name, before, after in rows.fetchall():
            t = TableName(catalog, schema, name)
            entries.append(
                HistoryEntry(
                    version=version,
                    seq=seq,
                    changed_at=changed_at.astimezone(UTC),
                    author=author,
                    via=via,
                    detail=detail,
                    table=t,
                    policy_name=policy_name,
                    before=policy_from_json(t, before),
                    after=policy_from_json(t, after),
                )
            )
        return entries

    def history(self, table: TableName | None = None, *, after_version: int = 0) -> builtins.list[HistoryEntry]:
        return self._run(lambda conn: self._history(conn, table, after_version), retry=True)

    def history_since(self) -> int:
        return self._run(
            lambda conn: _scalar(conn, self._q("SELECT history_since FROM {s}.policy_version WHERE id = 1")),
            retry=True,
        )

    def _undo_read(self, version: int) -> tuple[int, int, builtins.list[RowAccessPolicy], builtins.list[HistoryEntry]]:
        def work(conn: psycopg.Connection) -> tuple[int, int, builtins.list[RowAccessPolicy], builtins.list[HistoryEntry]]:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                row = conn.execute(self._q("SELECT version, history_since FROM {s}.policy_version WHERE id = 1")).fetchone()
                assert row is not None
                return row[0], row[1], self._select(conn, None), self._history(conn, None, version)

        return self._run(work, retry=True)

    def version(self) -> int:
        return self._run(
            lambda conn: _scalar(conn, self._q("SELECT version FROM {s}.policy_version WHERE id = 1")),
            retry=True,
        )

    def load(self) -> tuple[int, builtins.list[RowAccessPolicy]]:
        def work(conn: psycopg.Connection) -> tuple[int, builtins.list[RowAccessPolicy]]:
            # REPEATABLE READ: the version and the policies come from one snapshot.
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                version = _scalar(conn, self._q("SELECT version FROM {s}.policy_version WHERE id = 1"))
                return version, self._select(conn, None)

        return self._run(work, retry=True)

    # -- change notifications

    def subscribe(self, listener: ChangeListener) -> None:
        super().subscribe(listener)
        with self._lock:
            if self._listener is None and not self._stop.is_set():
                self._listener = threading.Thread(target=self._listen, name=f"rowgate-listen-{self.schema}", daemon=True)
                self._listener.start()

    def _listen(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                with self._connect("listener") as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    backoff = 0.1
                    # Whatever happened while no one was listening is only visible by asking.
                    self._changed()
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            if note.payload.partition(":")[0] == self.schema:
                                self._changed()
            except Exception as e:  # noqa: BLE001 - the listener reconnects after any failure
                if self._stop.is_set():
                    break
                log.warning("policy listener lost its connection (%s); retrying in %.1fs", e, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff)

    def close(self) -> None:
        self._stop.set()
        listener = self._listener
        if listener is not None and listener is not threading.current_thread():
            listener.join(timeout=2)
        with self._lock:
            self._reset()


def _table(t: TableName) -> tuple[str, str, str]:
    return t.catalog, t.schema, t.table


def _policy(row: tuple) -> RowAccessPolicy:
    catalog, schema, table, name, grantees, filter_sql, created, updated = row
    return RowAccessPolicy(
        table=TableName(catalog, schema, table),
        name=name,
        grantees=tuple(grantees),
        filter_sql=filter_sql,
        created_at=created.astimezone(UTC),
        updated_at=updated.astimezone(UTC),
    )


def _jsonb(policy: RowAccessPolicy | None) -> Jsonb | None:
    data = policy_json(policy)
    return None if data is None else Jsonb(data)


def _scalar(conn: psycopg.Connection, query: sql.Composed) -> Any:
    """The first column of the one row `query` returns (every caller asks for exactly one)."""
    row = conn.execute(query).fetchone()
    if row is None:
        raise RuntimeError(f"the policy store returned no row for {query.as_string(conn)}")
    return row[0]

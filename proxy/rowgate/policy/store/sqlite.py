"""Policies in one SQLite file: for a single host, where several proxy processes share the file.

WAL lets readers (the caches' version polls) run beside a writer; `BEGIN IMMEDIATE` takes
the write lock up front so the existence check and the change in one statement cannot
interleave with another process's; synchronous=FULL makes a committed policy survive a
power cut, which matters because a lost DROP is harmless but a lost CREATE exposes rows.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy.store.base import (
    UNATTRIBUTED,
    HistoryEntry,
    PolicyChange,
    PolicyConflict,
    PolicyExists,
    PolicyNotFound,
    PolicyStore,
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

# Each entry migrates the schema from version i to i + 1; never edit a released entry.
_MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE policy_version (
               id INTEGER PRIMARY KEY CHECK (id = 1),
               version INTEGER NOT NULL)""",
        "INSERT INTO policy_version (id, version) VALUES (1, 0)",
        """CREATE TABLE row_access_policies (
               table_catalog TEXT NOT NULL,
               table_schema TEXT NOT NULL,
               table_name TEXT NOT NULL,
               policy_key TEXT NOT NULL,
               policy_name TEXT NOT NULL,
               grantees TEXT NOT NULL,
               filter_sql TEXT NOT NULL,
               created_at TEXT NOT NULL,
               updated_at TEXT NOT NULL,
               PRIMARY KEY (table_catalog, table_schema, table_name, policy_key))""",
    ],
    [
        # Every change from here on is recorded; a store that had policies before starts its
        # history at the version it had then.
        "ALTER TABLE policy_version ADD COLUMN history_since INTEGER NOT NULL DEFAULT 0",
        "UPDATE policy_version SET history_since = version",
        """CREATE TABLE policy_history (
               version INTEGER NOT NULL,
               seq INTEGER NOT NULL,
               changed_at TEXT NOT NULL,
               author TEXT NOT NULL,
               via TEXT NOT NULL,
               detail TEXT NOT NULL,
               table_catalog TEXT NOT NULL,
               table_schema TEXT NOT NULL,
               table_name TEXT NOT NULL,
               policy_key TEXT NOT NULL,
               policy_name TEXT NOT NULL,
               before_policy TEXT,
               after_policy TEXT,
               PRIMARY KEY (version, seq))""",
        "CREATE INDEX policy_history_by_table ON policy_history (table_catalog, table_schema, table_name, version)",
    ],
]

_HISTORY_COLUMNS = (
    "version, seq, changed_at, author, via, detail, table_catalog, table_schema, table_name, policy_name,"
    " before_policy, after_policy"
)

_COLUMNS = "table_catalog, table_schema, table_name, policy_name, grantees, filter_sql, created_at, updated_at"
_ORDER = "ORDER BY table_catalog, table_schema, table_name, policy_key"


class SqlitePolicyStore(PolicyStore):
    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_ms: int = 10_000):
        super().__init__()
        self.path = os.fspath(path)
        # One connection per store object, shared by the cache's poll thread and request
        # threads; the lock keeps their statements from interleaving inside a transaction.
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000)
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        self._migrate()

    def _migrate(self) -> None:
        with self._transaction() as db:
            db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = db.execute("SELECT max(version) FROM schema_version").fetchone()
            current = row[0] or 0
            if current > len(_MIGRATIONS):
                raise RuntimeError(
                    f"{self.path} has policy schema version {current}; this rowgate knows up to {len(_MIGRATIONS)}"
                )
            for statements in _MIGRATIONS[current:]:
                for statement in statements:
                    db.execute(statement)
            if current < len(_MIGRATIONS):
                db.execute("DELETE FROM schema_version")
                db.execute("INSERT INTO schema_version (version) VALUES (?)", (len(_MIGRATIONS),))

    @contextmanager
    def _transaction(self, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute(f"BEGIN {mode}")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _write(self, change: Callable[[sqlite3.Connection], tuple[T, list[Slot]]], by: Provenance) -> T:
        """Run `change(db)` in a write transaction; it returns (result, the slots it changed).

        The slots are recorded in the history under the version the change makes, in the
        same transaction: a change is committed with its history or not at all.
        """
        with self._transaction() as db:
            result, slots = change(db)
            if slots:
                db.execute("UPDATE policy_version SET version = version + 1 WHERE id = 1")
                version = db.execute("SELECT version FROM policy_version WHERE id = 1").fetchone()[0]
                _record(db, version, slots, by)
        if slots:
            self._changed()
        return result

    def create(
        self, policy: RowAccessPolicy, *, replace: bool = False, if_not_exists: bool = False, by: Provenance = UNATTRIBUTED
    ) -> RowAccessPolicy:
        check_create_flags(replace, if_not_exists)

        def change(db: sqlite3.Connection) -> tuple[RowAccessPolicy, list[Slot]]:
            existing = _one(db, policy.table, policy.name)
            stored, changed = planned_create(existing, policy, replace=replace, if_not_exists=if_not_exists)
            if not changed:
                return stored, []
            _put(db, stored)
            return stored, [(existing, stored)]

        return self._write(change, by)

    def drop(self, table: TableName, name: str, *, if_exists: bool = False, by: Provenance = UNATTRIBUTED) -> bool:
        def change(db: sqlite3.Connection) -> tuple[bool, list[Slot]]:
            existing = _one(db, table, name)
            if existing is None:
                if not if_exists:
                    raise PolicyNotFound(table, name)
                return False, []
            _delete(db, table, name)
            return True, [(existing, None)]

        return self._write(change, by)

    def drop_all(self, table: TableName, *, by: Provenance = UNATTRIBUTED) -> int:
        def change(db: sqlite3.Connection) -> tuple[int, list[Slot]]:
            existing = _select(db, table)
            db.execute(
                "DELETE FROM row_access_policies WHERE table_catalog = ? AND table_schema = ? AND table_name = ?",
                _table(table),
            )
            return len(existing), [(p, None) for p in existing]

        return self._write(change, by)

    def rename_table(self, old: TableName, new: TableName, *, by: Provenance = UNATTRIBUTED) -> int:
        if old == new:
            return 0

        def change(db: sqlite3.Connection) -> tuple[int, list[Slot]]:
            moving = _select(db, old)
            keys = {policy_key(p.name) for p in moving}
            clash = [p.name for p in _select(db, new) if policy_key(p.name) in keys]
            if clash:
                raise PolicyExists(new, clash[0])
            db.execute(
                "UPDATE row_access_policies SET table_catalog = ?, table_schema = ?, table_name = ?"
                " WHERE table_catalog = ? AND table_schema = ? AND table_name = ?",
                (*_table(new), *_table(old)),
            )
            slots: list[Slot] = [(p, None) for p in moving]
            slots += [(None, dataclasses.replace(p, table=new)) for p in moving]
            return len(moving), slots

        return self._write(change, by)

    def apply(self, changes: Sequence[PolicyChange], *, by: Provenance = UNATTRIBUTED, expect_version: int | None = None) -> int:
        def change(db: sqlite3.Connection) -> tuple[int, list[Slot]]:
            version = db.execute("SELECT version FROM policy_version WHERE id = 1").fetchone()[0]
            if expect_version is not None and version != expect_version:
                raise PolicyConflict(expect_version, version)
            slots: list[Slot] = []
            now = utc_now()
            for table in sorted({change_table(c) for c in changes}):
                current = {policy_key(p.name): p for p in _select(db, table)}
                planned = planned_slots(current, table, [c for c in changes if change_table(c) == table], now)
                for key in sorted(planned):
                    before, after = planned[key]
                    if after is None:
                        _delete(db, table, key)
                    else:
                        _put(db, after)
                    slots.append((before, after))
            return version + (1 if slots else 0), slots

        return self._write(change, by)

    def history(self, table: TableName | None = None, *, after_version: int = 0) -> list[HistoryEntry]:
        with self._transaction("DEFERRED") as db:
            return _history(db, table, after_version)

    def history_since(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT history_since FROM policy_version WHERE id = 1").fetchone()[0]

    def _undo_read(self, version: int) -> tuple[int, int, builtins.list[RowAccessPolicy], builtins.list[HistoryEntry]]:
        with self._transaction("DEFERRED") as db:
            current, since = db.execute("SELECT version, history_since FROM policy_version WHERE id = 1").fetchone()
            return current, since, _select(db, None), _history(db, None, version)

    def list(self, table: TableName | None = None) -> list[RowAccessPolicy]:
        with self._transaction("DEFERRED") as db:
            return _select(db, table)

    def version(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT version FROM policy_version WHERE id = 1").fetchone()[0]

    def load(self) -> tuple[int, builtins.list[RowAccessPolicy]]:
        # One read transaction: WAL gives it a single snapshot of both tables.
        with self._transaction("DEFERRED") as db:
            version = db.execute("SELECT version FROM policy_version WHERE id = 1").fetchone()[0]
            return version, _select(db, None)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _table(t: TableName) -> tuple[str, str, str]:
    return t.catalog, t.schema, t.table


def _row(p: RowAccessPolicy) -> tuple:
    return (
        *_table(p.table),
        p.name,
        json.dumps(list(p.grantees)),
        p.filter_sql,
        p.created_at.isoformat(),
        p.updated_at.isoformat(),
    )


def _policy(row: tuple) -> RowAccessPolicy:
    catalog, schema, table, name, grantees, filter_sql, created, updated = row
    return RowAccessPolicy(
        table=TableName(catalog, schema, table),
        name=name,
        grantees=tuple(json.loads(grantees)),
        filter_sql=filter_sql,
        created_at=datetime.fromisoformat(created),
        updated_at=datetime.fromisoformat(updated),
    )


def _put(db: sqlite3.Connection, policy: RowAccessPolicy) -> None:
    db.execute(
        f"INSERT OR REPLACE INTO row_access_policies ({_COLUMNS}, policy_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*_row(policy), policy_key(policy.name)),
    )


def _delete(db: sqlite3.Connection, table: TableName, name: str) -> None:
    db.execute(
        "DELETE FROM row_access_policies WHERE table_catalog = ? AND table_schema = ? AND table_name = ? AND policy_key = ?",
        (*_table(table), policy_key(name)),
    )


def _record(db: sqlite3.Connection, version: int, slots: list[Slot], by: Provenance) -> None:
    now = utc_now().isoformat()
    for seq, (before, after) in enumerate(slots):
        p = after if after is not None else before
        assert p is not None
        db.execute(
            f"INSERT INTO policy_history ({_HISTORY_COLUMNS}, policy_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                version,
                seq,
                now,
                by.author,
                by.via,
                by.detail,
                *_table(p.table),
                p.name,
                _json_text(policy_json(before)),
                _json_text(policy_json(after)),
                policy_key(p.name),
            ),
        )


def _json_text(data: dict[str, Any] | None) -> str | None:
    return None if data is None else json.dumps(data, sort_keys=True)


def _history(db: sqlite3.Connection, table: TableName | None, after_version: int) -> list[HistoryEntry]:
    where = "version > ?"
    args: list[object] = [after_version]
    if table is not None:
        where += " AND table_catalog = ? AND table_schema = ? AND table_name = ?"
        args += list(_table(table))
    rows = db.execute(f"SELECT {_HISTORY_COLUMNS} FROM policy_history WHERE {where} ORDER BY version, seq", args)
    entries = []
    for version, seq, changed_at, author, via, detail, catalog, schema, name, policy_name, before, after in rows.fetchall():
        t = TableName(catalog, schema, name)
        entries.append(
            HistoryEntry(
                version=version,
                seq=seq,
                changed_at=datetime.fromisoformat(changed_at),
                author=author,
                via=via,
                detail=detail,
                table=t,
                policy_name=policy_name,
                before=policy_from_json(t, json.loads(before)) if before is not None else None,
                after=policy_from_json(t, json.loads(after)) if after is not None else None,
            )
        )
    return entries


def _select(db: sqlite3.Connection, table: TableName | None) -> list[RowAccessPolicy]:
    if table is None:
        rows = db.execute(f"SELECT {_COLUMNS} FROM row_access_policies {_ORDER}")
    else:
        rows = db.execute(
            f"SELECT {_COLUMNS} FROM row_access_policies"
            f" WHERE table_catalog = ? AND table_schema = ? AND table_name = ? {_ORDER}",
            _table(table),
        )
    return [_policy(r) for r in rows.fetchall()]


def _one(db: sqlite3.Connection, table: TableName, name: str) -> RowAccessPolicy | None:
    row = db.execute(
        f"SELECT {_COLUMNS} FROM row_access_policies"
        " WHERE table_catalog = ? AND table_schema = ? AND table_name = ? AND policy_key = ?",
        (*_table(table), policy_key(name)),
    ).fetchone()
    return _policy(row) if row else None

"""Policies in one SQLite file: for a single host, where several proxy processes share the file.

WAL lets readers (the caches' version polls) run beside a writer; `BEGIN IMMEDIATE` takes
the write lock up front so the existence check and the change in one statement cannot
interleave with another process's; synchronous=FULL makes a committed policy survive a
power cut, which matters because a lost DROP is harmless but a lost CREATE exposes rows.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy.store.base import (
    PolicyExists,
    PolicyNotFound,
    PolicyStore,
    check_create_flags,
    planned_create,
    policy_key,
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
]

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

    def _write(self, change: Callable[[sqlite3.Connection], tuple[T, Any]]) -> T:
        """Run `change(db)` in a write transaction; it returns (result, changed)."""
        with self._transaction() as db:
            result, changed = change(db)
            if changed:
                db.execute("UPDATE policy_version SET version = version + 1 WHERE id = 1")
        if changed:
            self._changed()
        return result

    def create(self, policy: RowAccessPolicy, *, replace: bool = False, if_not_exists: bool = False) -> RowAccessPolicy:
        check_create_flags(replace, if_not_exists)

        def change(db: sqlite3.Connection):
            existing = _one(db, policy.table, policy.name)
            stored, changed = planned_create(existing, policy, replace=replace, if_not_exists=if_not_exists)
            if not changed:
                return stored, False
            db.execute(
                f"INSERT OR REPLACE INTO row_access_policies ({_COLUMNS}, policy_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*_row(stored), policy_key(stored.name)),
            )
            return stored, True

        return self._write(change)

    def drop(self, table: TableName, name: str, *, if_exists: bool = False) -> bool:
        def change(db: sqlite3.Connection):
            gone = db.execute(
                "DELETE FROM row_access_policies WHERE table_catalog = ? AND table_schema = ? AND table_name = ?"
                " AND policy_key = ?",
                (*_table(table), policy_key(name)),
            ).rowcount
            if not gone and not if_exists:
                raise PolicyNotFound(table, name)
            return bool(gone), bool(gone)

        return self._write(change)

    def drop_all(self, table: TableName) -> int:
        def change(db: sqlite3.Connection):
            gone = db.execute(
                "DELETE FROM row_access_policies WHERE table_catalog = ? AND table_schema = ? AND table_name = ?",
                _table(table),
            ).rowcount
            return gone, gone > 0

        return self._write(change)

    def rename_table(self, old: TableName, new: TableName) -> int:
        if old == new:
            return 0

        def change(db: sqlite3.Connection):
            moving = {policy_key(p.name): p for p in _select(db, old)}
            clash = [p.name for p in _select(db, new) if policy_key(p.name) in moving]
            if clash:
                raise PolicyExists(new, clash[0])
            moved = db.execute(
                "UPDATE row_access_policies SET table_catalog = ?, table_schema = ?, table_name = ?"
                " WHERE table_catalog = ? AND table_schema = ? AND table_name = ?",
                (*_table(new), *_table(old)),
            ).rowcount
            return moved, moved > 0

        return self._write(change)

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

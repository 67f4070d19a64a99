import sqlite3

import pytest

from rowgate.policy.store import open_store
from rowgate.policy.store.sqlite import SqlitePolicyStore

from .helpers import T, policy


@pytest.fixture
def path(tmp_path):
    return tmp_path / "policies.db"


def test_durability_settings_and_schema_version(path):
    with SqlitePolicyStore(path) as store:
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert store._conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
        assert store._conn.execute("SELECT version FROM schema_version").fetchall() == [(2,)]


def test_failed_statement_rolls_back_and_connection_stays_usable(path):
    with SqlitePolicyStore(path) as store:
        store.create(policy("a", "x"))
        with pytest.raises(Exception):
            store.create(policy("a", "y"))
        assert store.version() == 1
        store.create(policy("b", "y"))
        assert store.version() == 2


def test_reopen_keeps_data_and_refuses_a_newer_schema(path):
    with SqlitePolicyStore(path) as s:
        s.create(policy("a", "x"))
    with SqlitePolicyStore(path) as s:
        assert [p.name for p in s.list()] == ["a"] and s.version() == 1
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_version SET version = 99")
    db.commit()
    db.close()
    with pytest.raises(RuntimeError, match="schema version 99"):
        SqlitePolicyStore(path)


def test_subscriber_called_once_per_committed_change(path):
    with SqlitePolicyStore(path) as store:
        seen = []
        store.subscribe(lambda: seen.append(store.version()))
        store.create(policy("a", "x"))
        store.drop(T, "missing", if_exists=True)
        store.drop(T, "a")
        assert seen == [1, 2]


def test_open_store_urls(tmp_path, monkeypatch):
    with open_store(f"sqlite://{tmp_path}/abs.db") as s:  # tmp_path starts with "/"
        assert isinstance(s, SqlitePolicyStore) and s.path == f"{tmp_path}/abs.db"
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:rel.db") as s:
        assert s.path == "rel.db"
    assert (tmp_path / "rel.db").exists()
    for bad in ("mysql://x/y", "/just/a/path.db", "sqlite://host/x.db", "sqlite:", "", "sqlite:///"):
        with pytest.raises(ValueError):
            open_store(bad)

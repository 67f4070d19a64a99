"""PostgreSQL specifics: migration under concurrency, NOTIFY between replicas, reconnects."""

import threading
import time

import psycopg
import pytest
from psycopg import sql

from rowgate.policy.snapshot import PolicyCache
from rowgate.policy.store import open_store
from rowgate.policy.store.postgres import PostgresPolicyStore

from .helpers import T, policy, wait_for

pytestmark = pytest.mark.postgres


def terminate(dsn, application_name):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchone()[0]


def test_replicas_starting_together_migrate_once(pg_dsn, pg_schema):
    stores, errors = [], []

    def start():
        try:
            stores.append(PostgresPolicyStore(pg_dsn, schema=pg_schema))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute(sql.SQL("SELECT version FROM {}.schema_version").format(sql.Identifier(pg_schema))).fetchall()
        assert rows == [(2,)]
        assert stores[0].version() == 0
    finally:
        for s in stores:
            s.close()


def test_refuses_a_newer_schema(pg_dsn, pg_schema):
    PostgresPolicyStore(pg_dsn, schema=pg_schema).close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {}.schema_version SET version = 99").format(sql.Identifier(pg_schema)))
    with pytest.raises(RuntimeError, match="schema version 99"):
        PostgresPolicyStore(pg_dsn, schema=pg_schema)


def test_write_on_one_replica_reaches_the_other_by_notify(pg_dsn, pg_schema):
    a = PostgresPolicyStore(pg_dsn, schema=pg_schema, channel=pg_schema)
    b = PostgresPolicyStore(pg_dsn, schema=pg_schema, channel=pg_schema)
    # Polling effectively off: only NOTIFY can make the second cache move.
    cache_a = PolicyCache(a, poll_interval=60)
    cache_b = PolicyCache(b, poll_interval=60)
    try:
        assert wait_for(lambda: b._listener is not None and b._listener.is_alive())
        time.sleep(0.2)  # let the listener reach LISTEN
        a.create(policy("eu", "region = 'EU'"))
        assert [p.name for p in cache_a.policies_for(T)] == ["eu"]  # local write: immediate
        assert wait_for(lambda: [p.name for p in cache_b.policies_for(T)] == ["eu"], timeout=1.0)
        b.drop(T, "eu")
        assert wait_for(lambda: cache_a.policies_for(T) == (), timeout=1.0)
    finally:
        for c in (cache_a, cache_b):
            c.close()
        for s in (a, b):
            s.close()


def test_default_cache_enforces_other_replicas_change_within_a_second(pg_dsn, pg_schema):
    a = PostgresPolicyStore(pg_dsn, schema=pg_schema)
    b = PostgresPolicyStore(pg_dsn, schema=pg_schema)
    cache_b = PolicyCache(b)
    try:
        a.create(policy("eu", "x"))
        assert wait_for(lambda: cache_b.version == 1, timeout=1.0)
    finally:
        cache_b.close()
        a.close()
        b.close()


def test_listener_reconnects_after_its_connection_is_killed(pg_dsn, pg_schema):
    a = PostgresPolicyStore(pg_dsn, schema=pg_schema, channel=pg_schema)
    b = PostgresPolicyStore(pg_dsn, schema=pg_schema, channel=pg_schema)
    cache_b = PolicyCache(b, poll_interval=60)
    try:
        listener_app = f"rowgate-listener:{pg_schema}"
        assert wait_for(lambda: _count(pg_dsn, listener_app) == 1)
        assert terminate(pg_dsn, listener_app) == 1
        a.create(policy("during", "x"))  # may be sent while nobody listens
        assert wait_for(lambda: _count(pg_dsn, listener_app) == 1, timeout=2.0)
        # The reconnect itself triggers a refresh, so the missed change is not lost.
        assert wait_for(lambda: [p.name for p in cache_b.policies_for(T)] == ["during"], timeout=1.0)
        time.sleep(0.1)
        a.create(policy("after", "x"))
        assert wait_for(lambda: len(cache_b.policies_for(T)) == 2, timeout=1.0)
    finally:
        cache_b.close()
        a.close()
        b.close()


def test_store_connection_killed_between_statements(pg_dsn, pg_schema):
    store = PostgresPolicyStore(pg_dsn, schema=pg_schema)
    try:
        store.create(policy("a", "x"))
        assert terminate(pg_dsn, f"rowgate-store:{pg_schema}") == 1
        assert [p.name for p in store.list()] == ["a"]  # reads reconnect and retry
        assert terminate(pg_dsn, f"rowgate-store:{pg_schema}") == 1
        store.create(policy("b", "y"))  # writes notice the dead connection before writing
        assert store.version() == 2
    finally:
        store.close()


def test_unreachable_server_fails_at_start(pg_schema):
    with pytest.raises(psycopg.OperationalError):
        PostgresPolicyStore("postgresql://postgres@127.0.0.1:1/test", schema=pg_schema, connect_timeout=1)


def test_open_store_picks_postgres(monkeypatch):
    made = []
    monkeypatch.setattr(PostgresPolicyStore, "__init__", lambda self, dsn, **kw: made.append(dsn))
    monkeypatch.setattr(PostgresPolicyStore, "close", lambda self: None)
    for url in ("postgresql://u@h/db", "postgres://u@h/db"):
        assert isinstance(open_store(url), PostgresPolicyStore)
    assert made == ["postgresql://u@h/db", "postgres://u@h/db"]


def test_open_store_takes_the_schema_from_the_url(pg_dsn, pg_schema):
    with open_store(f"{pg_dsn}?schema={pg_schema}") as store:
        assert store.schema == pg_schema and "schema=" not in store.dsn
        store.create(policy("a", "x"))
    with psycopg.connect(pg_dsn) as conn:
        count = conn.execute(sql.SQL("SELECT count(*) FROM {}.row_access_policies").format(sql.Identifier(pg_schema)))
        assert count.fetchone()[0] == 1
    with pytest.raises(ValueError, match="schema= once"):
        open_store(f"{pg_dsn}?schema=")


def _count(dsn, application_name):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query ILIKE 'LISTEN%%'",
            (application_name,),
        ).fetchone()[0]

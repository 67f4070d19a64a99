"""The policy store failing in the ways a network fails: hanging, refusing, dropping mid-write."""

import threading
import time

import psycopg
import pytest

from rowgate.policy.snapshot import PolicyCache, PolicyStoreUnavailable
from rowgate.policy.store.base import PolicyStoreError
from rowgate.policy.store.postgres import PostgresPolicyStore, PostgresUnreachable
from rowgate.policy.store.sqlite import SqlitePolicyStore

from .helpers import T, policy, wait_for


class HangingStore(SqlitePolicyStore):
    """`version()` blocks while `hang` is set, as a query to a frozen server does."""

    def __init__(self, path):
        super().__init__(path)
        self.hang = threading.Event()
        self.release = threading.Event()

    def version(self):
        if self.hang.is_set():
            self.release.wait()
        return super().version()


def test_a_store_that_never_answers_is_refused_after_the_bound(tmp_path):
    with HangingStore(tmp_path / "p.db") as store:
        store.create(policy("a", "x"))
        cache = PolicyCache(store, poll_interval=0.02, max_stale=0.5)
        try:
            assert cache.healthy and cache.fresh_snapshot().version == 1
            store.hang.set()
            hung_at = time.monotonic()
            # No refresh fails (it just waits), yet the bound holds: no old snapshot forever.
            assert wait_for(lambda: not cache.healthy, timeout=2.0)
            with pytest.raises(PolicyStoreUnavailable, match="unreachable"):
                deadline = time.monotonic() + 3.0
                while time.monotonic() < deadline:
                    cache.fresh_snapshot()
                    time.sleep(0.01)
            assert time.monotonic() - hung_at > 0.5
            assert cache.policies_for(T)  # still kept, only not enforced as current

            store.hang.clear()
            store.release.set()
            assert wait_for(lambda: cache.healthy, timeout=2.0)
            assert cache.fresh_snapshot().version == 1
        finally:
            store.hang.clear()
            store.release.set()
            cache.close()


def test_a_slow_refresh_within_the_bound_is_no_outage(tmp_path):
    with HangingStore(tmp_path / "p.db") as store:
        cache = PolicyCache(store, start=False, max_stale=5.0)
        store.hang.set()
        worker = threading.Thread(target=cache.refresh)
        worker.start()
        try:
            time.sleep(0.1)
            assert cache.healthy
            assert cache.fresh_snapshot().version == 0
        finally:
            store.release.set()
            worker.join(timeout=5)
        assert cache.healthy and cache._pending_since is None


def test_unreachable_postgres_is_a_store_error_without_the_password():
    with pytest.raises(PostgresUnreachable) as info:
        PostgresPolicyStore("postgresql://postgres:s3cret@127.0.0.1:1/test", connect_timeout=1)
    error = info.value
    assert isinstance(error, PolicyStoreError)  # the admin API answers UNAVAILABLE for these
    assert isinstance(error, psycopg.OperationalError)  # and it is still the driver's error
    assert "127.0.0.1:1/test" in str(error) and "unreachable" in str(error)
    assert "s3cret" not in str(error)


@pytest.mark.postgres
def test_writes_say_whether_they_may_have_happened(pg_dsn, pg_schema, monkeypatch):
    store = PostgresPolicyStore(pg_dsn, schema=pg_schema)
    try:
        store.create(policy("a", "x"))
        # The server goes away: the write is refused before anything is sent.
        store._reset()
        monkeypatch.setattr(store, "_connect", lambda purpose: (_ for _ in ()).throw(psycopg.OperationalError("refused")))
        with pytest.raises(PostgresUnreachable, match="nothing was written"):
            store.create(policy("b", "y"))
        with pytest.raises(PostgresUnreachable):
            store.list()
        monkeypatch.undo()

        # The connection dies inside the write's transaction: the outcome is unknown.
        real = store._run_on_connection

        def dies_in_the_write(work, *, retry):
            if not retry:
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            return real(work, retry=retry)

        monkeypatch.setattr(store, "_run_on_connection", dies_in_the_write)
        with pytest.raises(PostgresUnreachable, match="may or may not have been committed"):
            store.create(policy("c", "z"))
        monkeypatch.undo()
        assert [p.name for p in store.list()] == ["a"] and store.version() == 1
    finally:
        store.close()


@pytest.mark.postgres
def test_connections_notice_a_silent_peer(pg_dsn, pg_schema):
    store = PostgresPolicyStore(pg_dsn, schema=pg_schema)
    try:
        with store._connect("probe") as conn:
            params = conn.info.get_parameters()
        assert params.get("tcp_user_timeout") == "5000" and params.get("keepalives") == "1"
    finally:
        store.close()
    # A DSN's own setting wins.
    store = PostgresPolicyStore(pg_dsn + "?tcp_user_timeout=9000", schema=pg_schema)
    try:
        with store._connect("probe") as conn:
            assert conn.info.get_parameters().get("tcp_user_timeout") == "9000"
    finally:
        store.close()

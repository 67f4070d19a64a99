import time

import pytest

from rowgate.policy.model import TableName
from rowgate.policy.snapshot import PolicyCache, PolicySnapshot, PolicyStoreUnavailable
from rowgate.policy.store.sqlite import SqlitePolicyStore

from .helpers import T, policy, wait_for

OTHER = TableName("c", "s", "other")


def test_snapshot_groups_and_orders():
    snap = PolicySnapshot.build(7, [policy("b", "x"), policy("a", "y"), policy("z", "TRUE", table=OTHER)])
    assert snap.version == 7 and snap.has_any()
    assert [p.name for p in snap.policies_for(T)] == ["a", "b"]
    assert snap.policies_for(TableName("c", "s", "none")) == ()
    assert snap.protected_tables() == frozenset({T, OTHER})
    assert not PolicySnapshot.build(0, []).has_any()


@pytest.fixture
def path(tmp_path):
    return tmp_path / "p.db"


def test_write_through_this_process_is_enforced_before_the_call_returns(path):
    with SqlitePolicyStore(path) as store:
        cache = PolicyCache(store, start=False)
        assert not cache.snapshot.has_any()
        store.create(policy("a", "x"))
        assert [p.name for p in cache.policies_for(T)] == ["a"] and cache.version == 1
        store.drop_all(T)
        assert cache.policies_for(T) == ()


def test_other_process_write_seen_by_poll(path):
    with SqlitePolicyStore(path) as writer, SqlitePolicyStore(path) as reader:
        cache = PolicyCache(reader, poll_interval=0.05)
        try:
            old = cache.snapshot
            writer.create(policy("a", "x"))
            assert wait_for(lambda: cache.policies_for(T) != ())
            assert old.policies_for(T) == ()  # snapshots are immutable
        finally:
            cache.close()


def test_default_poll_sees_other_writers_within_a_second(path):
    with SqlitePolicyStore(path) as writer, SqlitePolicyStore(path) as reader:
        cache = PolicyCache(reader)
        try:
            writer.create(policy("a", "x"))
            assert wait_for(lambda: cache.version == 1, timeout=1.0)
        finally:
            cache.close()


class FlakyStore(SqlitePolicyStore):
    down = False

    def version(self):
        if self.down:
            raise ConnectionError("store down")
        return super().version()

    def load(self):
        if self.down:
            raise ConnectionError("store down")
        return super().load()


def test_unreachable_store_keeps_last_snapshot_and_reports_it(path):
    with FlakyStore(path) as store, SqlitePolicyStore(path) as writer:
        writer.create(policy("a", "x"))
        cache = PolicyCache(store, start=False, max_stale=0.2)
        assert cache.healthy and cache.stale_since is None
        store.down = True
        writer.create(policy("b", "y"))
        assert cache.refresh() is False
        assert not cache.healthy and cache.stale_since is not None
        assert isinstance(cache.last_error, ConnectionError)
        assert [p.name for p in cache.policies_for(T)] == ["a"]  # still served
        assert cache.fresh_snapshot().version == 1  # within the bound
        time.sleep(0.25)
        with pytest.raises(PolicyStoreUnavailable, match="unreachable"):
            cache.fresh_snapshot()
        store.down = False
        assert cache.refresh() is True
        assert cache.healthy and cache.stale_since is None
        assert [p.name for p in cache.fresh_snapshot().policies_for(T)] == ["a", "b"]


def test_refresh_without_change_does_not_swap(path):
    with SqlitePolicyStore(path) as store:
        cache = PolicyCache(store, start=False)
        before = cache.snapshot
        assert cache.refresh() is False and cache.snapshot is before
        assert cache.refresh(force=True) is True and cache.snapshot is not before


def test_cannot_start_without_policies(path):
    store = FlakyStore(path)
    store.down = True
    with pytest.raises(ConnectionError):
        PolicyCache(store)
    store.close()


def test_close_stops_polling_and_listening(path):
    with SqlitePolicyStore(path) as store:
        cache = PolicyCache(store, poll_interval=0.01)
        cache.close()
        assert not cache._poller.is_alive()
        store.create(policy("a", "x"))
        assert cache.version == 0  # a closed cache no longer follows the store

"""What every policy store promises, run against each backend (`open_one` in conftest.py)."""

import threading

import pytest

from rowgate.policy.model import TableName
from rowgate.policy.store import PolicyExists, PolicyNotFound

from .helpers import EPOCH, T, policy

OTHER = TableName("spark_catalog", "sales", "returns")


@pytest.fixture
def store(open_one):
    return open_one()


def test_starts_empty(store):
    assert store.version() == 0 and store.list() == [] and store.load() == (0, [])


def test_create_list_drop(store):
    stored = store.create(policy("eu", "region = 'EU'", "user:a@x.com", "group:g@x.com"))
    assert stored.created_at == stored.updated_at and stored.created_at > EPOCH
    assert stored.created_at.utcoffset().total_seconds() == 0
    store.create(policy("apac", "region = 'APAC'"))
    store.create(policy("x", "TRUE", table=OTHER))
    assert [p.name for p in store.list(T)] == ["apac", "eu"]
    assert [p.name for p in store.list()] == ["apac", "eu", "x"]  # orders < returns
    assert store.list(T)[1] == stored
    assert store.drop(T, "EU") is True  # names compare case-insensitively
    assert [p.name for p in store.list(T)] == ["apac"]
    assert store.drop_all(T) == 1 and store.list(T) == []
    assert store.drop_all(T) == 0
    assert [p.name for p in store.list()] == ["x"]


def test_exists_and_not_found(store):
    store.create(policy("eu", "a"))
    with pytest.raises(PolicyExists):
        store.create(policy("EU", "b"))
    with pytest.raises(PolicyNotFound):
        store.drop(T, "nope")
    assert store.drop(T, "nope", if_exists=True) is False
    assert store.drop(OTHER, "eu", if_exists=True) is False  # names are per table


def test_if_not_exists_keeps_the_existing_policy(store):
    first = store.create(policy("eu", "a"))
    v = store.version()
    assert store.create(policy("eu", "b"), if_not_exists=True) == first
    assert store.version() == v and store.list(T)[0].filter_sql == "a"
    assert store.create(policy("new", "c"), if_not_exists=True).name == "new"


def test_replace_keeps_created_at(store):
    first = store.create(policy("eu", "a", "user:a@x.com"))
    second = store.create(policy("Eu", "b", "user:b@x.com", "domain:x.com"), replace=True)
    assert second.created_at == first.created_at and second.updated_at >= first.updated_at
    [got] = store.list(T)
    assert got == second
    assert (got.name, got.filter_sql, got.grantees) == ("Eu", "b", ("user:b@x.com", "domain:x.com"))
    assert store.create(policy("new", "c"), replace=True).name == "new"


def test_replace_and_if_not_exists_together_is_refused(store):
    with pytest.raises(ValueError):
        store.create(policy("eu", "a"), replace=True, if_not_exists=True)
    assert store.version() == 0


def test_version_bumps_once_per_change(store):
    versions = [store.version()]
    store.create(policy("a", "x"))
    versions.append(store.version())
    store.create(policy("a", "y"), replace=True)
    versions.append(store.version())
    store.drop(T, "zzz", if_exists=True)
    store.drop_all(OTHER)
    store.rename_table(OTHER, T)
    with pytest.raises(PolicyExists):
        store.create(policy("A", "z"))
    versions.append(store.version())
    store.create(policy("b", "y"))
    store.drop_all(T)
    versions.append(store.version())
    assert versions == [0, 1, 2, 2, 4]


def test_rename_table(store):
    store.create(policy("a", "x"))
    store.create(policy("b", "y"))
    assert store.rename_table(T, OTHER) == 2
    assert store.list(T) == [] and [p.table for p in store.list(OTHER)] == [OTHER, OTHER]
    store.create(policy("A", "z"))  # clashes with the moved "a" on the way back
    with pytest.raises(PolicyExists):
        store.rename_table(OTHER, T)
    assert len(store.list(OTHER)) == 2 and len(store.list(T)) == 1  # nothing moved
    assert store.rename_table(T, T) == 0


def test_two_store_objects_see_each_others_writes(open_one):
    one, two = open_one(), open_one()
    one.create(policy("a", "x"))
    assert [p.name for p in two.list(T)] == ["a"] and two.version() == 1
    two.drop(T, "a")
    assert one.list() == [] and one.version() == 2
    two.create(policy("b", "y"))
    with pytest.raises(PolicyExists):
        one.create(policy("B", "z"))


def test_concurrent_writers_serialise(open_one):
    stores = [open_one() for _ in range(4)]
    errors = []

    def write(i, s):
        try:
            for j in range(5):
                s.create(policy(f"p{i}_{j}", "x"))
            s.create(policy("shared", "x"), if_not_exists=True)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert stores[0].version() == 21 and len(stores[0].list()) == 21


def test_subscribers_hear_about_committed_local_writes(store):
    seen = []
    store.subscribe(lambda: seen.append("change"))
    store.create(policy("a", "x"))
    store.drop(T, "a")
    # Local writes call back synchronously; a pushing backend may add more calls later.
    assert seen.count("change") >= 2

"""The history every policy store keeps, and what it gives back: run against each backend.

Every committed change is recorded with its version, author, door and the policy before and
after, in the change's own transaction; `apply` makes many changes as one version;
`state_at(v)` is exactly what `list()` showed at version v; a store made before the history
existed keeps its policies and starts its history at its version.
"""

import importlib
import threading

import pytest

from rowgate.policy.model import TableName
from rowgate.policy.store import PolicyExists, PolicyNotFound
from rowgate.policy.store.base import HistoryUnavailable, PolicyConflict, Provenance, Put, Remove

from .helpers import T, policy

OTHER = TableName("spark_catalog", "sales", "returns")
ANN = Provenance("user:ann@example.com", "sql", "CREATE ROW ACCESS POLICY")
BOB = Provenance("user:bob@example.com", "admin_api")


@pytest.fixture
def store(open_one):
    return open_one()


def content(policies):
    """What a policy is, without its timestamps."""
    return [(p.table, p.name, tuple(p.grantees), p.filter_sql) for p in policies]


def test_every_write_is_recorded_with_its_author_and_both_sides(store):
    a = store.create(policy("a", "x", "user:a@x.com"), by=ANN)
    a2 = store.create(policy("A", "y"), replace=True, by=BOB)
    store.create(policy("a", "z"), if_not_exists=True, by=BOB)  # no change, no entry
    store.drop(T, "nope", if_exists=True, by=BOB)  # neither
    with pytest.raises(PolicyExists):
        store.create(policy("a", "z"), by=BOB)
    with pytest.raises(PolicyNotFound):
        store.drop(T, "nope", by=BOB)
    b = store.create(policy("b", "y", table=OTHER), by=ANN)
    assert store.drop(T, "a", by=Provenance("user:ann@example.com", "admin_api")) is True
    history = store.history()
    assert [(e.version, e.seq, e.author, e.via, e.action, e.policy_name) for e in history] == [
        (1, 0, "user:ann@example.com", "sql", "create", "a"),
        (2, 0, "user:bob@example.com", "admin_api", "replace", "A"),
        (3, 0, "user:ann@example.com", "sql", "create", "b"),
        (4, 0, "user:ann@example.com", "admin_api", "drop", "A"),
    ]
    assert history[0].before is None and history[0].after == a and history[0].detail == "CREATE ROW ACCESS POLICY"
    assert history[1].before == a and history[1].after == a2
    assert history[2].table == OTHER and history[2].after == b
    assert history[3].before == a2 and history[3].after is None
    assert all(e.changed_at.utcoffset().total_seconds() == 0 for e in history)
    assert history[0].changed_at <= history[-1].changed_at
    assert store.version() == 4 and store.history_since() == 0
    # filtered by table and by version
    assert [e.version for e in store.history(T)] == [1, 2, 4]
    assert [e.version for e in store.history(after_version=2)] == [3, 4]
    assert [e.version for e in store.history(OTHER, after_version=3)] == []


def test_writes_without_an_author_are_recorded_as_unattributed(store):
    store.create(policy("a", "x"))
    [entry] = store.history()
    assert (entry.author, entry.via) == ("unknown", "store")


def test_drop_all_and_rename_are_one_version_each(store):
    store.create(policy("a", "x"))
    store.create(policy("b", "y"))
    moved = Provenance("user:admin@example.com", "table_rename", "sales.orders renamed to sales.returns")
    assert store.rename_table(T, OTHER, by=moved) == 2
    entries = store.history(after_version=2)
    assert {e.version for e in entries} == {3}
    assert sorted((e.table, e.action, e.policy_name) for e in entries) == [
        (T, "drop", "a"),
        (T, "drop", "b"),
        (OTHER, "create", "a"),
        (OTHER, "create", "b"),
    ]
    assert all(e.via == "table_rename" and e.detail.endswith("sales.returns") for e in entries)
    gone = Provenance("user:admin@example.com", "table_drop")
    assert store.drop_all(OTHER, by=gone) == 2
    assert store.drop_all(OTHER, by=gone) == 0  # nothing: no version, no entry
    assert {e.version for e in store.history(after_version=3)} == {4} and store.version() == 4


def test_apply_is_one_atomic_version(store):
    store.create(policy("keep", "k"))
    store.create(policy("old", "o"))
    store.create(policy("gone", "g", table=OTHER))
    changes = [
        Put(policy("keep", "k")),  # identical: no change
        Put(policy("OLD", "o2", "user:b@x.com")),  # replace, new spelling
        Put(policy("new", "n")),
        Remove(OTHER, "GONE"),
        Remove(OTHER, "never_was"),
    ]
    version = store.apply(changes, by=Provenance("user:ann@example.com", "apply"))
    assert version == store.version() == 4
    entries = store.history(after_version=3)
    assert sorted((e.table.table, e.action, e.policy_name) for e in entries) == [
        ("orders", "create", "new"),
        ("orders", "replace", "OLD"),
        ("returns", "drop", "gone"),
    ]
    assert {(e.version, e.via, e.author) for e in entries} == {(4, "apply", "user:ann@example.com")}
    stored = {p.name: p for p in store.list()}
    assert set(stored) == {"keep", "OLD", "new"}
    replaced = next(e for e in entries if e.action == "replace")
    assert stored["OLD"].created_at == replaced.before.created_at  # a replace keeps the creation time
    assert stored["OLD"].grantees == ("user:b@x.com",)
    # nothing to do: no version
    assert store.apply(changes[:1] + [Remove(OTHER, "gone")]) == 4 and store.version() == 4


def test_apply_planned_on_an_old_version_writes_nothing(open_one):
    one, two = open_one(), open_one()
    one.create(policy("a", "x"))
    seen = one.version()
    two.create(policy("b", "y"))  # someone else writes meanwhile
    with pytest.raises(PolicyConflict, match="changed meanwhile"):
        one.apply([Remove(T, "a"), Remove(T, "b")], expect_version=seen)
    assert [p.name for p in one.list()] == ["a", "b"] and one.version() == 2
    assert one.apply([Remove(T, "a")], expect_version=2) == 3


def test_a_failing_apply_leaves_no_change_and_no_history(open_one, monkeypatch):
    store = open_one()
    store.create(policy("a", "x"))
    backend = importlib.import_module(type(store).__module__)
    real = backend.planned_slots
    calls = []

    def fails_on_the_second_table(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the disk is full")
        return real(*args, **kwargs)

    monkeypatch.setattr(backend, "planned_slots", fails_on_the_second_table)
    with pytest.raises(RuntimeError):
        store.apply([Remove(T, "a"), Put(policy("b", "y", table=OTHER))])
    monkeypatch.undo()
    assert [p.name for p in store.list()] == ["a"] and store.version() == 1
    assert [e.version for e in store.history()] == [1]


def test_state_at_gives_back_every_earlier_version(store):
    seen = {store.version(): store.list()}

    def remember():
        seen[store.version()] = store.list()

    store.create(policy("a", "x", "user:a@x.com"))
    remember()
    store.create(policy("b", "y", table=OTHER))
    remember()
    store.create(policy("A", "x2"), replace=True)
    remember()
    store.apply([Remove(T, "a"), Put(policy("c", "z")), Put(policy("d", "w", table=OTHER))])
    remember()
    store.rename_table(OTHER, TableName("spark_catalog", "sales", "moved"))
    remember()
    store.create(policy("a", "again"))
    remember()
    store.drop_all(T)
    remember()
    assert sorted(seen) == list(range(8))
    for version, policies in seen.items():
        assert store.state_at(version) == policies, version  # timestamps included
        assert store.state_at(version, T) == [p for p in policies if p.table == T]
    assert store.state_at(store.version()) == store.list()


def test_state_at_refuses_versions_it_cannot_know(store):
    store.create(policy("a", "x"))
    with pytest.raises(HistoryUnavailable, match="version 5 does not exist"):
        store.state_at(5)
    with pytest.raises(HistoryUnavailable):
        store.state_at(-1)


def test_concurrent_writers_make_one_entry_per_version(open_one):
    stores = [open_one() for _ in range(4)]
    errors = []

    def write(i, s):
        try:
            for j in range(4):
                s.create(policy(f"p{i}_{j}", "x"), by=Provenance(f"user:w{i}@x.com", "sql"))
            s.apply(
                [Put(policy(f"q{i}", "y")), Put(policy(f"r{i}", "y", table=OTHER))], by=Provenance(f"user:w{i}@x.com", "apply")
            )
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    history = stores[0].history()
    assert sorted({e.version for e in history}) == list(range(1, 21)) and stores[0].version() == 20
    assert len(history) == 24
    assert stores[0].state_at(0) == []


def test_a_store_from_before_the_history_keeps_its_policies(open_one, monkeypatch):
    """An existing store (schema 1, no history table) is upgraded in place: the policies and
    version stay, the history starts at that version, and the next changes are recorded."""
    backend = importlib.import_module(
        "rowgate.policy.store.sqlite" if open_one.backend == "sqlite" else "rowgate.policy.store.postgres"
    )
    monkeypatch.setattr(backend, "_MIGRATIONS", backend._MIGRATIONS[:1])
    old = open_one()
    old_put = old.create
    monkeypatch.setattr(backend, "_record", lambda *a, **k: None, raising=False)  # sqlite's module-level recorder
    monkeypatch.setattr(type(old), "_record", lambda *a, **k: None, raising=False)  # postgres' method
    old_put(policy("a", "x"))
    old_put(policy("b", "y", table=OTHER))
    old.close()
    monkeypatch.undo()

    store = open_one()
    assert content(store.list()) == content([policy("a", "x"), policy("b", "y", table=OTHER)])
    assert store.version() == 2 and store.history_since() == 2 and store.history() == []
    assert store.state_at(2) == store.list()
    with pytest.raises(HistoryUnavailable, match="history starts at version 2"):
        store.state_at(1)
    store.drop(T, "a", by=ANN)
    assert [(e.version, e.author, e.action) for e in store.history()] == [(3, "user:ann@example.com", "drop")]
    assert content(store.state_at(2)) == content([policy("a", "x"), policy("b", "y", table=OTHER)])


def test_a_version_written_without_history_is_never_guessed_over(store, open_one):
    store.create(policy("a", "x"))
    store.create(policy("b", "y"))
    # An older rowgate sharing the store bumps the version without recording anything.
    if open_one.backend == "sqlite":
        with store._transaction() as db:
            db.execute("UPDATE policy_version SET version = version + 1 WHERE id = 1")
    else:
        store._run(lambda conn: conn.execute(store._q("UPDATE {s}.policy_version SET version = version + 1")), retry=False)
    store.create(policy("c", "z"))
    assert store.version() == 4
    assert [p.name for p in store.state_at(3)] == ["a", "b"]  # after the gap: fine
    with pytest.raises(HistoryUnavailable, match="version 3 was written without history"):
        store.state_at(1)


def test_a_change_whose_history_cannot_be_written_is_not_made(open_one, monkeypatch):
    store = open_one()
    store.create(policy("a", "x"))

    def broken(*args, **kwargs):
        raise RuntimeError("history table unwritable")

    if open_one.backend == "sqlite":
        monkeypatch.setattr(importlib.import_module("rowgate.policy.store.sqlite"), "_record", broken)
    else:
        monkeypatch.setattr(type(store), "_record", broken)
    with pytest.raises(RuntimeError):
        store.drop(T, "a", by=ANN)
    with pytest.raises(RuntimeError):
        store.apply([Put(policy("b", "y"))], by=ANN)
    monkeypatch.undo()
    assert [p.name for p in store.list()] == ["a"] and store.version() == 1
    assert [e.version for e in store.history()] == [1]


def test_a_copy_onto_a_taken_name_is_refused_whole(store):
    store.create(policy("a", "x", table=OTHER))
    with pytest.raises(PolicyExists):
        store.apply([Put(policy("b", "y"), if_absent=True), Put(policy("A", "z", table=OTHER), if_absent=True)])
    assert [p.name for p in store.list()] == ["a"] and store.version() == 1

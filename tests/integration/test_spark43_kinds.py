"""What Spark 4.2/4.3 added, through the proxy, for callers trying to get around their filter.

A real pyspark 4.3 client, the real proxy, a real 4.3 server. `orders` is protected: alice
sees her own rows, bob none, carol holds the full-access grant, the admin has no grant (her
reads are filtered like anyone's). `nearestByJoin` and `zip` read both inputs filtered;
`read.changes` is time travel; the catalog calls that describe, truncate or drop a protected
table follow the rules of their SQL twins (rewrite/plan/catalog_statements.py); GetStatus is
relayed for the caller's own session.
"""

from __future__ import annotations

import pytest

from tests.conftest import unique
from tests.harness.answers import refusal
from tests.harness.callers import ADMIN, ALICE, BOB, CAROL
from tests.harness.worlds import Policy, Table, protected_world, values

pytestmark = pytest.mark.spark

ROWS = [(1, "alice", 10, "d1"), (2, "bob", 20, "d1"), (3, "alice", 30, "d2"), (4, "carol", 40, "d3")]
ALICE_IDS = {1, 3}


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, spark_server):
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)
    w = protected_world(
        proxy,
        module_sessions,
        Table("orders43", "id INT, owner STRING, amount INT, dt STRING", partitioned_by="dt", rows=[values(ROWS)]),
        Policy("own", "orders43", "owner = 'alice'", grantees=[ALICE]),
        Policy("everything", "orders43", "TRUE", grantees=[CAROL]),
        spark_url=spark_server.url,
    )
    yield proxy, w.admin, {who: w.caller(who) for who in (ALICE, BOB, CAROL)}, w.table("orders43")
    w.close()


def ids(df) -> set[int]:
    return {row[0] for row in df.collect()}


@pytest.mark.parametrize("side", ["left", "right"])
def test_nearest_by_join_reads_both_inputs_filtered(world, side):
    from pyspark.sql import functions as F

    _, admin, users, orders = world
    for who, session, expected in ((ALICE, users[ALICE], ALICE_IDS), (ADMIN, admin, set()), (BOB, users[BOB], set())):
        table = session.table(orders).select(F.col("id"), F.col("amount"))
        probe = session.range(0, 50, 5).select(F.col("id").alias("q"))
        if side == "right":  # every visible order is someone's nearest: ten neighbours each
            joined = probe.nearestByJoin(table, -F.abs(probe.q - table.amount), 10, "exact", "similarity")
            seen = {row.id for row in joined.select("id").collect()}
        else:
            joined = table.nearestByJoin(probe, -F.abs(table.amount - probe.q), 1, "exact", "similarity")
            seen = {row.id for row in joined.select("id").collect()}
        assert seen == expected, who


def test_zip_reads_both_inputs_filtered(world):
    _, admin, users, orders = world
    for session, expected in ((users[ALICE], ALICE_IDS), (admin, set()), (users[CAROL], {1, 2, 3, 4})):
        table = session.table(orders)
        zipped = table.select("id").zip(table.select("owner", "amount"))
        assert ids(zipped) == expected


def test_the_change_feed_of_a_protected_table_needs_the_full_access_grant(world):
    _, admin, users, orders = world
    for session in (users[ALICE], users[BOB], admin):  # admins included
        status, text = refusal(lambda: session.read.changes(orders).collect())
        assert status == "PERMISSION_DENIED" and "FILTER USING (TRUE)" in text, text
    # carol may: what she gets is Spark's own answer (parquet tables keep no change feed)
    status, text = refusal(lambda: users[CAROL].read.option("startingVersion", "0").changes(orders).collect())
    assert status != "PERMISSION_DENIED" and "ROWGATE" not in text, text


@pytest.mark.parametrize(
    "call",
    [
        lambda s, t: s.catalog.listPartitions(t),
        lambda s, t: s.catalog.getTableProperties(t),
        lambda s, t: s.catalog.getCreateTableString(t),
        lambda s, t: s.catalog.analyzeTable(t),
    ],
    ids=["listPartitions", "getTableProperties", "getCreateTableString", "analyzeTable"],
)
def test_facts_about_hidden_rows_need_the_full_access_grant(world, call):
    _, admin, users, orders = world
    for session in (users[ALICE], users[BOB], admin):
        status, text = refusal(lambda: call(session, orders))
        assert status == "PERMISSION_DENIED" and "FILTER USING (TRUE)" in text, text
    call(users[CAROL], orders)  # forwarded: nothing is hidden from carol


def test_partitions_of_an_unprotected_table_are_listed(world):
    _, admin, users, _ = world
    plain = unique("plain43")
    admin.sql(f"CREATE TABLE {plain} (id INT, dt STRING) USING parquet PARTITIONED BY (dt)")
    admin.sql(f"INSERT INTO {plain} VALUES (1, 'x'), (2, 'y')")
    assert sorted(p.partition for p in users[BOB].catalog.listPartitions(plain)) == ["dt=x", "dt=y"]
    assert "CREATE TABLE" in users[BOB].catalog.getCreateTableString(plain)


def test_truncating_a_protected_table_needs_the_full_access_grant(world):
    _, admin, users, orders = world
    for session in (users[ALICE], users[BOB], admin):
        status, text = refusal(lambda: session.catalog.truncateTable(orders))
        assert status == "PERMISSION_DENIED" and "FILTER USING (TRUE)" in text, text
    assert ids(users[CAROL].table(orders)) == {1, 2, 3, 4}  # nothing was truncated


def test_a_protected_table_is_dropped_only_by_admins_and_its_policies_follow(world):
    _, admin, users, _ = world
    victim = unique("victim43")
    admin.sql(f"CREATE TABLE {victim} (id INT, owner STRING) USING parquet")
    admin.sql(f"INSERT INTO {victim} VALUES (1, 'alice'), (2, 'bob')")
    admin.sql(f"CREATE ROW ACCESS POLICY own ON {victim} GRANT TO ('{ALICE}') FILTER USING (owner = 'alice')")
    bob = users[BOB]
    # A temp view named like the table: Spark's dropTable skips temp views, so the proxy must
    # judge the drop of the protected table, not of the view.
    bob.range(1).createOrReplaceTempView(victim)
    status, text = refusal(lambda: bob.catalog.dropTable(victim))
    assert status == "PERMISSION_DENIED" and "only rowgate admins" in text, text
    assert ids(users[ALICE].table(victim)) == {1}  # still there, still filtered
    admin.catalog.dropTable(victim)
    # The policies left with the table: a new table of that name is not protected by them.
    admin.sql(f"CREATE TABLE {victim} (id INT, owner STRING) USING parquet")
    admin.sql(f"INSERT INTO {victim} VALUES (7, 'bob')")
    assert ids(users[BOB].sql(f"SELECT * FROM spark_catalog.default.{victim}")) == {7}


def test_get_status_is_relayed_for_the_callers_own_session(world):
    _, _, users, orders = world
    alice, bob = users[ALICE], users[BOB]
    alice.table(orders).collect()
    response = alice.client._get_operation_statuses()
    assert response.session_id == alice.client._session_id
    mine = {s.operation_id for s in response.operation_statuses}
    assert mine  # the collect above is one of them
    # bob naming alice's session id and user id lands in a session of his own, which Spark
    # does not know
    saved = bob.client._session_id, bob.client._user_id
    bob.client._session_id, bob.client._user_id = alice.client._session_id, ALICE
    bob.client._server_session_id = None
    try:
        status, text = refusal(bob.client._get_operation_statuses)
    finally:
        bob.client._session_id, bob.client._user_id = saved
        bob.client._server_session_id = None
    assert "SESSION_NOT_FOUND" in text and "ROWGATE" not in text, text


def test_opaque_get_status_extensions_are_refused_while_protected(world):
    from google.protobuf import any_pb2

    _, admin, _, _ = world
    extension = any_pb2.Any(type_url="type.googleapis.com/example.Anything", value=b"")
    status, text = refusal(lambda: admin.client._get_operation_statuses(request_extensions=[extension]))
    assert status == "INVALID_ARGUMENT" and "extensions" in text, text

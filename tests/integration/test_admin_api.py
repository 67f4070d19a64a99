"""The admin API (rowgate.v1.PolicyAdmin) and `rowgate policies` through real proxies in
front of the suite's Spark Connect server.

Tables live in a unique database made by an admin pyspark session. The round-trip and
permission tests use the shared `proxy`; export/apply empties a policy store, so it runs
against a proxy of its own (its own SQLite store) to leave other tests' policies alone.
"""

from __future__ import annotations

import grpc
import pytest

from rowgate import cli
from rowgate.admin.client import AdminClient, AdminError
from tests.conftest import remote_url, unique
from tests.harness.callers import ADMIN, ANN, BOB

pytestmark = pytest.mark.spark


def spark_session(url: str):
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).create()


@pytest.fixture(scope="module")
def db(proxy):
    """A database with two small tables, made through the proxy by the admin."""
    name = unique("admin_api")
    spark = spark_session(remote_url(proxy.url, user=ADMIN))
    spark.sql(f"CREATE DATABASE {name}")
    spark.sql(f"CREATE TABLE {name}.orders (id INT, region STRING, owner STRING) USING parquet")
    spark.sql(
        f"INSERT INTO {name}.orders VALUES (1, 'EMEA', 'ann@example.com'), (2, 'APAC', 'bob@example.com'),"
        " (3, 'EMEA', 'bob@example.com'), (4, 'APAC', 'ann@example.com')"
    )
    spark.sql(f"CREATE TABLE {name}.items (id INT, owner STRING) USING parquet")
    spark.sql(f"INSERT INTO {name}.items VALUES (10, 'ann@example.com'), (11, 'bob@example.com')")
    try:
        yield name
    finally:
        spark.stop()


@pytest.fixture
def admin(proxy):
    with AdminClient(proxy.target, user=ADMIN, timeout=120) as client:
        yield client


def ids(url: str, table: str) -> list[int]:
    spark = spark_session(url)
    try:
        return [r.id for r in spark.sql(f"SELECT id FROM {table} ORDER BY id").collect()]
    finally:
        spark.stop()


def rowgate(target: str, *args: str, user: str = ADMIN) -> int:
    return cli.main(["policies", "--target", target, "--user", user, *args])


def test_create_get_list_explain_drop_round_trip(proxy, db, admin):
    orders = f"{db}.orders"
    mine = admin.create_policy(orders, "mine", [ANN, BOB], "owner = SESSION_USER()")
    assert (mine.table_catalog, mine.table_schema, mine.table_name) == ("spark_catalog", db, "orders")
    emea = admin.create_policy(f"spark_catalog.{db}.ORDERS", "emea", ["group:emea@example.com"], "region = 'EMEA'")
    assert admin.get_policy(orders, "MINE") == mine
    listed = admin.list_policies(orders)
    assert [p.policy_name for p in listed] == ["emea", "mine"]
    assert [p.policy_name for p in admin.list_policies(f"{db}.items")] == []
    assert {p.policy_name for p in admin.list_policies()} >= {"emea", "mine"}

    # enforced at once, for real callers
    assert ids(remote_url(proxy.url, user=ANN), orders) == [1, 4]
    assert ids(remote_url(proxy.url, user=ANN, groups="emea@example.com"), orders) == [1, 3, 4]
    assert ids(remote_url(proxy.url, user="user:eve@example.com"), orders) == []

    # the SQL statements see the same store
    spark = spark_session(remote_url(proxy.url, user=ADMIN))
    try:
        shown = spark.sql(f"SHOW ROW ACCESS POLICIES ON {orders}").collect()
        assert [(r.policy_name, r.grantees, r.filter_predicate) for r in shown] == [
            ("emea", "group:emea@example.com", "region = 'EMEA'"),
            ("mine", "user:ann@example.com, user:bob@example.com", "owner = SESSION_USER()"),
        ]
        spark.sql(f"CREATE ROW ACCESS POLICY by_sql ON {db}.items GRANT TO ('allAuthenticatedUsers') FILTER USING (id > 10)")
    finally:
        spark.stop()
    by_sql = admin.get_policy(f"{db}.items", "by_sql")
    assert list(by_sql.grantees) == ["allAuthenticatedUsers"] and by_sql.filter_predicate == "id > 10"
    assert emea.creation_time.seconds > 0

    explained = admin.explain_access("ann@example.com", f"SELECT o.id FROM {orders} o WHERE o.id > 1", ["emea@example.com"])
    assert explained.refusal == ""
    assert explained.row_filter_applied
    assert list(explained.policies_applied) == [f"spark_catalog.{db}.orders:emea", f"spark_catalog.{db}.orders:mine"]
    assert list(explained.tables_read) == [f"spark_catalog.{db}.orders"]
    assert "owner = 'ann@example.com'" in explained.rewritten_sql and ") AS o WHERE o.id > 1" in explained.rewritten_sql

    positioned = admin.explain_access(ANN, "SELECT * FROM items", current_schema=db)
    assert positioned.row_filter_applied and list(positioned.policies_applied) == [f"spark_catalog.{db}.items:by_sql"]
    unprotected = admin.explain_access(ANN, "SELECT 1 AS one")
    assert not unprotected.row_filter_applied and unprotected.rewritten_sql == "SELECT 1 AS one"
    refused = admin.explain_access(BOB, f"INSERT INTO {orders} VALUES (9, 'EMEA', 'x')")
    assert refused.refusal_code == "PERMISSION_DENIED" and orders in refused.refusal

    assert admin.drop_policy(orders, "emea") is True
    assert admin.drop_policy(orders, "mine") is True
    assert admin.drop_policy(orders, "mine", if_exists=True) is False
    assert admin.drop_policy(f"{db}.items", "by_sql") is True
    assert admin.list_policies(orders) == []
    assert ids(remote_url(proxy.url, user=ANN), orders) == [1, 2, 3, 4]


def test_refusals_come_from_the_real_table(db, admin):
    with pytest.raises(AdminError) as info:
        admin.create_policy(f"{db}.no_such_table", "p", [], "TRUE")
    assert info.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(AdminError) as info:
        admin.create_policy(f"{db}.orders", "p", [], "no_such_column = 1")
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"the filter does not run on spark_catalog.{db}.orders" in info.value.message
    with pytest.raises(AdminError) as info:
        admin.get_policy(f"{db}.orders", "p")
    assert info.value.code == grpc.StatusCode.NOT_FOUND
    assert admin.list_policies(f"{db}.orders") == []


def test_full_access_grant_can_be_created(db, admin):
    # Regression: `FROM t WHERE (TRUE)` reads as the table alias WHERE with column list (TRUE).
    created = admin.create_policy(f"{db}.items", "full", ["user:admin@example.com"], "TRUE")
    assert created.filter_predicate == "TRUE"
    assert admin.drop_policy(f"{db}.items", "full")


@pytest.mark.parametrize("who", [BOB, "serviceAccount:etl@proj.example.com"])
def test_non_admins_are_permission_denied(proxy, db, who):
    with AdminClient(proxy.target, user=who, timeout=60) as client:
        calls = {
            "ListPolicies": lambda: client.list_policies(),
            "GetPolicy": lambda: client.get_policy(f"{db}.orders", "p"),
            "CreatePolicy": lambda: client.create_policy(f"{db}.orders", "p", [who], "TRUE"),
            "DropPolicy": lambda: client.drop_policy(f"{db}.orders", "p", if_exists=True),
            "ExplainAccess": lambda: client.explain_access(who, f"SELECT * FROM {db}.orders"),
        }
        for rpc, call in calls.items():
            with pytest.raises(AdminError) as info:
                call()
            assert info.value.code == grpc.StatusCode.PERMISSION_DENIED, rpc
            assert f"rowgate.v1.PolicyAdmin/{rpc} is reserved for rowgate admins; {who} is not one" == info.value.message


def test_credentials_are_checked_like_spark_traffic(proxy, capsys):
    with AdminClient(proxy.target, timeout=60) as anonymous:
        with pytest.raises(AdminError) as info:
            anonymous.list_policies()
    assert info.value.code == grpc.StatusCode.PERMISSION_DENIED and "user:anonymous" in info.value.message
    assert rowgate(proxy.target, "list", user="admin@example.com") == 1  # the header source wants a kind
    assert "UNAUTHENTICATED: header: bad x-rowgate-user header" in capsys.readouterr().err
    assert cli.main(["policies", "--target", proxy.target, "--token", "abc", "list"]) == 1
    assert "UNAUTHENTICATED: authorization sent, but no enabled identity source" in capsys.readouterr().err


def test_spark_traffic_is_unaffected(proxy, sessions):
    spark = sessions(remote_url(proxy.url, user=ANN))
    assert spark.sql("SELECT 42 AS answer").first().answer == 42


# -- export / apply --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_proxy(proxy_factory):
    return proxy_factory("--identity", "header", "--admin", ADMIN)


def test_export_then_apply_to_an_emptied_store_reproduces_it(own_proxy, db, tmp_path, capsys):
    target = own_proxy.target
    orders, items = f"{db}.orders", f"{db}.items"
    assert (
        rowgate(
            target,
            "create",
            "--table",
            orders,
            "--name",
            "mine",
            "--grant",
            ANN,
            "--grant",
            BOB,
            "--filter",
            "owner = SESSION_USER()",
        )
        == 0
    )
    assert (
        rowgate(
            target,
            "create",
            "--table",
            orders,
            "--name",
            "emea",
            "--grant",
            "group:emea@example.com",
            "--filter",
            "region = 'EMEA'",
        )
        == 0
    )
    assert (
        rowgate(target, "create", "--table", items, "--name", "all_rows", "--grant", "domain:example.com", "--filter", "id >= 0")
        == 0
    )
    capsys.readouterr()

    first = tmp_path / "first.yaml"
    assert rowgate(target, "export", "--file", str(first)) == 0
    assert capsys.readouterr().err == f"exported 3 row access policies to {first}\n"
    text = first.read_text()
    assert text.index(f"spark_catalog.{db}.items") < text.index(f"spark_catalog.{db}.orders")
    assert "    - user:ann@example.com\n    - user:bob@example.com\n" in text

    # empty the store
    with AdminClient(target, user=ADMIN, timeout=120) as client:
        for policy in client.list_policies():
            assert client.drop_policy(f"{policy.table_schema}.{policy.table_name}", policy.policy_name)
        assert client.list_policies() == []
    assert ids(remote_url(own_proxy.url, user=ANN), orders) == [1, 2, 3, 4]

    assert rowgate(target, "apply", "--file", str(first)) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"created spark_catalog.{db}.items all_rows",
        f"created spark_catalog.{db}.orders emea",
        f"created spark_catalog.{db}.orders mine",
        "3 created, 0 replaced, 0 dropped, 0 unchanged (without --prune nothing is dropped)",
    ]
    second = tmp_path / "second.yaml"
    assert rowgate(target, "export", "--file", str(second)) == 0
    assert second.read_text() == text
    assert ids(remote_url(own_proxy.url, user=ANN), orders) == [1, 4]

    # applying the same file again changes nothing
    assert rowgate(target, "apply", "--file", str(second), "--prune") == 0
    assert capsys.readouterr().out == "0 created, 0 replaced, 0 dropped, 3 unchanged\n"


def test_apply_prune(own_proxy, db, tmp_path, capsys):
    target = own_proxy.target
    orders = f"{db}.orders"
    seed = tmp_path / "seed.yaml"
    seed.write_text(
        f"- table: {orders}\n  name: mine\n  grantees: [{ANN}]\n  filter: owner = SESSION_USER()\n"
        f"- table: {orders}\n  name: extra\n  grantees: [{BOB}]\n  filter: region = 'APAC'\n"
    )
    assert rowgate(target, "apply", "--file", str(seed)) == 0
    capsys.readouterr()

    desired = tmp_path / "desired.yaml"
    desired.write_text(
        f"# only these\n- table: {orders}\n  name: mine\n  grantees: [{ANN}, {BOB}]\n  filter: |\n    owner = SESSION_USER()\n"
        f"- table: {db}.items\n  name: new_one\n  filter: id > 10\n"
    )
    assert rowgate(target, "apply", "--file", str(desired), "--prune", "--dry-run") == 0
    dry = capsys.readouterr().out.splitlines()
    assert f"would drop spark_catalog.{db}.orders extra" in dry
    assert ids(remote_url(own_proxy.url, user=BOB), orders) == [2, 4]  # a dry run changes nothing: only "extra" grants bob

    assert rowgate(target, "apply", "--file", str(desired), "--prune") == 0
    out = capsys.readouterr().out.splitlines()
    assert f"created spark_catalog.{db}.items new_one" in out
    assert f"replaced spark_catalog.{db}.orders mine" in out
    assert f"dropped spark_catalog.{db}.orders extra" in out
    assert out[-1].startswith("1 created, 1 replaced, ") and out[-1].endswith(" dropped, 0 unchanged")
    # whatever else the store held (the previous test's policies) is gone too: the file is the truth
    with AdminClient(target, user=ADMIN, timeout=120) as client:
        names = sorted((p.table_name, p.policy_name) for p in client.list_policies())
    assert names == [("items", "new_one"), ("orders", "mine")]
    assert ids(remote_url(own_proxy.url, user=BOB), orders) == [2, 3]
    assert ids(remote_url(own_proxy.url, user=ANN), f"{db}.items") == [11]

    export = tmp_path / "after.yaml"
    assert rowgate(target, "export", "--file", str(export)) == 0
    assert "name: extra" not in export.read_text()

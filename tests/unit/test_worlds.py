"""tests/harness/worlds.py without Spark: the statements a declared world runs, in order.

The integration modules trust the factory to create exactly what they declared (their
assertions are about those rows and policies); a wrong name or a lost statement would show
there only as a puzzling failure a few minutes into a Spark run.
"""

from __future__ import annotations

import pytest

from tests.harness.callers import ADMIN, ANN
from tests.harness.worlds import Policy, Sql, Table, View, protected_world, values


class Recorder:
    """A stand-in session: keeps each statement, answers nothing."""

    def __init__(self, url: str, log: list[tuple[str, str]]) -> None:
        self.url, self.log = url, log

    def sql(self, text: str) -> Recorder:
        self.log.append((self.url, text))
        return self

    def collect(self) -> list:
        return []


class Proxy:
    url = "sc://localhost:1"


def world(*declared, **options):
    log: list[tuple[str, str]] = []
    made = protected_world(Proxy(), lambda url: Recorder(url, log), *declared, spark_url="sc://spark:2", **options)
    return made, log


def test_a_database_and_its_tables_in_the_declared_order():
    w, log = world(
        Table("orders", "id INT, region STRING", rows=[values([(1, "eu"), (2, "us")])]),
        Table("acl", "who STRING", rows=[values([("ann@example.com",)])]),
        View("v", "SELECT id FROM {orders}"),
        Policy("eu", "orders", "region IN (SELECT who FROM {db}.acl)", grantees=[ANN, ADMIN]),
        Policy("all", "acl", "TRUE", grantees=None),
        Sql("USE {db}"),
        database="shop",
    )
    db = w.db
    assert db.startswith("shop_")
    assert w.table("orders") == f"{db}.orders"
    assert [text for _, text in log] == [
        f"CREATE DATABASE {db}",
        f"CREATE TABLE {db}.orders (id INT, region STRING) USING parquet",
        f"INSERT INTO {db}.orders VALUES (1, 'eu'), (2, 'us')",
        f"CREATE TABLE {db}.acl (who STRING) USING parquet",
        f"INSERT INTO {db}.acl VALUES ('ann@example.com')",
        f"CREATE VIEW {db}.v AS SELECT id FROM {db}.orders",
        f"CREATE ROW ACCESS POLICY eu ON {db}.orders GRANT TO ('{ANN}', '{ADMIN}') "
        f"FILTER USING (region IN (SELECT who FROM {db}.acl))",
        f"CREATE ROW ACCESS POLICY all ON {db}.acl FILTER USING (TRUE)",
        f"USE {db}",
    ]
    assert {url for url, _ in log} == {f"{Proxy.url}/;x-rowgate-user={ADMIN}"}


def test_tables_without_a_database_get_unique_names_and_are_dropped_past_the_proxy():
    w, log = world(
        Table("t", "id INT", rows=[values([(1,)]), values([(2,)])], partitioned_by="id"),
        Table("c", select="SELECT 1 AS id"),
        Table("x", "id INT", database="other"),
        databases={"other": "elsewhere"},
    )
    t = w.table("t")
    assert t.startswith("t_") and t != "t"
    assert (Proxy.url + "/;x-rowgate-user=" + ADMIN, f"INSERT INTO {t} VALUES (2)") in log
    assert f"CREATE TABLE {t} (id INT) USING parquet PARTITIONED BY (id)" in [text for _, text in log]
    assert f"CREATE TABLE {w.names['other']}.x (id INT) USING parquet" in [text for _, text in log]
    log.clear()
    w.close()
    assert log == [
        ("sc://spark:2", f"DROP DATABASE IF EXISTS {w.names['other']} CASCADE"),
        ("sc://spark:2", f"DROP TABLE IF EXISTS {t}"),
        ("sc://spark:2", f"DROP TABLE IF EXISTS {w.table('c')}"),
    ]


def test_callers_are_kept_per_user_and_groups():
    w, _ = world()
    assert w.caller(ANN) is w.caller(ANN)
    assert w.caller(ANN, groups="group:eu") is not w.caller(ANN)


def test_a_policy_on_an_undeclared_table_is_a_mistake():
    with pytest.raises(KeyError, match="declare it before its policy"):
        world(Policy("p", "missing", "TRUE"))


def test_rows_are_data_and_quotes_are_the_tests_business():
    with pytest.raises(ValueError):
        values([("it's",)])
    w, log = world(Table("b", "s STRING", rows=["VALUES ('{not a name}')"]))
    assert log[-1][1] == "INSERT INTO " + w.table("b") + " VALUES ('{not a name}')"

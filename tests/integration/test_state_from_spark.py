"""The proxy's memory of sessions, catalog and policies follows Spark's answers, in order.

Issue 12, property 3 (bypass catalogue classes 24 and 25), through a real pyspark client, a
real `rowgate serve` of this module's own and the suite's Spark (which cuts result streams,
so pyspark reattaches all the time):

- a temp view Spark refused to create is not taken for a temp view, so the protected table
  of that name stays filtered;
- a `USE`, Catalog API move or `CREATE OR REPLACE VIEW` running while another request of
  the same session is resolved never lets that request read hidden rows (race tests, many
  rounds, two threads sharing one pyspark session), and the session's position is Spark's
  afterwards;
- an admin's RENAME / DROP of a protected table moves or drops the policies by what Spark
  did, also when the client goes away mid-statement.

mallory has no grant on the protected tables (she must see no row of them); alice sees
`id = 1`.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2, commands_pb2, relations_pb2

from tests.conftest import remote_url, unique
from tests.deadlines import scaled, wait_until
from tests.harness.answers import ids
from tests.harness.callers import ADMIN, MALLORY
from tests.harness.worlds import protected_world

pytestmark = pytest.mark.spark

ROUNDS = 12  # rounds of each race test
HIDDEN = {1, 2}  # ids of protected tables' rows mallory must never see


@dataclass
class World:
    db: str
    proxy: object
    admin: object
    direct: object
    mallory: object

    def t(self, name: str) -> str:
        return f"{self.db}.{name}"

    def url(self, user: str) -> str:
        return remote_url(self.proxy.url, user=user)

    def protected(self, name: str | None = None, *, db: str | None = None) -> str:
        """A fresh table (id) with rows 1, 2 and one policy granting alice id = 1."""
        table = f"{db or self.db}.{name or unique('prot')}"
        self.admin.sql(f"CREATE TABLE {table} (id INT) USING parquet")
        self.admin.sql(f"INSERT INTO {table} VALUES (1), (2)")
        self.admin.sql(
            f"CREATE ROW ACCESS POLICY p ON {table} GRANT TO ('user:alice@example.com') FILTER USING (id = 1)"
        ).collect()
        return table

    def plain(self, name: str | None = None, *, db: str | None = None, rows=(100,)) -> str:
        table = f"{db or self.db}.{name or unique('plain')}"
        self.admin.sql(f"CREATE TABLE {table} (id INT) USING parquet")
        self.admin.sql(f"INSERT INTO {table} VALUES {', '.join(f'({r})' for r in rows)}")
        return table

    def policies_on(self, table: str) -> list[str]:
        return [r.policy_name for r in self.admin.sql(f"SHOW ROW ACCESS POLICIES ON {table}").collect()]


@pytest.fixture(scope="module")
def state_proxy(proxy_factory):
    return proxy_factory("--identity", "header", "--admin", ADMIN)


@pytest.fixture(scope="module")
def world(state_proxy, spark_server, module_sessions):
    logging.getLogger("pyspark").setLevel(logging.CRITICAL)
    pw = protected_world(state_proxy, module_sessions, database="state", spark_url=spark_server.url)
    yield World(pw.db, state_proxy, pw.admin, pw.direct, pw.caller(MALLORY))
    pw.close()


def spark_error(action) -> Exception:
    try:
        action()
    except Exception as e:
        return e
    pytest.fail("expected Spark to refuse the statement")


# == class 24: a temp view exists for the proxy only once Spark made it ===================


def test_temp_view_spark_refused_in_sql_is_not_taken_for_a_temp_view(world, sessions):
    name = unique("orders")
    world.protected(name)
    spark = sessions(world.url(MALLORY))
    spark.catalog.setCurrentDatabase(world.db)
    assert ids(spark.sql(f"SELECT * FROM {name}")) == []
    # (a missing table in the body is refused by rowgate itself, rules/unknown_relations.py;
    # a missing column is Spark's to refuse)
    error = spark_error(lambda: spark.sql(f"CREATE TEMPORARY VIEW {name} AS SELECT no_such_column_xyz FROM range(1)").collect())
    assert "UNRESOLVED_COLUMN" in str(error)
    assert ids(spark.sql(f"SELECT * FROM {name}")) == []
    assert ids(spark.table(name)) == []
    assert spark.sql(f"SELECT count(*) FROM {name}").first()[0] == 0


def test_temp_view_spark_refused_from_a_dataframe_is_not_taken_for_a_temp_view(world, sessions):
    name = unique("orders")
    world.protected(name)
    spark = sessions(world.url(MALLORY))
    spark.catalog.setCurrentDatabase(world.db)
    error = spark_error(lambda: spark.range(3).selectExpr("no_such_column").createOrReplaceTempView(name))
    assert "UNRESOLVED_COLUMN" in str(error)
    assert ids(spark.sql(f"SELECT * FROM {name}")) == []
    assert ids(spark.table(name)) == []


def test_temp_views_spark_made_and_dropped_are_followed(world, sessions):
    name = unique("orders")
    world.protected(name)
    spark = sessions(world.url(MALLORY))
    spark.catalog.setCurrentDatabase(world.db)
    spark.sql(f"CREATE TEMPORARY VIEW {name} AS SELECT 7 AS id").collect()
    assert ids(spark.sql(f"SELECT * FROM {name}")) == [7]
    spark.sql(f"DROP VIEW {name}").collect()
    assert ids(spark.sql(f"SELECT * FROM {name}")) == []
    spark.range(5, 6).createOrReplaceTempView(name)
    assert ids(spark.table(name)) == [5]
    assert spark.catalog.dropTempView(name)
    assert ids(spark.table(name)) == []


# == class 25: requests of one session resolved while its state changes ===================


def race(spark, change, read, rounds: int = ROUNDS) -> list[list[int]]:
    """Runs `change(i)` and `read()` concurrently (two threads, one session) `rounds` times;
    returns every result `read` got."""
    seen: list[list[int]] = []
    errors: list[BaseException] = []

    def changer():
        try:
            for i in range(rounds):
                change(i)
        except BaseException as e:
            errors.append(e)

    def reader():
        try:
            for _ in range(rounds):
                seen.append(read())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=changer), threading.Thread(target=reader)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=scaled(600))
    assert not errors, f"a request failed during the race: {str(errors[0])[:800]}"
    return seen


@pytest.mark.parametrize("how", ["sql", "catalog-api"])
def test_use_in_flight_never_lets_a_read_see_hidden_rows(world, sessions, how):
    name = unique("tbl")
    world.protected(name)  # <db>.<name>: rows 1, 2, mallory sees none
    world.plain(name, db="default", rows=(100,))  # default.<name>: row 100, unprotected
    try:
        spark = sessions(world.url(MALLORY))
        databases = [world.db, "default"]

        def change(i):
            if how == "sql":
                spark.sql(f"USE {databases[i % 2]}").collect()
            else:
                spark.catalog.setCurrentDatabase(databases[i % 2])

        seen = race(spark, change, lambda: ids(spark.sql(f"SELECT id FROM {name}")))
        leaked = [rows for rows in seen if HIDDEN & set(rows)]
        assert not leaked, f"hidden rows read during a USE race: {leaked[:3]}"
        assert all(rows in ([], [100]) for rows in seen), seen
        # Afterwards the proxy resolves with the position Spark has.
        for db, expected in ((world.db, []), ("default", [100]), (world.db, [])):
            change(databases.index(db))
            assert spark.catalog.currentDatabase() == db
            assert ids(spark.sql(f"SELECT id FROM {name}")) == expected
            assert ids(spark.table(name)) == expected
    finally:
        world.direct.sql(f"DROP TABLE IF EXISTS default.{name}")


def test_replace_view_in_flight_never_lets_a_read_see_hidden_rows(world, sessions):
    protected = world.protected()
    plain = world.plain(rows=(100,))
    view = world.t(unique("v"))
    spark = sessions(world.url(ADMIN))  # admins' reads are filtered too; admin has no grant
    spark.sql(f"CREATE VIEW {view} AS SELECT id FROM {plain}").collect()
    bodies = [protected, plain]

    def change(i):
        spark.sql(f"CREATE OR REPLACE VIEW {view} AS SELECT id FROM {bodies[i % 2]}").collect()

    seen = race(spark, change, lambda: ids(spark.sql(f"SELECT id FROM {view}")))
    leaked = [rows for rows in seen if HIDDEN & set(rows)]
    assert not leaked, f"hidden rows read during a CREATE OR REPLACE VIEW race: {leaked[:3]}"
    change(0)
    assert ids(spark.sql(f"SELECT id FROM {view}")) == []
    assert ids(world.mallory.sql(f"SELECT id FROM {view}")) == []


# == class 24: policies follow what Spark did to the table ================================


def raw_statement(world, query: str):
    """Starts `query` as admin on a raw, reattachable ExecutePlan (as pyspark sends it) and
    returns (channel, response iterator); the caller decides when the client goes away."""
    channel = grpc.insecure_channel(world.proxy.target)
    request = base_pb2.ExecutePlanRequest(
        session_id=str(uuid.uuid4()),
        user_context=base_pb2.UserContext(user_id="ignored"),
        operation_id=str(uuid.uuid4()),
        plan=base_pb2.Plan(
            command=commands_pb2.Command(
                sql_command=commands_pb2.SqlCommand(input=relations_pb2.Relation(sql=relations_pb2.SQL(query=query)))
            )
        ),
    )
    request.request_options.add().reattach_options.reattachable = True
    stream = channel.unary_stream(
        "/spark.connect.SparkConnectService/ExecutePlan",
        request_serializer=base_pb2.ExecutePlanRequest.SerializeToString,
        response_deserializer=base_pb2.ExecutePlanResponse.FromString,
    )(request, metadata=(("x-rowgate-user", ADMIN),), timeout=scaled(120))
    return channel, stream


def exists(world, table: str) -> bool:
    return world.direct.catalog.tableExists(table)


@pytest.mark.parametrize("leave_after", ["first-response", "table-renamed"])
def test_rename_whose_client_went_away_moves_the_policies(world, leave_after):
    for _ in range(3):
        old = world.protected()
        new = world.t(unique("renamed"))
        channel, stream = raw_statement(world, f"ALTER TABLE {old} RENAME TO {new}")
        if leave_after == "first-response":
            next(stream, None)
        else:
            wait_until(lambda: exists(world, new), f"Spark to rename {old}")
        stream.cancel()
        channel.close()
        wait_until(lambda: exists(world, new) and not exists(world, old), f"Spark to rename {old}")
        wait_until(lambda: world.policies_on(new) == ["p"] and world.policies_on(old) == [], "the policies to move")
        assert ids(world.mallory.table(new)) == []
        assert ids(world.mallory.sql(f"SELECT * FROM {new}")) == []


def test_rename_spark_refuses_leaves_the_policies_where_they_were(world):
    old = world.protected()
    taken = world.plain()
    error = spark_error(lambda: world.admin.sql(f"ALTER TABLE {old} RENAME TO {taken}").collect())
    assert "TABLE_ALREADY_EXISTS" in str(error) or "already exists" in str(error)
    assert world.policies_on(old) == ["p"]
    assert world.policies_on(taken) == []
    assert ids(world.mallory.table(old)) == []
    assert ids(world.mallory.table(taken)) == [100]


def test_rename_by_pyspark_moves_the_policies_every_time(world):
    for _ in range(4):
        old = world.protected()
        new = world.t(unique("renamed"))
        world.admin.sql(f"ALTER TABLE {old} RENAME TO {new}").collect()
        assert world.policies_on(new) == ["p"] and world.policies_on(old) == []
        assert ids(world.mallory.table(new)) == []


def test_rename_onto_a_name_with_policies_is_refused_before_it_runs(world):
    old = world.protected()
    orphan = world.protected(unique("orphan"))
    world.direct.sql(f"DROP TABLE {orphan}")  # behind the proxy's back: its policy stays behind
    error = spark_error(lambda: world.admin.sql(f"ALTER TABLE {old} RENAME TO {orphan}").collect())
    assert "already has row access policies" in str(error)
    assert exists(world, old) and not exists(world, orphan)


def test_drop_whose_client_went_away_drops_the_policies(world):
    for _ in range(3):
        table = world.protected()
        channel, stream = raw_statement(world, f"DROP TABLE {table}")
        next(stream, None)
        stream.cancel()
        channel.close()
        wait_until(lambda: not exists(world, table), f"Spark to drop {table}")
        wait_until(lambda: world.policies_on(table) == [], "the policies to go")
        world.admin.sql(f"CREATE TABLE {table} (id INT) USING parquet")
        world.admin.sql(f"INSERT INTO {table} VALUES (1), (2)")
        assert ids(world.mallory.table(table)) == [1, 2]  # a new table, not protected by the old policies

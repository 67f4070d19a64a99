"""Allow lists, not deny lists (issue 12, property 5), through real pyspark, the real proxy
and a real Spark Connect server.

While a table is protected, a non-admin reads, writes or names files by path only under a
prefix the operator allowed (`--allow-path`); the proxy's data directory, its policy store,
Spark's own directories and protected tables' files stay refused even under such a prefix;
and request kinds off the allow list (proxy/rowgate/policy/kinds.py) are refused naming
the kind. Two proxies of this module's own front the same Spark: `strict` allows no path,
`allowing` allows the whole pytest temp directory (which holds both proxies' data
directories and the test Spark's warehouse and log).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import grpc
import pytest

from tests.conftest import remote_url, unique
from tests.harness.answers import ids
from tests.harness.callers import ADMIN, MALLORY
from tests.integration.conftest import grpc_status

pytestmark = pytest.mark.spark

ROWS = [(1, "eu", "alice@example.com"), (2, "us", "bob@example.com"), (3, "us", "carol@example.com")]


@dataclass
class Side:
    proxy: object
    admin: object
    mallory: object

    @property
    def data_dir(self):
        return self.proxy.extra["workdir"]


@dataclass
class World:
    db: str
    location: str  # the protected table's directory, as Spark reports it
    direct: object
    strict: Side
    allowing: Side
    allowed_prefix: str
    spark_log: object  # path of the test Spark's log, None against an external upstream

    def t(self, name: str) -> str:
        return f"{self.db}.{name}"


@pytest.fixture(scope="module")
def world(proxy_factory, spark_server, module_sessions, tmp_path_factory):
    prefix = str(tmp_path_factory.getbasetemp())
    strict = proxy_factory("--identity", "header", "--admin", ADMIN)
    allowing = proxy_factory("--identity", "header", "--admin", ADMIN, "--allow-path", prefix)
    direct = module_sessions(spark_server.url)
    db = unique("allow")
    direct.sql(f"CREATE DATABASE {db}")
    direct.sql(f"CREATE TABLE {db}.secret (id INT, region STRING, owner STRING) USING parquet")
    direct.sql(f"INSERT INTO {db}.secret VALUES " + ", ".join(f"({i}, '{r}', '{o}')" for i, r, o in ROWS))
    location = [r for r in direct.sql(f"DESCRIBE FORMATTED {db}.secret").collect() if r[0] == "Location"][0][1]
    sides = []
    for proxy in (strict, allowing):
        admin = module_sessions(remote_url(proxy.url, user=ADMIN))
        admin.sql(
            f"CREATE ROW ACCESS POLICY eu ON {db}.secret GRANT TO ('user:alice@example.com') FILTER USING (region = 'eu')"
        ).collect()
        sides.append(Side(proxy, admin, module_sessions(remote_url(proxy.url, user=MALLORY))))
    log = spark_server.server.log_path if spark_server.server is not None else None
    yield World(db, location, direct, sides[0], sides[1], prefix, log)
    direct.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


def refused(action, *words: str) -> str:
    """`action` must be refused by the proxy (PERMISSION_DENIED) with `words` in the message;
    when it is not, the test fails showing what it returned."""
    try:
        got = action()
    except Exception as e:
        text = str(e)
        assert status_of(e) == "PERMISSION_DENIED", text[:800]
        for word in words:
            assert word.lower() in text.lower(), f"{word!r} not in: {text[:800]}"
        return text
    pytest.fail(f"not refused; got {str(got)[:800]}")


def status_of(error: BaseException) -> str | None:
    """The proxy's status: in the gRPC text, or in the `ROWGATE_<STATUS>` error class pyspark shows."""
    found = re.search(r"\[ROWGATE_([A-Z_]+)\]", str(error))
    return found.group(1) if found else grpc_status(error)


# -- locations named by statements ------------------------------------------------------------


@pytest.mark.parametrize("side", ["strict", "allowing"])
def test_add_partition_located_at_a_protected_tables_directory_is_refused(world, side):
    """`ALTER TABLE own ADD PARTITION (p=1) LOCATION '<protected dir>'`, then `SELECT * FROM
    own`, read the protected rows unfiltered: the partition's location was never checked."""
    mallory = getattr(world, side).mallory
    own = world.t(unique("own"))
    mallory.sql(f"CREATE TABLE {own} (id INT, region STRING, owner STRING, p INT) USING parquet PARTITIONED BY (p)")

    def attack():
        mallory.sql(f"ALTER TABLE {own} ADD PARTITION (p=1) LOCATION '{world.location}'").collect()
        return mallory.sql(f"SELECT * FROM {own}").collect()

    expected = "--allow-path" if side == "strict" else "protected by row access policies"
    refused(attack, "naming the location", expected)
    assert world.direct.sql(f"SELECT * FROM {own}").collect() == []  # no partition was added


def test_the_add_partition_route_is_real_without_the_proxy(world):
    """The same two statements straight to Spark read every protected row (why the test above matters)."""
    own = world.t(unique("direct_own"))
    world.direct.sql(f"CREATE TABLE {own} (id INT, region STRING, owner STRING, p INT) USING parquet PARTITIONED BY (p)")
    world.direct.sql(f"ALTER TABLE {own} ADD PARTITION (p=1) LOCATION '{world.location}'")
    assert ids(world.direct.sql(f"SELECT * FROM {own}")) == [1, 2, 3]


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE {new} (x INT) USING csv LOCATION '{dir}'",
        "CREATE TABLE {new} (x INT) USING csv OPTIONS (path '{dir}')",
        "ALTER TABLE {own} SET LOCATION '{dir}'",
        "ALTER TABLE {own} PARTITION (p=1) SET LOCATION '{dir}'",
        "LOAD DATA INPATH '{dir}/x.csv' INTO TABLE {own}",
        "INSERT OVERWRITE LOCAL DIRECTORY '{dir}' SELECT 1",
    ],
)
def test_statements_naming_a_location_are_refused_without_an_allowed_prefix(world, statement, tmp_path):
    mallory = world.strict.mallory
    own = world.t(unique("own"))
    mallory.sql(f"CREATE TABLE {own} (x INT, p INT) USING csv PARTITIONED BY (p)")
    text = statement.format(new=world.t(unique("new")), own=own, dir=tmp_path)
    refused(lambda: mallory.sql(text).collect(), str(tmp_path), "--allow-path")


def test_writes_and_catalog_tables_by_path_are_refused_without_an_allowed_prefix(world, tmp_path):
    mallory = world.strict.mallory
    target = str(tmp_path / "out")
    refused(lambda: mallory.range(3).write.csv(target), "naming the location", "--allow-path")
    refused(lambda: mallory.catalog.createTable(world.t(unique("c")), path=target, source="csv"), "--allow-path")
    assert not (tmp_path / "out").exists()


# -- files read by path -----------------------------------------------------------------------


@pytest.mark.parametrize("side", ["strict", "allowing"])
def test_the_policy_store_is_not_readable_by_path(world, side):
    """`binaryFile` of the SQLite store's -wal, or of the data directory, returned every
    policy's grantees and predicate."""
    here = getattr(world, side)
    expected = "--allow-path" if side == "strict" else "the proxy's data directory"
    for path in (here.data_dir / "policies.db-wal", here.data_dir / "policies.db", here.data_dir):
        text = refused(lambda: here.mallory.read.format("binaryFile").load(str(path)).collect(), expected)
        assert "region = 'eu'" not in text
    refused(lambda: here.mallory.sql(f"SELECT content FROM binaryFile.`{here.data_dir}`").collect(), expected)


@pytest.mark.parametrize("side", ["strict", "allowing"])
def test_sparks_log_is_not_readable_by_path(world, side):
    if world.spark_log is None:
        pytest.skip("the upstream is not the suite's embedded Spark: its log is elsewhere")
    here = getattr(world, side)
    strict = side == "strict"
    refused(
        lambda: here.mallory.read.text(str(world.spark_log)).collect(), "--allow-path" if strict else "Spark's working directory"
    )
    refused(lambda: here.mallory.read.text(str(world.spark_log.parent)).collect(), "--allow-path" if strict else "never readable")


def test_a_data_source_class_name_with_a_relative_path_is_a_path_read(world):
    """`<any data source>.`<relative path>`` reads files relative to Spark's working directory
    (here the log); it used to pass when the format was no short name and the path had no '/'."""
    if world.spark_log is None:
        pytest.skip("the upstream is not the suite's embedded Spark")
    source = "`org.apache.spark.sql.execution.datasources.binaryfile.BinaryFileFormat`"
    text = f"SELECT length(content) AS n FROM {source}.`{world.spark_log.name}`"
    assert world.direct.sql(text).first().n > 0  # the route is real
    refused(lambda: world.allowing.mallory.sql(text).collect(), "relative")


def test_an_allowed_prefix_is_readable_but_the_data_dir_under_it_is_not(world, tmp_path):
    assert str(tmp_path).startswith(world.allowed_prefix)
    csv = tmp_path / "landing.csv"
    csv.write_text("id,name\n1,one\n2,two\n")
    mallory = world.allowing.mallory
    assert sorted(tuple(r) for r in mallory.read.option("header", True).csv(str(csv)).collect()) == [("1", "one"), ("2", "two")]
    assert [r.n for r in mallory.sql(f"SELECT count(*) AS n FROM csv.`{csv}`").collect()] == [3]
    out = str(tmp_path / "written")
    mallory.range(2).write.parquet(out)
    assert ids(mallory.read.parquet(out)) == [0, 1]
    refused(lambda: world.strict.mallory.read.csv(str(csv)).collect(), "--allow-path")  # no prefix, no read
    store = world.allowing.data_dir / "policies.db"
    refused(lambda: mallory.read.format("binaryFile").load(str(store)).collect(), "the proxy's data directory")
    refused(lambda: mallory.read.text(world.location).collect(), "protected by row access policies")


def test_admins_may_read_by_path(world, tmp_path):
    csv = tmp_path / "a.csv"
    csv.write_text("1\n2\n")
    assert len(world.strict.admin.read.csv(str(csv)).collect()) == 2


# -- kinds off the allow list -----------------------------------------------------------------


def test_a_command_kind_off_the_allow_list_is_refused_naming_it(world):
    from pyspark.sql.connect.proto import base_pb2

    request = base_pb2.ExecutePlanRequest(session_id=str(uuid.uuid4()), user_context=base_pb2.UserContext(user_id="x"))
    external = request.plan.command.execute_external_command
    external.runner = "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog"
    external.command = "SELECT 1"
    with grpc.insecure_channel(world.strict.proxy.target) as channel:
        call = channel.unary_stream(
            "/spark.connect.SparkConnectService/ExecutePlan",
            request_serializer=base_pb2.ExecutePlanRequest.SerializeToString,
            response_deserializer=base_pb2.ExecutePlanResponse.FromString,
        )(request, metadata=(("x-rowgate-user", MALLORY),), timeout=60)
        with pytest.raises(grpc.RpcError) as info:
            list(call)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, info.value.details()
    assert "execute_external_command" in info.value.details()

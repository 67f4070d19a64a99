"""The bypass catalogue (the shared notes' bypass-catalogue.md), tried through the proxy.

Every class of the catalogue gets at least one test here, run as non-admin callers through a
real pyspark client and a real `rowgate serve` of this module's own (its own policy store):

- mallory has no grant on `orders` and must see nothing, not even a count, min, max or
  existence signal;
- alice is granted `region = 'eu'` and must see rows 1 and 2 only;
- gina is in group apac-team, granted through a lookup subquery on `teams`, and sees row 5;
- writer has the full-access grant `FILTER USING (TRUE)` (writes, time travel).

The focus is the DataFrame API and the other non-SQL routes (catalogue classes 9-17, 19,
21, 22); tests/integration/test_sql_enforcement.py covers SQL text, and tests here only
touch SQL where that module does not. A refusal must be a gRPC status the proxy made
(PERMISSION_DENIED / INVALID_ARGUMENT / FAILED_PRECONDITION) whose message names the
reason; an error Spark raises is asserted by its error class.

Leaks and proxy bugs found while writing this module are strict xfails whose reason says
what happens; each one fails with the leaked data in its message when run.
"""

from __future__ import annotations

import re
import tempfile
import time
import uuid
import zlib
from dataclasses import dataclass

import grpc
import pytest
from pyspark.sql import functions as F

from tests.conftest import remote_url, unique
from tests.harness.answers import ids
from tests.harness.callers import ADMIN, active
from tests.harness.worlds import Policy, Table, View, protected_world, values

pytestmark = pytest.mark.spark

CALLERS = {
    "alice": ("user:alice@example.com", None),
    "mallory": ("user:mallory@example.com", None),
    "gina": ("user:gina@example.com", "apac-team@example.com"),
    "writer": ("user:writer@example.com", None),
}
# id -> (region, owner, amount)
ORDERS = {
    1: ("eu", "alice@example.com", 10),
    2: ("eu", "bob@example.com", 20),
    3: ("us", "carol@example.com", 300),
    4: ("us", "dave@example.com", 400),
    5: ("apac", "erin@example.com", 5000),
}
ALLOWED = {"alice": [1, 2], "mallory": [], "gina": [5], "writer": [1, 2, 3, 4, 5]}
POLICIES = [
    ("eu_only", "'user:alice@example.com'", "region = 'eu'"),
    ("by_team", "'group:apac-team@example.com'", "region IN (SELECT region FROM teams WHERE grp = 'apac-team')"),
    ("writers", "'user:writer@example.com'", "TRUE"),
]
# Text that would betray a policy predicate in anything shown to a caller.
PREDICATE_TRACES = re.compile(r"'eu'|= eu\b|apac-team|\bteams\b|example\.com")


# -- helpers --------------------------------------------------------------------------------


def status_of(error: BaseException) -> str | None:
    get = getattr(error, "getGrpcStatusCode", None)
    code = get() if get is not None else None
    return code.name if code is not None else None


def refused(action, status: str, *words: str) -> str:
    """`action` must be refused with the gRPC `status` and a message holding `words`; when it
    is not, the test fails and shows what came back instead."""
    try:
        got = action()
    except Exception as e:
        text = str(e)
        assert status_of(e) == status, f"expected {status}, got {status_of(e)}: {text[:600]}"
        for word in words:
            assert word.lower() in text.lower(), f"{word!r} not in the message: {text[:600]}"
        return text
    pytest.fail(f"not refused (expected {status}); got {got!r}")


def refused_naming(action, name: str) -> None:
    """`action` is refused by rowgate with INVALID_ARGUMENT naming the relation `name`."""
    try:
        got = action()
    except Exception as e:
        assert status_of(e) == "INVALID_ARGUMENT" and name.lower() in str(e).lower(), str(e)[:600]
        return
    pytest.fail(f"expected a refusal naming {name}; got {got!r}")


def spark_error(action, condition: str) -> str:
    """`action` must fail in Spark itself with the error class `condition` (not a refusal)."""
    try:
        got = action()
    except Exception as e:
        cond = e.getCondition() if hasattr(e, "getCondition") else None
        assert cond == condition, f"expected Spark error {condition}, got {cond} ({status_of(e)}): {str(e)[:600]}"
        return str(e)
    pytest.fail(f"expected Spark error {condition}; got {got!r}")


def filtered_or_refused(action, allowed) -> None:
    """A route the proxy may refuse (with a reason) or filter; it must never return more."""
    try:
        got = action()
    except Exception as e:
        assert status_of(e) in ("PERMISSION_DENIED", "INVALID_ARGUMENT", "FAILED_PRECONDITION"), str(e)[:600]
        return
    assert got == allowed


def activate(spark):
    """pyspark builds the DataFrame of a checkpoint with the *active* session; with several
    sessions in one process it must be the one that made the checkpoint."""
    from pyspark.sql.connect.session import SparkSession

    SparkSession._active_session.session = spark
    return spark


def location_of(direct, table: str) -> str:
    rows = [r for r in direct.sql(f"DESCRIBE TABLE EXTENDED {table}").collect() if r[0] == "Location"]
    assert rows, f"no location for {table}"
    return rows[0][1]


def local_path(location: str) -> str:
    return re.sub(r"^file:(//)?", "", location)


# -- the module's world ---------------------------------------------------------------------


@dataclass
class World:
    db: str
    proxy: object
    direct: object
    admin: object
    callers: dict
    orders_location: str  # as Spark reports it, file:/...

    def t(self, name: str = "orders") -> str:
        return f"{self.db}.{name}"

    def url(self, who: str, **params) -> str:
        user, groups = CALLERS[who] if who in CALLERS else (who, None)
        return remote_url(self.proxy.url, user=user, groups=groups, **params)

    @property
    def path(self) -> str:
        return local_path(self.orders_location)

    def protected(self, prefix: str, grantee: str = "user:alice@example.com", predicate: str = "region = 'eu'") -> str:
        """A fresh table (id, region) with rows 1 eu, 2 us and one policy."""
        name = self.t(unique(prefix))
        self.admin.sql(f"CREATE TABLE {name} (id INT, region STRING) USING parquet")
        self.admin.sql(f"INSERT INTO {name} VALUES (1, 'eu'), (2, 'us')")
        self.admin.sql(f"CREATE ROW ACCESS POLICY p ON {name} GRANT TO ('{grantee}') FILTER USING ({predicate})").collect()
        return name

    def plain(self, prefix: str) -> str:
        """A fresh unprotected table (id, region) with rows 1 eu, 2 us."""
        name = self.t(unique(prefix))
        self.admin.sql(f"CREATE TABLE {name} (id INT, region STRING) USING parquet")
        self.admin.sql(f"INSERT INTO {name} VALUES (1, 'eu'), (2, 'us')")
        return name


@pytest.fixture(scope="module")
def bypass_proxy(proxy_factory):
    # Paths under the temp directory (where the test Spark keeps its warehouse) are allowed,
    # so that the B10 tests below meet the check that matters there: a protected table's
    # files stay refused under an allowed prefix (tests/integration/test_allow_lists.py
    # covers the allow list itself).
    return proxy_factory("--identity", "header", "--admin", ADMIN, "--allow-path", tempfile.gettempdir())


@pytest.fixture(scope="module")
def world(bypass_proxy, spark_server, module_sessions):
    w = protected_world(
        bypass_proxy,
        module_sessions,
        Table("orders", "id INT, region STRING, owner STRING, amount INT", rows=[values((i, *row) for i, row in ORDERS.items())]),
        Table("teams", "grp STRING, region STRING", rows=[values([("apac-team", "apac"), ("us-team", "us")])]),
        View("v_orders", "SELECT * FROM {orders}"),
        View("vv_orders", "SELECT id, amount FROM {v_orders} WHERE amount > 0"),
        *(Policy(name, "orders", predicate, grantees=[grantees.strip("'")]) for name, grantees, predicate in POLICIES),
        database="bypass",
        spark_url=spark_server.url,
    )
    callers = {who: w.caller(u, groups=g) for who, (u, g) in CALLERS.items()}
    world = World(w.db, bypass_proxy, w.direct, w.admin, callers, location_of(w.direct, w.table("orders")))
    assert ids(w.direct.table(world.t())) == [1, 2, 3, 4, 5]
    yield world
    w.close()


@pytest.fixture
def alice(world):
    return world.callers["alice"]


@pytest.fixture
def mallory(world):
    return world.callers["mallory"]


@pytest.fixture
def gina(world):
    return world.callers["gina"]


def assert_orders_untouched(world) -> None:
    rows = sorted(tuple(r) for r in world.direct.table(world.t()).collect())
    assert rows == [(i, *v) for i, v in sorted(ORDERS.items())]


# == A1-A4: names ==========================================================================


@pytest.mark.parametrize(
    "name",
    ["{DB}.ORDERS", "`{db}`.`orders`", "spark_catalog.{db}.orders", "SPARK_CATALOG.`{DB}`.Orders", " {db} . orders "],
)
@pytest.mark.parametrize("who", ["alice", "mallory", "gina"])
def test_a1_a2_name_variants_in_spark_table(world, who, name):
    text = name.format(db=world.db, DB=world.db.upper())
    spark = world.callers[who]
    filtered_or_refused(lambda: ids(spark.table(text)), ALLOWED[who])
    assert ids(spark.read.table(text.strip())) == ALLOWED[who]


def test_a1_single_quoted_part_with_a_dot_is_not_the_table(world, mallory):
    # one part that names nothing: refused by rowgate, naming it (rules/unknown_relations.py)
    refused_naming(lambda: ids(mallory.table(f"`{world.db}.orders`")), f"{world.db}.orders")


def test_a1_name_variants_in_write_targets(world, mallory):
    row = mallory.createDataFrame([(9, "eu", "mallory@example.com", 1)], "id INT, region STRING, owner STRING, amount INT")
    for target in (f"`{world.db}`.`ORDERS`", f"spark_catalog.{world.db.upper()}.orders"):
        refused(lambda: row.write.insertInto(target), "PERMISSION_DENIED", "FILTER USING (TRUE)")
    assert_orders_untouched(world)


def test_a3_catalog_api_current_database_is_followed(world, sessions):
    spark = sessions(world.url("alice"))
    spark.catalog.setCurrentCatalog("spark_catalog")
    spark.catalog.setCurrentDatabase(world.db)
    assert spark.catalog.currentDatabase() == world.db
    assert ids(spark.table("orders")) == [1, 2]
    assert ids(spark.range(10).filter("id IN (SELECT id FROM orders)")) == [1, 2]
    assert spark.range(1).selectExpr("(SELECT max(amount) FROM orders) AS m").first().m == 20
    row = spark.createDataFrame([(9, "eu", "x", 1)], "id INT, region STRING, owner STRING, amount INT")
    refused(lambda: row.write.insertInto("orders"), "PERMISSION_DENIED", "requires a FILTER USING (TRUE) grant")


def test_a4_temp_view_named_like_the_table_shadows_it_but_does_not_hide_it(world, sessions):
    spark = sessions(world.url("mallory"))
    spark.catalog.setCurrentDatabase(world.db)
    spark.range(100, 103).createOrReplaceTempView("orders")
    assert ids(spark.table("orders")) == [100, 101, 102]  # the temp view, not filtered as the table
    assert ids(spark.table(world.t())) == []  # the table is still filtered
    assert spark.range(1).selectExpr(f"(SELECT count(*) FROM {world.t()}) AS n").first().n == 0


# == A5-A7: text the proxy and Spark could read differently (expression strings) ==========


@pytest.mark.parametrize(
    "make",
    [
        lambda s, t: s.range(3).filter("id = ${x}"),
        lambda s, t: s.range(3).selectExpr("'${x}' AS v"),
        lambda s, t: s.range(3).select(F.expr("(SELECT count(*) FROM ${db}.orders)")),
    ],
    ids=["filter", "selectExpr", "F.expr"],
)
def test_a5_variable_substitution_in_expression_strings_is_refused(world, mallory, make):
    refused(lambda: make(mallory, world.t()).collect(), "INVALID_ARGUMENT", "${")


@pytest.mark.parametrize(
    "expression",
    [
        "(SELECT count(*) FROM IDENTIFIER('{t}'))",
        "(SELECT count(*) FROM /* a /* nested */ comment */ {t})",
        "(SELECT /*+ BROADCAST(o) */ count(*) FROM {t} o)",
        "(SELECT\n\tcount(*)\nFROM\n  {t}\n)",
        "(SELECT count(*) FROM (SELECT * FROM {t}) AS orders)",
        "(WITH orders AS (SELECT * FROM {t}) SELECT count(*) FROM orders)",
    ],
    ids=["identifier", "nested-comment", "hint", "whitespace", "derived-named-like-table", "cte-named-like-table"],
)
def test_a6_a7_expression_string_variants_are_filtered(world, mallory, alice, expression):
    text = expression.format(t=world.t()) + " AS n"
    filtered_or_refused(lambda: mallory.range(1).selectExpr(text).first().n, 0)
    filtered_or_refused(lambda: alice.range(1).selectExpr(text).first().n, 2)


def test_a7_expression_string_the_proxy_cannot_read_is_refused_or_harmless(world, mallory):
    filtered_or_refused(lambda: ids(mallory.range(10).filter(f"id IN (SELECT id FROM {world.t()}); SELECT 1")), [])


# == A8: views through the DataFrame API ===================================================


@pytest.mark.parametrize("who", ["alice", "mallory", "gina"])
def test_a8_views_and_views_of_views_read_with_spark_table(world, who):
    spark = world.callers[who]
    assert ids(spark.table(world.t("v_orders"))) == ALLOWED[who]
    assert ids(spark.table(world.t("vv_orders"))) == ALLOWED[who]
    joined = spark.table(world.t("vv_orders")).join(spark.table(world.t()), "id")
    assert ids(joined) == ALLOWED[who]


def test_a8_streaming_read_of_a_view_over_protected_data_is_refused(world, mallory):
    refused(lambda: mallory.readStream.table(world.t("v_orders")).isStreaming, "INVALID_ARGUMENT", "view")


# == B9: the DataFrame API =================================================================


@pytest.mark.parametrize("who", sorted(CALLERS))
def test_b9_table_and_read_table(world, who):
    spark = world.callers[who]
    assert ids(spark.table(world.t())) == ALLOWED[who]
    assert ids(spark.read.table(world.t())) == ALLOWED[who]
    assert spark.table(world.t()).count() == len(ALLOWED[who])


@pytest.mark.parametrize("who", ["alice", "mallory", "gina"])
def test_b9_joins_of_several_dataframes_and_self_joins(world, who):
    spark = world.callers[who]
    o, teams, o2 = spark.table(world.t()), spark.table(world.t("teams")), spark.table(world.t())
    joined = (
        o.join(teams, o["region"] == teams["region"], "left")
        .join(o2, o["id"] == o2["id"])
        .select(o["id"], o2["owner"], teams["grp"])
    )
    expected = [(i, ORDERS[i][1], {"apac": "apac-team", "us": "us-team"}.get(ORDERS[i][0])) for i in ALLOWED[who]]
    assert sorted(tuple(r) for r in joined.collect()) == expected
    full = spark.range(1, 6).toDF("k").join(o, F.col("k") == o["id"], "full_outer")
    rows = full.collect()
    assert sorted(r.k for r in rows) == [1, 2, 3, 4, 5]
    assert sorted(r.id for r in rows if r.id is not None) == ALLOWED[who]
    crossed = o.alias("a").crossJoin(o.alias("b"))
    assert crossed.count() == len(ALLOWED[who]) ** 2


@pytest.mark.parametrize("who", ["alice", "mallory", "gina"])
def test_b9_filter_and_selectexpr_with_subqueries(world, who):
    spark, t = world.callers[who], world.t()
    allowed = ALLOWED[who]
    assert ids(spark.range(10).filter(f"id IN (SELECT id FROM {t})")) == allowed
    assert ids(spark.range(10).where(F.expr(f"id IN (SELECT id FROM {t} WHERE amount > 0)"))) == allowed
    row = (
        spark.range(1)
        .selectExpr(
            f"(SELECT count(*) FROM {t}) AS n",
            f"(SELECT max(amount) FROM {t}) AS hi",
            f"(SELECT min(amount) FROM {t}) AS lo",
            f"EXISTS (SELECT 1 FROM {t} WHERE amount >= 300) AS big",
        )
        .first()
    )
    amounts = [ORDERS[i][2] for i in allowed]
    assert (row.n, row.hi, row.lo, row.big) == (
        len(allowed),
        max(amounts, default=None),
        min(amounts, default=None),
        any(a >= 300 for a in amounts),
    )


@pytest.mark.parametrize("who", ["alice", "mallory", "gina"])
def test_b9_sql_with_dataframe_arguments(world, who):
    spark = world.callers[who]
    df = spark.table(world.t())
    assert ids(spark.sql("SELECT id FROM {df}", df=df)) == ALLOWED[who]
    assert ids(spark.sql("SELECT id FROM {df} WHERE amount > {low}", df=df, low=0)) == ALLOWED[who]
    nested = spark.sql("SELECT * FROM {outer}", outer=spark.sql("SELECT id, owner FROM {inner}", inner=df))
    assert ids(nested) == ALLOWED[who]
    joined = spark.sql("SELECT a.id FROM {a} a JOIN {b} b ON a.id = b.id", a=df, b=spark.table(world.t()))
    assert ids(joined) == ALLOWED[who]


@pytest.mark.parametrize("who", ["alice", "mallory", "gina"])
def test_b9_subquery_dataframes(world, who):
    spark = world.callers[who]
    orders = spark.table(world.t())
    allowed = ALLOWED[who]
    assert ids(spark.range(10).where(F.col("id").isin(orders.select("id")))) == allowed
    hi = spark.range(1).select(orders.select(F.max("amount")).scalar().alias("hi")).first().hi
    assert hi == max((ORDERS[i][2] for i in allowed), default=None)
    big = orders.where(F.col("amount") >= 300).exists()
    assert spark.range(3).where(big).count() == (3 if any(ORDERS[i][2] >= 300 for i in allowed) else 0)


@pytest.mark.parametrize("who", ["alice", "mallory"])
def test_b9_readstream_table_is_filtered(world, who):
    spark = world.callers[who]
    name = unique("sink").replace("-", "_")
    query = spark.readStream.table(world.t()).writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    assert query.awaitTermination(120) is not False
    assert ids(spark.table(name)) == ALLOWED[who]


def test_b9_dataframe_temp_view_holds_filtered_rows(world, sessions):
    spark = sessions(world.url("alice"))
    view = unique("tv")
    spark.table(world.t()).createOrReplaceTempView(view)
    assert ids(spark.sql(f"SELECT id FROM {view}")) == [1, 2]
    assert ids(spark.table(view)) == [1, 2]


# == B10: files by path ====================================================================


PATH_READS = {
    "parquet": lambda s, p: s.read.parquet(p),
    "parquet-file-uri": lambda s, p: s.read.parquet("file://" + p),
    "format-load": lambda s, p: s.read.format("parquet").load(p),
    "load-kwarg": lambda s, p: s.read.load(p, format="parquet"),
    "option-path": lambda s, p: s.read.format("parquet").option("path", p).load(),
    "text": lambda s, p: s.read.text(p),
    "binaryFile": lambda s, p: s.read.format("binaryFile").load(p),
    "parent-dir-recursive": lambda s, p: s.read.option("recursiveFileLookup", "true").parquet(p.rsplit("/", 1)[0]),
    "trailing-slash": lambda s, p: s.read.parquet(p + "/"),
    "double-slash": lambda s, p: s.read.parquet(p.replace("/", "//")),
    "stream": lambda s, p: s.readStream.schema("id INT").parquet(p),
    "sql-in-expression": lambda s, p: s.range(1).selectExpr(f"(SELECT count(*) FROM parquet.`{p}`) AS n"),
}


@pytest.mark.parametrize("route", sorted(PATH_READS))
def test_b10_reading_protected_files_by_path_is_refused(world, mallory, route):
    df = PATH_READS[route](mallory, world.path)
    # A streaming DataFrame cannot be collected; asking whether it streams analyses it.
    action = (lambda: df.isStreaming) if route == "stream" else df.collect
    refused(action, "PERMISSION_DENIED", "reading files by path", "protected")


PATH_VARIANTS = {
    "glob-star": lambda p: p[:-1] + "*",
    "glob-question": lambda p: p[:-2] + "?" + p[-1],
    "glob-class": lambda p: p.rsplit("/", 1)[0] + "/[" + p.rsplit("/", 1)[1][0] + "]" + p.rsplit("/", 1)[1][1:],
    "glob-braces": lambda p: p.rsplit("/", 1)[0] + "/{" + p.rsplit("/", 1)[1] + "}",
    "glob-parent": lambda p: p.rsplit("/", 1)[0] + "/*",
    "dot-segment": lambda p: p.rsplit("/", 1)[0] + "/./" + p.rsplit("/", 1)[1],
    "dotdot-segment": lambda p: p.rsplit("/", 1)[0] + "/teams/../" + p.rsplit("/", 1)[1],
    "relative-dotdot": lambda p: "../" * 12 + p.lstrip("/"),
}
SCHEME_VARIANTS = {"FILE:": lambda p: "FILE:" + p, "File:": lambda p: "File:" + p, "FILE:///": lambda p: "FILE://" + p}


# `..` in a path, and relative paths, are refused before the location is even compared.
VARIANT_REASONS = {"dotdot-segment": "'..'", "relative-dotdot": "relative"}


@pytest.mark.parametrize("variant", sorted(PATH_VARIANTS))
def test_b10_path_spellings_of_a_protected_location_are_refused(world, mallory, variant):
    path = PATH_VARIANTS[variant](world.path)
    refused(lambda: ids(mallory.read.parquet(path)), "PERMISSION_DENIED", VARIANT_REASONS.get(variant, "protected"))


def test_b10_glob_in_a_sql_path_inside_an_expression_string_is_refused(world, mallory):
    path = PATH_VARIANTS["glob-star"](world.path)
    refused(
        lambda: mallory.range(1).selectExpr(f"(SELECT collect_list(owner) FROM parquet.`{path}`) AS o").first().o,
        "PERMISSION_DENIED",
        "protected",
    )


@pytest.mark.parametrize("variant", sorted(SCHEME_VARIANTS))
def test_b10_scheme_spellings_of_a_protected_location_are_refused(world, mallory, variant):
    path = SCHEME_VARIANTS[variant](world.path)
    refused(lambda: ids(mallory.read.parquet(path)), "PERMISSION_DENIED", "protected")


@pytest.mark.parametrize("route", ["sql-path-in-expression", "catalog-createTable", "create-table-location"])
def test_b10_scheme_spellings_in_other_routes_are_refused(world, mallory, route):
    path = "FILE:" + world.path
    name = world.t(unique("scheme"))
    action = {
        "sql-path-in-expression": lambda: mallory.range(1).selectExpr(f"(SELECT count(*) FROM parquet.`{path}`) AS n").first().n,
        "catalog-createTable": lambda: ids(mallory.catalog.createTable(name, path=path, source="parquet")),
        "create-table-location": lambda: (
            mallory.sql(f"CREATE TABLE {name} USING parquet LOCATION '{path}'").collect(),
            ids(mallory.table(name)),
        ),
    }[route]
    refused(action, "PERMISSION_DENIED", "protected")


@pytest.mark.parametrize("how", ["createTable", "createExternalTable"])
def test_b10_catalog_create_table_over_the_location_is_refused(world, mallory, how):
    name = world.t(unique("stolen"))
    create = getattr(mallory.catalog, how)
    refused(lambda: create(name, path=world.path, source="parquet"), "PERMISSION_DENIED", "protected")
    assert not world.direct.catalog.tableExists(name)


def test_b10_writing_into_the_location_or_a_table_over_it_is_refused(world, mallory):
    row = mallory.createDataFrame([(9, "eu", "mallory@example.com", 1)], "id INT, region STRING, owner STRING, amount INT")
    refused(lambda: row.write.mode("append").parquet(world.path), "PERMISSION_DENIED", "protected")
    refused(lambda: row.write.mode("append").format("parquet").option("path", world.path).save(), "PERMISSION_DENIED")
    name = world.t(unique("mine"))
    refused(lambda: row.write.option("path", world.path).saveAsTable(name), "PERMISSION_DENIED", "protected")
    assert not world.direct.catalog.tableExists(name)
    assert_orders_untouched(world)


@pytest.mark.parametrize("who", ["alice", "mallory"])
def test_b10_input_files_of_a_protected_read_are_refused(world, who):
    spark = world.callers[who]
    refused(lambda: spark.table(world.t()).inputFiles(), "PERMISSION_DENIED", "input files")
    refused(lambda: spark.table(world.t("v_orders")).select("id").inputFiles(), "PERMISSION_DENIED", "input files")
    files = spark.table(world.t("teams")).inputFiles()  # unprotected: answered
    assert files and all("/teams" in f for f in files)


# == B11: global temp views ================================================================


def test_b11_global_temp_views_of_protected_or_session_data_are_refused(world, sessions):
    spark = sessions(world.url("alice"))
    name = unique("g")
    refused(lambda: spark.table(world.t()).createOrReplaceGlobalTempView(name), "PERMISSION_DENIED", "global temporary view")
    refused(lambda: spark.table(world.t("vv_orders")).createGlobalTempView(name), "PERMISSION_DENIED", "global temporary view")
    spark.table(world.t()).createOrReplaceTempView(name + "_local")
    refused(lambda: spark.table(name + "_local").createGlobalTempView(name), "PERMISSION_DENIED", "global temporary view")
    activate(spark)
    checkpointed = spark.table(world.t()).localCheckpoint()
    refused(lambda: checkpointed.createGlobalTempView(name), "PERMISSION_DENIED", "global temporary view")
    reader = sessions(world.url("mallory"))
    spark_error(lambda: ids(reader.table(f"global_temp.{name}")), "TABLE_OR_VIEW_NOT_FOUND")
    spark.range(3).createOrReplaceGlobalTempView(name)  # unprotected data: shared as usual
    assert ids(reader.table(f"global_temp.{name}")) == [0, 1, 2]


def test_b11_global_temp_view_made_before_a_policy_does_not_serve_unfiltered_rows(world, sessions):
    """A global temp view keeps the plan it was made with (storeAnalyzedPlanForView is forced
    on), so one made over a table before its first policy holds unfiltered rows."""
    table = world.plain("gbefore")
    view = unique("gv")
    sessions(world.url("alice")).table(table).createOrReplaceGlobalTempView(view)
    world.admin.sql(
        f"CREATE ROW ACCESS POLICY p ON {table} GRANT TO ('user:alice@example.com') FILTER USING (region = 'eu')"
    ).collect()
    reader = sessions(world.url("mallory"))
    assert ids(reader.table(table)) == []
    refused(lambda: ids(reader.table(f"global_temp.{view}")), "FAILED_PRECONDITION", view, "recreate")
    refused(lambda: ids(reader.sql(f"SELECT * FROM global_temp.{view}")), "FAILED_PRECONDITION", view)


# == B12: copies ===========================================================================


@pytest.mark.parametrize("who", ["alice", "mallory"])
def test_b12_save_as_table_and_write_to_create_copy_only_allowed_rows(world, who):
    spark = world.callers[who]
    first, second, third = (world.t(unique(p)) for p in ("copy", "copy", "copy"))
    spark.table(world.t()).write.saveAsTable(first)
    spark.table(world.t()).writeTo(second).using("parquet").create()
    spark.table(world.t("v_orders")).write.format("parquet").saveAsTable(third)
    for copy in (first, second, third):
        assert ids(world.direct.table(copy)) == ALLOWED[who], copy


def test_b12_insert_into_an_unprotected_table_copies_only_allowed_rows(world, alice):
    sink = world.t(unique("sink"))
    world.admin.sql(f"CREATE TABLE {sink} (id INT, region STRING, owner STRING, amount INT) USING parquet")
    alice.table(world.t()).write.insertInto(sink)
    alice.table(world.t()).write.mode("append").saveAsTable(sink)
    assert ids(world.direct.table(sink)) == [1, 1, 2, 2]


def test_b12_writing_files_copies_only_allowed_rows(world, alice):
    target = f"{tempfile.gettempdir()}/rowgate-bypass-{uuid.uuid4().hex}"
    alice.table(world.t()).write.parquet(target)
    assert ids(world.direct.read.parquet(target)) == [1, 2]


@pytest.mark.parametrize("who", ["alice", "mallory", "gina"])
def test_b12_cache_and_persist_hold_only_allowed_rows(world, who):
    spark = world.callers[who]
    cached = spark.table(world.t()).cache()
    try:
        assert ids(cached) == ALLOWED[who]
        assert cached.count() == len(ALLOWED[who])
        assert cached.storageLevel.useMemory
    finally:
        cached.unpersist()
    persisted = spark.table(world.t()).where("amount > 0").persist()
    try:
        assert ids(persisted) == ALLOWED[who]
    finally:
        persisted.unpersist()


@pytest.mark.parametrize("who", ["alice", "mallory", "gina"])
def test_b12_local_checkpoint_holds_only_allowed_rows(world, who):
    spark = activate(world.callers[who])
    checkpointed = spark.table(world.t()).localCheckpoint()
    assert ids(checkpointed) == ALLOWED[who]
    assert checkpointed.agg(F.count("*").alias("n")).first().n == len(ALLOWED[who])
    lazy = spark.table(world.t()).localCheckpoint(eager=False)
    assert ids(lazy) == ALLOWED[who]


# == B13: time travel ======================================================================


@pytest.mark.parametrize("option", [("versionAsOf", "0"), ("timestampAsOf", "2020-01-01"), ("VERSIONASOF", "0")])
@pytest.mark.parametrize("who", ["alice", "mallory", "gina"])
def test_b13_time_travel_read_options_need_full_access(world, who, option):
    spark = world.callers[who]
    refused(lambda: ids(spark.read.option(*option).table(world.t())), "PERMISSION_DENIED", "time travel", "FILTER USING (TRUE)")


def test_b13_change_feed_options_on_a_stream_need_full_access(world, mallory):
    refused(
        lambda: mallory.readStream.option("startingVersion", "0").table(world.t()).isStreaming,
        "PERMISSION_DENIED",
        "time travel",
    )


def test_b13_full_access_caller_passes_the_proxy(world):
    # Parquet has no versions: Spark itself answers, which shows the proxy let the read through.
    writer = world.callers["writer"]
    spark_error(lambda: ids(writer.read.option("versionAsOf", "0").table(world.t())), "UNSUPPORTED_FEATURE.TIME_TRAVEL")


def test_b13_unknown_read_options_on_a_protected_table_are_refused(world, alice):
    refused(lambda: ids(alice.read.option("mergeSchema", "true").table(world.t())), "INVALID_ARGUMENT", "read option")


# == B14: table-valued functions and metadata ==============================================


def test_b14_table_valued_functions_over_a_protected_name_are_refused(world, mallory):
    refused(
        lambda: mallory.tvf._fn("table_changes", F.lit(world.t()), F.lit(0)).collect(),
        "INVALID_ARGUMENT",
        "table_changes",
        "protected",
    )
    refused(
        lambda: mallory.tvf._fn("table_changes", F.concat(F.lit(world.db + "."), F.lit("orders")), F.lit(0)).collect(),
        "INVALID_ARGUMENT",
        "not a literal",
    )
    assert mallory.tvf.range(3).count() == 3  # generators are fine


@pytest.mark.parametrize(
    "sql, status, reason",
    [
        ("DESCRIBE TABLE EXTENDED {t} amount", "PERMISSION_DENIED", "statistics or history"),
        ("DESC FORMATTED {t} amount", "PERMISSION_DENIED", "statistics or history"),
        ("DESCRIBE EXTENDED {t}", "PERMISSION_DENIED", "statistics or history"),
        ("ANALYZE TABLE {t} COMPUTE STATISTICS FOR COLUMNS amount, owner", "PERMISSION_DENIED", "statistics or history"),
        ("ANALYZE TABLE {t} COMPUTE STATISTICS", "PERMISSION_DENIED", "statistics or history"),
        ("SHOW TABLE EXTENDED IN {db} LIKE 'orders'", "INVALID_ARGUMENT", "SHOW TABLE"),
        ("SHOW TBLPROPERTIES {t}", "INVALID_ARGUMENT", "SHOW TBLPROPERTIES"),
        ("SHOW CREATE TABLE {t}", "INVALID_ARGUMENT", "SHOW CREATE"),
        ("SHOW PARTITIONS {t}", "INVALID_ARGUMENT", "SHOW PARTITIONS"),
    ],
)
@pytest.mark.parametrize("who", ["alice", "mallory"])
def test_b14_d19_metadata_with_statistics_is_refused(world, who, sql, status, reason):
    """Column statistics (min/max/distinct), table statistics (row counts), partitions and
    properties tell a caller about rows it may not see."""
    text = sql.format(t=world.t(), db=world.db)
    message = refused(lambda: world.callers[who].sql(text).collect(), status, reason)
    assert "row access polic" in message.lower() or "filter using (true)" in message.lower(), message[:400]


def test_b14_catalog_api_shows_schema_only(world, mallory):
    columns = mallory.catalog.listColumns(world.t())
    assert [c.name for c in columns] == ["id", "region", "owner", "amount"]
    table = mallory.catalog.getTable(world.t())
    assert table.name == "orders" and table.tableType == "MANAGED"
    assert "orders" in [t.name for t in mallory.catalog.listTables(world.db)]


# == C15: identity =========================================================================


def test_c15_user_id_in_the_connection_string_changes_nothing(world, sessions):
    spoofed = sessions(world.url("mallory", user_id="user:alice@example.com"))
    assert spoofed.client._user_id == "user:alice@example.com"  # pyspark really sends it
    assert ids(spoofed.table(world.t())) == []
    assert spoofed.range(1).select(F.current_user().alias("u")).first().u == "mallory@example.com"


def test_c15_another_callers_session_id_reaches_none_of_its_filtered_data(world, sessions):
    owner = sessions(world.url("alice"))
    view = unique("mine")
    owner.table(world.t()).createOrReplaceTempView(view)
    assert ids(owner.table(view)) == [1, 2]
    thief = sessions(world.url("mallory", session_id=owner.client._session_id))
    refused_naming(lambda: ids(thief.table(view)), view)  # no temp view of thief's session
    assert ids(thief.table(world.t())) == []


# == C16: configuration ====================================================================


GUARDED = [
    "spark.sql.catalog.evil",
    "SPARK.SQL.CATALOG.Evil",
    "spark.sql.catalog.spark_catalog",
    "spark.sql.variable.substitute",
    "spark.sql.legacy.storeAnalyzedPlanForView",
    "spark.sql.optimizer.excludedRules",
    "spark.sql.defaultCatalog",
    "spark.sql.caseSensitive",
    "spark.sql.extensions",
    "spark.hadoop.fs.defaultFS",
]


@pytest.mark.parametrize("key", GUARDED)
def test_c16_config_rpc_set_and_unset_of_guarded_keys_are_refused(world, sessions, key):
    spark = sessions(world.url("mallory"))
    refused(
        lambda: spark.conf.set(key, "org.apache.spark.sql.execution.datasources.v2.V2SessionCatalog"),
        "PERMISSION_DENIED",
        "setting of",
    )
    refused(lambda: spark.conf.unset(key), "PERMISSION_DENIED", "unsetting of")
    assert ids(spark.table(world.t())) == []


def test_c16_forced_settings_hold_and_cannot_be_reset(world, sessions):
    spark = sessions(world.url("alice"))
    assert spark.conf.get("spark.sql.variable.substitute") == "false"
    assert spark.conf.get("spark.sql.legacy.storeAnalyzedPlanForView") == "true"
    refused(lambda: spark.conf.set("spark.sql.legacy.storeAnalyzedPlanForView", "false"), "PERMISSION_DENIED")
    refused(lambda: spark.sql("RESET spark.sql.legacy.storeAnalyzedPlanForView").collect(), "PERMISSION_DENIED", "resetting of")
    refused(lambda: spark.sql("SET `spark.sql.legacy.storeAnalyzedPlanForView` = false").collect(), "PERMISSION_DENIED")
    assert spark.conf.get("spark.sql.legacy.storeAnalyzedPlanForView") == "true"
    spark.conf.set("spark.sql.shuffle.partitions", "3")  # an ordinary setting is the caller's own
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    assert ids(spark.table(world.t())) == [1, 2]


def test_c16_admin_may_change_guarded_keys(world, sessions):
    admin = sessions(remote_url(world.proxy.url, user=ADMIN))
    admin.conf.set("spark.sql.caseSensitive", "true")
    assert admin.conf.get("spark.sql.caseSensitive") == "true"
    admin.conf.unset("spark.sql.caseSensitive")
    assert admin.conf.get("spark.sql.caseSensitive") == "false"


# == C17: code shipping ====================================================================


def _python_code_routes():
    from pyspark.sql.functions import udtf

    @F.udf("long")
    def plus_one(x):
        return x + 1

    @udtf(returnType="x: int")
    class One:
        def eval(self):
            yield (1,)

    return {
        "udf": lambda s, t: s.range(2).select(plus_one("id")).collect(),
        "udf-over-protected": lambda s, t: s.table(t).select(plus_one("id")).collect(),
        "udf-in-filter": lambda s, t: s.table(t).filter(plus_one("id") > 0).count(),
        "register": lambda s, t: s.udf.register(unique("f"), lambda x: x, "long"),
        "udtf": lambda s, t: _as_active(s, lambda: One().collect()),
        "mapInPandas": lambda s, t: s.range(2).mapInPandas(lambda it: it, "id long").collect(),
        "mapInArrow": lambda s, t: s.range(2).mapInArrow(lambda it: it, "id long").collect(),
        "applyInPandas": lambda s, t: s.range(2).groupBy("id").applyInPandas(lambda pdf: pdf, "id long").collect(),
    }


def _as_active(session, action):
    """A UDTF call builds its DataFrame with pyspark's active session: make it the caller's."""
    with active(session):
        return action()


PYTHON_CODE_ROUTES = [
    "udf",
    "udf-over-protected",
    "udf-in-filter",
    "register",
    "udtf",
    "mapInPandas",
    "mapInArrow",
    "applyInPandas",
]


@pytest.mark.parametrize("route", PYTHON_CODE_ROUTES)
def test_c17_python_code_is_refused_for_non_admins(world, mallory, route):
    routes = _python_code_routes()
    assert sorted(routes) == sorted(PYTHON_CODE_ROUTES)
    action = routes[route]
    refused(lambda: action(mallory, world.t()), "PERMISSION_DENIED", "--allow-python-udfs")


def test_c17_java_udf_registration_is_refused(world, mallory):
    refused(
        lambda: mallory.udf.registerJavaFunction("jf", "org.example.Nope", "string"), "PERMISSION_DENIED", "--allow-java-udfs"
    )


@pytest.mark.parametrize(
    "sql, flag",
    [
        ("SELECT reflect('java.lang.System', 'getProperty', 'user.dir') AS d", "--allow-reflect"),
        ("SELECT java_method('java.lang.System', 'getProperty', 'user.dir') AS d", "--allow-reflect"),
        ("SELECT TRANSFORM(id) USING 'cat' AS (x STRING) FROM range(2)", "--allow-script-transform"),
        (
            "SELECT id FROM {t} WHERE id IN (SELECT TRANSFORM(id) USING 'cat' AS (x INT) FROM range(9))",
            "--allow-script-transform",
        ),
    ],
)
def test_c17_sql_reflect_and_transform_are_refused(world, mallory, sql, flag):
    refused(lambda: mallory.sql(sql.format(t=world.t())).collect(), "PERMISSION_DENIED", flag)


def test_c17_sql_functions_are_refused(world, mallory):
    refused(lambda: mallory.sql("CREATE TEMPORARY FUNCTION f AS 'org.example.Nope'").collect(), "PERMISSION_DENIED", "functions")
    refused(lambda: mallory.sql("CREATE TEMPORARY FUNCTION g() RETURNS INT RETURN 1").collect(), "PERMISSION_DENIED", "functions")
    refused(lambda: mallory.sql("ADD JAR /tmp/nope.jar").collect(), "PERMISSION_DENIED", "admins")


@pytest.mark.parametrize(
    "make",
    [
        lambda s: s.range(1).selectExpr("reflect('java.lang.System', 'getProperty', 'user.dir') AS d"),
        lambda s: s.range(1).filter("java_method('java.lang.System', 'getProperty', 'user.dir') IS NOT NULL"),
        lambda s: s.range(1).selectExpr("system.builtin.java_method('java.lang.System', 'getProperty', 'java.home') AS d"),
        lambda s: s.range(1).select(F.reflect(F.lit("java.lang.System"), F.lit("getProperty"), F.lit("user.dir"))),
        lambda s: s.range(1).select(F.try_reflect(F.lit("java.lang.System"), F.lit("getProperty"), F.lit("user.dir"))),
        lambda s: s.range(1).select(
            F.transform(
                F.array(F.lit(1)), lambda x: F.java_method(F.lit("java.lang.System"), F.lit("getProperty"), F.lit("java.home"))
            )
        ),
    ],
    ids=["selectExpr", "filter", "qualified-name", "F.reflect", "F.try_reflect", "inside-a-lambda"],
)
def test_c17_reflect_in_dataframe_expressions_is_refused(world, mallory, make):
    refused(lambda: make(mallory).collect(), "PERMISSION_DENIED", "--allow-reflect")


@pytest.mark.parametrize(
    "make",
    [
        lambda s: s.range(1).select(
            F.call_function("reflect", F.lit("java.lang.System"), F.lit("getProperty"), F.lit("java.home"))
        ),
        lambda s: s.range(1).select(
            F.call_function("JAVA_METHOD", F.lit("java.lang.System"), F.lit("getProperty"), F.lit("java.home"))
        ),
        lambda s: s.range(1).selectExpr("`java_method`('java.lang.System', 'getProperty', 'java.home') AS d"),
        lambda s: s.range(1).selectExpr("java_method/**/('java.lang.System', 'getProperty', 'java.home') AS d"),
        lambda s: s.sql("SELECT `reflect`('java.lang.System', 'getProperty', 'java.home') AS d"),
    ],
    ids=["call_function", "call_function-upper", "backticks", "comment", "sql-backticks"],
)
def test_c17_reflect_spelled_otherwise_is_refused(world, mallory, make):
    refused(lambda: make(mallory).collect(), "PERMISSION_DENIED", "--allow-reflect")


def test_c17_transform_in_an_expression_string_is_refused(world, mallory):
    """TRANSFORM ... USING runs a shell command on the server: this one would print every
    owner's email from the protected table's parquet files."""
    script = f'cat {world.path}/*.parquet | grep -a -o "[a-z]*@example.com"'
    text = f"(SELECT collect_set(x) FROM (SELECT TRANSFORM(id) USING '{script}' AS (x STRING) FROM range(1))) AS leak"
    refused(lambda: sorted(mallory.range(1).selectExpr(text).first().leak), "PERMISSION_DENIED", "--allow-script-transform")
    refused(
        lambda: mallory.range(1).filter("id IN (SELECT TRANSFORM(id) USING 'cat' AS (x INT) FROM range(2))").collect(),
        "PERMISSION_DENIED",
        "--allow-script-transform",
    )


def test_c17_higher_order_transform_is_not_a_script(world, mallory):
    assert mallory.range(1).selectExpr("transform(array(1, 2), x -> x + 1) AS a").first().a == [2, 3]
    got = mallory.range(1).filter("size(transform(array(1), x -> x)) = 1 AND 'using' <> ''").count()
    assert got == 1


def _add_artifact(world, who: str, name: str, timeout: float = 15):
    """One AddArtifacts call as pyspark makes it (raw gRPC: pyspark sets no deadline)."""
    from pyspark.sql.connect.proto import base_pb2, base_pb2_grpc

    data = b"X = 1\n"
    request = base_pb2.AddArtifactsRequest(
        session_id=str(uuid.uuid4()),
        user_context=base_pb2.UserContext(user_id="ignored"),
        batch=base_pb2.AddArtifactsRequest.Batch(
            artifacts=[
                base_pb2.AddArtifactsRequest.SingleChunkArtifact(
                    name=name, data=base_pb2.AddArtifactsRequest.ArtifactChunk(data=data, crc=zlib.crc32(data))
                )
            ]
        ),
    )
    user, groups = CALLERS.get(who, (who, None))
    metadata = [("x-rowgate-user", user)] + ([("x-rowgate-groups", groups)] if groups else [])
    with grpc.insecure_channel(world.proxy.target) as channel:
        return base_pb2_grpc.SparkConnectServiceStub(channel).AddArtifacts(iter([request]), metadata=metadata, timeout=timeout)


def test_c17_cached_local_data_artifacts_are_not_code(world):
    reply = _add_artifact(world, "mallory", f"cache/{uuid.uuid4().hex}")
    assert [a.is_crc_successful for a in reply.artifacts] == [True]


@pytest.mark.parametrize("name", ["pyfiles/evil.py", "jars/evil.jar", "classes/Evil.class", "archives/evil.zip", "files/x.txt"])
def test_c17_code_artifacts_are_refused_promptly(world, name):
    """pyspark's addArtifact sets no deadline: a refusal must end the stream at once."""
    started = time.monotonic()
    try:
        reply = _add_artifact(world, "mallory", name, timeout=10)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.PERMISSION_DENIED, f"{e.code()} after {time.monotonic() - started:.1f}s: {e.details()}"
        assert "--allow-" in e.details()
        return
    pytest.fail(f"artifact {name} accepted: {reply}")


def test_c17_pyspark_add_artifact_is_refused(world, sessions, tmp_path):
    spark = sessions(world.url("mallory"))
    module = tmp_path / f"{unique('evil')}.py"
    module.write_text("X = 1\n")
    refused(lambda: spark.addArtifact(str(module), pyfile=True), "PERMISSION_DENIED", "--allow-python-udfs")


def test_c17_admins_may_ship_code(world):
    admin = world.admin

    @F.udf("long")
    def plus_one(x):
        return x + 1

    assert [r[0] for r in admin.range(2).select(plus_one("id")).collect()] == [1, 2]
    assert admin.sql("SELECT reflect('java.lang.Integer', 'valueOf', '7') AS v").first().v == "7"


@pytest.fixture(scope="module")
def permissive(proxy_factory, world, module_sessions):
    """A second proxy whose operator allows Python UDFs and TRANSFORM scripts (not reflect),
    with the same policy on orders in its own store, so protection is in force there too."""
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN, "--allow-python-udfs", "--allow-script-transform")
    admin = module_sessions(remote_url(proxy.url, user=ADMIN))
    admin.sql(
        f"CREATE ROW ACCESS POLICY eu_only ON {world.t()} GRANT TO ('user:alice@example.com') FILTER USING (region = 'eu')"
    ).collect()
    return proxy


def test_c17_operator_flags_allow_the_named_kinds_only(world, permissive, sessions):
    mallory = sessions(remote_url(permissive.url, user="user:mallory@example.com"))
    alice = sessions(remote_url(permissive.url, user="user:alice@example.com"))

    @F.udf("long")
    def plus_one(x):
        return x + 1

    assert [r[0] for r in mallory.range(2).select(plus_one("id")).collect()] == [1, 2]
    assert sorted(r[0] for r in alice.table(world.t()).select(plus_one("id")).collect()) == [2, 3]  # still filtered
    assert ids(mallory.table(world.t()).select(plus_one("id"))) == []
    assert sorted(r.x for r in mallory.sql("SELECT TRANSFORM(id) USING 'cat' AS (x STRING) FROM range(2)").collect()) == [
        "0",
        "1",
    ]
    refused(
        lambda: mallory.sql("SELECT reflect('java.lang.Integer', 'valueOf', '7')").collect(),
        "PERMISSION_DENIED",
        "--allow-reflect",
    )
    refused(
        lambda: mallory.udf.registerJavaFunction("jf", "org.example.Nope", "string"), "PERMISSION_DENIED", "--allow-java-udfs"
    )


# == D18: error oracles through DataFrame filters ==========================================


ORACLES = ["assert_true", "divide_by_zero", "failed_cast", "raise_error"]


def oracles(hidden_region: str, hidden_owner: str) -> dict[str, object]:
    """Predicates that raise on a hidden row (built lazily: pyspark needs a session for F.expr)."""
    return {
        "assert_true": F.expr(f"assert_true(region <> '{hidden_region}') IS NULL"),
        "divide_by_zero": F.expr(f"1 / (CASE WHEN region = '{hidden_region}' THEN 0 ELSE 1 END) > 0"),
        "raise_error": F.when(
            F.col("region") == hidden_region, F.raise_error(F.concat(F.lit("owner "), F.col("owner")))
        ).otherwise(F.lit(True)),
        "failed_cast": F.expr(f"CAST(CASE WHEN owner = '{hidden_owner}' THEN 'x' ELSE '1' END AS INT) = 1"),
    }


@pytest.mark.parametrize("oracle", ORACLES)
def test_d18_error_oracles_in_a_dataframe_filter_do_not_fire_on_hidden_rows_alice(world, alice, oracle):
    predicate = oracles("us", "carol@example.com")[oracle]
    assert ids(alice.table(world.t()).filter(predicate)) == [1, 2]
    assert alice.table(world.t()).where(predicate).count() == 2
    assert ids(alice.table(world.t()).join(alice.range(1), predicate)) == [1, 2]


@pytest.mark.parametrize("oracle", ORACLES)
def test_d18_error_oracles_in_a_dataframe_filter_do_not_fire_on_hidden_rows_lookup_policy(world, gina, oracle):
    predicate = oracles("us", "carol@example.com")[oracle]
    try:
        got = ids(gina.table(world.t()).filter(predicate))
    except Exception as e:
        pytest.fail(f"gina's predicate ran on a hidden row: {str(e).splitlines()[0][:300]}")
    assert got == [5]


def test_d18_control_a_non_matching_oracle_returns_the_lookup_callers_row(world, gina):
    """The control for the test above: with an owner nobody has, nothing can raise."""
    predicate = F.expr("CAST(CASE WHEN owner = 'nobody@example.com' THEN 'x' ELSE '1' END AS INT) = 1")
    assert ids(gina.table(world.t()).filter(predicate)) == [5]


# == D19: statistics =======================================================================


@pytest.mark.parametrize("who", ["alice", "mallory", "gina"])
def test_d19_aggregates_and_stat_functions_see_only_allowed_rows(world, who):
    spark = world.callers[who]
    df = spark.table(world.t())
    amounts = [ORDERS[i][2] for i in ALLOWED[who]]
    row = df.agg(
        F.count("*").alias("n"),
        F.min("amount").alias("lo"),
        F.max("amount").alias("hi"),
        F.sum("amount").alias("total"),
        F.countDistinct("region").alias("regions"),
        F.approx_count_distinct("owner").alias("owners"),
        F.max_by("owner", "amount").alias("top"),
    ).first()
    assert (row.n, row.lo, row.hi, row.total, row.regions, row.owners) == (
        len(amounts),
        min(amounts, default=None),
        max(amounts, default=None),
        sum(amounts) if amounts else None,
        len({ORDERS[i][0] for i in ALLOWED[who]}),
        len(amounts),
    )
    assert row.top == (ORDERS[max(ALLOWED[who], key=lambda i: ORDERS[i][2])][1] if amounts else None)
    described = {r.summary: r.amount for r in df.describe("amount").collect()}
    assert described["count"] == str(len(amounts))
    assert described["max"] == (str(max(amounts)) if amounts else None)
    summary = {r.summary: r.amount for r in df.select("amount").summary("count", "min", "max", "50%").collect()}
    assert summary["count"] == str(len(amounts)) and summary["max"] == (str(max(amounts)) if amounts else None)
    assert df.approxQuantile("amount", [0.0, 1.0], 0.0) == ([float(min(amounts)), float(max(amounts))] if amounts else [])
    assert sorted(df.freqItems(["owner"]).first()[0]) == sorted(ORDERS[i][1] for i in ALLOWED[who])
    assert df.isEmpty() == (not amounts)
    assert df.groupBy("region").count().count() == len({ORDERS[i][0] for i in ALLOWED[who]})
    assert sorted(r.id for r in df.tail(10)) == ALLOWED[who]


def test_d19_column_statistics_computed_by_an_operator_do_not_answer_for_callers(world, mallory, alice):
    world.direct.sql(f"ANALYZE TABLE {world.t()} COMPUTE STATISTICS FOR ALL COLUMNS")
    assert mallory.table(world.t()).agg(F.count("*"), F.max("amount"), F.min("amount")).first()[:] == (0, None, None)
    assert alice.table(world.t()).agg(F.count("*"), F.max("amount"), F.min("amount")).first()[:] == (2, 20, 10)
    assert PREDICATE_TRACES.search(mallory.table(world.t())._explain_string(mode="cost")) is None


# == D20: plan text ========================================================================


@pytest.mark.parametrize("mode", ["simple", "extended", "formatted", "cost", "codegen"])
@pytest.mark.parametrize("who", ["alice", "gina", "mallory"])
def test_d20_dataframe_explain_shows_no_predicate(world, capsys, who, mode):
    spark = world.callers[who]
    plans = [
        spark.table(world.t()).where("amount > 1"),
        spark.range(3).selectExpr(f"(SELECT count(*) FROM {world.t()}) AS n"),
        spark.table(world.t("vv_orders")).crossJoin(spark.range(2)),
    ]
    for df in plans:
        text = df._explain_string(mode=mode)
        assert "rowgate" in text and PREDICATE_TRACES.search(text) is None, text[:500]
        capsys.readouterr()
        df.explain(mode=mode)
        printed = capsys.readouterr().out
        assert "rowgate" in printed and PREDICATE_TRACES.search(printed) is None, printed[:500]


@pytest.mark.parametrize("who", ["alice", "mallory"])
def test_d20_explain_of_a_temp_view_over_a_protected_table_shows_no_predicate(world, capsys, who):
    """Spark stores the filtered plan for a temp view made through rowgate; explaining a read of
    the view printed it, policy predicates included (the read names no protected table)."""
    spark = world.callers[who]
    view = unique("d20_view")
    spark.table(world.t()).where("amount > 0").createOrReplaceTempView(view)
    for df in (spark.table(view), spark.table(view).where("amount > 1").crossJoin(spark.range(2))):
        for mode in ("simple", "extended", "formatted"):
            text = df._explain_string(mode=mode)
            assert "rowgate" in text and PREDICATE_TRACES.search(text) is None, text[:500]
    printed = "\n".join(str(r[0]) for r in spark.sql(f"EXPLAIN EXTENDED SELECT * FROM {view}").collect())
    assert "rowgate" in printed and PREDICATE_TRACES.search(printed) is None, printed[:500]
    unrelated = unique("d20_plain")
    spark.table(world.t("teams")).createOrReplaceTempView(unrelated)
    assert "rowgate" not in spark.table(unrelated)._explain_string(extended=True)  # no protected rows: Spark's plan


def test_d20_explain_of_an_unprotected_plan_is_the_real_plan(world, mallory):
    text = mallory.table(world.t("teams")).where("grp = 'x'")._explain_string(extended=True)
    assert "rowgate" not in text and "teams" in text


@pytest.mark.parametrize("who", ["alice", "gina"])
def test_d20_analysis_errors_show_no_predicate(world, who):
    spark = world.callers[who]
    text = spark_error(lambda: spark.table(world.t()).select("no_such_column").collect(), "UNRESOLVED_COLUMN.WITH_SUGGESTION")
    message = text.split("JVM stacktrace")[0]
    assert PREDICATE_TRACES.search(message) is None, message


# == E21: writes ===========================================================================


def _row(spark):
    return spark.createDataFrame([(9, "eu", "planted@example.com", 1)], "id INT, region STRING, owner STRING, amount INT")


WRITES = {
    "insertInto": lambda df, t: df.write.insertInto(t),
    "insertInto-overwrite": lambda df, t: df.write.insertInto(t, overwrite=True),
    "saveAsTable-append": lambda df, t: df.write.mode("append").saveAsTable(t),
    "saveAsTable-overwrite": lambda df, t: df.write.mode("overwrite").saveAsTable(t),
    "saveAsTable-ignore": lambda df, t: df.write.mode("ignore").format("parquet").saveAsTable(t),
    "writeTo-append": lambda df, t: df.writeTo(t).append(),
    "writeTo-overwrite": lambda df, t: df.writeTo(t).overwrite(F.lit(True)),
    "writeTo-overwritePartitions": lambda df, t: df.writeTo(t).overwritePartitions(),
    "writeTo-createOrReplace": lambda df, t: df.writeTo(t).using("parquet").createOrReplace(),
    "writeTo-replace": lambda df, t: df.writeTo(t).using("parquet").replace(),
    "mergeInto": lambda df, t: df.alias("s").mergeInto(t, F.expr("s.id = orders.id")).whenNotMatched().insertAll().merge(),
    "writeStream-toTable": lambda df, t: df.sparkSession.readStream.table(t).writeStream.toTable(t),
}


@pytest.mark.parametrize("how", sorted(WRITES))
@pytest.mark.parametrize("who", ["alice", "mallory"])
def test_e21_dataframe_writes_into_a_protected_table_need_full_access(world, who, how):
    spark = world.callers[who]
    refused(lambda: WRITES[how](_row(spark), world.t()), "PERMISSION_DENIED", "requires a FILTER USING (TRUE) grant")
    assert_orders_untouched(world)


@pytest.mark.parametrize(
    "sql",
    ["DELETE FROM {t} WHERE id = 3", "UPDATE {t} SET amount = 0", "TRUNCATE TABLE {t}", "INSERT OVERWRITE {t} SELECT * FROM {t}"],
)
def test_e21_sql_dml_by_the_lookup_caller_needs_full_access(world, gina, sql):
    refused(lambda: gina.sql(sql.format(t=world.t())).collect(), "PERMISSION_DENIED", "FILTER USING (TRUE)")
    assert_orders_untouched(world)


def test_e21_full_access_caller_may_write(world):
    ledger = world.protected("ledger")
    world.admin.sql(f"CREATE ROW ACCESS POLICY w ON {ledger} GRANT TO ('user:writer@example.com') FILTER USING (TRUE)").collect()
    writer = world.callers["writer"]
    more = writer.createDataFrame([(3, "eu")], "id INT, region STRING")
    more.write.insertInto(ledger)
    writer.createDataFrame([(4, "us")], "id INT, region STRING").write.mode("append").saveAsTable(ledger)
    writer.sql(f"INSERT INTO {ledger} VALUES (5, 'eu')").collect()
    assert ids(world.direct.table(ledger)) == [1, 2, 3, 4, 5]
    assert ids(writer.table(ledger)) == [1, 2, 3, 4, 5]
    assert ids(world.callers["alice"].table(ledger)) == [1, 3, 5]
    assert ids(world.callers["mallory"].table(ledger)) == []


@pytest.mark.parametrize("spelling", ["dotdot", "scheme-case"])
def test_e21_writing_into_a_protected_location_by_another_spelling_is_refused(world, mallory, spelling):
    victim = world.protected("plant")
    path = local_path(location_of(world.direct, victim))
    parent, leaf = path.rsplit("/", 1)
    other = local_path(location_of(world.direct, world.t("teams"))).rsplit("/", 1)[1]
    target = f"{parent}/{other}/../{leaf}" if spelling == "dotdot" else "FILE:" + path
    planted = mallory.createDataFrame([(66, "eu")], "id INT, region STRING")
    try:
        planted.write.mode("append").parquet(target)
    except Exception as e:
        assert status_of(e) == "PERMISSION_DENIED", str(e)[:500]
        assert ids(world.direct.table(victim)) == [1, 2]
        return
    world.direct.sql(f"REFRESH TABLE {victim}")
    pytest.fail(f"not refused; alice now reads {ids(world.callers['alice'].table(victim))} from {victim} (66 was planted)")


# == E22: lifecycle ========================================================================


def test_e22_dataframe_temp_view_made_before_a_policy_becomes_unusable(world, sessions):
    table = world.plain("tvbefore")
    spark = sessions(world.url("alice"))
    view = unique("tv")
    spark.table(table).createOrReplaceTempView(view)
    plain_df = spark.table(table)
    cached = spark.table(table).cache()
    assert ids(spark.table(view)) == [1, 2] and ids(cached) == [1, 2]
    world.admin.sql(
        f"CREATE ROW ACCESS POLICY p ON {table} GRANT TO ('user:alice@example.com') FILTER USING (region = 'eu')"
    ).collect()
    refused(lambda: ids(spark.table(view)), "FAILED_PRECONDITION", view, "recreate")
    refused(lambda: ids(spark.sql(f"SELECT * FROM {view}")), "FAILED_PRECONDITION", view)
    refused(lambda: spark.range(3).filter(f"id IN (SELECT id FROM {view})").count(), "FAILED_PRECONDITION", view)
    assert ids(plain_df) == [1]  # a DataFrame is re-sent and rewritten with the policy in force
    assert ids(cached) == [1]
    spark.table(table).createOrReplaceTempView(view)  # recreating it is the way back
    assert ids(spark.table(view)) == [1]


def test_e22_checkpoint_taken_before_a_policy_does_not_serve_hidden_rows(world, sessions):
    table = world.plain("cpbefore")
    spark = activate(sessions(world.url("alice")))
    checkpointed = spark.table(table).localCheckpoint()
    assert ids(checkpointed) == [1, 2]
    world.admin.sql(
        f"CREATE ROW ACCESS POLICY p ON {table} GRANT TO ('user:alice@example.com') FILTER USING (region = 'eu')"
    ).collect()
    refused(lambda: ids(checkpointed), "FAILED_PRECONDITION", "checkpoint", "recreate")


@pytest.mark.xfail(
    strict=True,
    reason="usability (E22): the stale-checkpoint refusal says 'recreate it', but the proxy keeps only a "
    "list of (policy version, tables) per session, not per relation id (rules/stale_session_data.py checks every "
    "checkpoint the session ever made whenever a plan uses any cached relation), so after one policy "
    "change every checkpoint of the session, also a new one and one of unrelated data, is refused "
    "until the session ends",
)
def test_e22_a_checkpoint_made_after_the_policy_change_is_usable(world, sessions):
    table = world.plain("cpafter")
    spark = activate(sessions(world.url("alice")))
    old = spark.table(table).localCheckpoint()
    assert ids(old) == [1, 2]
    world.admin.sql(
        f"CREATE ROW ACCESS POLICY p ON {table} GRANT TO ('user:alice@example.com') FILTER USING (region = 'eu')"
    ).collect()
    refused(lambda: ids(old), "FAILED_PRECONDITION", "recreate")
    assert ids(spark.range(3).localCheckpoint()) == [0, 1, 2]
    assert ids(spark.table(table).localCheckpoint()) == [1]


def test_e22_non_admins_may_not_drop_rename_or_move_a_protected_table(world, alice):
    table = world.protected("keep")
    refused(lambda: alice.sql(f"DROP TABLE {table}").collect(), "PERMISSION_DENIED", "only rowgate admins")
    refused(
        lambda: alice.sql(f"ALTER TABLE {table} RENAME TO {table}_moved").collect(), "PERMISSION_DENIED", "only rowgate admins"
    )
    refused(lambda: alice.sql(f"ALTER TABLE {table} SET LOCATION '/tmp/elsewhere'").collect(), "PERMISSION_DENIED", "location")
    assert world.direct.catalog.tableExists(table)
    assert ids(alice.table(table)) == [1]


def test_e22_admin_rename_moves_the_policies(world, alice, mallory):
    table = world.protected("before_rename")
    renamed = world.t(unique("after_rename"))
    world.admin.sql(f"ALTER TABLE {table} RENAME TO {renamed}").collect()
    assert ids(alice.table(renamed)) == [1]
    assert ids(mallory.table(renamed)) == []
    shown = world.admin.sql(f"SHOW ROW ACCESS POLICIES ON {renamed}").collect()
    assert [r.policy_name for r in shown] == ["p"]


def test_e22_admin_drop_and_recreate_forgets_the_old_policies(world, mallory, sessions):
    table = world.protected("recreated")
    assert ids(mallory.table(table)) == []
    world.admin.sql(f"DROP TABLE {table}").collect()
    world.admin.sql(f"CREATE TABLE {table} (id INT, region STRING) USING parquet")
    world.admin.sql(f"INSERT INTO {table} VALUES (7, 'us'), (8, 'eu')")
    assert world.admin.sql(f"SHOW ROW ACCESS POLICIES ON {table}").collect() == []
    # A fresh session: Spark keeps the dropped table's file listing in the old session's
    # relation cache (a Spark matter, not the proxy's).
    assert ids(sessions(world.url("mallory")).table(table)) == [7, 8]


def test_e22_dropping_the_last_policy_makes_the_table_readable_again(world, alice, mallory):
    table = world.protected("unprotect")
    assert ids(mallory.table(table)) == [] and ids(alice.table(table)) == [1]
    world.admin.sql(f"DROP ROW ACCESS POLICY p ON {table}").collect()
    assert ids(mallory.table(table)) == [1, 2]
    assert ids(alice.table(table)) == [1, 2]
    assert mallory.table(table).agg(F.max("id")).first()[0] == 2

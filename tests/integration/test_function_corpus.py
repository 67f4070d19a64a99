"""Spark's own function examples and SQL reference forms, directly and through the proxy (issue #22).

With one row access policy on a table these statements never read, each runs directly
against Spark and through rowgate; the column names, the column types and the values (or
the error class) must be the same. The expectation is Spark's answer, never a list kept by
hand: the examples come from `DESCRIBE FUNCTION EXTENDED` of the running Spark (a fixed
sample of every `STRIDE`-th function of `SHOW FUNCTIONS`, so the suite stays fast on two
cores; `scripts/function_examples.py` runs all of them), the SQL reference forms below
(typed literals, operators, pipes, hints, TABLE, DESCRIBE, SHOW) are run as written.

Differences the README lists as refusals are the only exceptions, each with its reason:
the identity functions answer the caller (by design: Spark's own user in the direct answer
stands for the caller) and `reflect`/`java_method`/`try_reflect` call Java methods. The
examples that set `spark.sql.parser.escapedStringLiterals`, nanosecond timestamps or Python
worker logging run like the others (those settings are on the allow list).
A failure names every differing example. Without the splice (every statement rendered by
sqlglot) dozens of them differ (checked).

The DataFrame API's functions too: a sample of `pyspark.sql.functions` over a small
DataFrame, and expression strings naming the identity functions, give the same column
names, types and values directly and through the proxy.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

import pytest

from tests.conftest import remote_url, unique
from tests.harness.callers import ADMIN

pytestmark = pytest.mark.spark

CALLER = "user:cal@example.com"
STRIDE = 4  # every 4th function of SHOW FUNCTIONS, sorted: about 150 functions, 330 examples

# Functions whose examples are refused through rowgate, with the README's reason.
REFUSED = {
    "reflect": "calls a Java method by name (reads files, the environment)",
    "java_method": "calls a Java method by name (reads files, the environment)",
    "try_reflect": "calls a Java method by name (reads files, the environment)",
}

# Literal forms, operators and statements of Spark's SQL reference; {db} is a database with
# a table `nums (a INT, s STRING)` and the protected, unrelated table `unrelated`.
REFERENCE = [
    # typed and suffixed literals
    "SELECT DATE '2024-02-29', DATE'2024-01-01', TIMESTAMP '2024-01-01 10:00:00.5'",
    "SELECT TIMESTAMP_NTZ '2024-01-01 10:00:00', TIMESTAMP_LTZ '2024-01-01 10:00:00'",
    "SELECT CAST(TIME '00:01:52' AS INT), string(TIME '12:34:56'), make_timestamp(DATE'2014-12-28', TIME'6:30:45.887')",
    "SELECT X'1F', X '1F', x'00ff', bitmap_count(X '1010')",
    "SELECT 127Y, -128Y, 1S, 1L, 1BD, 1.5D, 1.5F, 1e3, .5, 12.345BD, 0.1e-2D",
    "SELECT 'it''s', \"dq\", 'tab\\there', r'raw\\n', 'a' 'b'",
    "SELECT string(INTERVAL '1' DAY), string(INTERVAL 2 HOURS), typeof(INTERVAL '1-2' YEAR TO MONTH)",
    "SELECT string(INTERVAL '1 10:00:00' DAY TO SECOND), string(INTERVAL 1 YEAR 2 MONTHS)",
    "SELECT DATE '2024-01-31' + INTERVAL 1 MONTH, TIMESTAMP '2024-01-01 00:00:00' - INTERVAL '1' HOUR",
    "SELECT true, false, NULL, array(1, 2), map('k', 1), struct(1 AS a, 'x' AS b), named_struct('a', 1)",
    # operators
    "SELECT 4 >>> 1, -16 >>> 2, 1 << 3, -16 >> 2, 5 & 3, 5 | 3, 5 ^ 3, ~5",
    "SELECT 7 div 2, 7 % 3, 7 / 2, -7, +7, 2 * 3 + 1, (2 + 3) * 4",
    "SELECT 1 == 1, 1 = 1, 1 != 2, 1 <> 2, 1 <=> NULL, NULL <=> NULL, !true, NOT false",
    "SELECT 'a' || 'b' || 1, 'abc' LIKE 'a%', 'ABC' ILIKE 'a%', 'abc' RLIKE '^a', 'abc' REGEXP 'b'",
    "SELECT 'abc' LIKE ANY ('x%', 'a%'), 2 BETWEEN 1 AND 3, 2 NOT IN (1, 3), 1 IS DISTINCT FROM 2",
    "SELECT 1 IS NOT NULL, NULL IS NULL, true IS TRUE, CASE WHEN 1 > 0 THEN 'p' ELSE 'n' END, CASE 2 WHEN 2 THEN 'two' END",
    "SELECT array(1, 2)[0], map('k', 1)['k'], named_struct('a', 1).a, element_at(array(1, 2), -1)",
    "SELECT transform(array(1, 2), x -> x + 1), filter(array(1, 2, 3), (x, i) -> x > i), aggregate(array(1, 2), 0, (a, x) -> a + x)",
    "SELECT '1'::INT, 1::STRING, CAST('2' AS BIGINT), TRY_CAST('x' AS INT), typeof(1::DECIMAL(10, 2))",
    "SELECT typeof(timestamp_ltz'2024-01-01 00:00:00'::timestamp_ntz(6))",
    "SELECT parse_json('{\"a\": [1, 2]}'):a, variant_get(parse_json('{\"a\": 1}'), '$.a', 'int')",
    "SELECT collate('aaa', 'utf8_binary'), 'a' COLLATE UTF8_LCASE = 'A'",
    "SELECT approx_percentile(x, 0.5), array_size(collect_list(x)), nvl(NULL, 1) FROM VALUES (1), (2), (3) AS v(x)",
    "SELECT date_sub(date'2011-11-11', '1'), current_date() IS NOT NULL, localtimestamp() IS NOT NULL",
    "SELECT current_user(), session_user(), user(), current_user AS who",
    # queries and pipes
    "SELECT * FROM VALUES (1, 'a'), (2, 'b') AS t(id, s) WHERE id > 1",
    "SELECT 3 AS x, 4 AS y |> AGGREGATE GROUP BY 1, 2",
    "FROM {db}.nums |> WHERE a > 1 |> EXTEND a * 2 AS b |> SELECT a, b |> ORDER BY a DESC |> LIMIT 2",
    "FROM {db}.nums |> AGGREGATE count(*) AS n, sum(a) AS total GROUP BY s |> ORDER BY s",
    "TABLE {db}.nums |> UNION ALL TABLE {db}.nums |> ORDER BY a",
    "TABLE {db}.nums |> INTERSECT TABLE {db}.nums |> ORDER BY a",
    "TABLE {db}.nums |> EXCEPT (SELECT * FROM {db}.nums WHERE a = 1) |> ORDER BY a",
    "TABLE {db}.nums |> AS q |> SELECT q.a |> TABLESAMPLE (100 PERCENT) |> ORDER BY a",
    "TABLE {db}.nums |> UNION DISTINCT SELECT 9, 'z' |> ORDER BY a",
    "TABLE {db}.nums |> JOIN {db}.nums AS o USING (a) |> SELECT count(*)",
    "TABLE {db}.nums",
    "SELECT /*+ BROADCAST(t) */ * FROM {db}.nums t ORDER BY a",
    "SELECT /*+ REPARTITION(2) */ a FROM {db}.nums ORDER BY a",
    "SELECT a, sum(a) OVER (ORDER BY a ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) FROM {db}.nums ORDER BY a",
    "WITH c AS (SELECT a FROM {db}.nums) SELECT max(a) FROM c",
    "SELECT a FROM {db}.nums WHERE a IN (SELECT a FROM {db}.nums WHERE s = 'b') ORDER BY a -- trailing",
    "SELECT s, count(*) FROM {db}.nums GROUP BY ALL ORDER BY ALL",
    # statements forwarded as read from tokens or as special forms
    "DESCRIBE {db}.nums",
    "DESCRIBE TABLE {db}.nums a",
    "DESCRIBE FUNCTION upper",
    "SHOW TABLES IN {db}",
    "SHOW COLUMNS IN {db}.nums",
    "SHOW FUNCTIONS LIKE 'upp*'",
    "EXPLAIN SELECT 1",
]


@dataclass
class Setup:
    db: str
    direct: object
    caller: object
    sessions: object
    server_user: str


@pytest.fixture(scope="module")
def setup(proxy_factory, spark_server, module_sessions) -> Setup:
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)
    db = unique("corpus")
    direct = module_sessions(spark_server.url)
    direct.sql(f"CREATE DATABASE {db}")
    direct.sql(f"CREATE TABLE {db}.nums (a INT, s STRING) USING parquet")
    direct.sql(f"INSERT INTO {db}.nums VALUES (1, 'a'), (2, 'b'), (3, 'b')")
    direct.sql(f"CREATE TABLE {db}.unrelated (id INT) USING parquet")
    admin = module_sessions(remote_url(proxy.url, user=ADMIN))
    admin.sql(f"CREATE ROW ACCESS POLICY p ON {db}.unrelated GRANT TO ('{CALLER}') FILTER USING (id < 100)").collect()

    def sessions():
        return module_sessions(spark_server.url), module_sessions(remote_url(proxy.url, user=CALLER))

    caller = module_sessions(remote_url(proxy.url, user=CALLER))
    user = direct.sql("SELECT current_user()").first()[0]
    yield Setup(db, direct, caller, sessions, user)
    direct.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


def examples(text: str) -> list[str]:
    """The `> SELECT ...;` statements of one function's documentation (multi-line too);
    the same reading as scripts/function_examples.py."""
    out: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if current is None and stripped.startswith(">"):
            current = [stripped[1:].strip()]
        elif current is not None:
            current.append(stripped)
        if current is not None and current[-1].endswith(";"):
            statement = " ".join(current).rstrip(";").strip()
            if statement:
                out.append(statement)
            current = None
    return out


_ERROR_CLASS = re.compile(r"\[([A-Z0-9_.]+)\]")
_PLAN_IDS = re.compile(r"#[0-9]+")


def outcome(spark, sql: str) -> tuple:
    """Column names, column types and values, or the error class."""
    try:
        df = spark.sql(sql)
        rows = df.collect()
        values = tuple(_PLAN_IDS.sub("#", repr(tuple(r))) for r in rows)  # EXPLAIN numbers attributes per query
        return "rows", tuple(df.columns), df.schema.simpleString(), values
    except Exception as e:  # an error is an outcome to compare
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        match = _ERROR_CLASS.search(first)
        return "error", match.group(1) if match else first[:120]


def as_caller(setup: Setup, sql: str, want: tuple) -> tuple:
    """The identity functions answer the caller behind the proxy (by design)."""
    if want[0] != "rows" or "user" not in sql.lower():
        return want
    name = repr(CALLER.split(":", 1)[1])
    return (*want[:3], tuple(r.replace(repr(setup.server_user), name) for r in want[3]))


def differences(setup: Setup, direct, caller, statements: list[str]) -> list[str]:
    out = []
    for sql in statements:
        want, got = as_caller(setup, sql, outcome(direct, sql)), outcome(caller, sql)
        if want[0] == got[0] == "error" and str(got[1]).startswith("ROWGATE_"):
            continue  # Spark fails it too (an unknown table): rowgate may refuse first, never answer
        # not rand(), shuffle() and the like: three more direct runs that all agree by chance are rare
        if want != got and all(as_caller(setup, sql, outcome(direct, sql)) == want for _ in range(3)):
            out.append(f"{sql}\n    direct: {str(want)[:300]}\n    proxy:  {str(got)[:300]}")
    return out


def test_sampled_function_examples_are_identical_through_the_proxy(setup):
    names = sorted({r[0] for r in setup.direct.sql("SHOW FUNCTIONS").collect()})[::STRIDE]
    names = [n for n in names if n not in REFUSED]
    assert len(names) > 100
    differing, compared = [], 0
    for name in names:
        quoted = "`" + name.replace("`", "``") + "`"
        try:
            doc = "\n".join(r[0] for r in setup.direct.sql(f"DESCRIBE FUNCTION EXTENDED {quoted}").collect())
        except Exception:  # operators like `!` may not describe
            continue
        found = examples(doc)
        compared += len(found)
        if any(sql.upper().startswith("SET ") for sql in found):
            differing += differences(setup, *setup.sessions(), found)  # settings stay in sessions of their own
        else:
            differing += differences(setup, setup.direct, setup.caller, found)
    assert compared > 200
    assert not differing, f"{len(differing)} of {compared} examples differ:\n" + "\n".join(differing)


@pytest.mark.parametrize("sql", REFERENCE)
def test_reference_forms_are_identical_through_the_proxy(setup, sql):
    sql = sql.replace("{db}", setup.db)
    direct = as_caller(setup, sql, outcome(setup.direct, sql))
    assert direct[0] == "rows", direct
    assert outcome(setup.caller, sql) == direct


# The DataFrame API: (label, columns over `frame`), each column built from pyspark.sql.functions.
def _dataframe_calls(F):
    a, s, d, ts, arr = F.col("a"), F.col("s"), F.col("d"), F.col("ts"), F.col("arr")
    return [
        ("identity", [F.current_user(), F.session_user(), F.user()]),
        ("identity, aliased", [F.current_user().alias("who"), F.lower(F.current_user())]),
        ("arithmetic", [a + 1, a * 2 - 3, a / 2, a % 2, -a, F.abs(-a), F.pow(a, 2), F.sqrt(a)]),
        ("comparison", [a > 1, a == 2, a.between(1, 2), a.isin(1, 3), a.isNull(), s.eqNullSafe("b")]),
        ("strings", [F.upper(s), F.concat(s, F.lit("-"), a), F.substring(s, 1, 1), F.length(s), F.lpad(s, 3, "*")]),
        ("more strings", [F.regexp_replace(s, "b", "B"), F.split(F.lit("a,b"), ","), F.format_string("%s=%d", s, a)]),
        ("like", [s.like("a%"), s.rlike("^b"), s.ilike("B"), s.startswith("a"), s.contains("b")]),
        ("nulls", [F.coalesce(F.lit(None), a), F.nvl(F.lit(None), a), F.ifnull(F.lit(None), s), F.nullif(a, F.lit(1))]),
        ("conditions", [F.when(a > 1, "big").otherwise("small"), F.greatest(a, F.lit(2)), F.least(a, F.lit(2))]),
        ("dates", [F.date_add(d, 1), F.date_sub(d, 1), F.year(d), F.month(d), F.dayofweek(d), F.date_format(d, "yyyy/MM")]),
        ("timestamps", [F.hour(ts), F.to_date(ts), F.date_trunc("hour", ts), F.unix_timestamp(ts), F.weekofyear(ts)]),
        ("arrays", [F.array_size(arr), F.size(arr), F.element_at(arr, 1), F.array_contains(arr, 2), F.sort_array(arr)]),
        (
            "higher order",
            [
                F.transform(arr, lambda x: x + 1),
                F.filter(arr, lambda x: x > 1),
                F.aggregate(arr, F.lit(0), lambda acc, x: acc + x),
            ],
        ),
        ("structs and maps", [F.struct(a, s), F.struct(a.alias("x")), F.create_map(s, a), F.named_struct(F.lit("k"), a)]),
        ("json", [F.to_json(F.struct(a, s)), F.get_json_object(F.lit('{"k": 1}'), "$.k"), F.parse_json(F.lit('{"k": 1}'))]),
        ("casts", [a.cast("string"), s.cast("int"), F.try_to_number(F.lit("12"), F.lit("99")), a.cast("decimal(10,2)")]),
        ("hashes", [F.md5(s), F.sha2(s, 256), F.crc32(s), F.hash(a, s), F.base64(s)]),
        ("literals", [F.lit(1), F.lit("x"), F.lit(1.5), F.lit(True), F.lit(None), F.lit(datetime.date(2024, 2, 29))]),
    ]


_AGGREGATES = [
    "count", "sum", "avg", "min", "max", "count_distinct", "collect_list", "first", "stddev", "approx_count_distinct",
]  # fmt: skip


def _dataframe_outcome(run) -> tuple:
    try:
        df = run()
        rows = df.collect()
        return "rows", tuple(df.columns), df.schema.simpleString(), tuple(repr(tuple(r)) for r in rows)
    except Exception as e:  # an error is an outcome to compare
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        match = _ERROR_CLASS.search(first)
        return "error", match.group(1) if match else first[:120]


def _frame(spark):
    return spark.sql(
        "SELECT * FROM VALUES (1, 'a', DATE '2024-02-29', TIMESTAMP_NTZ '2024-01-01 10:30:00', array(1, 2)), "
        "(2, 'b', DATE '2024-03-01', TIMESTAMP_NTZ '2024-01-02 23:00:00', array(3)) AS v(a, s, d, ts, arr)"
    )


def test_dataframe_functions_are_identical_through_the_proxy(setup):
    """Item 3 for the DataFrame API: the names, types and values of function columns."""
    from pyspark.sql import functions as F

    differing = []
    calls = _dataframe_calls(F)
    calls.append(("aggregates", [getattr(F, name)("a") for name in _AGGREGATES]))
    for label, columns in calls:
        if label == "aggregates":
            build = lambda df, cols=columns: df.groupBy("s").agg(*cols).orderBy("s")  # noqa: E731
        else:
            build = lambda df, cols=columns: df.select(*cols)  # noqa: E731
        want = as_caller(setup, "user", _dataframe_outcome(lambda: build(_frame(setup.direct))))
        got = _dataframe_outcome(lambda: build(_frame(setup.caller)))
        if want != got:
            differing.append(f"{label}\n    direct: {str(want)[:400]}\n    proxy:  {str(got)[:400]}")
    assert not differing, f"{len(differing)} DataFrame calls differ:\n" + "\n".join(differing)


@pytest.mark.parametrize(
    "texts",
    [
        ["current_user()", "session_user()", "user()"],
        ["lower(current_user())", "current_user() AS who", "current_user() = 'x'"],
        ["a", "session_user() IS NOT NULL", "length(user()) > 0"],
    ],
)
def test_identity_functions_in_expression_strings_keep_sparks_names(setup, texts):
    """Item 2: rowgate binds the identity functions to the caller; the columns keep the
    names Spark gives the client's expressions."""
    want = as_caller(setup, "user", _dataframe_outcome(lambda: _frame(setup.direct).selectExpr(*texts)))
    got = _dataframe_outcome(lambda: _frame(setup.caller).selectExpr(*texts))
    assert want[0] == "rows" and got == want
    from pyspark.sql import functions as F

    want = as_caller(setup, "user", _dataframe_outcome(lambda: _frame(setup.direct).select(*[F.expr(t) for t in texts])))
    assert _dataframe_outcome(lambda: _frame(setup.caller).select(*[F.expr(t) for t in texts])) == want

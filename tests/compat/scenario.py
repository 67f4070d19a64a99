"""One cell's scenario, run by the client under test inside its own venv.

    python scenario.py setup SPEC_JSON   # as the admin, through the proxy: tables and policies
    python scenario.py run SPEC_JSON     # three callers through the proxy, and Spark directly

It imports only pyspark and the standard library, because it runs in the venv of whichever
pyspark version the cell measures (3.5 to the newest), not in rowgate's own environment; it
uses only what every one of those versions offers. It prints one JSON document on its last
line of output; the driver (tests/compat/matrix.py) turns that into the cell's verdict.

The oracle is computed here from the rows the setup inserts, never from Spark's answers, so
a proxy that lets a row through (or hides one) shows up as a rows mismatch.
"""

from __future__ import annotations

import json
import os
import sys

ADMIN = "user:admin@compat.test"

# id, region, owner, amount
ORDERS = [
    (1, "eu", "ann", 10),
    (2, "us", "bob", 20),
    (3, "eu", "carl", 30),
    (4, "apac", "ann", 40),
    (5, "us", "bob", 50),
    (6, "latam", "dora", 60),
    (7, "eu", "bob", 70),
    (8, "apac", "carl", 80),
]
PLAIN = [(1, "one"), (2, "two"), (3, "three"), (4, "four"), (5, "five")]
LABELS = [("eu", "Europe"), ("us", "Americas"), ("apac", "Asia")]

# caller -> (x-rowgate-user, x-rowgate-groups); carl has no grant and must see nothing.
CALLERS = {
    "ann": ("user:ann@compat.test", None),
    "bob": ("user:bob@compat.test", "group:big@compat.test"),
    "carl": ("user:carl@compat.test", None),
}
POLICIES = [
    ("eu_rows", "'user:ann@compat.test'", "region = 'eu'"),
    ("big_rows", "'group:big@compat.test'", "amount >= 50"),
]
# The same predicates as POLICIES, in Python: who may see which row. "direct" is Spark
# without the proxy, where every row is visible.
VISIBLE = {
    "ann": lambda row: row[1] == "eu",
    "bob": lambda row: row[3] >= 50,
    "carl": lambda row: False,
    "direct": lambda row: True,
}


def url_for(base: str, user: str | None, groups: str | None) -> str:
    url = base + "/"
    if user:
        url += f";x-rowgate-user={user}"
    if groups:
        url += f";x-rowgate-groups={groups}"
    return url


def session(url: str):
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).create()


def literal(value) -> str:
    return "'" + value + "'" if isinstance(value, str) else str(value)


def setup(spec: dict) -> dict:
    """Tables and policies, created through the proxy by the admin (policy DDL is the proxy's)."""
    db = spec["db"]
    admin = session(url_for(spec["proxy"], ADMIN, None))
    admin.sql(f"CREATE DATABASE IF NOT EXISTS {db}")
    admin.sql(f"CREATE TABLE {db}.orders (id INT, region STRING, owner STRING, amount INT) USING parquet")
    rows = ", ".join("(" + ", ".join(literal(v) for v in row) + ")" for row in ORDERS)
    admin.sql(f"INSERT INTO {db}.orders VALUES {rows}")
    admin.sql(f"CREATE TABLE {db}.plain (k INT, label STRING) USING parquet")
    rows = ", ".join("(" + ", ".join(literal(v) for v in row) + ")" for row in PLAIN)
    admin.sql(f"INSERT INTO {db}.plain VALUES {rows}")
    for name, grantee, predicate in POLICIES:
        admin.sql(f"CREATE ROW ACCESS POLICY {name} ON {db}.orders GRANT TO ({grantee}) FILTER USING ({predicate})")
    admin.stop()
    return {"ok": True}


def error_text(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {(lines[0] if lines else '')[:200]}"


def outcome(program, want=None) -> dict:
    """kind "ok", "rows" (an answer other than the oracle's) or "error" (with its text)."""
    try:
        got = program()
    except Exception as err:  # every failure is a finding of the cell, not of this script
        return {"kind": "error", "detail": error_text(err)}
    if want is not None and got != want:
        return {"kind": "rows", "detail": f"got {got!r}, want {want!r}"}
    return {"kind": "ok", "got": repr(got)}


def caller_checks(spark, table: str, visible) -> dict:
    """check name -> (program, the oracle's answer)."""
    from pyspark.sql import functions as F

    rows = [row for row in ORDERS if visible(row)]
    labels = dict(LABELS)

    def error_case():
        try:
            spark.sql(f"SELECT no_such_column FROM {table}").collect()
        except Exception as err:
            return type(err).__name__
        return "no error"

    double = F.udf(lambda amount: amount * 2, "int")

    def view():
        spark.table(table).select("id", "region").createOrReplaceTempView("compat_orders_view")
        return sorted(r.id for r in spark.sql("SELECT id FROM compat_orders_view").collect())

    by_region: dict[str, list[int]] = {}
    for row in rows:
        by_region.setdefault(row[1], []).append(row[3])
    return {
        "sql": (lambda: sorted(r.id for r in spark.sql(f"SELECT id FROM {table}").collect()), sorted(r[0] for r in rows)),
        "dataframe": (
            lambda: sorted(
                (r.region, r.n, r.s)
                for r in spark.table(table)
                .where(F.col("amount") > 0)
                .groupBy("region")
                .agg(F.count("*").alias("n"), F.sum("amount").alias("s"))
                .collect()
            ),
            sorted((region, len(amounts), sum(amounts)) for region, amounts in by_region.items()),
        ),
        "temp_view": (view, sorted(r[0] for r in rows)),
        "cte": (
            lambda: sorted(
                r.id
                for r in spark.sql(f"WITH big AS (SELECT id, amount FROM {table} WHERE amount > 25) SELECT id FROM big").collect()
            ),
            sorted(r[0] for r in rows if r[3] > 25),
        ),
        "create_dataframe_join": (
            lambda: sorted(
                (r.id, r.label)
                for r in spark.table(table)
                .join(spark.createDataFrame(LABELS, ["region", "label"]), "region")
                .select("id", "label")
                .collect()
            ),
            sorted((r[0], labels[r[1]]) for r in rows if r[1] in labels),
        ),
        "python_udf": (
            lambda: sorted((r.id, r.d) for r in spark.table(table).select("id", double("amount").alias("d")).collect()),
            sorted((r[0], r[3] * 2) for r in rows),
        ),
        "error": (error_case, "AnalysisException"),
    }


def transparency_program(spark, db: str) -> dict:
    """Questions that touch no protected table: through the proxy the answers must be Spark's."""
    from pyspark.sql import functions as F

    plus_one = F.udf(lambda x: x + 1, "long")

    def error_class():
        try:
            spark.sql(f"SELECT no_such_column FROM {db}.plain").collect()
        except Exception as err:
            condition = getattr(err, "getCondition", None) or getattr(err, "getErrorClass", None)
            return type(err).__name__, condition() if condition else None
        return "no error"

    return {
        "range": outcome(lambda: [tuple(r) for r in spark.range(10).selectExpr("id * 3 AS x").where("x % 2 = 0").collect()]),
        "sql_literals": outcome(
            lambda: [tuple(r) for r in spark.sql("SELECT 1 AS a, 'x' AS b, CAST(2.5 AS DOUBLE) AS c").collect()]
        ),
        "plain_table_sql": outcome(
            lambda: [tuple(r) for r in spark.sql(f"SELECT k, label FROM {db}.plain ORDER BY k").collect()]
        ),
        "plain_table_dataframe": outcome(
            lambda: sorted(tuple(r) for r in spark.table(f"{db}.plain").groupBy((F.col("k") % 2).alias("m")).count().collect())
        ),
        "schema": outcome(lambda: spark.table(f"{db}.plain").schema.simpleString()),
        "error": outcome(error_class),
        "python_udf": outcome(lambda: [r.y for r in spark.range(4).select(plus_one("id").alias("y")).collect()]),
        "create_dataframe": outcome(lambda: sorted(tuple(r) for r in spark.createDataFrame(PLAIN, ["k", "label"]).collect())),
    }


def run(spec: dict) -> dict:
    import pyspark

    table = f"{spec['db']}.orders"
    targets = {name: url_for(spec["proxy"], user, groups) for name, (user, groups) in CALLERS.items()}
    targets["direct"] = spec["direct"] + "/"
    sessions: dict = {}
    callers: dict = {}
    for name, url in targets.items():
        try:
            sessions[name] = session(url)
        except Exception as err:
            callers[name] = {"session": {"kind": "error", "detail": error_text(err)}}
    out: dict = {"pyspark": pyspark.__version__, "callers": callers, "transparency": {}}
    if "direct" in sessions and "ann" in sessions:
        out["transparency"] = {
            "direct": transparency_program(sessions["direct"], spec["db"]),
            "proxy": transparency_program(sessions["ann"], spec["db"]),
        }
    erred: set[str] = set()
    for name, spark in sessions.items():
        if name == "direct":
            continue
        checks = caller_checks(spark, table, VISIBLE[name])
        callers[name] = {check: outcome(program, want) for check, (program, want) in checks.items()}
        erred.update(check for check, result in callers[name].items() if result["kind"] == "error")
    if "direct" in sessions:
        # Directly, only what failed through the proxy: does it fail without the proxy too?
        checks = caller_checks(sessions["direct"], table, VISIBLE["direct"])
        callers["direct"] = {check: outcome(*checks[check]) for check in sorted(erred)}
    for name, spark in sessions.items():
        callers[name]["stop"] = outcome(lambda spark=spark: spark.stop())
    return out


def main() -> None:
    mode, spec = sys.argv[1], json.loads(sys.argv[2])
    result = setup(spec) if mode == "setup" else run(spec)
    print(json.dumps(result), flush=True)
    # Finalizers of stopped sessions may wait on pools already shut down: the answer is out.
    os._exit(0)


if __name__ == "__main__":
    main()

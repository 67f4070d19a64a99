"""TPC-H for the tests: the 8 tables of /work/shared/data/tpch and its 22 queries.

The data is a small TPC-H sample: one pipe-separated, gzip-compressed CSV file with a header
line per table (`<table>.csv.gz`). The files are read here, on the client, and sent to Spark
with `createDataFrame` (all columns as strings, then cast to the TPC-H types in Spark), so
loading works against any Spark Connect server, also one that cannot see this machine's files.

`queries.sql` holds the 22 queries, each introduced by a `-- TPC-H <n>` comment line and
ended by `;`. They name tables with one part (`lineitem`, `orders`, ...), so they run against
whichever database is the session's current one (`USE tpch`, `USE <copy>`). A textual
`tpch.X` mapping would be wrong: `nation` is also a column alias in queries 8 and 9, and
`revenue` in query 15 is a CTE.
"""

from __future__ import annotations

import csv
import gzip
import os
import re
from pathlib import Path



def _data_dir() -> Path:
    """ROWGATE_TPCH_DIR, else `shared/data/tpch` beside the checkout, else /work/shared's."""
    candidates = [
        os.environ.get("ROWGATE_TPCH_DIR", ""),
        Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "tpch",
        "/work/shared/data/tpch",
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "queries.sql").exists():
            return Path(candidate)
    return Path(candidates[1])


DATA = _data_dir()

# Column types as in the TPC-H specification (identifiers as BIGINT, money as DECIMAL(15,2)).
SCHEMAS: dict[str, list[tuple[str, str]]] = {
    "region": [("r_regionkey", "INT"), ("r_name", "STRING"), ("r_comment", "STRING")],
    "nation": [("n_nationkey", "INT"), ("n_name", "STRING"), ("n_regionkey", "INT"), ("n_comment", "STRING")],
    "part": [
        ("p_partkey", "BIGINT"),
        ("p_name", "STRING"),
        ("p_mfgr", "STRING"),
        ("p_brand", "STRING"),
        ("p_type", "STRING"),
        ("p_size", "INT"),
        ("p_container", "STRING"),
        ("p_retailprice", "DECIMAL(15,2)"),
        ("p_comment", "STRING"),
    ],
    "supplier": [
        ("s_suppkey", "BIGINT"),
        ("s_name", "STRING"),
        ("s_address", "STRING"),
        ("s_nationkey", "INT"),
        ("s_phone", "STRING"),
        ("s_acctbal", "DECIMAL(15,2)"),
        ("s_comment", "STRING"),
    ],
    "partsupp": [
        ("ps_partkey", "BIGINT"),
        ("ps_suppkey", "BIGINT"),
        ("ps_availqty", "INT"),
        ("ps_supplycost", "DECIMAL(15,2)"),
        ("ps_comment", "STRING"),
    ],
    "customer": [
        ("c_custkey", "BIGINT"),
        ("c_name", "STRING"),
        ("c_address", "STRING"),
        ("c_nationkey", "INT"),
        ("c_phone", "STRING"),
        ("c_acctbal", "DECIMAL(15,2)"),
        ("c_mktsegment", "STRING"),
        ("c_comment", "STRING"),
    ],
    "orders": [
        ("o_orderkey", "BIGINT"),
        ("o_custkey", "BIGINT"),
        ("o_orderstatus", "STRING"),
        ("o_totalprice", "DECIMAL(15,2)"),
        ("o_orderdate", "DATE"),
        ("o_orderpriority", "STRING"),
        ("o_clerk", "STRING"),
        ("o_shippriority", "INT"),
        ("o_comment", "STRING"),
    ],
    "lineitem": [
        ("l_orderkey", "BIGINT"),
        ("l_partkey", "BIGINT"),
        ("l_suppkey", "BIGINT"),
        ("l_linenumber", "INT"),
        ("l_quantity", "DECIMAL(15,2)"),
        ("l_extendedprice", "DECIMAL(15,2)"),
        ("l_discount", "DECIMAL(15,2)"),
        ("l_tax", "DECIMAL(15,2)"),
        ("l_returnflag", "STRING"),
        ("l_linestatus", "STRING"),
        ("l_shipdate", "DATE"),
        ("l_commitdate", "DATE"),
        ("l_receiptdate", "DATE"),
        ("l_shipinstruct", "STRING"),
        ("l_shipmode", "STRING"),
        ("l_comment", "STRING"),
    ],
}
TABLES = tuple(SCHEMAS)


def read_rows(table: str, data: Path = DATA) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one table, as strings (the file's text, unconverted)."""
    with gzip.open(data / f"{table}.csv.gz", "rt", encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="|", quoting=csv.QUOTE_NONE)
        header = next(reader)
        rows = [row for row in reader if row]
    expected = [name for name, _ in SCHEMAS[table]]
    if header != expected:
        raise ValueError(f"{table}.csv.gz has columns {header}, expected {expected}")
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(f"{table}.csv.gz row {i + 2} has {len(row)} fields, expected {len(header)}")
    return header, rows


def dataframe(spark, table: str, data: Path = DATA):
    """One table as a DataFrame with the TPC-H column types."""
    header, rows = read_rows(table, data)
    from pyspark.sql.types import StringType, StructField, StructType

    raw = spark.createDataFrame(rows, StructType([StructField(c, StringType()) for c in header]))
    return raw.selectExpr(*(c if t == "STRING" else f"CAST(NULLIF({c}, '') AS {t}) AS {c}" for c, t in SCHEMAS[table]))


def load(spark, database: str = "tpch", data: Path = DATA, *, replace: bool = False) -> bool:
    """Saves the 8 tables as parquet tables in `database`; False when they were already there."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    existing = {r.tableName.lower() for r in spark.sql(f"SHOW TABLES IN `{database}`").collect() if not r.isTemporary}
    if not replace and all(t in existing for t in TABLES):
        return False
    for table in TABLES:
        if table in existing and not replace:
            continue
        dataframe(spark, table, data).write.mode("overwrite").format("parquet").saveAsTable(f"`{database}`.`{table}`")
    return True


def row_counts(data: Path = DATA) -> dict[str, int]:
    return {t: len(read_rows(t, data)[1]) for t in TABLES}


_HEADER = re.compile(r"^--\s*TPC-H\s+(\d+)\s*$", re.M)


def queries(data: Path = DATA) -> dict[int, str]:
    """The 22 queries by number, without the trailing `;`."""
    text = (data / "queries.sql").read_text()
    marks = list(_HEADER.finditer(text))
    out: dict[int, str] = {}
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[mark.end() : end].strip()
        if body.endswith(";"):
            body = body[:-1].rstrip()
        if ";" in body:
            raise ValueError(f"TPC-H query {mark.group(1)} holds more than one statement")
        out[int(mark.group(1))] = body
    if sorted(out) != list(range(1, 23)):
        raise ValueError(f"queries.sql holds queries {sorted(out)}, expected 1..22")
    return out


def has_order_by_and_limit(sql: str) -> bool:
    """Whether the outermost query orders and truncates (then row order matters)."""
    flat = " ".join(sql.lower().split())
    return bool(re.search(r"\border by\b[^()]*\blimit\s+\d+\s*$", flat))


def has_outer_order_by(sql: str) -> bool:
    flat = " ".join(sql.lower().split())
    # ORDER BY outside any parentheses: strip parenthesised groups first.
    prev = None
    while prev != flat:
        prev, flat = flat, re.sub(r"\([^()]*\)", "", flat)
    return " order by " in f" {flat} "

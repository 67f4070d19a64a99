"""TPC-H in Spark for the tests and benchmarks: the 8 tables loaded into a database, the 22 queries.

The data is generated on this machine by DuckDB's dbgen (tests/tpch_data.py) at a scale
factor, TEST_SCALE (0.01) unless told otherwise. Each table's parquet file is read here, on
the client, and sent to Spark with `createDataFrame` (Arrow), then cast to the TPC-H types
below, so loading works against any Spark Connect server, also one that cannot see this
machine's files.

The queries are DuckDB's texts of the 22 TPC-H queries. They name tables with one part
(`lineitem`, `orders`, ...), so they run against whichever database is the session's
current one (`USE tpch`, `USE <copy>`). A textual `tpch.X` mapping would be wrong: `nation`
is also a column alias in queries 8 and 9, and `revenue` in query 15 is a CTE.
"""

from __future__ import annotations

import re

from tests import tpch_data
from tests.tpch_data import TEST_SCALE

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
# Rows per createDataFrame call: keeps each Arrow batch sent to Spark well below gRPC's limits.
ROWS_PER_UPLOAD = 200_000


def _typed(raw, table: str):
    return raw.selectExpr(*(f"CAST({c} AS {t}) AS {c}" for c, t in SCHEMAS[table]))


def dataframes(spark, table: str, scale: float = TEST_SCALE):
    """One table as DataFrames with the TPC-H column types, one per slice of ROWS_PER_UPLOAD rows."""
    arrow = tpch_data.read_table(table, scale)
    expected = [name for name, _ in SCHEMAS[table]]
    if arrow.column_names != expected:
        raise ValueError(f"generated {table} has columns {arrow.column_names}, expected {expected}")
    for offset in range(0, max(arrow.num_rows, 1), ROWS_PER_UPLOAD):
        yield _typed(spark.createDataFrame(arrow.slice(offset, ROWS_PER_UPLOAD)), table)


def dataframe(spark, table: str, scale: float = TEST_SCALE):
    """One table as one DataFrame with the TPC-H column types (for small scales)."""
    parts = list(dataframes(spark, table, scale))
    out = parts[0]
    for part in parts[1:]:
        out = out.unionAll(part)
    return out


def write_table(spark, database: str, table: str, scale: float = TEST_SCALE, *, server_path: bool = False) -> None:
    """(Re)creates `database`.`table` as a parquet table holding the generated rows.

    `server_path`: Spark reads the cache's parquet file itself (only when the server sees
    this machine's files, as the embedded one does); otherwise the rows go through the client.
    """
    name = f"`{database}`.`{table}`"
    if server_path:
        raw = spark.read.parquet(str(tpch_data.table_path(table, scale)))
        _typed(raw, table).write.mode("overwrite").format("parquet").saveAsTable(name)
        return
    for i, df in enumerate(dataframes(spark, table, scale)):
        df.write.mode("overwrite" if i == 0 else "append").format("parquet").saveAsTable(name)


def loaded_counts(spark, database: str = "tpch") -> dict[str, int] | None:
    """Rows per table in `database`, or None when a table is missing."""
    try:
        row = spark.sql("SELECT " + ", ".join(f"(SELECT count(*) FROM `{database}`.`{t}`) AS {t}" for t in TABLES)).first()
    except Exception:  # a table (or the database) is missing
        return None
    return row.asDict()


def load(spark, database: str = "tpch", scale: float = TEST_SCALE, *, replace: bool = False, server_path: bool = False) -> bool:
    """Saves the 8 tables as parquet tables in `database`; False when they were already there
    with the row counts of `scale` (tables with other counts, e.g. another scale, are replaced)."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    if not replace and loaded_counts(spark, database) == row_counts(scale):
        return False
    for table in TABLES:
        write_table(spark, database, table, scale, server_path=server_path)
    return True


def row_counts(scale: float = TEST_SCALE) -> dict[str, int]:
    counts = tpch_data.row_counts(scale)
    return {t: counts[t] for t in TABLES}


def queries() -> dict[int, str]:
    """The 22 queries by number, without the trailing `;`."""
    return dict(tpch_data.queries())


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

"""TPC-H made on this machine with DuckDB's dbgen: the 8 tables at a scale factor, the 22 queries.

Tests and benchmarks need TPC-H but must not depend on files outside the repository, so
they generate it. DuckDB's `tpch` extension holds dbgen (the same scale factor always gives
the same rows) and the 22 query texts. The extension binary comes from the PyPI package
`duckdb-extension-tpch`, whose version is pinned to duckdb's; it is loaded from the file the
package installs, with DuckDB's automatic extension install and load switched off, so
nothing is downloaded and generation works offline.

Generated tables are kept as parquet files (one per table) in `.rowgate/tpch/sf<scale>/` of
the checkout (gitignored). A cache is written into a temporary sibling directory and renamed
into place only when complete, so a half-written cache is never read, and two processes
generating at once both end up with one complete copy.

Nothing here touches Spark: tests/tpch.py moves the tables into Spark.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from pathlib import Path

TABLES = ("region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem")
# The tests' scale: 60,175 lineitem rows, 15,000 orders, 1,500 customers, 100 suppliers;
# every one of the 22 queries has a non-empty answer at this scale.
TEST_SCALE = 0.01
CACHE_ROOT = Path(__file__).resolve().parent.parent / ".rowgate" / "tpch"


def extension_path() -> Path:
    """The tpch extension file shipped by `duckdb-extension-tpch` for the installed duckdb."""
    try:
        import duckdb
        import duckdb_extension_tpch
    except ImportError as exc:
        raise RuntimeError(
            "TPC-H generation needs the packages duckdb and duckdb-extension-tpch "
            "(install the project's test extra: pip install -e '.[test]')"
        ) from exc
    extensions = Path(duckdb_extension_tpch.__file__).resolve().parent / "extensions"
    path = extensions / f"v{duckdb.__version__}" / "tpch.duckdb_extension"
    if not path.is_file():
        shipped = sorted(p.parent.name for p in extensions.glob("*/tpch.duckdb_extension"))
        raise RuntimeError(
            f"duckdb-extension-tpch ships the extension for {shipped or 'no version'}, "
            f"not for the installed duckdb {duckdb.__version__}: install matching versions"
        )
    return path


def connect():
    """An in-memory DuckDB connection with the tpch extension loaded from its file, offline."""
    import duckdb

    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    path = str(extension_path()).replace("'", "''")
    con.execute(f"LOAD '{path}'")
    return con


def cache_dir(scale: float) -> Path:
    return CACHE_ROOT / f"sf{scale:g}"


def generate(scale: float = TEST_SCALE) -> Path:
    """The directory holding `<table>.parquet` for the 8 tables at `scale`, made if missing."""
    if not scale > 0:
        raise ValueError(f"TPC-H scale factor must be positive, got {scale}")
    target = cache_dir(scale)
    if all((target / f"{t}.parquet").is_file() for t in TABLES):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        con = connect()
        try:
            con.execute(f"CALL dbgen(sf={scale!r})")
            for table in TABLES:
                out = str(work / f"{table}.parquet").replace("'", "''")
                # Insertion order is kept (DuckDB's default), so the files are the same every time.
                con.execute(f"COPY (SELECT * FROM {table}) TO '{out}' (FORMAT parquet)")
        finally:
            con.close()
        work.chmod(0o755)  # mkdtemp makes it private; the cache is as readable as the checkout
        try:
            os.rename(work, target)
        except OSError:
            if not all((target / f"{t}.parquet").is_file() for t in TABLES):
                raise  # not another process's complete copy: a real failure
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def table_path(table: str, scale: float = TEST_SCALE) -> Path:
    """The parquet file of one table (generating the scale's cache first if needed)."""
    if table not in TABLES:
        raise ValueError(f"not a TPC-H table: {table}")
    return generate(scale) / f"{table}.parquet"


def read_table(table: str, scale: float = TEST_SCALE):
    """One table as a pyarrow Table, in dbgen's column order and types."""
    import pyarrow.parquet as pq

    return pq.read_table(table_path(table, scale))


def row_counts(scale: float = TEST_SCALE) -> dict[str, int]:
    """Rows per table at `scale`, from the parquet footers."""
    import pyarrow.parquet as pq

    return {t: pq.ParquetFile(table_path(t, scale)).metadata.num_rows for t in TABLES}


@functools.cache
def queries() -> dict[int, str]:
    """The 22 queries of the extension by number, without a trailing `;`.

    DuckDB's texts run unchanged on Spark SQL (dates as CAST('...' AS date), `extract`,
    `substring(x FROM 1 FOR 2)`, the column list on the derived table of query 13, the CTE
    of query 15) and name tables with one part, so they run in the session's current
    database. Spark names the unaliased `sum(l_quantity)` of query 18 as DuckDB does.
    """
    con = connect()
    try:
        rows = con.execute("SELECT query_nr, query FROM tpch_queries() ORDER BY query_nr").fetchall()
    finally:
        con.close()
    out = {int(n): text.strip().rstrip(";").rstrip() for n, text in rows}
    if sorted(out) != list(range(1, 23)):
        raise RuntimeError(f"the tpch extension holds queries {sorted(out)}, expected 1..22")
    for n, text in out.items():
        if ";" in text:
            raise RuntimeError(f"TPC-H query {n} holds more than one statement")
    return out

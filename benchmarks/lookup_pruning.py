#!/usr/bin/env python
"""Does a lookup policy keep Spark's partition pruning? One day of a 400-day table, proxy vs direct.

Creates (through the proxy, as an admin) a parquet table partitioned by day (`--days`
partitions, `--rows-per-day` rows each, generated here), a lookup table and a lookup policy

    region IN (SELECT region FROM acl WHERE who = SESSION_USER())

and, directly on Spark, a view with the same filter inlined for the reader. Then, interleaving
the two round by round so background noise hits both alike, it times a one-day aggregate:

  proxy   SELECT count(*), sum(amount) FROM ev WHERE day = '<day>'   (as the reader, via rowgate)
  direct  SELECT count(*), sum(amount) FROM v  WHERE day = '<day>'   (Spark, no proxy)

`repeated` asks for the same day every round (the proxy's remembered verdicts answer);
`first-seen` asks for a new day each round (the proxy's second opinion analyses the new text).
Each in two forms: the SQL text above, and the DataFrame
`spark.table(t).filter(col("day") == day).agg(count("*"), sum("amount"))` (rewrite/plan/placement.py
hands its leakproof condition to the SQL rewriter to place).
Before leakproof placement (rewrite/sql/leakproof.py) the caller's `day = ...` stayed above
the policy's non-deterministic guard and Spark read all partitions.

Usage (from the repository root; starts its own Spark Connect server unless --upstream):

  .venv/bin/python benchmarks/lookup_pruning.py --rounds 15 [--no-second-opinion]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import new_session, proxy_process, stop_session
from pyspark.sql import functions as F

from rowgate.embedded.spark import EmbeddedSparkConnect, free_port

ADMIN = "user:admin@example.com"
ANN = "user:ann@example.com"
START = datetime.date(2024, 1, 1)


def setup(admin, direct, db: str, days: int, rows_per_day: int, lineitem: str | None = None) -> int:
    """Creates (through the proxy's `admin` session) the partitioned table `db.ev`, the lookup
    table and the lookup policy, and (through `direct`) the view `db.v` with the filter
    inlined for the reader. `lineitem`: take the rows from this TPC-H table (DuckDB's dbgen,
    as bench.py --tpch loads it) instead of generating `days * rows_per_day` of them."""
    region = "element_at(array('eu', 'us', 'apac'), CAST({k} % 3 + 1 AS INT))"
    if lineitem is None:
        total = days * rows_per_day
        rows = (
            f"SELECT id, {region.format(k='id')}, CAST(id % 1000 AS INT), "
            f"date_add(DATE '{START}', CAST(id % {days} AS INT)) FROM range({total})"
        )
    else:
        total = direct.table(lineitem).count()
        rows = (
            f"SELECT l_orderkey * 8 + l_linenumber, {region.format(k='l_suppkey')}, CAST(l_quantity AS INT), "
            f"date_add(DATE '{START}', CAST((l_orderkey + l_linenumber) % {days} AS INT)) FROM {lineitem}"
        )
    for sql in [
        f"CREATE DATABASE {db}",
        f"CREATE TABLE {db}.ev (id BIGINT, region STRING, amount INT, day DATE) USING parquet PARTITIONED BY (day)",
        f"INSERT INTO {db}.ev {rows}",
        f"CREATE TABLE {db}.acl (who STRING, region STRING) USING parquet",
        f"INSERT INTO {db}.acl VALUES ('ann@example.com', 'eu'), ('bob@example.com', 'us')",
        f"CREATE ROW ACCESS POLICY lookup ON {db}.ev GRANT TO ('{ANN}') "
        f"FILTER USING (region IN (SELECT region FROM {db}.acl WHERE who = SESSION_USER()))",
    ]:
        admin.sql(sql).collect()
    direct.sql(
        f"CREATE VIEW {db}.v AS SELECT * FROM {db}.ev WHERE region IN (SELECT region FROM {db}.acl WHERE who = 'ann@example.com')"
    ).collect()
    return total


def measure(reader, direct, db: str, rounds: int, days: int, forms=("sql", "dataframe"), warmed=None) -> dict:
    """{(form, 'proxy'|'direct', 'repeated'|'first-seen'): [ms, ...]}, interleaved round by
    round (the order alternating); the answers of both sides are compared every round.

    `warmed()` is called between the warm-up and the measured rounds, e.g. to read the proxy's
    counters: the warm-up's second-opinion misses (each form's first query, and the session's
    first request, whose state version is not yet settled) are not the measured rounds'."""
    sql_text = "SELECT count(*), sum(amount) FROM {table} WHERE day = '{day}'"

    def sql_query(session, table):
        return lambda day: session.sql(sql_text.format(table=table, day=day))

    def dataframe_query(session, table):
        # spark.table(...).filter(col("day") == ...): a filter relation over a read (rewrite/plan/placement.py)
        return lambda day: session.table(table).filter(F.col("day") == str(day)).agg(F.count("*"), F.sum("amount"))

    makers = {"sql": sql_query, "dataframe": dataframe_query}
    queries = {}
    for form in forms:
        queries[form, "proxy"] = makers[form](reader, f"{db}.ev")
        queries[form, "direct"] = makers[form](direct, f"{db}.v")
    for make in queries.values():  # warm-up: sessions, catalog caches, JIT (days not measured below)
        for day in (START, START + datetime.timedelta(days=days - 1), START + datetime.timedelta(days=days - 2)):
            make(day).collect()
    if warmed is not None:
        warmed()
    times: dict[tuple[str, str, str], list[float]] = {}
    for i in range(rounds):
        for form in forms:
            for phase in ("repeated", "first-seen"):
                day = START if phase == "repeated" else START + datetime.timedelta(days=(10 + i) % days)
                answers = {}
                for name in ("proxy", "direct") if i % 2 == 0 else ("direct", "proxy"):
                    t0 = time.perf_counter()
                    answers[name] = [tuple(r) for r in queries[form, name](day).collect()]
                    times.setdefault((form, name, phase), []).append((time.perf_counter() - t0) * 1000)
                if answers["proxy"] != answers["direct"]:
                    raise AssertionError(f"different answers for {form} {day}: {answers}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", help="a running Spark Connect server (sc://host:port); default: start one")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--days", type=int, default=400)
    parser.add_argument("--rows-per-day", type=int, default=500)
    parser.add_argument("--no-second-opinion", action="store_true", help="start the proxy with --no-second-opinion")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rowgate-lookup-pruning-"))
    spark = None
    upstream = args.upstream
    if upstream is None:
        spark = EmbeddedSparkConnect(data_dir=work / "spark", driver_memory="1g", conf={})
        spark.start()
        upstream = spark.url
    proxy_args = ["--identity", "header", "--admin", ADMIN] + (["--no-second-opinion"] if args.no_second_opinion else [])
    proxy = proxy_process(free_port(), upstream, work / "proxy", proxy_args, work / "proxy.log")
    sessions = []
    db = "pruning_" + uuid.uuid4().hex[:8]
    try:
        proxy.start()
        admin = new_session(f"sc://{proxy.target}/;x-rowgate-user={ADMIN}")
        direct = new_session(upstream + "/" if not upstream.endswith("/") else upstream)
        reader = new_session(f"sc://{proxy.target}/;x-rowgate-user={ANN}")
        sessions += [admin, direct, reader]
        started = time.perf_counter()
        total = setup(admin, direct, db, args.days, args.rows_per_day)
        print(f"data: {args.days} day partitions, {total} rows, generated in {time.perf_counter() - started:.1f} s")
        times = measure(reader, direct, db, args.rounds, args.days)
        load = os.getloadavg()
        print(f"one-day aggregate under a lookup policy, {args.rounds} interleaved rounds, ms (p50); "
              f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")  # fmt: skip
        print(f"{'':22} {'proxy':>8} {'direct':>8} {'ratio':>7}   target <= 1.2x")
        for form in ("sql", "dataframe"):
            for phase in ("repeated", "first-seen"):
                p, d = statistics.median(times[form, "proxy", phase]), statistics.median(times[form, "direct", phase])
                print(f"{form + ' ' + phase:22} {p:8.1f} {d:8.1f} {p / d:7.2f}x")
    finally:
        try:
            if sessions:
                sessions[1].sql(f"DROP DATABASE IF EXISTS {db} CASCADE").collect()
        except Exception:
            pass
        for session in sessions:
            stop_session(session)
        proxy.stop()
        if spark is not None:
            spark.stop()


if __name__ == "__main__":
    main()

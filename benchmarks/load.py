#!/usr/bin/env python
"""rowgate load test: many concurrent callers through one proxy, every answer checked.

Issue #7, item 4. One run starts (or uses, with --upstream) one Spark Connect server, loads
TPC-H into it, starts `rowgate serve` in front of it (header identity, one admin), and has
the admin create row access policies on lineitem, orders, customer and supplier for 8
callers with distinct grants (users, a service account, groups, a domain, lookup
subqueries, SESSION_USER(), a lookup into another protected table, no grant at all, full
access). Then 32 pyspark sessions (8 callers x 4, spread over worker processes so the
client's GIL is not the bottleneck) each cycle through a mix of TPC-H SQL queries and
DataFrame-API queries for --duration seconds (default 60), twice:

  direct   straight to Spark, each caller's session reading `rowgate_load_direct_<caller>`,
           views of the TPC-H tables with the caller's policy filter inlined, so Spark does
           the same filtering work the proxy's rewrite asks of it;
  proxied  through the proxy as the caller, reading the protected `tpch` tables.

Every answer of both phases (and of the untimed warm-up) is compared with the caller's
oracle, computed once beforehand directly against Spark from `rowgate_load_oracle_<caller>`:
copies of the protected tables holding exactly the rows the caller's policies allow (the
OR of the filters of the policies that grant the caller, grantee matching re-implemented
here, SESSION_USER() replaced by the caller's email, FALSE when none grants). A differing
answer is a leak; when it equals another caller's oracle answer it is reported as a
cross-caller leak. The proxy's RSS is sampled from /proc all along.

Targets: 0 errors, 0 leaks, proxied throughput >= 0.9 x direct, proxy peak RSS <= 300 MiB.

Usage (from the repository root, with the project's virtualenv):

  .venv/bin/python benchmarks/load.py                          # full run: 32 sessions, 60 s per side
  .venv/bin/python benchmarks/load.py --duration 10 --sessions-per-caller 1   # smoke test
  .venv/bin/python benchmarks/load.py --json load.json --work-dir /tmp/load   # keep data and logs

Everything started here (Spark, proxy, worker processes) is stopped again, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.measure import (
    RssSampler,
    environment,
    percentile,
    proc_cpu_seconds,
    proc_status_kib,
    proc_thread_cpu,
    proxy_process,
    stop_session,
    thread_cpu_delta,
    verdict,
)
from tests.harness.processes import RowgateProcess, ignore_signals, interrupt_on_signals

DEFAULT_TPCH_SCALE = 0.01  # the tests' scale (tests/tpch_data.py); --tpch-scale for more
ADMIN = "user:admin@example.com"
ACL_DB = "rowgate_load_acl"
PROTECTED = ("customer", "orders", "lineitem", "supplier")
ALL_TABLES = ("customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier")
DEFAULT_SQL_QUERIES = "1,3,5,6,10,12,14"

TARGET_ERRORS = 0
TARGET_LEAKS = 0
TARGET_THROUGHPUT_RATIO = 0.9
TARGET_PEAK_RSS_MIB = 300.0


def log(msg: str) -> None:
    print(f"[load {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- who may see what ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    name: str
    member: str  # user:... or serviceAccount:...
    groups: tuple[str, ...] = ()

    @property
    def email(self) -> str:
        return self.member.split(":", 1)[1]

    def proxied_url(self, proxy_target: str) -> str:
        url = f"sc://{proxy_target}/;x-rowgate-user={self.member}"
        if self.groups:
            url += ";x-rowgate-groups=" + ",".join(f"group:{g}" for g in self.groups)
        return url


CALLERS = [
    Caller("ann", "user:ann@example.com"),  # user grants, a domain grant with a SESSION_USER() lookup
    Caller("amy", "user:amy@example.com", ("america@example.com",)),  # group + domain grants OR-ed
    Caller("bob", "user:bob@partner.org"),  # one grant, on lineitem only
    Caller("eve", "user:eve@nowhere.net"),  # no grant: the four tables are empty for her
    Caller("carl", "user:carl@example.org", ("audit@example.com",)),  # full access (TRUE)
    Caller("dan", "user:dan@example.org", ("europe@example.com",)),  # lookup into a protected table
    Caller("etl", "serviceAccount:etl@pipelines.example.net"),  # a service account
    Caller("gus", "user:gus@example.com"),  # domain grants plus a user grant, no supplier grant
]


@dataclass(frozen=True)
class Policy:
    table: str
    name: str
    grantees: tuple[str, ...]
    predicate: str  # {db} and {acl} are filled in; tables in subqueries are fully qualified


POLICIES = [
    # customer
    Policy("customer", "c_america", ("group:america@example.com",),
           "c_nationkey IN (SELECT n_nationkey FROM {db}.nation WHERE n_regionkey = 1)"),
    Policy("customer", "c_own_segments", ("domain:example.com",),
           "c_mktsegment IN (SELECT segment FROM {acl}.segment_access WHERE email = SESSION_USER())"),
    Policy("customer", "c_europe", ("group:europe@example.com",),
           "c_nationkey IN (SELECT n_nationkey FROM {db}.nation WHERE n_regionkey = 3)"),
    Policy("customer", "c_asia_solvent", ("serviceAccount:etl@pipelines.example.net",),
           "c_acctbal > 0 AND c_nationkey IN (SELECT n_nationkey FROM {db}.nation WHERE n_regionkey = 2)"),
    # orders
    Policy("orders", "o_before_1996", ("user:ann@example.com",), "o_orderdate < DATE '1996-01-01'"),
    Policy("orders", "o_urgent", ("group:america@example.com",), "o_orderpriority IN ('1-URGENT', '2-HIGH')"),
    Policy("orders", "o_94_95", ("group:europe@example.com",),
           "o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1996-01-01'"),
    Policy("orders", "o_finished", ("serviceAccount:etl@pipelines.example.net",), "o_orderstatus = 'F'"),
    Policy("orders", "o_big", ("user:gus@example.com",), "o_totalprice > 150000"),
    # lineitem
    Policy("lineitem", "l_modes", ("domain:example.com",), "l_shipmode IN ('AIR', 'MAIL', 'SHIP')"),
    Policy("lineitem", "l_small", ("user:bob@partner.org",), "l_quantity <= 10"),
    # reads `orders`, itself protected, with the policy owner's rights (unfiltered)
    Policy("lineitem", "l_early_orders", ("group:europe@example.com",),
           "l_orderkey IN (SELECT o_orderkey FROM {db}.orders WHERE o_orderdate < DATE '1995-06-01')"),
    Policy("lineitem", "l_ground", ("serviceAccount:etl@pipelines.example.net",), "l_shipmode IN ('TRUCK', 'RAIL')"),
    # supplier
    Policy("supplier", "s_solvent", ("user:ann@example.com", "group:america@example.com"), "s_acctbal > 0"),
    Policy("supplier", "s_europe", ("group:europe@example.com",), "s_suppkey % 3 <> 0"),
    Policy("supplier", "s_asia", ("serviceAccount:etl@pipelines.example.net",),
           "s_nationkey IN (SELECT n_nationkey FROM {db}.nation WHERE n_regionkey = 2)"),
    # full access for the auditors
    *(Policy(t, "audit", ("group:audit@example.com",), "TRUE") for t in PROTECTED),
]  # fmt: skip

SEGMENT_ACCESS = [
    ("ann@example.com", "BUILDING"),
    ("ann@example.com", "MACHINERY"),
    ("amy@example.com", "AUTOMOBILE"),
    ("gus@example.com", "HOUSEHOLD"),
]


def grants(grantee: str, caller: Caller) -> bool:
    """Grantee matching of row-access-semantics.md, written out independently of the proxy."""
    if grantee in ("allUsers", "allAuthenticatedUsers"):
        return True  # every caller here is authenticated
    kind, _, value = grantee.partition(":")
    caller_kind, _, email = caller.member.partition(":")
    if kind in ("user", "serviceAccount"):
        if kind != caller_kind:
            return False
        local, _, host = value.partition("@")
        c_local, _, c_host = email.partition("@")
        return local == c_local and host.lower() == c_host.lower()
    if kind == "domain":
        return email.partition("@")[2].lower() == value.lower()
    if kind == "group":
        return value.lower() in {g.lower() for g in caller.groups}
    raise ValueError(grantee)


def policy_sql(p: Policy, db: str) -> str:
    return p.predicate.format(db=db, acl=ACL_DB)


def oracle_predicate(table: str, caller: Caller, db: str) -> str:
    granted = [p for p in POLICIES if p.table == table and any(grants(g, caller) for g in p.grantees)]
    if not granted:
        return "FALSE"
    bound = [re.sub(r"(?i)\bSESSION_USER\s*\(\s*\)", f"'{caller.email}'", policy_sql(p, db)) for p in granted]
    return " OR ".join(f"({b})" for b in bound)


def oracle_db(caller: Caller) -> str:
    return f"rowgate_load_oracle_{caller.name}"


def direct_db(caller: Caller) -> str:
    return f"rowgate_load_direct_{caller.name}"


# -- the query mix ------------------------------------------------------------------------------------


def _df_queries():
    """DataFrame-API queries: name -> (build(table_fn) -> DataFrame, ordered). `table_fn(name)`
    returns the session's DataFrame of that TPC-H table (qualified with the side's database)."""
    from pyspark.sql import functions as F

    def d(text: str):
        return F.lit(text).cast("date")

    def pricing_summary(t):  # TPC-H 1
        li = t("lineitem")
        charge = F.col("l_extendedprice") * (1 - F.col("l_discount"))
        return (
            li.where(F.col("l_shipdate") <= F.date_sub(d("1998-12-01"), 90))
            .groupBy("l_returnflag", "l_linestatus")
            .agg(
                F.sum("l_quantity").alias("sum_qty"),
                F.sum(charge).alias("sum_disc_price"),
                F.sum(charge * (1 + F.col("l_tax"))).alias("sum_charge"),
                F.avg("l_discount").alias("avg_disc"),
                F.count(F.lit(1)).alias("count_order"),
            )
            .orderBy("l_returnflag", "l_linestatus")
        )

    def shipping_priority(t):  # TPC-H 3, with a tie-breaker so LIMIT is deterministic
        c = t("customer").where(F.col("c_mktsegment") == "BUILDING")
        o = t("orders").where(F.col("o_orderdate") < d("1995-03-15"))
        li = t("lineitem").where(F.col("l_shipdate") > d("1995-03-15"))
        joined = c.join(o, c["c_custkey"] == o["o_custkey"]).join(li, li["l_orderkey"] == o["o_orderkey"])
        return (
            joined.groupBy("l_orderkey", "o_orderdate", "o_shippriority")
            .agg(F.sum(li["l_extendedprice"] * (1 - li["l_discount"])).alias("revenue"))
            .orderBy(F.desc("revenue"), "o_orderdate", "l_orderkey")
            .limit(10)
        )

    def local_supplier(t):  # TPC-H 5: six tables, four of them protected
        r = t("region").where(F.col("r_name") == "ASIA")
        n, s, c, li = t("nation"), t("supplier"), t("customer"), t("lineitem")
        o = t("orders").where((F.col("o_orderdate") >= d("1994-01-01")) & (F.col("o_orderdate") < d("1995-01-01")))
        joined = (
            r.join(n, n["n_regionkey"] == r["r_regionkey"])
            .join(s, s["s_nationkey"] == n["n_nationkey"])
            .join(li, li["l_suppkey"] == s["s_suppkey"])
            .join(o, o["o_orderkey"] == li["l_orderkey"])
            .join(c, (c["c_custkey"] == o["o_custkey"]) & (c["c_nationkey"] == s["s_nationkey"]))
        )
        return joined.groupBy("n_name").agg(F.sum(li["l_extendedprice"] * (1 - li["l_discount"])).alias("revenue"))

    def forecast_revenue(t):  # TPC-H 6
        li = t("lineitem")
        return li.where(
            (F.col("l_shipdate") >= d("1994-01-01")) & (F.col("l_shipdate") < d("1995-01-01")) & (F.col("l_quantity") < 24)
        ).agg(F.sum(F.col("l_extendedprice") * F.col("l_discount")).alias("revenue"), F.count(F.lit(1)).alias("n"))

    def returned_items(t):  # TPC-H 10, with a tie-breaker
        c, n = t("customer"), t("nation")
        o = t("orders").where((F.col("o_orderdate") >= d("1993-10-01")) & (F.col("o_orderdate") < d("1994-01-01")))
        li = t("lineitem").where(F.col("l_returnflag") == "R")
        joined = (
            c.join(o, c["c_custkey"] == o["o_custkey"])
            .join(li, li["l_orderkey"] == o["o_orderkey"])
            .join(n, c["c_nationkey"] == n["n_nationkey"])
        )
        return (
            joined.groupBy("c_custkey", "c_name", "n_name")
            .agg(F.sum(li["l_extendedprice"] * (1 - li["l_discount"])).alias("revenue"))
            .orderBy(F.desc("revenue"), "c_custkey")
            .limit(20)
        )

    def orders_by_year(t):
        o = t("orders")
        return (
            o.groupBy(F.year("o_orderdate").alias("year"), "o_orderpriority")
            .agg(F.count(F.lit(1)).alias("orders"), F.sum("o_totalprice").alias("total"))
            .orderBy("year", "o_orderpriority")
        )

    def suppliers_by_region(t):
        s, n, r = t("supplier"), t("nation"), t("region")
        return (
            s.join(n, s["s_nationkey"] == n["n_nationkey"])
            .join(r, n["n_regionkey"] == r["r_regionkey"])
            .groupBy("r_name")
            .agg(F.count(F.lit(1)).alias("suppliers"), F.sum("s_acctbal").alias("acctbal"))
        )

    def top_customers(t):  # a window function over a join of two protected tables
        from pyspark.sql.window import Window

        c, o = t("customer"), t("orders")
        spent = (
            c.join(o, c["c_custkey"] == o["o_custkey"])
            .groupBy("c_mktsegment", "c_custkey")
            .agg(F.sum("o_totalprice").alias("spent"))
        )
        w = Window.partitionBy("c_mktsegment").orderBy(F.desc("spent"), "c_custkey")
        return spent.withColumn("rank", F.row_number().over(w)).where(F.col("rank") <= 3)

    return {
        "df_pricing_summary": (pricing_summary, True),
        "df_shipping_priority": (shipping_priority, True),
        "df_local_supplier": (local_supplier, False),
        "df_forecast_revenue": (forecast_revenue, False),
        "df_returned_items": (returned_items, True),
        "df_orders_by_year": (orders_by_year, False),
        "df_suppliers_by_region": (suppliers_by_region, False),
        "df_top_customers": (top_customers, False),
    }


@dataclass(frozen=True)
class QuerySpec:
    name: str
    kind: str  # "sql" or "df"
    ordered: bool  # compare rows in order (ORDER BY ... LIMIT), else as multisets
    sql: str = ""


def query_mix(sql_numbers: str, with_df: bool) -> list[QuerySpec]:
    from tests import tpch

    texts = tpch.queries()
    out = []
    for part in sql_numbers.replace(" ", "").split(","):
        if part:
            sql = texts[int(part)]
            out.append(QuerySpec(f"sql_q{int(part)}", "sql", tpch.has_order_by_and_limit(sql), sql))
    if with_df:
        out += [QuerySpec(name, "df", ordered) for name, (_, ordered) in _df_queries().items()]
    return out


# -- answers ----------------------------------------------------------------------------------------------


def _normal(value):
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value) or value == 0:
            return value
        return float(f"{value:.9g}")
    if isinstance(value, (list, tuple)):
        return tuple(_normal(v) for v in value)
    return value


def _sort_key(row: tuple):
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in row)


def run_query(spark, q: QuerySpec, db: str, df_builders: dict):
    """Runs one query in `spark` and returns its comparable answer (columns, rows)."""
    if q.kind == "sql":
        rows = spark.sql(q.sql).collect()
    else:
        rows = df_builders[q.name][0](lambda name: spark.table(f"{db}.{name}")).collect()
    columns = tuple(rows[0].__fields__) if rows else ()
    answer = [tuple(_normal(v) for v in r) for r in rows]
    if not q.ordered:
        answer.sort(key=_sort_key)
    return columns, tuple(answer)


def same_answer(got, expected) -> bool:
    g_cols, g_rows = got
    e_cols, e_rows = expected
    if g_rows != e_rows:
        return False
    return not g_rows or g_cols == e_cols  # an empty answer carries no column names here


def describe_mismatch(query: str, caller: str, got, oracles: dict) -> str:
    """'cross-caller leak' when the wrong answer is exactly another caller's answer."""
    own = oracles[(caller, query)]
    others = sorted(
        name for (name, q), answer in oracles.items() if q == query and name != caller and not same_answer(answer, own)
        and same_answer(got, answer)
    )  # fmt: skip
    what = f"cross-caller leak: equals {'/'.join(others)}'s answer" if others else "answer differs from the oracle"
    return f"{query} as {caller}: {what} ({len(got[1])} rows, oracle {len(own[1])})"


# -- worker processes ------------------------------------------------------------------------------------


@dataclass
class SessionSpec:
    sid: int
    caller: Caller
    index: int  # 0..sessions_per_caller-1


def _short_error(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return first[:300]


def worker_main(conn, spec: dict) -> None:
    """One worker process: its sessions (direct + proxied each), driven by the parent.

    Commands: ("warmup",), ("run", side, start_at, stop_at), ("stop",). Every answer is
    checked against the caller's oracle here, so only small records travel back.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    try:
        from pyspark.sql import SparkSession

        queries: list[QuerySpec] = spec["queries"]
        oracles: dict = spec["oracles"]
        df_builders = _df_queries()
        sessions: list[SessionSpec] = spec["sessions"]
        spark = {}  # (sid, side) -> session
        for s in sessions:
            for side in ("direct", "proxied"):
                url = spec["direct_url"] if side == "direct" else s.caller.proxied_url(spec["proxy_target"])
                session = SparkSession.builder.remote(url).create()
                for key, value in spec["session_conf"].items():
                    session.conf.set(key, value)
                session.sql(f"USE {spec['tpch_db'] if side == 'proxied' else direct_db(s.caller)}")
                spark[(s.sid, side)] = session
        conn.send(("ready", len(spark)))
    except BaseException as e:
        conn.send(("failed", _short_error(e) + "\n" + traceback.format_exc()))
        os._exit(1)

    def db_of(s: SessionSpec, side: str) -> str:
        return spec["tpch_db"] if side == "proxied" else direct_db(s.caller)

    def order_for(s: SessionSpec) -> list[int]:
        # Each session cycles through the whole mix in its own order (the same on both sides).
        order = list(range(len(queries)))
        random.Random(s.sid * 7919 + 17).shuffle(order)
        return order

    def one(s: SessionSpec, side: str, qi: int, records: list) -> None:
        q = queries[qi]
        t_start = time.time()
        t0 = time.perf_counter()
        try:
            got = run_query(spark[(s.sid, side)], q, db_of(s, side), df_builders)
        except Exception as e:
            records.append((s.sid, s.caller.name, qi, t_start, time.perf_counter() - t0, "error", _short_error(e)))
            return
        latency = time.perf_counter() - t0
        if same_answer(got, oracles[(s.caller.name, q.name)]):
            records.append((s.sid, s.caller.name, qi, t_start, latency, "ok", None))
        else:
            msg = describe_mismatch(q.name, s.caller.name, got, oracles)
            records.append((s.sid, s.caller.name, qi, t_start, latency, "leak", msg))

    def warmup_thread(s: SessionSpec, records: list) -> None:
        # Untimed, checked: every session runs its share of the mix on both sides, so that
        # the sessions of one caller together run every query once per side.
        per = spec["sessions_per_caller"]
        mine = [qi for qi in range(len(queries)) if qi % per == s.index % per] or [s.index % len(queries)]
        for side in ("direct", "proxied"):
            for qi in mine:
                one(s, side, qi, records)

    def run_thread(s: SessionSpec, side: str, start_at: float, deadline: float, records: list) -> None:
        order = order_for(s)
        i = 0
        delay = start_at - time.time()
        if delay > 0:
            time.sleep(delay)
        while time.time() < deadline:
            one(s, side, order[i % len(order)], records)
            i += 1

    while True:
        try:
            cmd = conn.recv()
        except (EOFError, OSError):
            os._exit(2)  # the parent is gone
        if cmd[0] == "stop":
            threads = [threading.Thread(target=stop_session, args=(x, 10.0), daemon=True) for x in spark.values()]
            for t in threads:
                t.start()
            for t in threads:
                t.join(15)
            try:
                conn.send(("stopped",))
            finally:
                os._exit(0)  # pyspark's release pool may otherwise keep the interpreter alive
        records: list = []
        cpu0 = time.process_time()
        if cmd[0] == "warmup":
            threads = [threading.Thread(target=warmup_thread, args=(s, records)) for s in sessions]
        else:
            _, side, start_at, stop_at = cmd
            threads = [threading.Thread(target=run_thread, args=(s, side, start_at, stop_at, records)) for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        conn.send(("done", records, time.process_time() - cpu0))


@dataclass
class Worker:
    proc: mp.Process
    conn: object
    sessions: list[SessionSpec]


# -- the run ----------------------------------------------------------------------------------------------------


@dataclass
class Resources:
    spark: object | None = None
    proxy: RowgateProcess | None = None
    sampler: RssSampler | None = None
    setup_sessions: list = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)
    workdir: Path | None = None
    remove_workdir: bool = False
    drop_dbs: list[str] = field(default_factory=list)
    results: dict | None = None

    def stop_workers(self, graceful: bool) -> None:
        if graceful:
            for w in self.workers:
                try:
                    w.conn.send(("stop",))
                except Exception:
                    pass
            deadline = time.monotonic() + 30
            for w in self.workers:
                w.proc.join(max(0.1, deadline - time.monotonic()))
        for w in self.workers:
            if w.proc.is_alive():
                w.proc.terminate()
        for w in self.workers:
            w.proc.join(5)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(5)
        self.workers.clear()

    def cleanup(self, graceful: bool) -> None:
        self.stop_workers(graceful)
        if self.drop_dbs and self.setup_sessions and graceful:
            direct = self.setup_sessions[0]
            for db in self.drop_dbs:
                try:
                    direct.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")
                except Exception:
                    pass
        for s in self.setup_sessions:
            stop_session(s)
        self.setup_sessions.clear()
        if self.sampler is not None:
            self.sampler.stop()
        if self.proxy is not None:
            log("stopping the proxy")
            try:
                self.proxy.stop()
            except Exception:
                pass
        if self.spark is not None:
            log("stopping Spark Connect")
            try:
                self.spark.stop()
            except Exception:
                pass
            self.spark = None
        if self.remove_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def setup_data(direct, admin, args, queries: list[QuerySpec]) -> dict:
    """TPC-H, the lookup table, the oracle copies and direct-side views, the policies, the oracles."""
    from tests import tpch

    t0 = time.perf_counter()
    db = args.database
    # Generated by DuckDB's dbgen at --tpch-scale (cached in .rowgate/tpch/), sent from this client.
    loaded = tpch.load(direct, db, args.tpch_scale, replace=args.tpch_reload)
    log(f"TPC-H sf={args.tpch_scale:g} in `{db}`: {'loaded' if loaded else 'already there'} ({time.perf_counter() - t0:.1f}s)")
    counts = {t: direct.table(f"{db}.{t}").count() for t in PROTECTED}

    direct.sql(f"CREATE DATABASE IF NOT EXISTS {ACL_DB}")
    direct.sql(f"DROP TABLE IF EXISTS {ACL_DB}.segment_access")
    direct.createDataFrame(SEGMENT_ACCESS, "email STRING, segment STRING").write.format("parquet").saveAsTable(
        f"{ACL_DB}.segment_access"
    )
    for caller in CALLERS:
        odb, ddb = oracle_db(caller), direct_db(caller)
        for name in (odb, ddb):
            direct.sql(f"DROP DATABASE IF EXISTS {name} CASCADE")
            direct.sql(f"CREATE DATABASE {name}")
        for table in ALL_TABLES:
            if table in PROTECTED:
                # `WHERE TRUE AND (...)`: Spark would read `FROM t WHERE (TRUE)` as the table
                # alias `WHERE` with a column list (the proxy's rewrite guards against the same).
                pred = f"TRUE AND ({oracle_predicate(table, caller, db)})"
                # The oracle: a materialised copy of exactly the allowed rows.
                direct.sql(f"CREATE TABLE {odb}.{table} USING parquet AS SELECT * FROM {db}.{table} WHERE {pred}")
                # The direct side: the same filter inlined in a view, evaluated per query like the proxy's rewrite.
                direct.sql(f"CREATE VIEW {ddb}.{table} AS SELECT * FROM {db}.{table} WHERE {pred}")
            else:
                direct.sql(f"CREATE VIEW {odb}.{table} AS SELECT * FROM {db}.{table}")
                direct.sql(f"CREATE VIEW {ddb}.{table} AS SELECT * FROM {db}.{table}")
    visible = {c.name: {t: direct.table(f"{oracle_db(c)}.{t}").count() for t in PROTECTED} for c in CALLERS}
    log("rows each caller may see (oracle copies): " + "; ".join(
        f"{n} " + "/".join(str(v[t]) for t in PROTECTED) for n, v in visible.items()
    ) + f"  [{'/'.join(PROTECTED)}; full {'/'.join(str(counts[t]) for t in PROTECTED)}]")  # fmt: skip

    for p in POLICIES:
        members = ", ".join(f"'{g}'" for g in p.grantees)
        admin.sql(
            f"CREATE OR REPLACE ROW ACCESS POLICY {p.name} ON {db}.{p.table} "
            f"GRANT TO ({members}) FILTER USING ({policy_sql(p, db)})"
        ).collect()
    shown = admin.sql("SHOW ROW ACCESS POLICIES").collect()
    mine = [r for r in shown if r["table_schema"] == db and r["table_name"] in PROTECTED]
    if len(mine) != len(POLICIES):
        raise RuntimeError(f"{len(POLICIES)} policies created, the proxy shows {len(mine)} on `{db}`")
    log(f"{len(POLICIES)} row access policies created through the proxy")

    # The oracles, once, directly against the copies.
    df_builders = _df_queries()
    oracles: dict = {}
    t1 = time.perf_counter()
    for caller in CALLERS:
        direct.sql(f"USE {oracle_db(caller)}")
        for q in queries:
            oracles[(caller.name, q.name)] = run_query(direct, q, oracle_db(caller), df_builders)
    direct.sql(f"USE {db}")
    log(f"oracles: {len(oracles)} answers ({len(CALLERS)} callers x {len(queries)} queries) in {time.perf_counter() - t1:.1f}s")

    # Teeth: the answers must depend on the caller, or a leak could not be seen.
    distinct = {q.name: len({repr(oracles[(c.name, q.name)]) for c in CALLERS}) for q in queries}
    nonempty = {q.name: sum(1 for c in CALLERS if oracles[(c.name, q.name)][1]) for q in queries}
    weak = [n for n, k in distinct.items() if k < 3]
    log("distinct oracle answers per query (of 8 callers): " + ", ".join(f"{n} {k}" for n, k in distinct.items()))
    if weak:
        log(f"warning: queries with fewer than 3 distinct answers across callers: {', '.join(weak)}")
    return {
        "seconds": time.perf_counter() - t0,
        "rows_full": counts,
        "rows_visible": visible,
        "distinct_answers": distinct,
        "nonempty_answers": nonempty,
        "oracles": oracles,
    }


def start_workers(res: Resources, args, queries, oracles, direct_url: str, session_conf: dict) -> None:
    specs = [
        SessionSpec(sid=i * len(CALLERS) + ci, caller=c, index=i)
        for i in range(args.sessions_per_caller)
        for ci, c in enumerate(CALLERS)
    ]
    nproc = max(1, min(args.processes, len(specs)))
    groups: list[list[SessionSpec]] = [[] for _ in range(nproc)]
    names = [c.name for c in CALLERS]
    for s in specs:
        # One process per caller by default (all sessions of a caller share a process);
        # any other count spreads the sessions round-robin.
        groups[names.index(s.caller.name) if nproc == len(CALLERS) else s.sid % nproc].append(s)
    ctx = mp.get_context("spawn")
    for g in groups:
        if not g:
            continue
        parent, child = ctx.Pipe()
        spec = {
            "queries": queries,
            "oracles": oracles,
            "sessions": g,
            "sessions_per_caller": args.sessions_per_caller,
            "direct_url": direct_url,
            "proxy_target": res.proxy.target,
            "tpch_db": args.database,
            "session_conf": session_conf,
        }
        proc = ctx.Process(target=worker_main, args=(child, spec), daemon=True, name="rowgate-load-worker")
        proc.start()
        child.close()
        res.workers.append(Worker(proc, parent, g))
    log(f"{len(res.workers)} worker processes started, {len(specs)} sessions per side; creating sessions")
    for w in res.workers:
        if not w.conn.poll(300):
            raise RuntimeError("a worker did not create its sessions within 300 s")
        msg = w.conn.recv()
        if msg[0] != "ready":
            raise RuntimeError(f"a worker failed to start: {msg[1]}")


def collect(res: Resources, timeout: float) -> tuple[list, float]:
    records: list = []
    cpu = 0.0
    deadline = time.monotonic() + timeout
    for w in res.workers:
        left = deadline - time.monotonic()
        if not w.conn.poll(max(0.1, left)):
            raise RuntimeError(
                f"a worker (pid {w.proc.pid}) did not finish within {timeout:.0f}s: queries hang"
                f" (proxy alive: {res.proxy.alive()})"
            )
        msg = w.conn.recv()
        records.extend(msg[1])
        cpu += msg[2]
    return records, cpu


def client_cpu(res: Resources) -> float:
    return sum(proc_cpu_seconds(w.proc.pid) for w in res.workers)


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return float("nan"), float("nan")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already part of user
    return (total - idle) / _CLK_TCK, total / _CLK_TCK


def thread_groups(cpu_by_name: dict[str, float]) -> dict[str, float]:
    """Thread CPU summed by name without its number ("GC Thread#3" -> "GC Thread")."""
    out: dict[str, float] = Counter()
    for name, secs in cpu_by_name.items():
        out[re.sub(r"[#\-_ ]?\d+$", "", name) or name] += secs
    return dict(sorted(((k, round(v, 2)) for k, v in out.items()), key=lambda kv: -kv[1]))


def run_phase(res: Resources, side: str, duration: float, ramp: float, queries: list[QuerySpec]) -> dict:
    """All sessions start together at start_at; the first `ramp` seconds are not counted, so the
    timed window [start_at + ramp, + duration] sees queries in flight at both of its ends."""
    start_at = time.time() + 2.0
    window_start = start_at + ramp
    window_end = window_start + duration
    for w in res.workers:
        w.conn.send(("run", side, start_at, window_end))
    time.sleep(max(0.0, window_start - time.time()))
    proxy_pid = res.proxy.proc.pid
    spark_pid = res.spark._proc.pid if res.spark is not None and res.spark._proc is not None else None
    c_proxy0, c_client0 = proc_cpu_seconds(proxy_pid), client_cpu(res)
    c_spark0 = proc_cpu_seconds(spark_pid) if spark_pid else float("nan")
    threads0 = proc_thread_cpu(proxy_pid)
    spark_threads0 = proc_thread_cpu(spark_pid) if spark_pid else {}
    busy0, total0 = machine_cpu()
    res.sampler.reset_window()
    rss_timeline = []
    while time.time() < window_end:
        time.sleep(min(5.0, max(0.0, window_end - time.time())))
        rss_timeline.append((round(time.time() - window_start, 1), round(proc_status_kib(proxy_pid).get("VmRSS", 0) / 1024, 1)))
    window_peak = res.sampler.window_peak()
    c_proxy1, c_client1 = proc_cpu_seconds(proxy_pid), client_cpu(res)
    c_spark1 = proc_cpu_seconds(spark_pid) if spark_pid else float("nan")
    busy1, total1 = machine_cpu()
    threads = thread_cpu_delta(threads0, proc_thread_cpu(proxy_pid))
    spark_threads = thread_groups(thread_cpu_delta(spark_threads0, proc_thread_cpu(spark_pid))) if spark_pid else {}
    load = os.getloadavg()[0]
    records, _ = collect(res, timeout=duration + 300)
    ours = (c_proxy1 - c_proxy0) + (c_client1 - c_client0) + ((c_spark1 - c_spark0) if spark_pid else 0.0)
    return (
        summarize(side, records, window_start, duration, queries)
        | {
            "ramp_s": ramp,
            "cpu_seconds": {
                "proxy": c_proxy1 - c_proxy0,
                "spark": c_spark1 - c_spark0,
                "clients": c_client1 - c_client0,
            },
            "machine_cpu": {
                "cores": (total1 - total0) / duration,
                "busy_cores": (busy1 - busy0) / duration,
                "ours_cores": ours / duration,  # Spark (embedded only), the proxy and the client processes
                "others_cores": max(0.0, (busy1 - busy0) - ours) / duration,
            },
            "spark_thread_cpu_seconds": dict(list(spark_threads.items())[:12]),
            "proxy_thread_cpu_seconds": threads,
            "proxy_rss_peak_mib": window_peak / 1024,
            "proxy_rss_timeline_mib": rss_timeline,
            "load_average_1m_at_end": load,
        }
    )


def summarize(side: str, records: list, start_at: float, duration: float, queries: list[QuerySpec]) -> dict:
    end = start_at + duration
    in_window = [r for r in records if start_at <= r[3] + r[4] <= end]  # finished within the timed window
    ok = [r for r in in_window if r[5] == "ok"]
    lat_ms = [r[4] * 1000.0 for r in ok]
    errors = [r for r in records if r[5] == "error"]
    leaks = [r for r in records if r[5] == "leak"]
    per_query = {}
    for qi, q in enumerate(queries):
        xs = [r[4] * 1000.0 for r in ok if r[2] == qi]
        per_query[q.name] = {"n": len(xs), "p50_ms": percentile(xs, 50), "p95_ms": percentile(xs, 95)}
    per_caller = Counter(r[1] for r in ok)
    per_second = Counter(int(r[3] + r[4] - start_at) for r in in_window)
    return {
        "side": side,
        "duration_s": duration,
        "queries_total": len(records),
        "queries_in_window": len(in_window),
        "ok_in_window": len(ok),
        "qps": len(ok) / duration,  # answered correctly within the window
        "all_qps": len(in_window) / duration,  # also errors and wrong answers
        "p50_ms": percentile(lat_ms, 50),
        "p95_ms": percentile(lat_ms, 95),
        "p99_ms": percentile(lat_ms, 99),
        "mean_ms": statistics.fmean(lat_ms) if lat_ms else float("nan"),
        "max_ms": max(lat_ms) if lat_ms else float("nan"),
        "errors": len(errors),
        "leaks": len(leaks),
        "cross_caller_leaks": sum(1 for r in leaks if "cross-caller" in (r[6] or "")),
        "error_messages": dict(Counter(r[6] for r in errors).most_common(20)),
        "leak_messages": dict(Counter(r[6] for r in leaks).most_common(20)),
        "per_query": per_query,
        "ok_per_caller": dict(sorted(per_caller.items())),
        "completions_per_second": [per_second.get(i, 0) for i in range(int(math.ceil(duration)))],
    }


def run(args: argparse.Namespace, res: Resources) -> dict:
    from rowgate.embedded.spark import EmbeddedSparkConnect, free_port

    started = time.perf_counter()
    results: dict = {"environment": environment(), "targets": {
        "errors": TARGET_ERRORS, "leaks": TARGET_LEAKS, "throughput_ratio": TARGET_THROUGHPUT_RATIO,
        "proxy_peak_rss_mib": TARGET_PEAK_RSS_MIB}}  # fmt: skip
    res.results = results
    results["settings"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "json"}
    load1 = results["environment"]["load_before"][0]
    if load1 > 1.5:
        log(f"warning: load average is {load1:.2f} on {os.cpu_count()} CPUs; results will be noisy")

    if args.work_dir:
        res.workdir = args.work_dir.resolve()
        res.workdir.mkdir(parents=True, exist_ok=True)
    else:
        res.workdir = Path(tempfile.mkdtemp(prefix="rowgate-load-"))
        res.remove_workdir = True

    session_conf = {"spark.sql.shuffle.partitions": str(args.shuffle_partitions)}
    if args.upstream:
        upstream = args.upstream
        log(f"using the running Spark Connect server {upstream}")
    else:
        conf = dict(session_conf)
        for item in args.spark_conf:
            key, _, value = item.partition("=")
            conf[key.strip()] = value.strip()
        log(f"starting embedded Spark Connect (driver memory {args.driver_memory}) under {res.workdir / 'spark'}")
        res.spark = EmbeddedSparkConnect(data_dir=res.workdir / "spark", driver_memory=args.driver_memory, conf=conf)
        res.spark.start()
        upstream = res.spark.url
        log(f"Spark Connect is up at {upstream} (pid {res.spark._proc.pid})")

    res.proxy = proxy_process(
        port=free_port(),
        upstream=upstream,
        data_dir=res.workdir / "proxy",
        extra_args=["--identity", "header", "--admin", ADMIN, *args.proxy_arg],
        log_path=res.workdir / "rowgate.log",
    )
    res.proxy.start()
    pid = res.proxy.proc.pid
    res.sampler = RssSampler(pid, interval=0.1)
    res.sampler.start()
    log(f"rowgate is SERVING on {res.proxy.target} (pid {pid}, log {res.proxy.log_path})")
    results["proxy"] = {"pid": pid, "args": res.proxy.command()[2:], "log": str(res.proxy.log_path),
                        "rss_at_start_mib": proc_status_kib(pid).get("VmRSS", 0) / 1024}  # fmt: skip

    from pyspark.sql import SparkSession

    direct = SparkSession.builder.remote(upstream).create()
    res.setup_sessions.append(direct)
    admin = SparkSession.builder.remote(f"sc://{res.proxy.target}/;x-rowgate-user={ADMIN}").create()
    res.setup_sessions.append(admin)
    for key, value in session_conf.items():
        direct.conf.set(key, value)
    queries = query_mix(args.sql_queries, not args.no_dataframe)
    if not args.keep_databases:
        res.drop_dbs = [ACL_DB, *(oracle_db(c) for c in CALLERS), *(direct_db(c) for c in CALLERS)]
    setup = setup_data(direct, admin, args, queries)
    oracles = setup.pop("oracles")
    results["setup"] = setup
    results["queries"] = [{"name": q.name, "kind": q.kind, "ordered": q.ordered} for q in queries]
    results["proxy"]["rss_after_setup_mib"] = proc_status_kib(pid).get("VmRSS", 0) / 1024

    start_workers(res, args, queries, oracles, upstream, session_conf)
    results["proxy"]["rss_with_sessions_mib"] = proc_status_kib(pid).get("VmRSS", 0) / 1024
    log("warm-up: each caller runs the whole mix once per side (untimed, checked)")
    t0 = time.perf_counter()
    for w in res.workers:
        w.conn.send(("warmup",))
    warm, _ = collect(res, timeout=600)
    results["warmup"] = {
        "seconds": time.perf_counter() - t0,
        "queries": len(warm),
        "errors": sum(1 for r in warm if r[5] == "error"),
        "leaks": sum(1 for r in warm if r[5] == "leak"),
        "messages": dict(Counter(r[6] for r in warm if r[6]).most_common(20)),
    }
    log(f"warm-up: {len(warm)} queries in {results['warmup']['seconds']:.1f}s, "
        f"{results['warmup']['errors']} errors, {results['warmup']['leaks']} leaks")  # fmt: skip
    for msg, n in results["warmup"]["messages"].items():
        log(f"  warm-up x{n}: {msg}")

    phases: list[dict] = []
    results["phases"] = phases  # filled phase by phase, so an interrupted run still reports
    order = ["direct", "proxied"] if args.first == "direct" else ["proxied", "direct"]
    for r in range(args.rounds):
        for side in order if r % 2 == 0 else order[::-1]:
            log(f"round {r + 1}/{args.rounds}: {side}, {args.duration:g} s, "
                f"{len(CALLERS) * args.sessions_per_caller} sessions (load {os.getloadavg()[0]:.2f})")  # fmt: skip
            phase = run_phase(res, side, args.duration, args.ramp, queries)
            phase["round"] = r + 1
            phases.append(phase)
            log(
                f"  {side}: {phase['qps']:.1f} q/s, p50 {phase['p50_ms']:.0f} ms, p95 {phase['p95_ms']:.0f} ms,"
                f" p99 {phase['p99_ms']:.0f} ms, errors {phase['errors']}, leaks {phase['leaks']},"
                f" proxy RSS peak {phase['proxy_rss_peak_mib']:.0f} MiB"
            )
            for msg, n in list(phase["error_messages"].items())[:5] + list(phase["leak_messages"].items())[:5]:
                log(f"    x{n}: {msg}")
            if not res.proxy.alive():
                raise RuntimeError(f"the proxy died; log:\n{res.proxy.log_tail()}")

    st = proc_status_kib(pid)
    results["proxy"].update({
        "rss_end_mib": st.get("VmRSS", 0) / 1024,
        "vmhwm_mib": st.get("VmHWM", 0) / 1024,
        "peak_sampled_mib": res.sampler.overall_peak_kib / 1024,
        "peak_anon_mib": res.sampler.peak_anon_kib / 1024,
        "rss_samples": res.sampler.samples,
        "cpu_seconds_total": proc_cpu_seconds(pid),
    })  # fmt: skip
    results["environment"]["load_after"] = list(os.getloadavg())
    results["wall_seconds"] = time.perf_counter() - started
    return results


# -- report ------------------------------------------------------------------------------------------------------


def combine(phases: list[dict], side: str) -> dict | None:
    """All rounds of one side together: throughput from the summed counts, latencies pooled."""
    ps = [p for p in phases if p["side"] == side]
    if not ps:
        return None
    duration = sum(p["duration_s"] for p in ps)
    n = sum(p["ok_in_window"] for p in ps)
    out = {
        "qps": n / duration,
        "queries": n,
        "p50_ms": statistics.median(p["p50_ms"] for p in ps),
        "p95_ms": statistics.median(p["p95_ms"] for p in ps),
        "p99_ms": statistics.median(p["p99_ms"] for p in ps),
        "errors": sum(p["errors"] for p in ps),
        "leaks": sum(p["leaks"] for p in ps),
        "cross_caller_leaks": sum(p["cross_caller_leaks"] for p in ps),
        "cpu": {k: sum(p["cpu_seconds"][k] for p in ps) for k in ("proxy", "spark", "clients")},
        "rss_peak_mib": max(p["proxy_rss_peak_mib"] for p in ps),
    }
    return out


def _ms(x: float) -> str:
    return "-" if x != x else f"{x:.0f}"


def print_report(results: dict) -> None:
    phases = results.get("phases") or []
    d, p = combine(phases, "direct"), combine(phases, "proxied")
    s = results["settings"]
    warm = results.get("warmup", {})
    sessions = len(CALLERS) * s["sessions_per_caller"]
    print()
    print(
        f"rowgate load test: {sessions} sessions ({len(CALLERS)} callers x {s['sessions_per_caller']}),"
        f" {len(results.get('queries', []))} queries"
        f" ({sum(1 for q in results.get('queries', []) if q['kind'] == 'sql')} SQL,"
        f" {sum(1 for q in results.get('queries', []) if q['kind'] == 'df')} DataFrame),"
        f" {s['duration']:g} s per side (after {s['ramp']:g} s ramp) x {s['rounds']} round(s),"
        f" {s['processes']} client processes"
    )
    rows: list[tuple[str, ...]] = []

    def val(x, fmt):
        return "" if x is None else fmt.format(x)

    def ratio(a, b):
        return f"{b / a:.3f}" if a and b is not None and a == a and b == b else ""

    if d or p:
        rows.append(("throughput (queries/s)", val(d and d["qps"], "{:.1f}"), val(p and p["qps"], "{:.1f}"),
                     ratio(d and d["qps"], p and p["qps"]), f">= {TARGET_THROUGHPUT_RATIO:g}",
                     verdict(bool(d and p and p["qps"] >= TARGET_THROUGHPUT_RATIO * d["qps"]))))  # fmt: skip
        for q in ("p50", "p95", "p99"):
            rows.append((f"latency {q}", val(d and d[q + "_ms"], "{:.0f} ms"), val(p and p[q + "_ms"], "{:.0f} ms"),
                         ratio(d and d[q + "_ms"], p and p[q + "_ms"]), "", ""))  # fmt: skip
        rows.append(("correct answers in the window", val(d and d["queries"], "{}"), val(p and p["queries"], "{}"), "", "", ""))
        errs = (d["errors"] if d else 0) + (p["errors"] if p else 0) + warm.get("errors", 0)
        rows.append(("errors", val(d and d["errors"], "{}"), val(p and p["errors"], "{}"), "",
                     f"= {TARGET_ERRORS}", verdict(errs == TARGET_ERRORS)))  # fmt: skip
        leaks = (d["leaks"] if d else 0) + (p["leaks"] if p else 0) + warm.get("leaks", 0)
        rows.append(("answers != oracle (leaks)", val(d and d["leaks"], "{}"), val(p and p["leaks"], "{}"), "",
                     f"= {TARGET_LEAKS}", verdict(leaks == TARGET_LEAKS)))  # fmt: skip
        rows.append(("  of which cross-caller", val(d and d["cross_caller_leaks"], "{}"),
                     val(p and p["cross_caller_leaks"], "{}"), "", "", ""))  # fmt: skip
    prx = results.get("proxy", {})
    if "vmhwm_mib" in prx:
        peak = max(prx["vmhwm_mib"], prx["peak_sampled_mib"])
        rows.append(("proxy peak RSS (VmHWM)", "", f"{prx['vmhwm_mib']:.0f} MiB", "",
                     f"<= {TARGET_PEAK_RSS_MIB:g} MiB", verdict(peak <= TARGET_PEAK_RSS_MIB)))  # fmt: skip
        rows.append(("proxy RSS sampled: peak / end", "", f"{prx['peak_sampled_mib']:.0f} / {prx['rss_end_mib']:.0f} MiB",
                     "", "", ""))  # fmt: skip
    if d and p:
        nd, np_ = max(1, d["queries"]), max(1, p["queries"])
        for k in ("spark", "proxy", "clients"):
            a, b = d["cpu"][k] * 1000 / nd, p["cpu"][k] * 1000 / np_
            if a == a or b == b:
                rows.append((f"CPU per query: {k}", f"{a:.1f} ms", f"{b:.1f} ms", ratio(a, b) if a > 0 else "", "info", ""))

    if rows:
        header = ("metric", "direct", "proxied", "ratio", "target", "")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        line = "  ".join("-" * w for w in widths)
        print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        print(line)
        for r in rows:
            print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        print(line)
    if warm:
        print(f"warm-up (untimed, checked): {warm['queries']} queries, {warm['errors']} errors, {warm['leaks']} leaks")
    if "rss_at_start_mib" in prx and "rss_end_mib" in prx:
        tl = [x[1] for ph in phases if ph["side"] == "proxied" for x in ph["proxy_rss_timeline_mib"]]
        print(
            f"proxy RSS: {prx['rss_at_start_mib']:.0f} MiB at start, {prx['rss_after_setup_mib']:.0f} after setup,"
            f" {prx['rss_with_sessions_mib']:.0f} with all sessions open"
            + (f", {tl[0]:.0f} -> {tl[-1]:.0f} MiB during the proxied phase (every 5 s: {' '.join(f'{x:.0f}' for x in tl)})" if tl else "")
        )  # fmt: skip
    for ph in phases:
        m = ph.get("machine_cpu")
        if m:
            spark_top = ", ".join(f"{k} {v:.0f}s" for k, v in list(ph.get("spark_thread_cpu_seconds", {}).items())[:4])
            print(
                f"{ph['side']}: machine CPU busy {m['busy_cores']:.2f} of {m['cores']:.1f} cores"
                f" (this run {m['ours_cores']:.2f}, other processes {m['others_cores']:.2f})"
                + (f"; Spark by thread: {spark_top}" if spark_top else "")
            )
    for ph in phases:
        if ph["side"] == "proxied":
            top = ", ".join(f"{k} {v:.1f}s" for k, v in list(ph["proxy_thread_cpu_seconds"].items())[:4])
            print(
                f"proxy CPU in the proxied phase: {ph['cpu_seconds']['proxy']:.1f} s of {ph['duration_s']:g} s; by thread: {top}"
            )
    if d and p:
        slow = []
        for q in results["queries"]:
            a = [ph["per_query"][q["name"]]["p50_ms"] for ph in phases if ph["side"] == "direct"]
            b = [ph["per_query"][q["name"]]["p50_ms"] for ph in phases if ph["side"] == "proxied"]
            if a and b:
                slow.append(f"{q['name']} {_ms(statistics.median(a))}/{_ms(statistics.median(b))}")
        print("p50 per query, direct/proxied ms: " + ", ".join(slow))
    for ph in phases:
        for title, msgs in (("errors", ph["error_messages"]), ("leaks", ph["leak_messages"])):
            for msg, n in list(msgs.items())[:10]:
                print(f"{ph['side']} {title} x{n}: {msg}")
    env = results["environment"]
    print(
        f"load average {env['load_before'][0]:.2f} before, {env.get('load_after', [float('nan')])[0]:.2f} after;"
        f" {env['cpus']} CPUs" + (f"; wall {results['wall_seconds']:.0f}s" if "wall_seconds" in results else "")
    )


# -- main -------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="rowgate load test: concurrent callers, direct vs proxied, every answer checked")
    p.add_argument("--duration", type=float, default=60.0, help="seconds per side and round (default 60)")
    p.add_argument("--sessions-per-caller", type=int, default=4, help="sessions per caller and side (default 4: 32 sessions)")
    p.add_argument("--processes", type=int, default=len(CALLERS),
                   help=f"client worker processes; sessions are threads in them (default {len(CALLERS)}: one per caller)")  # fmt: skip
    p.add_argument(
        "--ramp", type=float, default=15.0, help="seconds the sessions run before the timed window opens, per phase (default 15)"
    )
    p.add_argument("--rounds", type=int, default=1, help="direct+proxied rounds, the order alternating (default 1)")
    p.add_argument("--first", choices=["direct", "proxied"], default="direct", help="which side runs first (default direct)")
    p.add_argument(
        "--sql-queries", default=DEFAULT_SQL_QUERIES, help=f"TPC-H SQL queries in the mix (default {DEFAULT_SQL_QUERIES})"
    )
    p.add_argument("--no-dataframe", action="store_true", help="leave the DataFrame-API queries out of the mix")
    p.add_argument("--json", metavar="PATH", help="also write all results as JSON")
    p.add_argument(
        "--upstream", metavar="URL", help="use a running Spark Connect server (sc://host:port) instead of starting one"
    )
    p.add_argument("--database", default="tpch", help="database holding (or to hold) TPC-H (default tpch)")
    p.add_argument("--tpch-scale", type=float, default=DEFAULT_TPCH_SCALE,
                   help=f"TPC-H scale factor, generated by DuckDB's dbgen (cached in .rowgate/tpch/; default {DEFAULT_TPCH_SCALE:g})")  # fmt: skip
    p.add_argument("--tpch-reload", action="store_true", help="reload the TPC-H tables even when they exist")
    p.add_argument("--keep-databases", action="store_true", help="keep the oracle/direct/acl databases at the end")
    p.add_argument("--driver-memory", default="2g", help="driver memory of the embedded Spark server (default 2g)")
    p.add_argument("--shuffle-partitions", type=int, default=1, help="spark.sql.shuffle.partitions, every session (default 1)")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="extra conf for the embedded server")
    p.add_argument(
        "--proxy-arg", action="append", default=[], metavar="ARG", help="extra argument for `rowgate serve` (repeatable)"
    )
    p.add_argument("--work-dir", type=Path, help="keep Spark data, proxy data and logs here (default: a temp dir, removed)")
    args = p.parse_args(argv)
    if args.ramp < 0:
        p.error("--ramp must not be negative")
    if args.duration <= 0 or args.sessions_per_caller < 1 or args.processes < 1 or args.rounds < 1:
        p.error("--duration, --sessions-per-caller, --processes and --rounds must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    interrupt_on_signals()
    res = Resources()
    code = 0
    results = None
    try:
        results = run(args, res)
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        code = 130
        results = res.results
    except Exception as e:
        log(f"failed: {type(e).__name__}: {e}")
        if res.proxy is not None:
            tail = res.proxy.log_tail(15)
            if tail:
                log("proxy log tail:\n" + tail)
        code = 1
        results = res.results
    finally:
        ignore_signals()
        res.cleanup(graceful=code == 0)
    if results is not None and results.get("phases"):
        if code:
            print("(partial results: the run did not finish)")
        print_report(results)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
            log(f"wrote {args.json}")
    if code == 0 and results is not None:
        d, p = combine(results["phases"], "direct"), combine(results["phases"], "proxied")
        prx = results["proxy"]
        warm = results.get("warmup", {})
        failed = (
            warm.get("errors", 0) + warm.get("leaks", 0) + (d["errors"] + d["leaks"] if d else 0)
            + (p["errors"] + p["leaks"] if p else 0) > 0
            or max(prx["vmhwm_mib"], prx["peak_sampled_mib"]) > TARGET_PEAK_RSS_MIB
            or bool(d and p and p["qps"] < TARGET_THROUGHPUT_RATIO * d["qps"])
        )  # fmt: skip
        code = 3 if failed else 0
    sys.stdout.flush()
    sys.stderr.flush()
    # pyspark's ReleaseExecute pool may keep retrying calls to the stopped servers at exit.
    os._exit(code)


if __name__ == "__main__":
    main()

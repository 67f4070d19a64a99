#!/usr/bin/env python
"""Every figure of issue 23 beside its anchor, in one run, with the machine's load.

One embedded Spark Connect server (or `--upstream`), one `rowgate serve` (second opinion on,
as shipped) and the bare raw-bytes relay (bare_relay.py) in front of it. The data comes from
DuckDB's TPC-H dbgen (bench.py's loader, cached in .rowgate/tpch/): lineitem becomes a
parquet table partitioned by `--days` day partitions under the lookup policy of
lookup_pruning.py (`region IN (SELECT region FROM acl WHERE who = SESSION_USER())`).

  lookup   a one-day aggregate, SQL text and DataFrame, through rowgate as the reader vs
           direct Spark reading a view with the filter inlined (lookup_pruning.measure):
           `first-seen` sends a day never sent before each round (a new text; its shape was
           analysed during the warm-up, as a dashboard's is after its first query),
           `repeated` the same text again;
  select1  `SELECT 1`: direct, rowgate, bare relay (sidecar.bench_sidecar: relays pinned to
           their own core, then sharing every core): p50, added p50, relay CPU per query;
  large    a large Arrow result (`--rows`): throughput of each relay relative to direct.

Usage (from the repository root):

  .venv/bin/python benchmarks/run.py [--rounds 12] [--iterations 150] [--rows 5000000] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lookup_pruning
import sidecar
from bench import TPCH_DB, load_tpch
from measure import MB, log, new_session, proxy_process, scrape_metrics, stop_session

from rowgate.embedded.spark import EmbeddedSparkConnect, free_port

TARGET_LOOKUP = 1.2


def _load(tag: str) -> str:
    a, b, c = os.getloadavg()
    return f"load average {a:.2f} {b:.2f} {c:.2f} ({tag}, {os.cpu_count()} CPUs)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", help="a running Spark Connect server (sc://host:port); default: start one")
    parser.add_argument("--rounds", type=int, default=12, help="interleaved rounds of each lookup query")
    parser.add_argument("--days", type=int, default=400)
    parser.add_argument("--tpch-scale", type=float, default=0.01)
    parser.add_argument("--iterations", type=int, default=150, help="SELECT 1 rounds per side and layout")
    parser.add_argument("--rows", type=int, default=5_000_000, help="rows of the large result (16 bytes each)")
    parser.add_argument("--reps", type=int, default=3, help="large-result rounds per side and layout")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rowgate-run-"))
    loads = {"start": os.getloadavg()}
    print(_load("start"))
    spark = None
    upstream = args.upstream
    if upstream is None:
        spark = EmbeddedSparkConnect(data_dir=work / "spark", driver_memory=args.driver_memory, conf={})
        spark.start()
        upstream = spark.url
    metrics_port = free_port()
    proxy = proxy_process(
        free_port(), upstream, work / "proxy",
        ["--identity", "header", "--admin", lookup_pruning.ADMIN, "--metrics-listen", f"127.0.0.1:{metrics_port}"],
        work / "rowgate.log",
    )  # fmt: skip
    bare = sidecar.BareRelay(free_port(), upstream.removeprefix("sc://").rstrip("/"), work / "bare")
    sessions = []
    db = "run_" + uuid.uuid4().hex[:8]
    results: dict = {"settings": {k: str(v) for k, v in vars(args).items()}}
    try:
        proxy.start()
        bare.start()
        direct = new_session(upstream if upstream.endswith("/") else upstream + "/")
        admin = new_session(f"sc://{proxy.target}/;x-rowgate-user={lookup_pruning.ADMIN}")
        reader = new_session(f"sc://{proxy.target}/;x-rowgate-user={lookup_pruning.ANN}")
        sessions += [direct, admin, reader]
        results["tpch"] = load_tpch(direct, args.tpch_scale, "client" if args.upstream else "spark", False)
        total = lookup_pruning.setup(admin, direct, db, args.days, 0, lineitem=f"{TPCH_DB}.lineitem")
        log(f"lookup: {args.days} day partitions, {total} TPC-H lineitem rows")
        warm: dict = {}
        loads["lookup_before"] = os.getloadavg()
        times = lookup_pruning.measure(
            reader, direct, db, args.rounds, args.days, warmed=lambda: warm.update(scrape_metrics(metrics_port))
        )
        before = warm
        loads["lookup_after"] = os.getloadavg()
        after = scrape_metrics(metrics_port)
        results["second_opinion_during_lookup"] = {
            k.split('"')[1]: after.get(k, 0) - before.get(k, 0) for k in after if k.startswith("rowgate_second_opinion_total{")
        }
        results["lookup"] = {" ".join(k): v for k, v in times.items()}
        proxied = new_session(f"sc://{proxy.target}/;x-rowgate-user=user:bench@example.com")
        bare_session = new_session(f"sc://{bare.target}")
        sessions += [proxied, bare_session]
        spark_proc = getattr(spark, "_proc", None)
        place = sidecar.placement([proxy.proc.pid, bare.proc.pid], spark_proc.pid if spark_proc else None)
        relays = sidecar.Relays(proxy, bare, metrics_port)
        side_sessions = {"direct": direct, "rowgate": proxied, "bare": bare_session}
        results["sidecar"] = sidecar.bench_sidecar(side_sessions, relays, place, args.iterations, args.rows, args.reps)
        loads["end"] = os.getloadavg()
        results["loads"] = loads
        report(results, times, args)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2, default=str))
    finally:
        try:
            direct.sql(f"DROP DATABASE IF EXISTS {db} CASCADE").collect()
        except Exception:
            pass
        for session in sessions:
            stop_session(session)
        bare.stop()
        proxy.stop()
        if spark is not None:
            spark.stop()


def report(results: dict, times: dict, args) -> None:
    loads = results["loads"]
    print(f"\n== issue 23 figures, one run ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}) ==")
    lb, la = loads["lookup_before"], loads["lookup_after"]
    print(f"\nlookup policy, one day of {args.days} partitions, {args.rounds} interleaved rounds, p50 ms "
          f"(load {lb[0]:.2f} -> {la[0]:.2f})")  # fmt: skip
    print(f"  {'':24} {'rowgate':>9} {'direct, filter inlined':>24} {'ratio':>7}")
    for form in ("sql", "dataframe"):
        for phase in ("first-seen", "repeated"):
            p = statistics.median(times[form, "proxy", phase])
            d = statistics.median(times[form, "direct", phase])
            verdict = f"[<= {TARGET_LOOKUP}x {'PASS' if p / d <= TARGET_LOOKUP else 'MISS'}]" if phase == "first-seen" else ""
            print(f"  {form + ' ' + phase:24} {p:9.1f} {d:24.1f} {p / d:6.2f}x {verdict}")
    print(f"  second opinion during the measured rounds: {results['second_opinion_during_lookup']}")
    side = results["sidecar"]
    for layout in ("pinned", "shared"):
        part = side[layout]
        s1, large = part["select1"], part["large"]
        lb, la = part["load_before"], part["load_after"]
        print(f"\n[{layout}] (load {lb[0]:.2f} -> {la[0]:.2f})")
        print(f"  {'':34} {'rowgate':>9} {'bare relay':>11} {'direct':>8}   target")
        print(
            f"  {'SELECT 1 p50 ms':34} {s1['rowgate']['p50_ms']:9.2f} {s1['bare']['p50_ms']:11.2f} {s1['direct']['p50_ms']:8.2f}"
        )
        print(f"  {'SELECT 1 added p50 ms':34} {s1['rowgate']['added_p50_ms']:+9.2f} {s1['bare']['added_p50_ms']:+11.2f} "
              f"{'':8}   rowgate <= +2 ms")  # fmt: skip
        cpu = s1["rowgate"]["cpu_ms_per_query"] / s1["bare"]["cpu_ms_per_query"]
        print(f"  {'SELECT 1 relay CPU ms/query':34} {s1['rowgate']['cpu_ms_per_query']:9.2f} "
              f"{s1['bare']['cpu_ms_per_query']:11.2f} {'':8}   rowgate/bare {cpu:.2f}x (<= 1.3x)")  # fmt: skip
        mb = large["direct"]["median_mb_s"]
        title = f"{side['rows'] * 16 / MB:.0f} MB result, MB/s"
        print(f"  {title:34} {large['rowgate']['median_mb_s']:9.0f} "
              f"{large['bare']['median_mb_s']:11.0f} {mb:8.0f}   rowgate/direct "
              f"{large['rowgate']['throughput_ratio']:.3f} (>= 0.95), bare/direct {large['bare']['throughput_ratio']:.3f}")  # fmt: skip
    for name, r in side.get("rss", {}).items():
        print(f"  {name} VmHWM {r['vmhwm_mib']:.0f} MiB")
    print("\n" + _load("end"))


if __name__ == "__main__":
    main()

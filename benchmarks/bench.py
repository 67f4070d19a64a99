#!/usr/bin/env python
"""rowgate benchmark: the same workload direct to Spark Connect and through the proxy.

One run starts (or uses, with --upstream) one Spark Connect server, starts `rowgate serve`
in front of it as a subprocess, and measures side by side, interleaving direct and
proxied rounds so background noise hits both equally:

  (a) small-query latency    spark.sql("SELECT 1").collect()      target: +p50 <= 2 ms
  (b) large-result throughput spark.range(N).selectExpr(...).toArrow() (>= 300 MB of Arrow)
                                                                  target: proxied/direct >= 0.95
  (c) the proxy's peak RSS while streaming (b), from /proc/<pid>/status  target: < 200 MB
  (d) TPC-H (--tpch): the 22 queries of /work/shared/data/tpch, direct vs proxied

Usage (from the repository root, with the project's virtualenv):

  .venv/bin/python benchmarks/bench.py --quick              # smoke test, < 2 minutes
  .venv/bin/python benchmarks/bench.py --json bench.json    # full run, several minutes
  .venv/bin/python benchmarks/bench.py --tpch               # plus the TPC-H section

Everything started here (proxy, Spark) is stopped again, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DEFAULT_TPCH_DIR = Path("/work/shared/data/tpch")
TPCH_TABLES = ("customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier")
TPCH_DB = "tpch"
BENCH_USER = "user:bench@example.com"
MB = 1_000_000  # throughput and sizes are in decimal megabytes; RSS in MiB (as the kernel counts kB)

TARGET_ADDED_P50_MS = 2.0
TARGET_THROUGHPUT_RATIO = 0.95
TARGET_PEAK_RSS_MIB = 200.0
# Issue #5: rewrite time over the 22 TPC-H queries, end-to-end overhead with policies in force.
TARGET_REWRITE_P50_MS = 5.0
TARGET_REWRITE_P99_MS = 40.0
TARGET_TPCH_OVERHEAD = 0.05
BENCH_ADMIN = "user:bench-admin@example.com"
PROTECTED_TPCH = ("lineitem", "orders", "customer", "supplier")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- statistics ----------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if not values:
        return float("nan")
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


# -- /proc readings of the proxy process ------------------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_status_kib(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile in KiB from /proc/<pid>/status (empty when the process is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:", "RssAnon:", "RssFile:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (OSError, IndexError, ValueError):
        return float("nan")


def proc_thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread name (threads of one name summed): where the proxy spends time."""
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                text = f.read()
            name = text[text.index("(") + 1 : text.rindex(")")]
            fields = text.rsplit(")", 1)[1].split()
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / _CLK_TCK
        except (OSError, ValueError, IndexError):
            continue
    return out


def thread_cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    names = set(before) | set(after)
    delta = {n: after.get(n, 0.0) - before.get(n, 0.0) for n in names}
    return dict(sorted(((n, round(v, 3)) for n, v in delta.items() if v > 0.0), key=lambda kv: -kv[1]))


class RssSampler(threading.Thread):
    """Samples VmRSS/VmHWM of one process every `interval` seconds; peak since last reset."""

    def __init__(self, pid: int, interval: float = 0.05):
        super().__init__(name="rss-sampler", daemon=True)
        self.pid = pid
        self.interval = interval
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self.window_peak_kib = 0
        self.overall_peak_kib = 0
        self.peak_anon_kib = 0  # RssAnon: the process's own heap, without mapped libraries
        self.last_hwm_kib = 0
        self.samples = 0

    def run(self) -> None:
        while not self._stop_event.is_set():
            st = proc_status_kib(self.pid)
            if st:
                rss = st.get("VmRSS", 0)
                with self._lock:
                    self.samples += 1
                    self.window_peak_kib = max(self.window_peak_kib, rss)
                    self.overall_peak_kib = max(self.overall_peak_kib, rss)
                    self.peak_anon_kib = max(self.peak_anon_kib, st.get("RssAnon", 0))
                    self.last_hwm_kib = st.get("VmHWM", self.last_hwm_kib)
            self._stop_event.wait(self.interval)

    def reset_window(self) -> None:
        with self._lock:
            self.window_peak_kib = proc_status_kib(self.pid).get("VmRSS", 0)

    def window_peak(self) -> int:
        st = proc_status_kib(self.pid)  # one last reading, so a short window is not missed
        with self._lock:
            self.window_peak_kib = max(self.window_peak_kib, st.get("VmRSS", 0))
            return self.window_peak_kib

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=2)


# -- the processes under test -------------------------------------------------------------------


def health_serving(target: str, timeout: float = 1.0) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


@dataclass
class ProxyProcess:
    port: int
    upstream: str
    data_dir: Path
    extra_args: list[str]
    log_path: Path
    proc: subprocess.Popen | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "rowgate.cli", "serve",
            "--listen", self.target,
            "--upstream", self.upstream,
            "--data-dir", str(self.data_dir),
            "--shutdown-grace-seconds", "2",
            *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout: float = 60.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            # Its own session: a Ctrl-C in the terminal reaches only the benchmark, which
            # then stops the proxy itself (and its output never reaches the terminal).
            self.proc = subprocess.Popen(
                self.command(),
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rowgate exited with code {self.proc.returncode}; log:\n{self.log_tail()}")
            if health_serving(self.target):
                return
            time.sleep(0.1)
        raise RuntimeError(f"rowgate did not become SERVING within {timeout:.0f}s; log:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def new_session(url: str):
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).create()


def stop_session(session, timeout: float = 10.0) -> None:
    """Best effort and bounded: a session whose server is gone must not hang the cleanup."""
    if session is None:
        return
    t = threading.Thread(target=lambda: _quiet(session.stop), daemon=True)
    t.start()
    t.join(timeout)


def _quiet(fn) -> None:
    try:
        fn()
    except Exception:
        pass


# -- the measurements ---------------------------------------------------------------------------------


def drain_releases(timeout: float = 120.0) -> float:
    """Waits until pyspark's background ReleaseExecute calls have all been sent; seconds waited.

    pyspark acknowledges every response of a result with an asynchronous ReleaseExecute RPC
    (a thread pool shared by all sessions of the process), so a result of 2,000 Arrow
    batches leaves up to 2,000 RPCs queued when toArrow() returns. Draining them (untimed)
    after every measured call keeps one side's backlog from landing in the other side's round.
    """
    from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator as It

    pool = It._release_thread_pool_instance
    if pool is None:
        return 0.0
    t0 = time.perf_counter()
    workers = max(1, getattr(pool, "_max_workers", 1))
    # One barrier task per worker: none of them can finish before every worker has picked
    # one up, i.e. before every task queued earlier has finished.
    barrier = threading.Barrier(workers)
    try:
        futures = [pool.submit(barrier.wait, timeout) for _ in range(workers)]
    except RuntimeError:  # the pool was shut down
        return 0.0
    for f in futures:
        try:
            f.result(timeout=timeout + 5)
        except Exception:
            break
    return time.perf_counter() - t0


def interleaved(rounds: int, run_direct, run_proxied) -> None:
    """Direct and proxied alternate, and which of the two goes first alternates as well."""
    for i in range(rounds):
        if i % 2 == 0:
            run_direct(i)
            run_proxied(i)
        else:
            run_proxied(i)
            run_direct(i)


def bench_latency(direct, proxied, proxy: ProxyProcess, iterations: int, warmup: int) -> dict:
    def one(session) -> float:
        t0 = time.perf_counter()
        rows = session.sql("SELECT 1").collect()
        elapsed = time.perf_counter() - t0
        drain_releases()
        assert rows[0][0] == 1, rows
        return elapsed * 1000.0

    log(f"(a) latency: {warmup} warm-up rounds, then {iterations} interleaved rounds of SELECT 1")
    interleaved(warmup, lambda i: one(direct), lambda i: one(proxied))
    d: list[float] = []
    p: list[float] = []
    cpu0 = proc_cpu_seconds(proxy.proc.pid)
    interleaved(iterations, lambda i: d.append(one(direct)), lambda i: p.append(one(proxied)))
    cpu1 = proc_cpu_seconds(proxy.proc.pid)

    def summary(xs: list[float]) -> dict:
        return {
            "p50_ms": percentile(xs, 50),
            "p95_ms": percentile(xs, 95),
            "p99_ms": percentile(xs, 99),
            "mean_ms": statistics.fmean(xs),
            "min_ms": min(xs),
        }

    ds, ps = summary(d), summary(p)
    paired = [b - a for a, b in zip(d, p)]

    # One bare unary RPC (Config get): the proxy's fixed cost per call, without Spark's
    # query planning around it. A SELECT 1 collect() makes several RPCs.
    def rpc(session) -> float:
        t0 = time.perf_counter()
        session.conf.get("spark.sql.session.timeZone")
        return (time.perf_counter() - t0) * 1000.0

    rd: list[float] = []
    rp: list[float] = []
    interleaved(warmup, lambda i: rpc(direct), lambda i: rpc(proxied))
    interleaved(iterations, lambda i: rd.append(rpc(direct)), lambda i: rp.append(rpc(proxied)))
    return {
        "unary_rpc": {
            "p50_direct_ms": percentile(rd, 50),
            "p50_proxied_ms": percentile(rp, 50),
            "p95_direct_ms": percentile(rd, 95),
            "p95_proxied_ms": percentile(rp, 95),
            "added_p50_ms": percentile(rp, 50) - percentile(rd, 50),
        },
        "iterations": iterations,
        "warmup": warmup,
        "direct": ds,
        "proxied": ps,
        "added_p50_ms": ps["p50_ms"] - ds["p50_ms"],
        "added_p95_ms": ps["p95_ms"] - ds["p95_ms"],
        "median_paired_added_ms": percentile(paired, 50),
        "ratio_p50": ps["p50_ms"] / ds["p50_ms"],
        "proxy_cpu_ms_per_query": (cpu1 - cpu0) * 1000.0 / iterations,
    }


def bench_throughput(direct, proxied, proxy: ProxyProcess, rows: int, reps: int, min_mb: float) -> dict:
    def query(session):
        return session.range(rows).selectExpr("id", "id * 2 AS b")

    drains: dict[str, list[float]] = {"direct": [], "proxied": []}
    batches: list[int] = []

    def one(session, side: str = "") -> tuple[float, int, int]:
        gc.collect()
        t0 = time.perf_counter()
        table = query(session).toArrow()
        elapsed = time.perf_counter() - t0
        nbytes, nrows = table.nbytes, table.num_rows
        batches.append(table.column(0).num_chunks)
        del table
        drained = drain_releases()
        if side:
            drains[side].append(drained)
        return elapsed, nbytes, nrows

    # Size check first (direct): at least min_mb of Arrow, or raise the row count.
    while True:
        log(f"(b) throughput: warm-up with {rows:,} rows")
        _, nbytes, nrows = one(direct)
        if nrows != rows:
            raise RuntimeError(f"direct result has {nrows} rows, expected {rows}")
        if nbytes >= min_mb * MB:
            break
        new_rows = int(math.ceil(rows * (min_mb * MB) / nbytes * 1.02))
        log(f"(b) {nbytes / MB:.0f} MB < {min_mb:.0f} MB of Arrow: raising rows {rows:,} -> {new_rows:,}")
        rows = new_rows

    sampler = RssSampler(proxy.proc.pid, interval=0.05)
    sampler.start()
    try:
        st = proc_status_kib(proxy.proc.pid)
        rss_before_kib, rss_before_anon_kib = st.get("VmRSS", 0), st.get("RssAnon", 0)
        _, pbytes, prows = one(proxied)  # proxied warm-up (also checks the same result)
        if prows != rows or pbytes != nbytes:
            raise RuntimeError(f"proxied result differs: {prows} rows / {pbytes} B vs {rows} / {nbytes}")
        log(f"(b) {nbytes / MB:.0f} MB of Arrow per run; {reps} interleaved rounds")
        d_mbps: list[float] = []
        p_mbps: list[float] = []
        d_secs: list[float] = []
        p_secs: list[float] = []
        peaks_kib: list[int] = []
        proxy_cpu: list[float] = []
        threads_before = proc_thread_cpu(proxy.proc.pid)

        def run_direct(i: int) -> None:
            secs, nb, _ = one(direct, "direct")
            d_secs.append(secs)
            d_mbps.append(nb / MB / secs)

        def run_proxied(i: int) -> None:
            sampler.reset_window()
            c0 = proc_cpu_seconds(proxy.proc.pid)
            secs, nb, nr = one(proxied, "proxied")  # CPU includes the drained ReleaseExecute backlog
            proxy_cpu.append(proc_cpu_seconds(proxy.proc.pid) - c0)
            peaks_kib.append(sampler.window_peak())
            if nr != rows:
                raise RuntimeError(f"proxied result has {nr} rows, expected {rows}")
            p_secs.append(secs)
            p_mbps.append(nb / MB / secs)
            log(f"(b)   round {i + 1}: proxied {p_mbps[-1]:.0f} MB/s, peak RSS {peaks_kib[-1] / 1024:.0f} MiB")

        interleaved(reps, run_direct, run_proxied)
        threads = thread_cpu_delta(threads_before, proc_thread_cpu(proxy.proc.pid))
        hwm_kib = proc_status_kib(proxy.proc.pid).get("VmHWM", sampler.last_hwm_kib)
    finally:
        sampler.stop()

    best_d, best_p = max(d_mbps), max(p_mbps)
    med_d, med_p = statistics.median(d_mbps), statistics.median(p_mbps)
    mean_cpu = statistics.fmean(proxy_cpu)
    return {
        "rows": rows,
        "arrow_bytes": nbytes,
        "arrow_mb": nbytes / MB,
        "reps": reps,
        "direct_mb_s": d_mbps,
        "proxied_mb_s": p_mbps,
        "direct_seconds": d_secs,
        "proxied_seconds": p_secs,
        "best_direct_mb_s": best_d,
        "best_proxied_mb_s": best_p,
        "median_direct_mb_s": med_d,
        "median_proxied_mb_s": med_p,
        "ratio_best": best_p / best_d,
        "ratio_median": med_p / med_d,
        "arrow_batches_per_result": max(batches) if batches else 0,
        "release_backlog_seconds": {k: v for k, v in drains.items()},
        "proxy_cpu_seconds_per_run": proxy_cpu,
        "proxy_mb_per_cpu_second": nbytes / MB / mean_cpu if mean_cpu > 0 else float("nan"),
        "proxy_cpu_share_of_wall": mean_cpu / statistics.fmean(p_secs),
        "proxy_thread_cpu_seconds": threads,
        "rss": {
            "before_mib": rss_before_kib / 1024,
            "peak_per_run_mib": [k / 1024 for k in peaks_kib],
            "peak_mib": max(peaks_kib) / 1024,
            "peak_overall_sampled_mib": sampler.overall_peak_kib / 1024,
            "peak_anon_mib": sampler.peak_anon_kib / 1024,
            "before_anon_mib": rss_before_anon_kib / 1024,
            "vmhwm_mib": hwm_kib / 1024,
            "samples": sampler.samples,
            "interval_ms": 50,
        },
    }


# -- TPC-H -------------------------------------------------------------------------------------------


def read_tpch_queries(path: Path) -> list[tuple[str, str]]:
    """(name, sql) pairs. The file is `-- TPC-H n` comment lines followed by one statement
    ended by ';'. Comments are stripped before splitting so a ';' in one cannot cut a query."""
    text = path.read_text()
    queries: list[tuple[str, str]] = []
    for chunk in text.split(";"):
        names = re.findall(r"--\s*TPC-H\s*(\d+)", chunk)
        sql = "\n".join(line for line in chunk.splitlines() if not line.strip().startswith("--")).strip()
        if not sql:
            continue
        queries.append((f"Q{names[-1]}" if names else f"Q{len(queries) + 1}", sql))
    return queries


def existing_tables(session) -> set[str]:
    rows = session.sql(f"SHOW TABLES IN {TPCH_DB}").collect()
    return {r["tableName"].lower() for r in rows if not r["isTemporary"]}


def load_tpch(direct, data_dir: Path, loader: str, reload: bool) -> dict:
    """Creates the tpch tables (parquet) through the DIRECT session; skips tables that exist."""
    t0 = time.perf_counter()
    direct.sql(f"CREATE DATABASE IF NOT EXISTS {TPCH_DB}")
    have = existing_tables(direct)
    loaded, skipped = [], []
    for name in TPCH_TABLES:
        full = f"{TPCH_DB}.{name}"
        if name in have and not reload:
            skipped.append(name)
            continue
        path = data_dir / f"{name}.csv.gz"
        if loader == "spark":
            # The server reads the file itself: the path must be visible to it (embedded server).
            df = direct.read.csv(str(path), sep="|", header=True, inferSchema=True)
        else:
            import pandas as pd

            df = direct.createDataFrame(pd.read_csv(path, sep="|", compression="gzip"))
        log(f"(d) loading {full} from {path.name} ({loader})")
        df.write.format("parquet").mode("overwrite").saveAsTable(full)
        loaded.append(name)
    counts = {n: direct.table(f"{TPCH_DB}.{n}").count() for n in TPCH_TABLES}
    return {"loaded": loaded, "skipped": skipped, "row_counts": counts, "seconds": time.perf_counter() - t0}


def tpch_queries_in(direct, proxied, data_dir: Path, only: str | None) -> list[tuple[str, str]]:
    """The queries to run (all, or `--tpch-queries`), both sessions placed in the TPC-H database."""
    for session in (direct, proxied):
        session.catalog.setCurrentDatabase(TPCH_DB)
    queries = read_tpch_queries(data_dir / "queries.sql")
    if only:
        wanted = {f"Q{int(x)}" for x in only.replace(" ", "").split(",") if x}
        queries = [q for q in queries if q[0] in wanted]
    return queries


def timed_arrow(session, sql: str):
    """(milliseconds, Arrow table) of one query; pyspark's releases drained afterwards, untimed."""
    t0 = time.perf_counter()
    table = session.sql(sql).toArrow()
    elapsed = (time.perf_counter() - t0) * 1000.0
    drain_releases()
    return elapsed, table


def bench_tpch(direct, proxied, data_dir: Path, loader: str, reps: int, reload: bool, only: str | None) -> dict:
    load = load_tpch(direct, data_dir, loader, reload)
    if load["loaded"]:
        log(f"(d) loaded {', '.join(load['loaded'])} in {load['seconds']:.1f}s")
    else:
        log("(d) TPC-H tables already present; not reloading")
    queries = tpch_queries_in(direct, proxied, data_dir, only)
    log(f"(d) {len(queries)} queries, 1 warm-up + {reps} interleaved rounds each")

    one = timed_arrow
    per_query = []
    for name, sql in queries:
        _, td = one(direct, sql)
        _, tp = one(proxied, sql)
        same = td.num_rows == tp.num_rows and td.schema.names == tp.schema.names
        if same:
            try:
                same = td.equals(tp)
            except Exception:
                pass
        d: list[float] = []
        p: list[float] = []
        interleaved(reps, lambda i: d.append(one(direct, sql)[0]), lambda i: p.append(one(proxied, sql)[0]))
        entry = {
            "query": name,
            "rows": td.num_rows,
            "same_result": bool(same),
            "direct_ms": d,
            "proxied_ms": p,
            "p50_direct_ms": statistics.median(d),
            "p50_proxied_ms": statistics.median(p),
        }
        entry["ratio_p50"] = entry["p50_proxied_ms"] / entry["p50_direct_ms"]
        per_query.append(entry)
        log(
            f"(d)   {name:>4}: direct {entry['p50_direct_ms']:7.1f} ms  proxied {entry['p50_proxied_ms']:7.1f} ms"
            f"  x{entry['ratio_p50']:.3f}{'' if same else '  RESULT DIFFERS'}"
        )
    total_d = sum(q["p50_direct_ms"] for q in per_query)
    total_p = sum(q["p50_proxied_ms"] for q in per_query)
    return {
        "load": load,
        "reps": reps,
        "queries": per_query,
        "total_p50_direct_ms": total_d,
        "total_p50_proxied_ms": total_p,
        "ratio_total_p50": total_p / total_d,
        "ratio_geomean": geomean([q["ratio_p50"] for q in per_query]),
        "all_results_equal": all(q["same_result"] for q in per_query),
    }


def scrape_metrics(port: int) -> dict[str, float]:
    """The proxy's Prometheus text, as {sample with labels: value}."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def histogram_quantile(before: dict, after: dict, metric: str, labels: str, q: float) -> float:
    """Prometheus-style quantile (linear within a bucket) of the observations between two
    scrapes, in milliseconds."""
    prefix = f"{metric}_bucket{{"
    buckets = []
    for key, value in after.items():
        if key.startswith(prefix) and labels in key:
            le = key.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets.append((bound, value - before.get(key, 0.0)))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return float("nan")
    rank, lower, seen = q * total, 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower * 1000.0
            inside = count - seen
            return (lower + (bound - lower) * ((rank - seen) / inside if inside else 1.0)) * 1000.0
        lower, seen = bound, count
    return lower * 1000.0


def bench_tpch_policies(direct, proxied_url: str, admin_url: str, data_dir: Path, reps: int, only: str | None, metrics_port: int) -> dict:
    """(e) The 22 queries with row access policies on four tables, through the proxy.

    The bench caller holds a FILTER USING (TRUE) grant next to policies for other callers,
    so every read of those tables is rewritten (parsing, name resolution, derived tables,
    policy lookup) while Spark computes the same answers as directly: what is measured is
    what enforcement costs, not a smaller result. The proxy's own histogram gives the
    rewrite time per ExecutePlan and its catalog counter the upstream round trips it added.
    """
    admin = new_session(admin_url)
    proxied = new_session(proxied_url)
    try:
        for table in PROTECTED_TPCH:
            name = f"{TPCH_DB}.{table}"
            admin.sql(f"DROP ALL ROW ACCESS POLICIES ON {name}").collect()
            admin.sql(f"CREATE ROW ACCESS POLICY bench_all ON {name} GRANT TO ('{BENCH_USER}') FILTER USING (TRUE)").collect()
            admin.sql(
                f"CREATE ROW ACCESS POLICY others ON {name} GRANT TO ('group:others@example.com', 'domain:partner.org') "
                "FILTER USING (FALSE)"
            ).collect()
        queries = tpch_queries_in(direct, proxied, data_dir, only)

        one = timed_arrow
        warm: dict[str, bool] = {}
        for name, sql in queries:  # warm-up: fills the proxy's catalog cache, checks the answers
            _, td = one(direct, sql)
            _, tp = one(proxied, sql)
            warm[name] = td.num_rows == tp.num_rows and td.schema.names == tp.schema.names and _equal(td, tp)
        # First sight of a text with the catalog cache warm: a comment makes every text new to
        # the proxy's rewrite memo, so this pass times the rewrite itself (the target's measure).
        before_fresh = scrape_metrics(metrics_port)
        for name, sql in queries:
            one(proxied, f"/* rowgate bench: first sight of {name} */ {sql}")
        before = scrape_metrics(metrics_port)
        per_query = []
        for name, sql in queries:
            d: list[float] = []
            p: list[float] = []
            interleaved(reps, lambda i: d.append(one(direct, sql)[0]), lambda i: p.append(one(proxied, sql)[0]))
            entry = {"query": name, "same_result": warm[name], "p50_direct_ms": statistics.median(d),
                     "p50_proxied_ms": statistics.median(p), "direct_ms": d, "proxied_ms": p}  # fmt: skip
            entry["ratio_p50"] = entry["p50_proxied_ms"] / entry["p50_direct_ms"]
            per_query.append(entry)
            log(f"(e)   {name:>4}: direct {entry['p50_direct_ms']:7.1f} ms  proxied {entry['p50_proxied_ms']:7.1f} ms  x{entry['ratio_p50']:.3f}")
        after = scrape_metrics(metrics_port)
    finally:
        for table in PROTECTED_TPCH:
            _quiet(lambda: admin.sql(f"DROP ALL ROW ACCESS POLICIES ON {TPCH_DB}.{table}").collect())
        stop_session(proxied)
        stop_session(admin)
    labels = 'rpc="ExecutePlan"'
    count = _delta(before, after, f"rowgate_rewrite_seconds_count{{{labels}}}")
    total = _delta(before, after, f"rowgate_rewrite_seconds_sum{{{labels}}}")
    ratios = [q["ratio_p50"] for q in per_query]
    return {
        "reps": reps,
        "queries": per_query,
        "rewrite_requests": count,
        "rewrite_mean_ms": total / count * 1000.0 if count else float("nan"),
        "rewrite_p50_ms": histogram_quantile(before_fresh, before, "rowgate_sql_rewrite_seconds", "", 0.5),
        "rewrite_p99_ms": histogram_quantile(before_fresh, before, "rowgate_sql_rewrite_seconds", "", 0.99),
        "rewrites_first_sight": _delta(before_fresh, before, 'rowgate_rewrite_memo_total{outcome="miss"}'),
        "inspect_p50_ms": histogram_quantile(before, after, "rowgate_rewrite_seconds", labels, 0.5),
        "inspect_p99_ms": histogram_quantile(before, after, "rowgate_rewrite_seconds", labels, 0.99),
        "memo_hits_during_rounds": _delta(before, after, 'rowgate_rewrite_memo_total{outcome="hit"}'),
        "memo_misses_during_rounds": _delta(before, after, 'rowgate_rewrite_memo_total{outcome="miss"}'),
        "catalog_queries_during_rounds": _delta(before, after, "rowgate_catalog_queries_total"),
        "catalog_waits_during_rounds": _delta(before, after, "rowgate_catalog_waits_total"),
        "median_ratio_p50": statistics.median(ratios),
        "ratio_total_p50": sum(q["p50_proxied_ms"] for q in per_query) / sum(q["p50_direct_ms"] for q in per_query),
        "all_results_equal": all(q["same_result"] for q in per_query),
    }


def _delta(before: dict, after: dict, metric: str) -> float:
    return after.get(metric, 0) - before.get(metric, 0)


def _equal(a, b) -> bool:
    try:
        return bool(a.equals(b))
    except Exception:
        return False


# -- report ----------------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def print_report(results: dict) -> None:
    rows: list[tuple[str, str, str, str, str, str]] = []
    lat = results.get("latency")
    if lat:
        for q in ("p50", "p95", "p99"):
            rows.append(
                (f"(a) SELECT 1 {q}", f"{lat['direct'][q + '_ms']:.2f} ms", f"{lat['proxied'][q + '_ms']:.2f} ms",
                 f"{lat['proxied'][q + '_ms'] / lat['direct'][q + '_ms']:.3f}", "", "")
            )  # fmt: skip
        rows.append(
            ("(a) added latency p50", "", f"{lat['added_p50_ms']:+.2f} ms", f"{lat['ratio_p50']:.3f}",
             f"<= {TARGET_ADDED_P50_MS:g} ms", verdict(lat["added_p50_ms"] <= TARGET_ADDED_P50_MS))
        )  # fmt: skip
        u = lat["unary_rpc"]
        rows.append(
            ("(a) one unary RPC (Config) p50", f"{u['p50_direct_ms']:.2f} ms", f"{u['p50_proxied_ms']:.2f} ms",
             f"{u['p50_proxied_ms'] / u['p50_direct_ms']:.3f}", "info", "")
        )  # fmt: skip
    thr = results.get("throughput")
    if thr:
        rows.append(
            (f"(b) {thr['arrow_mb']:.0f} MB Arrow, best", f"{thr['best_direct_mb_s']:.0f} MB/s",
             f"{thr['best_proxied_mb_s']:.0f} MB/s", f"{thr['ratio_best']:.3f}",
             f">= {TARGET_THROUGHPUT_RATIO:g}", verdict(thr["ratio_best"] >= TARGET_THROUGHPUT_RATIO))
        )  # fmt: skip
        rows.append(
            ("(b) median", f"{thr['median_direct_mb_s']:.0f} MB/s", f"{thr['median_proxied_mb_s']:.0f} MB/s",
             f"{thr['ratio_median']:.3f}", f">= {TARGET_THROUGHPUT_RATIO:g}",
             verdict(thr["ratio_median"] >= TARGET_THROUGHPUT_RATIO))
        )  # fmt: skip
        rss = thr["rss"]
        rows.append(
            ("(c) proxy peak RSS (streaming)", "", f"{rss['peak_mib']:.0f} MiB", "", f"< {TARGET_PEAK_RSS_MIB:g} MiB",
             verdict(rss["peak_mib"] < TARGET_PEAK_RSS_MIB))
        )  # fmt: skip
        rows.append(
            ("(c) RSS at start / before (b) / VmHWM", "",
             f"{results['proxy']['rss_at_start_mib']:.0f} / {rss['before_mib']:.0f} / {rss['vmhwm_mib']:.0f} MiB", "", "", "")
        )  # fmt: skip
        rows.append(
            ("(c) RssAnon before (b) / peak", "", f"{rss['before_anon_mib']:.0f} / {rss['peak_anon_mib']:.0f} MiB", "", "", "")
        )  # fmt: skip
    tpch = results.get("tpch")
    if tpch:
        rows.append(
            (f"(d) TPC-H {len(tpch['queries'])}q, sum of p50", f"{tpch['total_p50_direct_ms']:.0f} ms",
             f"{tpch['total_p50_proxied_ms']:.0f} ms", f"{tpch['ratio_total_p50']:.3f}", "info", "")
        )  # fmt: skip
        rows.append(("(d) TPC-H geomean of p50 ratios", "", "", f"{tpch['ratio_geomean']:.3f}", "info", ""))
        if not tpch["all_results_equal"]:
            rows.append(("(d) results direct == proxied", "", "", "", "equal", "MISS"))
    pol = results.get("tpch_policies")
    if pol:
        rows.append(
            ("(e) rewrite time p50 (text first seen)", "", f"{pol['rewrite_p50_ms']:.2f} ms", "",
             f"<= {TARGET_REWRITE_P50_MS:g} ms", verdict(pol["rewrite_p50_ms"] <= TARGET_REWRITE_P50_MS))
        )  # fmt: skip
        rows.append(
            ("(e) rewrite time p99 (text first seen)", "", f"{pol['rewrite_p99_ms']:.2f} ms", "",
             f"<= {TARGET_REWRITE_P99_MS:g} ms", verdict(pol["rewrite_p99_ms"] <= TARGET_REWRITE_P99_MS))
        )  # fmt: skip
        rows.append(
            ("(e) inspection p50/p99 in rounds (memo)", "", f"{pol['inspect_p50_ms']:.2f} / {pol['inspect_p99_ms']:.2f} ms", "",
             "info", "")
        )  # fmt: skip
        rows.append(
            ("(e) memo hits / misses in rounds", "", f"{pol['memo_hits_during_rounds']:.0f} / {pol['memo_misses_during_rounds']:.0f}",
             "", "info", "")
        )  # fmt: skip
        rows.append(
            ("(e) catalog round trips waited for, warm", "", f"{pol['catalog_waits_during_rounds']:.0f}", "", "0",
             verdict(pol["catalog_waits_during_rounds"] == 0))
        )  # fmt: skip
        rows.append(
            ("(e) catalog statements incl. background", "", f"{pol['catalog_queries_during_rounds']:.0f}", "", "info", "")
        )  # fmt: skip
        overhead = pol["median_ratio_p50"] - 1.0
        rows.append(
            (f"(e) TPC-H p50 overhead (median of {len(pol['queries'])})", "", f"{overhead * 100:+.1f}%", f"{pol['median_ratio_p50']:.3f}",
             f"<= {TARGET_TPCH_OVERHEAD * 100:g}%", verdict(overhead <= TARGET_TPCH_OVERHEAD))
        )  # fmt: skip
        rows.append(("(e) sum of p50, proxied/direct", "", "", f"{pol['ratio_total_p50']:.3f}", "info", ""))
        if not pol["all_results_equal"]:
            rows.append(("(e) results direct == proxied", "", "", "", "equal", "MISS"))

    header = ("metric", "direct", "proxied", "ratio", "target", "")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    print()
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print(line)
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    print(line)

    if lat:
        print(
            f"(a) {lat['iterations']} rounds; median of paired differences {lat['median_paired_added_ms']:+.2f} ms;"
            f" proxy CPU {lat['proxy_cpu_ms_per_query']:.2f} ms per query"
        )
    if thr:
        top = ", ".join(f"{k} {v:.2f}s" for k, v in list(thr["proxy_thread_cpu_seconds"].items())[:4])
        print(
            f"(b) {thr['rows']:,} rows x {thr['reps']} rounds; proxy CPU {statistics.fmean(thr['proxy_cpu_seconds_per_run']):.2f} s"
            f" per run ({thr['proxy_cpu_share_of_wall'] * 100:.0f}% of a core, {thr['proxy_mb_per_cpu_second']:.0f} MB per"
            f" CPU-second); by thread: {top}"
        )
        print(
            f"    {thr['arrow_batches_per_result']} Arrow batches per result (one ReleaseExecute each);"
            f" ReleaseExecute backlog after toArrow: direct {statistics.fmean(thr['release_backlog_seconds']['direct']):.2f} s,"
            f" proxied {statistics.fmean(thr['release_backlog_seconds']['proxied']):.2f} s (untimed)"
        )
    if tpch:
        print("(d) per query p50 (ms):")
        for q in tpch["queries"]:
            flag = "" if q["same_result"] else "  RESULT DIFFERS"
            print(
                f"      {q['query']:>4}  direct {q['p50_direct_ms']:8.1f}  proxied {q['p50_proxied_ms']:8.1f}"
                f"  ratio {q['ratio_p50']:.3f}  rows {q['rows']}{flag}"
            )
    if pol:
        print(
            f"(e) policies on {', '.join(PROTECTED_TPCH)} (the bench caller's grant is TRUE, others' FALSE);"
            f" {pol['rewrite_requests']:.0f} ExecutePlans measured, inspection mean {pol['rewrite_mean_ms']:.2f} ms;"
            f" rewrite time from {pol['rewrites_first_sight']:.0f} SQL texts seen for the first time (a comment added,"
            " catalog cache warm); p50/p99 interpolated from the proxy's histogram buckets"
        )
        for q in pol["queries"]:
            flag = "" if q["same_result"] else "  RESULT DIFFERS"
            print(f"      {q['query']:>4}  direct {q['p50_direct_ms']:8.1f}  proxied {q['p50_proxied_ms']:8.1f}  ratio {q['ratio_p50']:.3f}{flag}")
    if results["settings"].get("quick"):
        print("--quick: small sizes, a smoke test; the verdicts are only indicative")
    env = results["environment"]
    print(
        f"load average {env['load_before'][0]:.2f} before, {env.get('load_after', [float('nan')])[0]:.2f} after;"
        f" {env['cpus']} CPUs" + (f"; wall {results['wall_seconds']:.0f}s" if "wall_seconds" in results else "")
    )
    if results.get("errors"):
        print("errors: " + "; ".join(results["errors"]))


# -- main ----------------------------------------------------------------------------------------------


@dataclass
class Resources:
    spark: object | None = None
    proxy: ProxyProcess | None = None
    sessions: list = field(default_factory=list)
    workdir: Path | None = None
    remove_workdir: bool = False
    results: dict | None = None  # filled section by section, so an interrupted run still reports

    def cleanup(self) -> None:
        for s in self.sessions:
            stop_session(s)
        self.sessions.clear()
        if self.proxy is not None:
            log("stopping the proxy")
            _quiet(self.proxy.stop)
        if self.spark is not None:
            log("stopping Spark Connect")
            _quiet(self.spark.stop)
            self.spark = None
        if self.remove_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="rowgate: direct vs proxied Spark Connect benchmark")
    p.add_argument("--quick", action="store_true", help="small sizes, finishes in under 2 minutes (smoke test)")
    p.add_argument("--rows", type=int, help="rows of the throughput query (default 20M; quick 2M)")
    p.add_argument("--iterations", type=int, help="SELECT 1 rounds per side (default 500; quick 60)")
    p.add_argument("--reps", type=int, help="throughput rounds per side (default 5; quick 2)")
    p.add_argument("--min-mb", type=float, help="least Arrow MB for (b); rows are raised to reach it (default 300; quick 0)")
    p.add_argument("--json", metavar="PATH", help="also write all results as JSON")
    p.add_argument("--upstream", metavar="URL", help="use a running Spark Connect server (sc://host:port) instead of starting one")
    p.add_argument("--driver-memory", default="2g", help="driver memory of the embedded Spark server (default 2g)")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="extra conf for the embedded server")
    p.add_argument("--identity", default="header", help="the proxy's --identity (default header)")
    p.add_argument("--proxy-arg", action="append", default=[], metavar="ARG", help="extra argument for `rowgate serve` (repeatable; --proxy-arg=--log-level=debug)")
    p.add_argument("--work-dir", type=Path, help="keep Spark data, proxy data and logs here (default: a temp dir, removed)")
    p.add_argument("--arrow-batch-rows", type=int, metavar="N",
                   help="set spark.sql.execution.arrow.maxRecordsPerBatch on both sessions (Spark's default: 10000)")  # fmt: skip
    p.add_argument("--skip", action="append", default=[], choices=["latency", "throughput"], help="skip a section")
    p.add_argument("--tpch", action="store_true", help="run the TPC-H section (needs --tpch-dir)")
    p.add_argument("--tpch-dir", type=Path, default=DEFAULT_TPCH_DIR, help=f"TPC-H data and queries.sql (default {DEFAULT_TPCH_DIR})")
    p.add_argument("--tpch-reps", type=int, help="rounds per TPC-H query and side (default 5; quick 1)")
    p.add_argument("--tpch-loader", choices=["auto", "spark", "pandas"], default="auto",
                   help="spark.read.csv on the server (needs the files on its disk) or pandas on the client; "
                   "auto: spark for the embedded server, pandas for --upstream")  # fmt: skip
    p.add_argument("--tpch-reload", action="store_true", help="reload the TPC-H tables even when they exist")
    p.add_argument("--tpch-queries", metavar="LIST", help="only these queries, e.g. 1,6,14 (default: all 22)")
    args = p.parse_args(argv)
    q = args.quick
    args.rows = args.rows or (2_000_000 if q else 20_000_000)
    args.iterations = args.iterations or (60 if q else 500)
    args.reps = args.reps or (2 if q else 5)
    args.tpch_reps = args.tpch_reps or (1 if q else 5)
    if args.min_mb is None:
        args.min_mb = 0.0 if q else 300.0
    return args


def environment() -> dict:
    import grpc
    import pyarrow
    import pyspark

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except Exception:
        commit = ""
    return {
        "cpus": os.cpu_count(),
        "load_before": list(os.getloadavg()),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "grpcio": grpc.__version__,
        "pyarrow": pyarrow.__version__,
        "commit": commit,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def run(args: argparse.Namespace, res: Resources) -> dict:
    from rowgate.embedded.spark import EmbeddedSparkConnect, free_port

    started = time.perf_counter()
    results: dict = {"environment": environment(), "errors": []}
    res.results = results
    results["settings"] = {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("json",)
    }
    load1 = results["environment"]["load_before"][0]
    if load1 > 1.5:
        log(f"warning: load average is {load1:.2f} on {os.cpu_count()} CPUs; results will be noisy")

    if args.work_dir:
        res.workdir = args.work_dir.resolve()
        res.workdir.mkdir(parents=True, exist_ok=True)
    else:
        res.workdir = Path(tempfile.mkdtemp(prefix="rowgate-bench-"))
        res.remove_workdir = True

    if args.upstream:
        upstream = args.upstream
        log(f"using the running Spark Connect server {upstream}")
    else:
        conf = {}
        for item in args.spark_conf:
            key, _, value = item.partition("=")
            conf[key.strip()] = value.strip()
        log(f"starting embedded Spark Connect (driver memory {args.driver_memory}) under {res.workdir / 'spark'}")
        res.spark = EmbeddedSparkConnect(data_dir=res.workdir / "spark", driver_memory=args.driver_memory, conf=conf)
        res.spark.start()
        upstream = res.spark.url
        log(f"Spark Connect is up at {upstream}")

    metrics_port = free_port()
    res.proxy = ProxyProcess(
        port=free_port(),
        upstream=upstream,
        data_dir=res.workdir / "proxy",
        extra_args=["--identity", args.identity, "--admin", BENCH_ADMIN, "--metrics-listen", f"127.0.0.1:{metrics_port}", *args.proxy_arg],
        log_path=res.workdir / "rowgate.log",
    )
    res.proxy.start()
    log(f"rowgate is SERVING on {res.proxy.target} (pid {res.proxy.proc.pid}, log {res.proxy.log_path})")
    results["proxy"] = {
        "pid": res.proxy.proc.pid,
        "args": res.proxy.command()[2:],
        "log": str(res.proxy.log_path),
        "rss_at_start_mib": proc_status_kib(res.proxy.proc.pid).get("VmRSS", 0) / 1024,
    }

    # Both through 127.0.0.1, so name resolution treats them alike.
    direct_url = upstream
    proxied_url = f"sc://{res.proxy.target}/;x-rowgate-user={BENCH_USER}"
    direct = new_session(direct_url)
    res.sessions.append(direct)
    proxied = new_session(proxied_url)
    res.sessions.append(proxied)
    results["urls"] = {"direct": direct_url, "proxied": proxied_url}
    if args.arrow_batch_rows:
        for session in (direct, proxied):
            session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.arrow_batch_rows))

    def check_proxy() -> None:
        if not res.proxy.alive():
            raise RuntimeError(f"the proxy died; log:\n{res.proxy.log_tail()}")

    if "latency" not in args.skip:
        warmup = max(10, args.iterations // 10)
        results["latency"] = bench_latency(direct, proxied, res.proxy, args.iterations, warmup)
        check_proxy()
    if "throughput" not in args.skip:
        results["throughput"] = bench_throughput(direct, proxied, res.proxy, args.rows, args.reps, args.min_mb)
        check_proxy()
    if args.tpch:
        if not (args.tpch_dir / "queries.sql").exists():
            msg = f"--tpch: {args.tpch_dir} has no queries.sql; TPC-H section skipped"
            log(msg)
            results["errors"].append(msg)
        else:
            loader = args.tpch_loader
            if loader == "auto":
                loader = "pandas" if args.upstream else "spark"
            results["tpch"] = bench_tpch(direct, proxied, args.tpch_dir, loader, args.tpch_reps, args.tpch_reload, args.tpch_queries)
            check_proxy()
            admin_url = f"sc://{res.proxy.target}/;x-rowgate-user={BENCH_ADMIN}"
            log("(e) TPC-H with row access policies on lineitem, orders, customer, supplier")
            results["tpch_policies"] = bench_tpch_policies(
                direct, proxied_url, admin_url, args.tpch_dir, args.tpch_reps, args.tpch_queries, metrics_port
            )
            check_proxy()

    results["proxy"]["final_rss_mib"] = proc_status_kib(res.proxy.proc.pid).get("VmRSS", 0) / 1024
    results["proxy"]["cpu_seconds_total"] = proc_cpu_seconds(res.proxy.proc.pid)
    results["environment"]["load_after"] = list(os.getloadavg())
    results["wall_seconds"] = time.perf_counter() - started
    return results


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Explicitly, since a shell starting us in the background may have left SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)
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
        if res.proxy is not None and not res.remove_workdir:
            log(f"proxy log: {res.proxy.log_path}")
        elif res.proxy is not None:
            tail = res.proxy.log_tail(15)
            if tail:
                log("proxy log tail:\n" + tail)
        code = 1
        results = res.results
    finally:
        # A second Ctrl-C must not cut the cleanup short (every step in it is bounded).
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        res.cleanup()
    if results is not None and any(k in results for k in ("latency", "throughput", "tpch")):
        if code:
            print("(partial results: the run did not finish)")
            results["environment"].setdefault("load_after", list(os.getloadavg()))
        print_report(results)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
            log(f"wrote {args.json}")
    if code:
        # pyspark's ReleaseExecute pool may still retry calls to the stopped servers for
        # minutes at interpreter exit; everything we started is already stopped.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())

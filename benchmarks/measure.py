"""What every benchmark measures with: statistics, /proc readings of a process, the proxy
as the benchmarks run it, pyspark sessions, and the proxy's metrics.

Shared by bench.py, sidecar.py, load.py, run.py and the smaller benchmarks, so that none of
them imports another benchmark for its tools (the harness that runs `rowgate serve` itself
is tests/harness/processes.py, shared with the tests).
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.harness.processes import SERVING, RowgateProcess

MB = 1_000_000  # throughput and sizes are in decimal megabytes; RSS in MiB (as the kernel counts kB)


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


def proxy_process(port: int, upstream: str, data_dir: Path, extra_args: list[str], log_path: Path) -> RowgateProcess:
    """`rowgate serve` as the benchmarks run it: ready once SERVING, in its own session (a
    Ctrl-C reaches only the benchmark, which stops it), with a short shutdown grace."""
    data_dir.mkdir(parents=True, exist_ok=True)
    args = ["--upstream", upstream, "--data-dir", str(data_dir), "--shutdown-grace-seconds", "2", *extra_args]
    return RowgateProcess(port, args, log_path, ready=SERVING, own_session=True, stop_timeout=15)


def new_session(url: str):
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).create()


def stop_session(session, timeout: float = 10.0) -> None:
    """Best effort and bounded: a session whose server is gone must not hang the cleanup."""
    if session is None:
        return
    t = threading.Thread(target=lambda: quietly(session.stop), daemon=True)
    t.start()
    t.join(timeout)


def quietly(fn) -> None:
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


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


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

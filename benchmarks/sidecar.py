"""`bench.py --sidecar`: rowgate against the floor of its stack, with and without a core of its own.

A sidecar proxy gets its own CPU request; the fair question is then what rowgate costs on
that core compared with the least any Python gRPC relay costs there. So this section runs
three sides in one run, round-robin (the order rotating every round, so drift and
background load hit all three alike):

  direct   the client straight to Spark Connect
  rowgate  through `rowgate serve` (no policies: the pipeline runs, nothing is rewritten)
  bare     through `bare_relay.py`: raw bytes over grpc.aio, no pipeline (the floor)

twice: `pinned` (rowgate and the bare relay on the last core, Spark and the client on the
others: `sched_setaffinity` on every thread of each process, new threads inherit it) and
`shared` (every process allowed on every core, as bench.py's other sections run).

Per pyspark `SELECT 1` and per large Arrow result (>= `--min-mb`, 320 MB by default): p50 and
added p50 vs direct, the relay's CPU (utime + stime from /proc/<pid>/stat, read before and
after each side's rounds) per query and per relayed call (rowgate: the sum of
rowgate_requests_total; bare relay: its own counter, read with SIGUSR1), the throughput
ratio to direct and the relays' RSS. Ratios are printed against the issue's targets, never
asserted.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from measure import (
    MB,
    REPO,
    RssSampler,
    drain_releases,
    log,
    percentile,
    proc_cpu_seconds,
    proc_status_kib,
    scrape_metrics,
)

from tests.harness.processes import RowgateProcess

SIDES = ("direct", "rowgate", "bare")
TARGET_RATIO_TO_BARE = 1.3
TARGET_THROUGHPUT_RATIO = 0.95
TARGET_RSS_MIB = 200.0


# -- CPU placement -------------------------------------------------------------------------------


def pin_process(pid: int, cpus: set[int]) -> int:
    """Every current thread of `pid` onto `cpus`; threads started later inherit it. Returns
    how many threads were pinned (a thread that ended meanwhile is skipped)."""
    pinned = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), cpus)
            pinned += 1
        except OSError:
            continue
    return pinned


def descendants(pid: int) -> list[int]:
    """`pid`'s child processes, recursively (from /proc/<pid>/task/*/children)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


@dataclass
class Placement:
    """Which processes go where; `apply(pinned)` switches between the two layouts."""

    relay_pids: list[int]
    other_pids: list[int]  # Spark (with its whole process tree) and this client process
    relay_cpus: set[int]
    other_cpus: set[int]

    def apply(self, pinned: bool) -> None:
        every = self.relay_cpus | self.other_cpus
        for pid in self.relay_pids:
            pin_process(pid, self.relay_cpus if pinned else every)
        for pid in self.other_pids:
            pin_process(pid, self.other_cpus if pinned else every)


def placement(relay_pids: list[int], spark_pid: int | None) -> Placement:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise RuntimeError("--sidecar needs at least 2 CPUs (one for the relay, one for Spark and the client)")
    others = [os.getpid()]
    if spark_pid is not None:
        others += [spark_pid, *descendants(spark_pid)]
    return Placement(relay_pids, others, {cpus[-1]}, set(cpus[:-1]))


# -- the bare relay -------------------------------------------------------------------------------


@dataclass
class BareRelay:
    port: int
    upstream: str  # host:port
    work: Path
    proc: subprocess.Popen | None = None
    _seq: int = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def stats_file(self) -> Path:
        return self.work / "bare-relay.stats"

    def start(self, timeout: float = 60.0) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        log_path = self.work / "bare-relay.log"
        cmd = [sys.executable, str(REPO / "benchmarks" / "bare_relay.py"), "--listen", self.target,
               "--upstream", self.upstream, "--stats-file", str(self.stats_file)]  # fmt: skip
        with open(log_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bare_relay.py exited with {self.proc.returncode}; see {log_path}")
            if "listening" in log_path.read_text(errors="replace"):
                return
            time.sleep(0.1)
        raise RuntimeError(f"bare_relay.py did not listen within {timeout:.0f}s; see {log_path}")

    def calls(self, timeout: float = 10.0) -> int:
        """The relay's call counter, asked with SIGUSR1 (waits for the answer to this signal)."""
        assert self.proc is not None
        self._seq += 1
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                seq, calls = self.stats_file.read_text().split()
                if int(seq) >= self._seq:
                    return int(calls)
            except (OSError, ValueError):
                pass
            time.sleep(0.01)
        raise RuntimeError("bare_relay.py did not report its call count")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# -- measurement ------------------------------------------------------------------------------------


@dataclass
class Relays:
    proxy: RowgateProcess
    bare: BareRelay
    metrics_port: int

    def pid(self, side: str) -> int:
        proc = self.proxy.proc if side == "rowgate" else self.bare.proc
        assert proc is not None
        return proc.pid

    def calls(self, side: str) -> int:
        if side == "bare":
            return self.bare.calls()
        samples = scrape_metrics(self.metrics_port)
        return int(sum(v for k, v in samples.items() if k.startswith("rowgate_requests_total{")))


def _rounds(sessions: dict, relays: Relays, rounds: int, one) -> dict[str, dict]:
    """`one(session)` -> (ms, Arrow bytes) `rounds` times per side, the order rotating; each
    relay's CPU and calls are summed over its own rounds only."""
    out = {side: {"ms": [], "bytes": 0, "cpu_s": 0.0, "calls": 0} for side in SIDES}
    for i in range(rounds):
        order = SIDES[i % 3 :] + SIDES[: i % 3]
        for side in order:
            acc = out[side]
            if side != "direct":
                pid = relays.pid(side)
                calls0 = relays.calls(side)  # asking costs the relay CPU: outside the window
                cpu0 = proc_cpu_seconds(pid)
            ms, nbytes = one(sessions[side])
            if side != "direct":
                acc["cpu_s"] += proc_cpu_seconds(pid) - cpu0
                acc["calls"] += relays.calls(side) - calls0
            acc["ms"].append(ms)
            acc["bytes"] = nbytes
    return out


def _select1(session) -> tuple[float, int]:
    t0 = time.perf_counter()
    rows = session.sql("SELECT 1").collect()
    ms = (time.perf_counter() - t0) * 1000.0
    drain_releases()  # the ReleaseExecute calls belong to this query (and its CPU window)
    assert rows[0][0] == 1, rows
    return ms, 0


def _large(rows: int):
    def one(session) -> tuple[float, int]:
        gc.collect()
        t0 = time.perf_counter()
        table = session.range(rows).selectExpr("id", "id * 2 AS b").toArrow()
        ms = (time.perf_counter() - t0) * 1000.0
        nbytes, n = table.nbytes, table.num_rows
        del table
        drain_releases()
        if n != rows:
            raise RuntimeError(f"{n} rows, expected {rows}")
        return ms, nbytes

    return one


def _summary(data: dict[str, dict], queries: int) -> dict:
    out: dict = {}
    direct_p50 = percentile(data["direct"]["ms"], 50)
    for side, acc in data.items():
        p50 = percentile(acc["ms"], 50)
        row = {"p50_ms": p50, "p95_ms": percentile(acc["ms"], 95), "median_mb_s": acc["bytes"] / MB / (p50 / 1000.0)}
        if side != "direct":
            row |= {
                "added_p50_ms": p50 - direct_p50,
                "cpu_ms_per_query": acc["cpu_s"] * 1000.0 / queries,
                "calls_per_query": acc["calls"] / queries,
                "cpu_ms_per_call": acc["cpu_s"] * 1000.0 / acc["calls"] if acc["calls"] else float("nan"),
                "throughput_ratio": direct_p50 / p50,
            }
        out[side] = row
    return out


def bench_sidecar(sessions: dict, relays: Relays, place: Placement, iterations: int, rows: int, reps: int) -> dict:
    """The three sides, pinned then shared; see the module docstring."""
    results: dict = {
        "relay_cpus": sorted(place.relay_cpus),
        "other_cpus": sorted(place.other_cpus),
        "iterations": iterations,
        "rows": rows,
        "reps": reps,
    }
    samplers = {side: RssSampler(relays.pid(side), interval=0.05) for side in ("rowgate", "bare")}
    for s in samplers.values():
        s.start()
    try:
        for layout in ("pinned", "shared"):
            place.apply(layout == "pinned")
            load0 = os.getloadavg()
            log(f"(s) {layout}: warm-up")
            _rounds(sessions, relays, max(10, iterations // 10), _select1)
            _rounds(sessions, relays, 1, _large(rows))
            log(f"(s) {layout}: {iterations} rounds of SELECT 1 per side, rotating")
            small = _summary(_rounds(sessions, relays, iterations, _select1), iterations)
            log(f"(s) {layout}: {reps} rounds of {rows:,} rows per side, rotating")
            large = _summary(_rounds(sessions, relays, reps, _large(rows)), reps)
            results[layout] = {"select1": small, "large": large, "load_before": load0, "load_after": os.getloadavg()}
    finally:
        for s in samplers.values():
            s.stop()
        place.apply(False)
    results["rss"] = {
        side: {
            "peak_sampled_mib": s.overall_peak_kib / 1024,
            "vmhwm_mib": proc_status_kib(relays.pid(side)).get("VmHWM", s.last_hwm_kib) / 1024,
        }
        for side, s in samplers.items()
    }
    return results


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def print_sidecar(res: dict) -> None:
    print(f"\nsidecar section: relays on CPU {res['relay_cpus']}, Spark and client on {res['other_cpus']} (pinned)")
    for layout in ("pinned", "shared"):
        part = res.get(layout)
        if not part:
            continue
        lb, la = part["load_before"], part["load_after"]
        print(f"\n[{layout}]  load average before {lb[0]:.2f} {lb[1]:.2f} {lb[2]:.2f}, after {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}")
        for name, title in (("select1", f"SELECT 1 x {res['iterations']}"), ("large", f"{res['rows']:,} rows x {res['reps']}")):
            s = part[name]
            print(f"  {title}")
            print(
                f"    {'side':8} {'p50 ms':>9} {'added':>8} {'CPU ms/q':>9} {'calls/q':>8} {'CPU ms/call':>11} {'MB/s':>7} {'thr/dir':>7}"
            )
            for side in SIDES:
                r = s[side]
                if side == "direct":
                    print(f"    {side:8} {r['p50_ms']:9.2f} {'':>8} {'':>9} {'':>8} {'':>11} {r['median_mb_s']:7.0f}")
                else:
                    print(f"    {side:8} {r['p50_ms']:9.2f} {r['added_p50_ms']:+8.2f} {r['cpu_ms_per_query']:9.2f} "
                          f"{r['calls_per_query']:8.1f} {r['cpu_ms_per_call']:11.3f} {r['median_mb_s']:7.0f} "
                          f"{r['throughput_ratio']:7.3f}")  # fmt: skip
            rg, bare = s["rowgate"], s["bare"]
            cpu_ratio = rg["cpu_ms_per_query"] / bare["cpu_ms_per_query"]
            # The floor's added p50 can be ~0 or negative under load (noise larger than the cost): n/a then.
            added_ratio = rg["added_p50_ms"] / bare["added_p50_ms"] if bare["added_p50_ms"] > 0 else float("nan")
            if added_ratio == added_ratio:
                added = f"{added_ratio:.2f}x [<= {TARGET_RATIO_TO_BARE}x {_verdict(added_ratio <= TARGET_RATIO_TO_BARE)}]"
            else:  # no floor to divide by: say so instead of a NaN verdict
                added = "n/a (the bare relay added nothing measurable over direct here)"
            print(f"    rowgate/bare: CPU per query {cpu_ratio:.2f}x [<= {TARGET_RATIO_TO_BARE}x {_verdict(cpu_ratio <= TARGET_RATIO_TO_BARE)}], "
                  f"added p50 {added}")  # fmt: skip
            if name == "large":
                ratio = rg["throughput_ratio"]
                print(
                    f"    rowgate throughput / direct {ratio:.3f} [>= {TARGET_THROUGHPUT_RATIO} {_verdict(ratio >= TARGET_THROUGHPUT_RATIO)}]"
                )
    for side, r in res.get("rss", {}).items():
        print(f"  {side} RSS: peak sampled {r['peak_sampled_mib']:.0f} MiB, VmHWM {r['vmhwm_mib']:.0f} MiB "
              f"[< {TARGET_RSS_MIB:g} {_verdict(r['vmhwm_mib'] < TARGET_RSS_MIB)}]")  # fmt: skip

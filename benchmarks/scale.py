"""Policies at scale: 10,000 policies over 1,000 tables, up to 100 grantees each.

Measures, for issue #16 item 2 (targets in brackets, printed as PASS/MISS, never asserted):
- filling the store (information) and loading a snapshot of every policy (information);
- the memory of a real `rowgate serve` process holding that snapshot [RSS <= 300 MB];
- per request, the decision (which filter applies to this caller on this table) and the
  whole SQL rewrite of a query joining two protected tables, with the real rewriter and the
  real snapshot, each text new to the rewriter [rewrite p50 <= 5 ms, p99 <= 40 ms];
- with PostgreSQL: the time for one policy change to reach three replica processes that
  share the store (each a `PolicyCache` as the proxy runs it) [<= 1 s].

    .venv/bin/python benchmarks/scale.py                      # SQLite, and PostgreSQL if it answers
    .venv/bin/python benchmarks/scale.py --policies 2000 --tables 200 --requests 500   # quicker

Grantees are a mix of users, groups and domains; every caller is a member of some grants, so
most decisions OR several filters. Nothing here needs Spark: the catalog answers come from a
table list kept in memory, as a warm catalog cache would give them.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "proxy"))

from rowgate.catalog.model import RelationInfo, RelationKind
from rowgate.identity.caller import Caller
from rowgate.policy.decision import row_filter
from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy.snapshot import PolicyCache, PolicySnapshot
from rowgate.policy.store import open_store
from rowgate.rewrite.sql import rewrite_sql

PG_DSN = os.environ.get("ROWGATE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
COLUMNS = ("id", "region", "owner", "amount", "day")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def tables(n: int) -> list[TableName]:
    return [TableName("spark_catalog", f"db{i % 50}", f"t{i}") for i in range(n)]


def make_policies(n: int, on: list[TableName], max_grantees: int, rng: random.Random) -> list[RowAccessPolicy]:
    now = datetime.now(UTC)
    policies = []
    for i in range(n):
        grantees = set()
        for _ in range(rng.randint(1, max_grantees)):
            kind = rng.random()
            if kind < 0.6:
                grantees.add(f"user:u{rng.randrange(5000)}@example.com")
            elif kind < 0.9:
                grantees.add(f"group:g{rng.randrange(300)}@example.com")
            else:
                grantees.add(f"domain:d{rng.randrange(20)}.example.com")
        filter_sql = rng.choice(
            [
                f"region = 'r{i % 17}'",
                "owner = SESSION_USER()",
                f"amount < {rng.randrange(1000)} AND day >= '2024-01-{1 + i % 28:02d}'",
                f"region IN ('r{i % 5}', 'r{i % 7}') OR owner = SESSION_USER()",
            ]
        )
        policies.append(RowAccessPolicy(on[i % len(on)], f"p{i}", tuple(sorted(grantees)), filter_sql, now, now))
    return policies


def callers(rng: random.Random, n: int = 200) -> list[Caller]:
    return [
        Caller(
            f"user:u{rng.randrange(5000)}@d{rng.randrange(20)}.example.com",
            frozenset(f"g{rng.randrange(300)}@example.com" for _ in range(rng.randint(0, 8))),
        )
        for _ in range(n)
    ]


class SnapshotContext:
    """The rewriter's view of one caller and session, backed by a real `PolicySnapshot`."""

    def __init__(self, caller: Caller, snapshot: PolicySnapshot, catalog: dict[TableName, RelationInfo]):
        self.caller = caller
        self.is_admin = False
        self.current_catalog, self.current_schema = "spark_catalog", "default"
        self._snapshot, self._catalog = snapshot, catalog

    def temp_view_exists(self, name: str) -> bool:
        return False

    def lookup(self, name: TableName) -> RelationInfo | None:
        return self._catalog.get(name)

    def policies_for(self, name: TableName):
        return self._snapshot.policies_for(name)

    def has_protected_tables(self) -> bool:
        return self._snapshot.has_any()


def fill(store, policies: list[RowAccessPolicy]) -> float:
    started = time.perf_counter()
    for policy in policies:
        store.create(policy)
    return time.perf_counter() - started


def bench_requests(snapshot: PolicySnapshot, on: list[TableName], requests: int, rng: random.Random) -> dict:
    catalog = {t: RelationInfo(t, RelationKind.TABLE, COLUMNS) for t in on}
    people = callers(rng)
    decide, rewrite = [], []
    for i in range(requests):
        caller = rng.choice(people)
        a, b = rng.sample(on, 2)
        started = time.perf_counter()
        row_filter(caller, snapshot.policies_for(a))
        decide.append((time.perf_counter() - started) * 1000)
        # A text the rewriter has not seen (the literal differs), so nothing is reused.
        sql = (
            f"SELECT x.region, count(*) AS n, sum(y.amount) FROM {a.schema}.{a.table} x "
            f"JOIN {b.schema}.{b.table} y ON x.id = y.id WHERE x.amount > {i} GROUP BY x.region"
        )
        started = time.perf_counter()
        result = rewrite_sql(sql, SnapshotContext(caller, snapshot, catalog))
        rewrite.append((time.perf_counter() - started) * 1000)
        assert result.filtered
    return {
        "decision_p50_ms": percentile(decide, 0.5),
        "decision_p99_ms": percentile(decide, 0.99),
        "rewrite_p50_ms": percentile(rewrite, 0.5),
        "rewrite_p99_ms": percentile(rewrite, 0.99),
    }


def proxy_rss_mib(store_url: str, data_dir: Path, timeout: float = 120.0) -> float:
    """VmRSS of a real `rowgate serve` once it loaded every policy and listens. Its upstream
    is a closed port: the proxy starts (readiness NOT_SERVING) without a Spark server."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "proxy"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rowgate.cli", "serve", "--listen", "127.0.0.1:0", "--upstream", "sc://127.0.0.1:9",
         "--policy-store", store_url, "--data-dir", str(data_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + timeout
        assert proc.stderr is not None
        for line in proc.stderr:
            if "rowgate is serving" in line:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("rowgate serve did not start")
        else:
            raise RuntimeError(f"rowgate serve exited with {proc.wait()}")
        status = Path(f"/proc/{proc.pid}/status").read_text()
        kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        return kib / 1024
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


REPLICA = r"""
import sys, time
sys.path.insert(0, sys.argv[3])
from rowgate.policy.snapshot import PolicyCache
from rowgate.policy.store.postgres import PostgresPolicyStore
cache = PolicyCache(PostgresPolicyStore(sys.argv[1], schema=sys.argv[2]))
print("ready", flush=True)
for line in sys.stdin:
    want = int(line)
    while cache.version < want:
        time.sleep(0.002)
    print(time.monotonic(), flush=True)
"""


def bench_propagation(schema: str, policies: list[RowAccessPolicy], replicas: int, changes: int) -> dict:
    """Time from the start of a write until every replica enforces the new version."""
    from rowgate.policy.store.postgres import PostgresPolicyStore

    writer = PostgresPolicyStore(PG_DSN, schema=schema)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", REPLICA, PG_DSN, schema, str(REPO / "proxy")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(replicas)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        delays = []
        now = datetime.now(UTC)
        for i in range(changes):
            template = policies[i % len(policies)]
            change = RowAccessPolicy(template.table, f"change{i}", ("allAuthenticatedUsers",), "TRUE", now, now)
            started = time.monotonic()
            writer.create(change)
            version = writer.version()
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write(f"{version}\n")
                proc.stdin.flush()
            seen = [float(proc.stdout.readline()) for proc in procs if proc.stdout is not None]
            delays.append(max(seen) - started)
        return {"propagation_p50_s": statistics.median(delays), "propagation_max_s": max(delays)}
    finally:
        for proc in procs:
            proc.kill()
        writer.close()


def pg_reachable() -> bool:
    try:
        import psycopg

        psycopg.connect(PG_DSN, connect_timeout=2).close()
        return True
    except Exception:
        return False


def run(store_kind: str, args, policies: list[RowAccessPolicy], on: list[TableName], work: Path) -> dict:
    results: dict = {"store": store_kind}
    schema = f"rowgate_scale_{uuid.uuid4().hex[:8]}"
    if store_kind == "sqlite":
        url = f"sqlite:///{work / 'policies.db'}"
        store = open_store(url)
    else:
        from rowgate.policy.store.postgres import PostgresPolicyStore

        url = f"{PG_DSN}?options=-csearch_path%3D{schema}"
        store = PostgresPolicyStore(PG_DSN, schema=schema)
    try:
        results["fill_s"] = fill(store, policies)
        loads = []
        for _ in range(5):
            started = time.perf_counter()
            snapshot = PolicySnapshot.build(*store.load())
            loads.append(time.perf_counter() - started)
        results["load_s"] = statistics.median(loads)
        cache = PolicyCache(store, start=False)
        assert len(cache.snapshot.all()) == len(policies)
        results.update(bench_requests(snapshot, on, args.requests, random.Random(7)))
        if store_kind == "sqlite":
            results["proxy_rss_mib"] = proxy_rss_mib(url, work)
        else:
            results.update(bench_propagation(schema, policies, args.replicas, args.changes))
    finally:
        store.close()
        if store_kind == "postgres":
            import psycopg

            with psycopg.connect(PG_DSN, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return results


def report(r: dict, args) -> None:
    print(f"\n== {r['store']}: {args.policies} policies over {args.tables} tables, <= {args.max_grantees} grantees each")
    print(f"fill the store (one write per policy): {r['fill_s']:.1f} s (information)")
    print(f"load a snapshot of every policy: {r['load_s'] * 1000:.0f} ms (information)")
    print(f"decision per table: p50 {r['decision_p50_ms']:.3f} ms, p99 {r['decision_p99_ms']:.3f} ms (information)")
    print(
        f"rewrite of a two-table join: p50 {r['rewrite_p50_ms']:.2f} ms [{verdict(r['rewrite_p50_ms'] <= 5)} <= 5], "
        f"p99 {r['rewrite_p99_ms']:.2f} ms [{verdict(r['rewrite_p99_ms'] <= 40)} <= 40]"
    )
    if "proxy_rss_mib" in r:
        print(
            f"rowgate serve RSS with every policy loaded: {r['proxy_rss_mib']:.0f} MiB [{verdict(r['proxy_rss_mib'] <= 300)} <= 300]"
        )
    if "propagation_max_s" in r:
        print(
            f"a change reaches {args.replicas} replicas: p50 {r['propagation_p50_s'] * 1000:.0f} ms, max "
            f"{r['propagation_max_s'] * 1000:.0f} ms over {args.changes} changes [{verdict(r['propagation_max_s'] <= 1)} <= 1 s]"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policies", type=int, default=10_000)
    p.add_argument("--tables", type=int, default=1_000)
    p.add_argument("--max-grantees", type=int, default=100)
    p.add_argument("--requests", type=int, default=2_000, help="decisions and rewrites timed")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--changes", type=int, default=20, help="policy changes timed for propagation")
    p.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    args = p.parse_args(argv)
    rng = random.Random(2026)
    on = tables(args.tables)
    policies = make_policies(args.policies, on, args.max_grantees, rng)
    kinds = ["sqlite", "postgres"] if args.store == "both" else [args.store]
    if "postgres" in kinds and not pg_reachable():
        print(f"PostgreSQL at {PG_DSN} does not answer: skipping the replica section (set ROWGATE_BENCH_PG)")
        kinds.remove("postgres")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for kind in kinds:
        with tempfile.TemporaryDirectory(prefix="rowgate-scale-") as work:
            report(run(kind, args, policies, on, Path(work)), args)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

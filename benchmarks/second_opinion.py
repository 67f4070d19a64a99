#!/usr/bin/env python
"""What the second opinion from Spark costs: first-seen and repeated texts, with and without.

Starts two `rowgate serve` processes in front of one Spark Connect server (given with
--upstream), one with the second opinion (the default) and one with --no-second-opinion,
sharing one policy store. A protected table with a plain and a lookup policy is created
through the first. Then, interleaving the two proxies round by round so background noise
hits both alike, it times `spark.sql(text).collect()` for

  first-seen  a text neither proxy has seen (a new constant each round): the checked proxy
              asked Spark for two analyses of each such plan, plus one per protected table
              the first time a caller reads it under a policy snapshot; since one check per
              plan shape (pipeline/enforce/second_opinion.py) only the first round's text is
              analysed, and the later ones share its verdict (benchmarks/run.py shows that
              case against its anchor);
  repeated    the same text again: answered from the remembered verdict.

Usage (from the repository root):

  .venv/bin/python benchmarks/second_opinion.py --upstream sc://127.0.0.1:15002 --rounds 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import new_session, percentile, proxy_process, stop_session

from rowgate.embedded.spark import free_port
from tests.harness.processes import RowgateProcess

ADMIN = "user:admin@example.com"
ANN = "user:ann@example.com"


def url(proxy: RowgateProcess, user: str) -> str:
    return f"sc://{proxy.target}/;x-rowgate-user={user}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", default="sc://127.0.0.1:15002")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rowgate-second-opinion-"))
    store = f"sqlite:///{work / 'policies.db'}"
    common = ["--identity", "header", "--admin", ADMIN, "--policy-store", store]
    proxies = {
        "with": proxy_process(free_port(), args.upstream, work / "with", common, work / "with.log"),
        "without": proxy_process(
            free_port(), args.upstream, work / "without", [*common, "--no-second-opinion"], work / "without.log"
        ),
    }
    sessions = []
    try:
        for proxy in proxies.values():
            proxy.start()
        db = "so_bench_" + uuid.uuid4().hex[:8]
        admin = new_session(url(proxies["with"], ADMIN))
        sessions.append(admin)
        for sql in [
            f"CREATE DATABASE {db}",
            f"CREATE TABLE {db}.orders (id INT, region STRING, amount INT) USING parquet",
            f"INSERT INTO {db}.orders SELECT CAST(id AS INT), element_at(array('eu', 'us', 'apac'), CAST(id % 3 + 1 AS INT)), CAST(id AS INT) FROM range(1000)",
            f"CREATE TABLE {db}.ent (email STRING, region STRING) USING parquet",
            f"INSERT INTO {db}.ent VALUES ('ann@example.com', 'us')",
            f"CREATE ROW ACCESS POLICY eu ON {db}.orders GRANT TO ('{ANN}') FILTER USING (region = 'eu')",
            f"CREATE ROW ACCESS POLICY look ON {db}.orders GRANT TO ('{ANN}') "
            f"FILTER USING (region IN (SELECT region FROM {db}.ent WHERE email = SESSION_USER()))",
        ]:
            admin.sql(sql).collect()
        readers = {name: new_session(url(proxy, ANN)) for name, proxy in proxies.items()}
        sessions.extend(readers.values())
        query = f"SELECT o.region, sum(o.amount) AS s FROM {db}.orders o JOIN {db}.orders p ON o.id = p.id WHERE o.id <> {{n}} GROUP BY 1"
        deadline = time.monotonic() + 60
        while len(readers["without"].sql(query.format(n=-1)).collect()) != 2:  # the store is polled
            if time.monotonic() > deadline:
                raise RuntimeError("the second proxy never saw the policies")
            time.sleep(0.2)
        for reader in readers.values():  # warm-up: sessions, catalog caches, reference filters
            reader.sql(query.format(n=-2)).collect()
        times: dict[tuple[str, str], list[float]] = {}
        for i in range(args.rounds):
            text = query.format(n=10_000 + i)
            for phase in ("first-seen", "repeated"):
                order = ("with", "without") if i % 2 == 0 else ("without", "with")
                for name in order:
                    started = time.perf_counter()
                    rows = readers[name].sql(text).collect()
                    times.setdefault((name, phase), []).append((time.perf_counter() - started) * 1000)
                    assert len(rows) == 2, rows
        print(f"spark.sql(text).collect() through the proxy, {args.rounds} rounds, ms")
        print(f"{'':12} {'p50 with':>9} {'p50 without':>12} {'p90 with':>9} {'p90 without':>12} {'+p50':>7}")
        for phase in ("first-seen", "repeated"):
            w, wo = times["with", phase], times["without", phase]
            print(
                f"{phase:12} {statistics.median(w):9.1f} {statistics.median(wo):12.1f} "
                f"{percentile(w, 90):9.1f} {percentile(wo, 90):12.1f} {statistics.median(w) - statistics.median(wo):7.1f}"
            )
    finally:
        for session in sessions:
            stop_session(session)
        for proxy in proxies.values():
            proxy.stop()


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""How long rowgate's SQL rewriter takes on the 22 TPC-H queries, in process (no Spark).

Prints p50, p99 and the maximum per query text, with four tables protected and with
nothing protected (the parse-only fast path). A measurement, never an assertion: the
end-to-end figures with Spark are bench.py's and run.py's.

  .venv/bin/python benchmarks/rewrite_timings.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "proxy"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from rowgate.rewrite.sql import rewrite_sql
from tests.unit.rewrite.tpch import queries, tpch_context


def timings(sql_list, ctx_factory, rounds: int) -> tuple[float, float, float]:
    """p50, p99 and max of one rewrite, in milliseconds; a fresh context each time, as per request."""
    samples = []
    for _ in range(rounds):
        for _label, sql in sql_list:
            ctx = ctx_factory()
            start = time.perf_counter()
            rewrite_sql(sql, ctx)
            samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))], samples[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    tpch = queries()
    rewrite_sql(tpch[0][1], tpch_context())  # warm imports and caches
    for title, factory in (
        ("protected (lineitem, orders, customer)", tpch_context),
        ("nothing protected (fast path / parse only)", lambda: tpch_context(protect=False)),
    ):
        p50, p99, worst = timings(tpch, factory, args.rounds)
        print(f"TPC-H rewrite, {title}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

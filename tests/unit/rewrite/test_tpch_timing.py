"""TPC-H through the rewriter: all filtered, valid, idempotent; timings printed (rule 9)."""

import statistics
import time

import pytest

from rowgate.rewrite.sql import rewrite_sql
from tests.unit.rewrite.fakes import reparse, rw, unfiltered
from tests.unit.rewrite.tpch import queries, tpch_context

QUERIES = queries()


def test_there_are_22_queries():
    assert len(QUERIES) == 22


@pytest.mark.parametrize("label, sql", QUERIES, ids=[q[0] for q in QUERIES])
def test_tpch_query_is_filtered(label, sql):
    ctx = tpch_context()
    r = rw(sql, ctx)
    reparse(r.sql)
    for table in ("lineitem", "orders", "customer"):
        assert unfiltered(r.sql, table) == []
    touches = {t.table for t in r.tables_read} & {"lineitem", "orders", "customer"}
    assert r.filtered == bool(touches)


@pytest.mark.parametrize("label, sql", QUERIES, ids=[q[0] for q in QUERIES])
def test_tpch_unprotected_is_byte_identical(label, sql):
    r = rw(sql, tpch_context(protect=False))
    assert r.sql == sql and not r.changed


def _timings(sql_list, ctx_factory, rounds):
    samples = []
    for _ in range(rounds):
        for _label, sql in sql_list:
            ctx = ctx_factory()
            start = time.perf_counter()
            rewrite_sql(sql, ctx)
            samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return p50, p99, samples[-1]


def test_print_timings(capsys):
    rewrite_sql(QUERIES[0][1], tpch_context())  # warm imports and caches
    rows = []
    for title, factory in (
        ("protected (lineitem, orders, customer)", tpch_context),
        ("nothing protected (fast path / parse only)", lambda: tpch_context(protect=False)),
    ):
        p50, p99, worst = _timings(QUERIES, factory, rounds=10)
        rows.append(f"TPC-H rewrite, {title}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms")
    with capsys.disabled():
        print()
        for row in rows:
            print(row)

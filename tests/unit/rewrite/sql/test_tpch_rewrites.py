"""TPC-H through the rewriter: all filtered, valid, idempotent (its timings: benchmarks/rewrite_timings.py)."""

import pytest

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

"""The relation passes one by one: resolve.py, protect.py, reads.py (with views.py), effects.py, run.py."""

import pytest
import sqlglot
from sqlglot import exp

from rowgate.identity.caller import Caller
from rowgate.refusal import Refusal
from rowgate.rewrite.sql.classify import classify
from rowgate.rewrite.sql.effects import TargetName, enforce
from rowgate.rewrite.sql.protect import already_filtered, wrap_protected
from rowgate.rewrite.sql.reads import rewrite_reads
from rowgate.rewrite.sql.resolve import resolve_read, resolve_target
from rowgate.rewrite.sql.run import Run
from rowgate.rewrite.sql.scope import relation_references
from rowgate.rewrite.sql.wrap import render
from tests.unit.rewrite.fakes import ALICE_ORDERS, BOB, shop, tn


def _reads(sql: str, ctx=None, guarded: bool = True):
    run = Run(ctx or shop(), None, guarded)
    tree = sqlglot.parse_one(sql, read="spark")
    return run, tree, relation_references(tree, run.top_scope())


# -- resolve ---------------------------------------------------------------------------


def test_resolve_answers_a_typed_read_and_changes_nothing():
    ctx = shop().temp("tmp").view("v_all", "SELECT * FROM orders")
    run, tree, refs = _reads("WITH c AS (SELECT 1) SELECT * FROM c, tmp, orders, lineitem, v_all, parquet.`/d`, range(3)", ctx)
    before = tree.sql("spark")
    reads = [resolve_read(run, r, lambda n: False) for r in refs]
    assert [r.kind for r in reads] == ["cte", "temp_view", "protected", "table", "view", "path", "table_function"]
    assert reads[2].name == tn("orders") and len(reads[2].policies) == 2
    assert reads[5].path is not None and reads[5].path.path == "/d"
    assert tree.sql("spark") == before


def test_resolve_refuses_what_belongs_to_resolution():
    run, _, refs = _reads("WITH Orders AS (SELECT 1) SELECT * FROM orders")
    with pytest.raises(Refusal, match="differs only in letter case"):
        resolve_read(run, refs[-1], lambda n: True)
    ctx = shop().view("v", "SELECT 1").protect("v", "p", ("allAuthenticatedUsers",), "TRUE")
    run, _, refs = _reads("SELECT * FROM v", ctx)
    with pytest.raises(Refusal, match="policies on the view"):
        resolve_read(run, refs[0], lambda n: False)


def test_unanalysable_names_are_refused_only_under_protection():
    run, _, refs = _reads("SELECT * FROM a.b.c.d")
    with pytest.raises(Refusal):
        resolve_read(run, refs[0], lambda n: False)
    run, _, refs = _reads("SELECT * FROM a.b.c.d", guarded=False)
    assert resolve_read(run, refs[0], lambda n: False).kind == "unanalysable"


def test_resolve_target_sees_temp_views_not_ctes():
    ctx = shop().temp("tmp")
    run = Run(ctx, None, True)
    assert resolve_target(run, exp.to_table("tmp", dialect="spark")).temp_view == "tmp"
    assert resolve_target(run, exp.to_table("sales.orders", dialect="spark")).name == tn("sales.orders")
    assert resolve_target(run, exp.to_table("parquet.`/data/x`", dialect="spark")).path == "/data/x"


# -- protect (the wrap pass) -----------------------------------------------------------


def test_wrap_replaces_the_reference_and_reports_the_policies():
    run, tree, refs = _reads("SELECT o.id FROM orders o")
    read = resolve_read(run, refs[0], lambda n: False)
    wrap_protected(run, refs[0].node, read.name, read.policies, read.parts, tree)
    assert render(tree) == f"SELECT o.id FROM {ALICE_ORDERS} AS o"
    assert run.found.filtered and run.changes == 1
    assert sorted(run.found.policies_applied) == [
        "spark_catalog.default.orders:eu_sales",
        "spark_catalog.default.orders:own_rows",
    ]


def test_already_filtered_recognises_only_this_callers_text():
    sql = f"SELECT * FROM {ALICE_ORDERS} AS o"
    run, tree, _ = _reads(sql)
    sub = tree.find(exp.Subquery)
    assert already_filtered(run, sub, run.top_scope()) and run.found.filtered
    run, tree, _ = _reads(sql, shop().as_caller(BOB))
    assert not already_filtered(run, tree.find(exp.Subquery), run.top_scope())


def test_time_travel_needs_the_full_access_grant():
    run, tree, refs = _reads("SELECT * FROM orders VERSION AS OF 1")
    read = resolve_read(run, refs[0], lambda n: False)
    with pytest.raises(Refusal, match="FILTER USING \\(TRUE\\)"):
        wrap_protected(run, refs[0].node, read.name, read.policies, read.parts, tree)


# -- reads (resolve -> expand views -> wrap -> pin) ------------------------------------


def test_reads_expand_a_view_over_a_protected_table():
    ctx = shop().view("v_eu", "SELECT id FROM orders WHERE region = 'EU'", columns=("id",))
    run, tree, _ = _reads("SELECT id FROM v_eu JOIN lineitem ON true", ctx)
    # two changes: the wrap inside the view's text, and the expansion itself
    assert rewrite_reads(run, tree, run.top_scope(), (), qualify=True) == 2
    assert run.found.views_expanded == {tn("v_eu")} and run.found.filtered
    assert "`spark_catalog`.`default`.`lineitem`" in render(tree)  # pinned
    assert ALICE_ORDERS in render(tree)


def test_reads_refuse_protected_data_through_table_arguments_and_functions():
    run, tree, _ = _reads("SELECT * FROM my_tvf(TABLE(orders))")
    with pytest.raises(Refusal, match="reads protected data unfiltered"):
        rewrite_reads(run, tree, run.top_scope(), (), qualify=True)
    run, tree, _ = _reads("SELECT * FROM read_table('orders')")
    with pytest.raises(Refusal, match="over protected relation"):
        rewrite_reads(run, tree, run.top_scope(), (), qualify=True)


# -- effects ---------------------------------------------------------------------------


def _enforce(sql: str, caller: Caller, ctx=None):
    ctx = ctx or shop()
    run = Run(ctx, None, True)
    return enforce(classify(sqlglot.parse_one(sql, read="spark")), lambda n: resolve_target(run, n), run.policies_for, caller)


def test_writes_to_protected_tables_need_the_full_access_grant():
    with pytest.raises(Refusal, match="writing to"):
        _enforce("INSERT INTO orders SELECT * FROM lineitem", BOB)
    ctx = shop().protect("orders", "all", ("user:bob@example.com",), "TRUE")
    assert _enforce("INSERT INTO orders SELECT * FROM lineitem", BOB, ctx).tables_written == {tn("orders")}


def test_effects_of_ddl():
    e = _enforce("ALTER TABLE lineitem RENAME TO items", BOB).effects
    assert e.tables_renamed == ((tn("lineitem"), tn("items")),)
    e = _enforce("DROP VIEW IF EXISTS v", BOB).effects
    assert e.views_dropped == {tn("v")}
    assert TargetName(("t",), None).path is None


# -- run -------------------------------------------------------------------------------


def test_run_asks_the_context_once_per_name():
    ctx = shop()
    run = Run(ctx, None, True)
    run.lookup(tn("orders"))
    run.lookup(tn("orders"))
    assert ctx.lookups == [tn("orders")]

"""passes.py: the order of the passes is data, and the driver runs exactly that."""

import sqlglot

from rowgate.rewrite.sql.passes import PASSES, Statement, run_passes
from rowgate.rewrite.sql.result import RewriteResult
from rowgate.rewrite.sql.run import Run
from tests.unit.rewrite.fakes import ALICE_ORDERS, shop


def test_the_documented_order():
    assert [name for name, _ in PASSES] == [
        "normalize",
        "classify",
        "check_shape",
        "use",
        "reserved",
        "bind_identity",
        "statement_effects",
        "reads",
        "stored_bodies",
        "pin_names",
        "shared_views",
        "render",
    ]


def _statement(sql: str) -> Statement:
    return Statement(sql, sqlglot.parse_one(sql, read="spark"))


def test_the_first_result_ends_the_run():
    seen = []

    def first(run, s):
        seen.append("first")

    def second(run, s):
        seen.append("second")
        return RewriteResult(sql="x", statement_kind="query")

    def third(run, s):  # never reached
        seen.append("third")

    result = run_passes(Run(shop(), None, True), _statement("SELECT 1"), (("a", first), ("b", second), ("c", third)))
    assert result.sql == "x" and seen == ["first", "second"]


def test_all_passes_filter_bind_and_render():
    run = Run(shop(), None, True)
    result = run_passes(run, _statement("SELECT current_user() AS u, o.id FROM orders o"))
    assert result.sql == f"SELECT 'alice@example.com' AS u, o.id FROM {ALICE_ORDERS} AS o"
    assert result.filtered and result.identity_bound and run.changes == 2


def test_use_ends_before_the_statement_passes():
    run = Run(shop(), None, True)
    result = run_passes(run, _statement("USE sales"))
    assert result.sql == "USE `sales`" and result.session_effects.current_schema == "sales"
    assert run.found.tables_read == set()


def test_normalize_runs_before_reads():
    result = run_passes(Run(shop(), None, True), _statement("INSERT INTO lineitem TABLE orders"))
    assert result.sql == f"INSERT INTO `spark_catalog`.`default`.`lineitem` SELECT * FROM {ALICE_ORDERS} AS orders"

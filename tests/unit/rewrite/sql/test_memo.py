"""A remembered rewrite is reused only when a fresh rewrite would give the same answer.

Every test here changes one thing a rewrite depends on and checks that the memo does not
answer with the old rewrite (which would hand one caller another caller's filter, or an
unfiltered read after a policy or a view changed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rowgate.catalog.model import RelationInfo, RelationKind
from rowgate.refusal import Refusal
from rowgate.rewrite.sql import rewrite_sql
from rowgate.rewrite.sql.memo import MAX_TEXT_CHARS, NotAnswerable, RewriteMemo
from tests.unit.rewrite.fakes import ALICE_ORDERS, BOB, BOB_ORDERS, EVE, FakeContext, shop, tn


@dataclass
class MemoContext(FakeContext):
    rewrite_memo: RewriteMemo = field(default_factory=RewriteMemo)
    snapshot: object = field(default_factory=object)  # replaced when policies change
    evicted: set = field(default_factory=set)  # names the catalog cache no longer holds

    def memo_context(self) -> tuple:
        return (self.caller, self.is_admin, self.current_catalog, self.current_schema,
                frozenset(self.temp_views), frozenset(self.global_temp_views))  # fmt: skip

    def memo_snapshot(self):
        return self.snapshot

    def cached_lookup(self, name):
        if name in self.evicted:
            raise NotAnswerable(str(name))
        return self.tables.get(name)

    def policy_changed(self) -> None:
        self.snapshot = object()


def memo_shop() -> MemoContext:
    base = shop()
    ctx = MemoContext()
    ctx.tables, ctx.policies = base.tables, base.policies
    ctx.view("v_orders", "SELECT id, amount FROM orders WHERE amount > 0")
    return ctx


Q = "SELECT id FROM orders WHERE amount > 10"


def counts(ctx: MemoContext) -> tuple[int, int]:
    return ctx.rewrite_memo.hits, ctx.rewrite_memo.misses


def test_the_same_text_in_the_same_context_is_answered_from_memory():
    ctx = memo_shop()
    first = rewrite_sql(Q, ctx)
    again = rewrite_sql(Q, ctx)
    assert again is first and ALICE_ORDERS in first.sql
    assert counts(ctx) == (1, 1)


def test_the_echo_of_a_rewrite_is_remembered_as_its_own_text():
    ctx = memo_shop()
    out = rewrite_sql(Q, ctx).sql
    echo = rewrite_sql(out, ctx)
    assert echo.sql == out and echo.filtered
    assert rewrite_sql(out, ctx) is echo
    assert counts(ctx) == (1, 2)


def test_another_caller_never_gets_the_first_callers_rewrite():
    ctx = memo_shop()
    assert ALICE_ORDERS in rewrite_sql(Q, ctx).sql
    ctx.as_caller(BOB)
    bob = rewrite_sql(Q, ctx)
    assert BOB_ORDERS in bob.sql and ALICE_ORDERS not in bob.sql
    ctx.as_caller(EVE)
    assert "eve@example.com" in rewrite_sql(Q, ctx).sql
    assert counts(ctx) == (0, 3)


def test_same_principal_with_other_groups_is_another_caller():
    ctx = memo_shop()
    assert "region = 'EU'" in rewrite_sql(Q, ctx).sql  # alice is in sales@
    ctx.caller = type(ctx.caller)(ctx.caller.principal, frozenset())
    assert "region = 'EU'" not in rewrite_sql(Q, ctx).sql


def test_a_new_policy_snapshot_is_a_miss_even_for_the_same_text():
    ctx = memo_shop()
    assert ALICE_ORDERS in rewrite_sql(Q, ctx).sql
    ctx.policies[tn("orders")] = ()  # policies dropped, then one that grants nobody
    ctx.protect("orders", "nobody", ("user:nobody@example.com",), "TRUE")
    ctx.policy_changed()
    after = rewrite_sql(Q, ctx)
    assert "WHERE TRUE AND (FALSE)" in after.sql and ALICE_ORDERS not in after.sql


def test_a_redefined_view_is_a_miss():
    ctx = memo_shop()
    before = rewrite_sql("SELECT * FROM v_orders", ctx)
    assert "amount > 0" in before.sql
    ctx.view("v_orders", "SELECT id, amount FROM orders WHERE amount < 0")
    after = rewrite_sql("SELECT * FROM v_orders", ctx)
    assert "amount < 0" in after.sql and ALICE_ORDERS in after.sql


def test_a_view_that_becomes_a_read_of_a_protected_table_is_filtered():
    ctx = memo_shop()
    ctx.view("v_free", "SELECT * FROM lineitem")
    assert not rewrite_sql("SELECT * FROM v_free", ctx).filtered
    ctx.view("v_free", "SELECT id AS order_id, amount AS qty FROM orders")
    assert rewrite_sql("SELECT * FROM v_free", ctx).filtered


def test_a_name_the_catalog_cache_dropped_is_a_miss():
    ctx = memo_shop()
    rewrite_sql(Q, ctx)
    ctx.evicted.add(tn("orders"))
    rewrite_sql(Q, ctx)
    assert counts(ctx) == (0, 2)


def test_a_temp_view_that_shadows_the_table_is_a_miss():
    ctx = memo_shop()
    assert rewrite_sql("SELECT * FROM lineitem", ctx).tables_read == {tn("lineitem")}
    ctx.temp("lineitem")
    assert tn("lineitem") not in rewrite_sql("SELECT * FROM lineitem", ctx).tables_read


def test_another_current_database_is_a_miss():
    ctx = memo_shop()
    assert rewrite_sql("SELECT * FROM orders", ctx).filtered  # default.orders: protected
    ctx.current_schema = "sales"
    assert not rewrite_sql("SELECT * FROM orders", ctx).filtered  # sales.orders: not protected
    ctx.current_schema = "default"
    assert rewrite_sql("SELECT * FROM orders", ctx).filtered


def test_other_arguments_are_another_text():
    ctx = memo_shop()
    ctx.table("t_free", "id")
    sql = "SELECT * FROM IDENTIFIER(:t)"
    assert not rewrite_sql(sql, ctx, args={"t": "t_free"}).filtered
    assert rewrite_sql(sql, ctx, args={"t": "orders"}).filtered
    # positional IDENTIFIER(?) is refused while names are pinned (see test_attacks); other
    # positional arguments still make another text
    positional = "SELECT * FROM t_free WHERE id = ? AND IDENTIFIER(?) = 1"
    assert not rewrite_sql(positional, ctx, args=[1, "id"]).filtered
    assert rewrite_sql(positional, ctx, args=[1, "id"]) is rewrite_sql(positional, ctx, args=[1, "id"])
    assert rewrite_sql(positional, ctx, args=[2, "id"]) is not rewrite_sql(positional, ctx, args=[1, "id"])


def test_refusals_are_not_remembered():
    ctx = memo_shop()
    for _ in range(2):
        with pytest.raises(Refusal):
            rewrite_sql("SELECT * FROM orders; SELECT 1", ctx)
    assert counts(ctx) == (0, 2) and len(ctx.rewrite_memo) == 0


def test_a_lookup_that_failed_is_not_remembered():
    ctx = memo_shop()

    def failing(name):
        raise TimeoutError("upstream slow")

    ctx.lookup = failing
    with pytest.raises(TimeoutError):
        rewrite_sql(Q, ctx)
    assert len(ctx.rewrite_memo) == 0


def test_long_texts_are_rewritten_every_time():
    ctx = memo_shop()
    sql = Q + " AND id IN (" + ",".join(["1"] * (MAX_TEXT_CHARS // 2)) + ")"
    rewrite_sql(sql, ctx)
    rewrite_sql(sql, ctx)
    assert counts(ctx) == (0, 2) and len(ctx.rewrite_memo) == 0


def test_the_memo_keeps_to_its_budget_oldest_out_first():
    ctx = memo_shop()
    ctx.rewrite_memo = RewriteMemo(budget_chars=2_000)
    texts = [f"SELECT id FROM orders WHERE amount > {i}" for i in range(40)]
    for t in texts:
        rewrite_sql(t, ctx)
    assert 0 < len(ctx.rewrite_memo) < 40
    rewrite_sql(texts[-1], ctx)
    rewrite_sql(texts[0], ctx)
    assert counts(ctx) == (1, 41)


def test_catalog_answers_are_recorded_for_view_expansion_too():
    """The memo's entry for a view read depends on the view's and its tables' answers."""
    ctx = memo_shop()
    rewrite_sql("SELECT * FROM v_orders", ctx)
    ctx.tables[tn("orders")] = RelationInfo(tn("orders"), RelationKind.TABLE, ("id", "amount", "extra"))
    rewrite_sql("SELECT * FROM v_orders", ctx)
    assert counts(ctx) == (0, 2)


def test_whether_protection_is_in_force_is_part_of_the_key():
    """Protection decides between the client's bytes and the proxy's own rendering: an
    answer remembered while nothing was protected must never be reused once it is, even
    by a context whose snapshot object did not change."""
    ctx = memo_shop()
    saved = dict(ctx.policies)
    ctx.policies.clear()
    sql = "INSERT INTO lineitem SELECT * FROM customers -- comment"
    assert rewrite_sql(sql, ctx).sql == sql
    ctx.policies.update(saved)
    r = rewrite_sql(sql, ctx)
    assert (
        r.sql == "INSERT INTO `spark_catalog`.`default`.`lineitem` SELECT * FROM `spark_catalog`.`default`.`customers` -- comment"
    )

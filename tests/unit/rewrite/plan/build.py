"""Small builders for hand-made Spark Connect messages."""

from __future__ import annotations

from pyspark.sql.connect.proto import commands_pb2, relations_pb2

from rowgate.rewrite.plan import rewrite_plan
from rowgate.rewrite.plan.reads import filter_text
from rowgate.rewrite.sql.wrap import BARRIER
from tests.unit.rewrite.fakes import ALICE, BOB, shop

Relation = relations_pb2.Relation
Command = commands_pb2.Command

ORDERS_ID = "`spark_catalog`.`default`.`orders`"


def _derived(caller) -> str:
    """The SQL rewriter's derived table for `orders` and this caller in `shop()` (the plan
    rewriter must place exactly the SQL rewriter's filter, whatever its spelling)."""
    from rowgate.rewrite.sql import rewrite_sql

    ctx = shop().as_caller(caller)
    text = rewrite_sql("SELECT * FROM orders", ctx).sql
    assert text.startswith("SELECT * FROM (") and text.endswith(") AS orders"), text
    return text[len("SELECT * FROM ") : -len(" AS orders")]


def _filter(caller) -> str:
    return filter_text(f"SELECT * FROM {_derived(caller)} AS orders")


ALICE_ORDERS = _derived(ALICE)  # "(SELECT * FROM `spark_catalog`.`default`.`orders` WHERE ...)"
ALICE_FILTER = _filter(ALICE)
BOB_FILTER = _filter(BOB)


def table(name: str, plan_id: int | None = None, *, streaming: bool = False, **options: str) -> Relation:
    rel = Relation()
    if plan_id is not None:
        rel.common.plan_id = plan_id
    rel.read.named_table.unparsed_identifier = name
    for key, value in options.items():
        rel.read.named_table.options[key] = value
    if streaming:
        rel.read.is_streaming = True
    return rel


def sql(query: str, plan_id: int | None = None, **named: str) -> Relation:
    rel = Relation()
    if plan_id is not None:
        rel.common.plan_id = plan_id
    rel.sql.query = query
    for key, value in named.items():
        rel.sql.named_arguments[key].literal.string = value
    return rel


def where(child: Relation, text: str, plan_id: int | None = None) -> Relation:
    rel = Relation()
    if plan_id is not None:
        rel.common.plan_id = plan_id
    rel.filter.input.CopyFrom(child)
    rel.filter.condition.expression_string.expression = text
    return rel


def select_exprs(child: Relation, *texts: str) -> Relation:
    rel = Relation()
    rel.project.input.CopyFrom(child)
    for text in texts:
        rel.project.expressions.add().expression_string.expression = text
    return rel


def sql_command(query: str) -> Command:
    cmd = Command()
    cmd.sql_command.input.sql.query = query
    return cmd


def filtered_read(rel: Relation) -> tuple[str, str] | None:
    """(identifier, row filter) when `rel` is the proxy's filtered read form (the row filter
    under the barrier filter), else None."""
    if rel.WhichOneof("rel_type") != "filter" or rel.filter.condition.expression_string.expression != BARRIER:
        return None
    policy = rel.filter.input
    if policy.WhichOneof("rel_type") != "filter" or policy.HasField("common"):
        return None
    inner = policy.filter.input
    if inner.WhichOneof("rel_type") != "read" or inner.HasField("common"):
        return None
    return inner.read.named_table.unparsed_identifier, policy.filter.condition.expression_string.expression


def read_of(rel: Relation) -> Relation:
    """The `read` inside the proxy's filtered read form `rel`."""
    assert filtered_read(rel) is not None, rel
    return rel.filter.input.filter.input


def stable(message, ctx, **kwargs):
    """rewrite_plan, plus the invariant every test relies on: rewriting the output again
    changes nothing and reports the same filtering (the client re-sends plans)."""
    result = rewrite_plan(message, ctx, **kwargs)
    before = message.SerializeToString(deterministic=True)
    again = rewrite_plan(message, ctx, **kwargs)
    assert message.SerializeToString(deterministic=True) == before, "a second rewrite changed the plan"
    assert not again.changed
    assert again.filtered == result.filtered
    assert again.policies_applied == result.policies_applied
    return result

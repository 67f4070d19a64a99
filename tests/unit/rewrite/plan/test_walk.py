"""The walk itself: every type is classified, unknown ones fail closed, depth is no problem."""

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2, catalog_pb2, commands_pb2, expressions_pb2, relations_pb2

from rowgate.refusal import Refusal
from rowgate.rewrite.plan import rewrite_plan
from rowgate.rewrite.plan.classify import ADMIN, CATALOG_OPS, COMMANDS, EXPRESSIONS, REFUSED, RELATIONS, WALK
from rowgate.rewrite.plan.rewrite import HANDLERS
from tests.unit.rewrite.plan.build import Relation, filtered_read, stable, table


def members(message, oneof: str) -> set[str]:
    return {f.name for f in message.DESCRIPTOR.oneofs_by_name[oneof].fields}


@pytest.mark.parametrize(
    "message, oneof, known",
    [
        (relations_pb2.Relation, "rel_type", RELATIONS),
        (commands_pb2.Command, "command_type", COMMANDS),
        (expressions_pb2.Expression, "expr_type", EXPRESSIONS),
        (catalog_pb2.Catalog, "cat_type", CATALOG_OPS),
    ],
)
def test_every_type_of_the_pinned_protocol_is_classified(message, oneof, known):
    """A pyspark upgrade that adds a type makes this fail, so it gets a deliberate entry."""
    assert members(message, oneof) == set(known)


def test_every_entry_has_a_handler():
    for kinds in (RELATIONS, COMMANDS, EXPRESSIONS):
        for entry in kinds.values():
            assert entry in (WALK, ADMIN, REFUSED) or entry in HANDLERS


def with_unknown_field(message, number: int = 999):
    """`message` as a newer peer would send it: with a field this protobuf does not know."""
    data = message.SerializeToString()
    tag = (number << 3) | 0  # varint
    encoded = bytearray()
    while True:
        byte = tag & 0x7F
        tag >>= 7
        encoded.append(byte | (0x80 if tag else 0))
        if not tag:
            break
    return type(message).FromString(data + bytes(encoded) + b"\x01")


def test_unknown_relation_type_refused_for_everyone_while_protected(ctx):
    rel = with_unknown_field(Relation())  # a rel_type member this pyspark does not know
    assert rel.WhichOneof("rel_type") is None
    for admin in (False, True):  # admins' reads are filtered like anyone's: no unanalysed plans
        ctx.is_admin = admin
        with pytest.raises(Refusal) as e:
            rewrite_plan(rel, ctx)
        message = e.value.message
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "spark.connect.Relation" in message and "999" in message
        assert "unknown to rowgate" in message and "admins included" in message
    ctx.policies.clear()  # nothing protected: a newer client's plan passes for anyone
    assert not rewrite_plan(rel, ctx).changed
    ctx.is_admin = False
    assert not rewrite_plan(rel, ctx).changed


def test_an_admins_read_of_a_protected_table_with_an_unknown_field_is_refused(ctx):
    """A newer client's relations (as 4.2's `nearestByJoin` reached a 4.1 proxy) arrive as
    unknown fields of a relation whose inputs read tables: forwarded unanalysed, the admin's
    read would not be filtered."""
    ctx.is_admin = True
    rel = Relation()
    rel.project.input.CopyFrom(table("orders"))
    rel.project.CopyFrom(with_unknown_field(rel.project, 42))
    with pytest.raises(Refusal) as e:
        rewrite_plan(rel, ctx)
    assert "field 42 of spark.connect.Project (at project)" in e.value.message
    rel = Relation()  # deep inside the read the proxy replaces by its filtered form
    rel.read.named_table.CopyFrom(with_unknown_field(relations_pb2.Read.NamedTable(unparsed_identifier="orders"), 7))
    with pytest.raises(Refusal) as e:
        rewrite_plan(rel, ctx)
    assert "field 7 of spark.connect.Read.NamedTable" in e.value.message
    rel = table("orders")  # and inside the proxy's own filtered form, sent back
    rewrite_plan(rel, ctx)
    rel.filter.input.read.CopyFrom(with_unknown_field(rel.filter.input.read))
    with pytest.raises(Refusal):
        rewrite_plan(rel, ctx)
    ctx.is_admin = False


@pytest.mark.parametrize(
    "kinds, kind, build",
    [
        (RELATIONS, "sample", lambda rel: rel.sample.input.CopyFrom(table("orders"))),
        (CATALOG_OPS, "list_tables", lambda rel: rel.catalog.list_tables.SetInParent()),
    ],
)
def test_a_kind_missing_from_the_tables_is_refused_for_admins_too(ctx, monkeypatch, kinds, kind, build):
    """A kind protobuf knows but the proxy's tables do not (a protocol upgrade nobody
    classified) is unknown, not reserved to admins."""
    monkeypatch.delitem(kinds, kind)
    rel = Relation()
    build(rel)
    for admin in (False, True):
        ctx.is_admin = admin
        with pytest.raises(Refusal) as e:
            rewrite_plan(rel, ctx)
        assert kind in e.value.message and "unknown to rowgate" in e.value.message
    ctx.is_admin = False


def test_kinds_reserved_to_admins_stay_usable_by_admins(ctx):
    rel = Relation()
    rel.ml_relation.transform.input.CopyFrom(table("lineitem"))
    with pytest.raises(Refusal) as e:
        rewrite_plan(rel, ctx)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and "reserved to admins" in e.value.message
    ctx.is_admin = True
    assert rewrite_plan(rel, ctx).unchecked == ("the ml_relation relation",)
    ctx.is_admin = False


def test_kinds_nobody_can_analyse_are_refused_for_admins_too(ctx):
    rel = Relation()
    rel.extension.type_url = "type.googleapis.com/some.Extension"
    for admin in (False, True):
        ctx.is_admin = admin
        with pytest.raises(Refusal) as e:
            rewrite_plan(rel, ctx)
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and "admins included" in e.value.message
    ctx.policies.clear()
    assert rewrite_plan(rel, ctx).unchecked == ("the extension relation",)
    ctx.is_admin = False


def test_unknown_field_deep_inside_refused(ctx):
    inner = with_unknown_field(relations_pb2.Filter())
    rel = Relation()
    rel.project.input.filter.CopyFrom(inner)
    rel.project.input.filter.input.CopyFrom(table("lineitem"))
    with pytest.raises(Refusal) as e:
        rewrite_plan(rel, ctx)
    assert "project.input.filter" in e.value.message


def test_unknown_field_in_a_replaced_read_refused(ctx):
    rel = Relation()
    rel.read.named_table.CopyFrom(with_unknown_field(relations_pb2.Read.NamedTable(unparsed_identifier="orders")))
    with pytest.raises(Refusal):
        rewrite_plan(rel, ctx)


def test_unknown_field_in_a_recognised_filter_refused(ctx):
    rel = table("orders")
    rewrite_plan(rel, ctx)
    rel.filter.input.read.CopyFrom(with_unknown_field(rel.filter.input.read))
    with pytest.raises(Refusal):
        rewrite_plan(rel, ctx)


def test_constructs_reported(ctx):
    rel = Relation()
    rel.limit.input.CopyFrom(table("lineitem"))
    rel.limit.limit = 3
    r = rewrite_plan(rel, ctx)
    assert r.constructs == {"relation:limit", "relation:read"}


def test_deep_plans_do_not_hit_the_recursion_limit(ctx):
    rel = table("orders", plan_id=0)
    for i in range(3000):
        outer = Relation()
        outer.common.plan_id = i + 1
        outer.limit.input.CopyFrom(rel)
        outer.limit.limit = 10
        rel = outer
    r = rewrite_plan(rel, ctx)
    assert r.filtered
    node = rel
    while node.WhichOneof("rel_type") == "limit":
        node = node.limit.input
    assert filtered_read(node) is not None and node.common.plan_id == 0


def test_plan_messages_accepted_and_others_not(ctx):
    plan = base_pb2.Plan()
    plan.root.CopyFrom(table("orders"))
    assert stable(plan, ctx).filtered
    with pytest.raises(TypeError):
        rewrite_plan(relations_pb2.Filter(), ctx)


def test_large_literal_lists_are_not_walked_per_element(ctx):
    rel = Relation()
    rel.filter.input.CopyFrom(table("`spark_catalog`.`default`.`lineitem`"))  # pinned already
    call = rel.filter.condition.unresolved_function
    call.function_name = "in"
    call.arguments.add().unresolved_attribute.unparsed_identifier = "qty"
    for i in range(20000):
        call.arguments.add().literal.integer = i
    assert not rewrite_plan(rel, ctx).changed


def test_compressed_plan_refused_while_protected(ctx):
    plan = base_pb2.Plan()
    plan.compressed_operation.data = b"\x28\xb5\x2f\xfd"
    with pytest.raises(Refusal):
        rewrite_plan(plan, ctx)
    ctx.policies.clear()
    assert not rewrite_plan(plan, ctx).changed

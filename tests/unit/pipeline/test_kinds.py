"""The allow list of kinds (proxy/rowgate/policy/kinds.py) covers everything Spark's protocol
and the SQL rewriter can produce, and names only fields that exist.

A pyspark upgrade that adds a relation, command, expression or catalog type, or a rewriter
change that reports a new statement kind, fails here until someone decides, in data,
what the new kind reads, writes and names, and whether non-admins may use it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor
from pyspark.sql.connect.proto import catalog_pb2, commands_pb2, expressions_pb2, relations_pb2

from rowgate.policy import kinds
from rowgate.rewrite.plan import classify
from rowgate.rewrite.sql import result as sql_result

PROTOCOL = [
    ("relation", relations_pb2.Relation, "rel_type", kinds.RELATIONS),
    ("command", commands_pb2.Command, "command_type", kinds.COMMANDS),
    ("expression", expressions_pb2.Expression, "expr_type", kinds.EXPRESSIONS),
    ("catalog", catalog_pb2.Catalog, "cat_type", kinds.CATALOG),
]
SQL_SOURCES = Path(sql_result.__file__).parent


@pytest.mark.parametrize("family, message, oneof, specs", PROTOCOL, ids=[p[0] for p in PROTOCOL])
def test_every_kind_of_the_protocol_is_classified(family, message, oneof, specs):
    members = {f"{family}:{f.name}" for f in message.DESCRIPTOR.oneofs_by_name[oneof].fields}
    assert sorted(members - set(specs)) == [], "unclassified: add an entry to policy/kinds.py"
    assert sorted(set(specs) - members) == [], "entries for kinds the protocol no longer has"


def _field(descriptor, step: str) -> FieldDescriptor:
    name, _, key = step.partition("[")
    field = descriptor.fields_by_name.get(name)
    assert field is not None, f"{descriptor.full_name} has no field {name}"
    if key:
        assert field.message_type is not None and field.message_type.GetOptions().map_entry, f"{name} is no map"
    return field


def _resolve(message, path: str) -> FieldDescriptor:
    descriptor = message.DESCRIPTOR
    field = None
    for step in path.split("."):
        assert descriptor is not None, f"{path}: {step} is inside a scalar"
        field = _field(descriptor, step)
        descriptor = field.message_type
    assert field is not None
    return field


@pytest.mark.parametrize("family, message, oneof, specs", PROTOCOL, ids=[p[0] for p in PROTOCOL])
def test_every_field_a_spec_names_exists(family, message, oneof, specs):
    for spec in specs.values():
        for path in (*spec.reads, *spec.writes, *spec.locations):
            assert path.split(".")[0].split("[")[0] == spec.kind.split(":")[1], f"{spec.kind}: {path} is another kind's"
            _resolve(message, path)


@pytest.mark.parametrize("family, message, oneof, specs", PROTOCOL[:2], ids=["relation", "command"])
def test_every_input_relation_is_listed_as_read(family, message, oneof, specs):
    """What a kind reads is complete: a relation-typed field Spark adds to a kind must be listed."""
    for field in message.DESCRIPTOR.oneofs_by_name[oneof].fields:
        if field.message_type is None:
            continue
        spec = specs[f"{family}:{field.name}"]
        for sub in field.message_type.fields:
            if sub.message_type is not None and sub.message_type.full_name == "spark.connect.Relation":
                assert f"{field.name}.{sub.name}" in spec.reads, f"{spec.kind} does not list {sub.name}"


def test_refused_kinds_say_why():
    for spec in kinds.SPECS.values():
        assert spec.non_admins or spec.why, spec.kind
        assert kinds.refusal_of(spec.kind) == (None if spec.non_admins else spec.why)
    assert "not on the proxy's list" in kinds.refusal_of("relation:from_the_future")


def _documented_sql_kinds() -> set[str]:
    doc = sql_result.RewriteResult.__doc__ or ""
    text = doc.split("`statement_kind` is one of:", 1)[1].split("`empty`", 1)[0]
    text = re.sub(r"\([^)]*\)", "", text).replace("and, only when no table is protected:", ",")
    return {w.strip(" .;\n") for w in re.split(r"[,;\n]", text) if w.strip(" .;\n")} | {"empty"}


def _produced_sql_kinds() -> set[str]:
    """Every literal kind the SQL rewriter's modules can hand back."""
    patterns = (
        r'Classified\(\s*"(\w+)"',
        r'TextStatement\(\s*"(\w+)"',
        r'passthrough\([^,]+,\s*"(\w+)"',
        r'statement_kind="(\w+)"',
        r'\.kind = "(\w+)"',
    )
    found = set()
    for path in SQL_SOURCES.glob("*.py"):
        source = path.read_text()
        for pattern in patterns:
            found |= set(re.findall(pattern, source))
    return found


def test_every_sql_statement_kind_is_classified():
    specs = {kind.split(":", 1)[1] for kind in kinds.SQL}
    documented = _documented_sql_kinds()
    assert {"query", "insert", "alter", "command", "unknown", "empty"} <= documented  # the reading works
    assert sorted(documented - specs) == [], "documented kinds without an entry in policy/kinds.py"
    assert sorted(specs - documented) == [], "entries for kinds RewriteResult does not document"
    produced = _produced_sql_kinds()
    assert {"query", "insert", "load", "show", "row_access_policy"} <= produced  # the scan works
    assert sorted(produced - specs) == [], "the rewriter produces kinds without an entry in policy/kinds.py"


def test_the_walkers_tables_are_derived_from_the_specs():
    for family, _, _, specs in PROTOCOL:
        table = {"relation": classify.RELATIONS, "command": classify.COMMANDS,
                 "expression": classify.EXPRESSIONS, "catalog": classify.CATALOG_OPS}[family]  # fmt: skip
        for kind, spec in specs.items():
            entry = table[kind.split(":", 1)[1]]
            if not spec.admins:
                assert entry == classify.REFUSED and not spec.non_admins, kind
            else:
                assert (entry == classify.ADMIN) == (not spec.non_admins), kind


def test_kinds_refused_for_admins_are_the_unanalysable_ones():
    """Admins' reads are filtered like anyone's: only kinds the walker sees through are
    admin-only; the rest are refused for everyone while a table is protected."""
    refused = sorted(k for k, spec in kinds.SPECS.items() if not spec.admins)
    assert refused == [
        "command:execute_external_command",
        "command:extension",
        "command:pipeline_command",
        "expression:extension",
        "relation:extension",
    ]
    for kind in refused:
        assert kinds.refused_for_admins(kind) == kinds.SPECS[kind].why
    assert kinds.refused_for_admins("command:ml_command") is None


def test_locations_named_by_the_spec_are_extracted():
    cmd = commands_pb2.Command()
    start = cmd.write_stream_operation_start
    start.path = "/out"
    start.options["CHECKPOINTLOCATION"] = "/ckpt"
    start.options["other"] = "x"
    assert sorted(classify.named_locations("command:write_stream_operation_start", cmd)) == ["/ckpt", "/out"]
    rel = relations_pb2.Relation()
    rel.read.data_source.paths.append("/a")
    rel.read.data_source.options["paths"] = '["/b", "/c"]'
    assert sorted(classify.named_locations("relation:read", rel)) == ["/a", "/b", "/c"]
    cat = catalog_pb2.Catalog()
    cat.create_table.table_name = "t"
    cat.create_table.path = "/d"
    assert classify.named_locations("catalog:create_table", cat) == ["/d"]
    assert classify.named_locations("command:write_operation", commands_pb2.Command()) == []

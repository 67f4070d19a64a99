"""How the plan walker treats every relation, command, expression and catalog type.

The kinds themselves, and whether a non-admin may use each while a table is protected,
are one table of data in proxy/rowgate/policy/kinds.py (shared with the pipeline's rule
proxy/rowgate/pipeline/enforce/rules/allowed_kinds.py). This module only adds which handler of
`rewrite.HANDLERS` looks into a kind, and derives the walker's tables from both, so a type
missing from the spec fails closed: a `rel_type`/`command_type`/`expr_type` that is not
listed (a newer client, or a protobuf field this pyspark does not know) is treated like
`extension`, refused for non-admins while any table is protected.

Values of the derived tables:
- `WALK`: carries no data access of its own; its message fields are walked like any other;
- `ADMIN`: refused for non-admins while protection is in force (opaque, or reaches data in
  ways the proxy does not analyse); walked for admins, whose reads inside are filtered;
- `REFUSED`: refused for every caller, admins included, while protection is in force: the
  walker cannot see what it reads (the spec's `admins` is False);
- any other string names a handler (`rewrite.HANDLERS`); the walk continues into the
  message's fields unless the handler says otherwise.
"""

from __future__ import annotations

import json

from google.protobuf.message import Message

from rowgate.policy import kinds

WALK = "walk"
ADMIN = "admin"
REFUSED = "refused"

# Kinds a handler looks into (the rest are walked or refused by their spec alone).
_HANDLED: dict[str, str] = {
    "relation:read": "read",
    "relation:relation_changes": "changes",
    "relation:sql": "sql",
    "relation:catalog": "catalog",
    "relation:unresolved_table_valued_function": "table_function",
    "relation:filter": "filter",  # also recognises the proxy's own filtered reads (reads.py)
    "command:sql_command": "sql_command",
    "command:create_dataframe_view": "create_view",
    "command:write_operation": "write",
    "command:write_operation_v2": "write_v2",
    "command:write_stream_operation_start": "write_stream",
    "command:merge_into_table_command": "merge",
    "command:checkpoint_command": "checkpoint",
    "command:register_function": "register",
    "command:register_table_function": "register",
    "command:register_data_source": "register",
    "expression:expression_string": "expression_string",
    "expression:unresolved_function": "function",
    "expression:call_function": "function",
}


def _table(specs: dict[str, kinds.KindSpec]) -> dict[str, str]:
    out = {}
    for key, spec in specs.items():
        name = key.split(":", 1)[1]
        if not spec.admins:
            out[name] = REFUSED
        elif not spec.non_admins:
            out[name] = ADMIN
        else:
            out[name] = _HANDLED.get(key, WALK)
    return out


RELATIONS: dict[str, str] = _table(kinds.RELATIONS)
COMMANDS: dict[str, str] = _table(kinds.COMMANDS)
EXPRESSIONS: dict[str, str] = _table(kinds.EXPRESSIONS)
# Catalog API ops, reported with their string arguments (`CatalogOp`); none reads table rows.
CATALOG_OPS: dict[str, str] = _table(kinds.CATALOG)


def named_locations(kind: str, message: Message) -> list[str]:
    """The values of the spec's `locations` fields of a kind in `message`, e.g. the path of a
    `write_operation` or the `checkpointLocation` option of a streaming write.

    `message` is the message holding the kind's oneof (a Relation, Command, Expression or
    Catalog). Map keys compare case-insensitively (Spark's options do); a `paths` option
    holds a JSON list.
    """
    spec = kinds.spec_of(kind)
    if spec is None:
        return []
    out: list[str] = []
    for path in spec.locations:
        out.extend(_values(message, path.split(".")))
    return out


def _values(message: Message, steps: list[str]) -> list[str]:
    step, rest = steps[0], steps[1:]
    name, _, key = step.partition("[")
    field = message.DESCRIPTOR.fields_by_name.get(name)
    if field is None:
        return []
    if key:
        wanted = key.rstrip("]").lower()
        values = [v for k, v in getattr(message, name).items() if k.lower() == wanted]
        if wanted == "paths":
            return [p for v in values for p in json_paths(v)]
        return [v for v in values if isinstance(v, str)]
    if field.message_type is not None and not field.is_repeated:
        if not message.HasField(name):
            return []
        return _values(getattr(message, name), rest) if rest else []
    value = getattr(message, name)
    if field.is_repeated:
        return [v for v in value if isinstance(v, str)]
    if field.has_presence and not message.HasField(name):
        return []
    return [value] if isinstance(value, str) and value else []


def json_paths(value: str) -> list[str]:
    """A `paths` option: Spark passes several load() paths to file sources as a JSON array;
    anything else is one path."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return [value]
    if isinstance(parsed, list) and all(isinstance(p, str) for p in parsed):
        return parsed
    return [value]


# Messages that carry shipped code, by protobuf full name -> `UserCode.kind`.
USER_CODE: dict[str, str] = {
    "spark.connect.PythonUDF": "python_udf",
    "spark.connect.JavaUDF": "java_udf",
    "spark.connect.ScalarScalaUDF": "scalar_scala_udf",
    "spark.connect.PythonUDTF": "python_udtf",
    "spark.connect.PythonDataSource": "python_data_source",
}

# Messages that name the code they wrap: full name -> the field holding the name.
CODE_NAMES: dict[str, str] = {
    "spark.connect.CommonInlineUserDefinedFunction": "function_name",
    "spark.connect.CommonInlineUserDefinedTableFunction": "function_name",
    "spark.connect.CommonInlineUserDefinedDataSource": "name",
}

# Subtrees that can hold neither a relation, an expression nor code: not walked (a large
# `isin([...])` literal list or a wide schema would otherwise cost a visit per element).
PRUNE: frozenset[str] = frozenset({"spark.connect.DataType", "spark.connect.Expression.Literal"})

# Read options that select other versions or change feeds of a table: on a protected
# table they need the FILTER USING (TRUE) grant (Delta, Iceberg, Hudi spellings; Spark
# compares option keys case-insensitively).
TIME_TRAVEL_OPTIONS: frozenset[str] = frozenset(
    {
        "versionasof",
        "timestampasof",
        "readchangefeed",
        "readchangedata",
        "startingversion",
        "startingtimestamp",
        "endingversion",
        "endingtimestamp",
        "snapshot-id",
        "as-of-timestamp",
        "branch",
        "tag",
        "start-snapshot-id",
        "end-snapshot-id",
        "start-timestamp",
        "end-timestamp",
        "as.of.instant",
    }
)

# Read options that point a read at files: reported as path reads wherever they appear.
PATH_OPTIONS: frozenset[str] = frozenset({"path", "paths"})

# Read options a protected table read may carry without the full-access grant: they only
# pace or harden a (streaming) file scan of the table's own files. Any other option on a
# protected read is refused, since the proxy cannot tell what it selects.
HARMLESS_READ_OPTIONS: frozenset[str] = frozenset(
    {
        "maxfilespertrigger",
        "maxbytespertrigger",
        "maxfileage",
        "latestfirst",
        "ignorecorruptfiles",
        "ignoremissingfiles",
    }
)

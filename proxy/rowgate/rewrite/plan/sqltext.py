"""SQL text inside plans: `sql` relations and the legacy `sql_command.sql` string.

Both go through `rewrite_sql` with their arguments, so `IDENTIFIER(:name)` resolves with
the value Spark will bind. Only string values matter for that; other arguments stay
positional placeholders (None). The argument expressions themselves are walked like any
expression.

The proxy's own row access policy statements are answered by the pipeline for a
`sql_command` only; the same text anywhere else in a plan (a nested `sql` relation) is
refused, never forwarded.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message
from pyspark.sql.connect.proto import relations_pb2

from rowgate.rewrite.plan.expressions import string_literal
from rowgate.rewrite.plan.walker import Frame, Walk
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql import rewrite_sql
from rowgate.rewrite.sql.names import Args


def sql_relation(walk: Walk, rel: relations_pb2.Relation, frame: Frame) -> Frame | None:
    query = rel.sql
    rewrite_text(walk, query, "query", arguments(query, walk.sql_args), top=frame.top)
    return frame


def rewrite_text(walk: Walk, holder: Message, field: str, args: Args, *, top: bool) -> None:
    text = getattr(holder, field)
    res = rewrite_sql(text, walk.ctx, args=args)
    if res.statement_kind == "row_access_policy" and not top:
        raise refuse.invalid(
            "policy_statement_not_alone", "row access policy statements must be sent on their own with spark.sql()"
        )
    walk.found.merge(res)  # a SQL text of the plan itself: its reads, writes, code and edits
    walk.found.add(statement_kinds=(res.statement_kind,), sql_results=(res,))
    if res.changed:
        setattr(holder, field, res.sql)


def arguments(msg: Message, default: Args = None) -> Args:
    """The SQL arguments of a `SQL` relation or `SqlCommand` (legacy and expression forms).

    Named arguments win over positional ones (Spark refuses a text with both); `default`
    is used when the message carries none.
    """
    named: dict[str, Any] = {}
    for key, literal in msg.args.items():
        named[key] = literal.string if literal.WhichOneof("literal_type") == "string" else None
    for key, expr in msg.named_arguments.items():
        named[key] = string_literal(expr)
    if named:
        return named
    positional: list[Any] = [
        literal.string if literal.WhichOneof("literal_type") == "string" else None for literal in msg.pos_args
    ]
    positional.extend(string_literal(expr) for expr in msg.pos_arguments)
    if positional:
        return positional
    return default

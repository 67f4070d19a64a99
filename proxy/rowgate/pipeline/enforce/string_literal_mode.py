"""`spark.sql.parser.escapedStringLiterals`: allowed, and bound to what rowgate read.

A non-admin may set it (settings_allow_list.py): Spark's own function documentation does,
for `like` and `rlike` patterns with backslashes. It changes no token's extent, only the
value of a string literal holding a backslash (proxy/rowgate/rewrite/sql/escaped_strings.py),
and rowgate reads and renders literals under Spark's default. So, for each plan request:

- no SQL text, before or after the rewrite, holds such a literal: every literal means the
  same under both values; nothing is asked;
- the texts Spark receives hold exactly the client's such literals, and the request names
  no path or location and no `IDENTIFIER(...)` (rowgate reads those from literals): Spark
  reads the client's own literals under the session's value, as it would directly;
- otherwise (rowgate inserted or re-rendered such a literal: a policy filter, a bound
  identity, a canonical rendering; or it judged a path or a name by a literal's value) the
  request runs only while the session holds the server's value, asked from Spark (the
  session's and the shared session's value side by side), else FAILED_PRECONDITION.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

import grpc
from google.protobuf.message import Message
from pyspark.sql.connect.proto import commands_pb2, expressions_pb2, relations_pb2

from rowgate.message_walk import messages
from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.session.epoch import StateVersions
from rowgate.pipeline.session.registry import SessionState
from rowgate.rewrite.sql.escaped_strings import escaped_literals

KEY = "spark.sql.parser.escapedStringLiterals"
# (message type, its field holding SQL text Spark parses in the session)
_TEXT_FIELDS = {
    relations_pb2.SQL.DESCRIPTOR.full_name: "query",
    commands_pb2.SqlCommand.DESCRIPTOR.full_name: "sql",
    expressions_pb2.Expression.ExpressionString.DESCRIPTOR.full_name: "expression",
}
_IDENTIFIER_CLAUSE = re.compile(r"(?<![A-Za-z0-9_])identifier\s*\(", re.IGNORECASE)


def sql_texts(plans: Iterable[Message]) -> list[str]:
    """Every SQL text Spark parses of these plans (`sql` relations and commands, expression strings)."""
    out = []
    for msg in messages(plans):
        field = _TEXT_FIELDS.get(msg.DESCRIPTOR.full_name)
        if field is not None and getattr(msg, field):
            out.append(getattr(msg, field))
    return out


def escaped(texts: list[str]) -> Counter:
    return Counter(literal for text in texts for literal in escaped_literals(text))


def needs_servers_reading(client: list[str], forwarded: list[str], findings: Findings) -> str | None:
    """Why the request is read right only under the server's value, or None."""
    mine, sent = escaped(client), escaped(forwarded)
    if not mine and not sent:
        return None
    if mine != sent:
        return "rowgate inserted or rendered a string literal holding a backslash"
    if findings.paths_read or findings.locations:
        return "rowgate judged a path or location by a string literal's value"
    if any(_IDENTIFIER_CLAUSE.search(text) for text in client):
        return "rowgate resolved an IDENTIFIER(...) clause by a string literal's value"
    return None


async def check(
    versions: StateVersions | None,
    call: Call,
    state: SessionState,
    client: list[str],
    plans: Iterable[Message],
    findings: Findings,
) -> None:
    why = needs_servers_reading(client, sql_texts(plans), findings)
    if why is None:
        return
    if versions is None or not call.session_id:
        raise Refusal(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"rowgate cannot ask Spark this session's {KEY}, and {why}",
            reason="string_literal_mode",
        )
    mine, reference = await versions.settings(call, state, (KEY,))
    have, want = mine.get(KEY.lower()), reference.get(KEY.lower())
    if have is None or want is None or have.strip().lower() != want.strip().lower():
        raise Refusal(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{why}, which Spark reads as rowgate did only under the server's value of {KEY} ({want!r}); this "
            f"session has {have!r}: RESET {KEY} (or set it to {want!r}) to run this statement",
            reason="string_literal_mode",
        )

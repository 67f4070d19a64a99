"""Upstream errors of row-filtered requests, with the policy text taken out.

Spark's error messages quote the query they failed on: the SQL around the failing
expression (`== SQL (line 1, position 130) ==`), the DataFrame call site, the analyzed plan
after `;` for analysis errors. For a request rowgate rewrote, that query is the rewritten
one, so a caller's own `id / 0` error would print the neighbouring policy predicate: other
callers' names, lookup tables, the values that decide who sees what. EXPLAIN is redacted
for the same reason (proxy/rowgate/pipeline/enforce.py).

For an error of a request that read a row-filtered table (and of the ReattachExecute calls
that continue it), the proxy therefore keeps only the part of the message that describes
the error, up to Spark's `SQLSTATE: xxxxx`, and withholds the whole message if even that
part names a literal or a lookup table of an applied policy that the caller did not write
themselves. The error class, SQLSTATE and exception classes stay, so pyspark still raises
the same exception type with the same condition. Of the error's metadata only what pyspark needs
to raise the right exception stays: the `errorId` it would use to fetch the full error
(FetchErrorDetails: messages, query contexts with fragments of the rewritten SQL) and the
server stack trace (which starts with the full message) are removed, and message parameters
that quote a secret are blanked.

Requests that read no protected table, and admins, get Spark's errors untouched.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

import sqlglot
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from sqlglot import exp

STATUS_DETAILS_KEY = "grpc-status-details-bin"
# Where Spark appends what a message quotes: query contexts and the analyzed plan.
_SQLSTATE = re.compile(r"SQLSTATE: [0-9A-Z]{5}")
_QUOTING = re.compile(r"\n== (SQL|DataFrame)\b|;\n|\n\s*[+:]- |\nJVM stacktrace:")
REDACTED = "<redacted by rowgate>"


@dataclass(frozen=True)
class ErrorSecrets:
    """What an error of one request must not print: literals and lookup tables of the
    policies applied to it, except those the caller wrote in the request themselves."""

    tokens: frozenset[str]

    def found_in(self, text: str) -> bool:
        return any(_mentions(text, token) for token in self.tokens)


def _mentions(text: str, token: str) -> bool:
    pattern = re.escape(token)
    if token[:1].isalnum() or token[:1] == "_":
        pattern = r"(?<![\w])" + pattern
    if token[-1:].isalnum() or token[-1:] == "_":
        pattern = pattern + r"(?![\w])"
    return re.search(pattern, text, re.IGNORECASE) is not None


@lru_cache(maxsize=4096)
def policy_tokens(filter_sql: str) -> frozenset[str]:
    """String literals and table names of one policy filter (parsed once per text)."""
    try:
        tree = sqlglot.parse_one(filter_sql, read="spark")
    except sqlglot.errors.ParseError:
        # Validated at creation, so this should not happen; if it does, the quoted strings
        # are the best guess at what must not leak.
        return frozenset(t for t in re.findall(r"'([^']*)'", filter_sql) if len(t) >= 2)
    tokens: set[str] = set()
    for literal in tree.find_all(exp.Literal):
        if literal.is_string and len(literal.this) >= 2:
            tokens.add(literal.this)
    for table in tree.find_all(exp.Table):
        tokens.add(table.name)
        tokens.add(".".join(p.name for p in table.parts))
    return frozenset(t for t in tokens if len(t) >= 2)


def secrets_for(filter_texts: list[str], caller_email: str, own_request: bytes) -> ErrorSecrets:
    tokens: set[str] = set()
    for text in filter_texts:
        tokens |= policy_tokens(text)
        if "session_user" in text.lower() and caller_email:
            tokens.add(caller_email)
    lowered = own_request.lower()
    # What the caller wrote themselves reveals nothing when it comes back.
    return ErrorSecrets(frozenset(t for t in tokens if t.lower().encode() not in lowered))


def redact_message(message: str, secrets: ErrorSecrets) -> str:
    kept = message
    state = _SQLSTATE.search(kept)
    if state is not None:
        kept = kept[: state.end()]
    quoting = _QUOTING.search(kept)
    if quoting is not None:
        kept = kept[: quoting.start()]
    kept = kept.rstrip()
    if secrets.found_in(kept):
        error_class = re.match(r"\s*(\[[A-Z0-9_.]+\])", message)
        return " ".join(
            part
            for part in (
                error_class.group(1) if error_class else "",
                "The query failed where it reads row-filtered data; rowgate withholds Spark's "
                "message because it quotes the row access policy.",
                state.group(0) if state else "",
            )
            if part
        )
    return kept


def redact_status(details: str, trailing: tuple, secrets: ErrorSecrets) -> tuple[str, tuple]:
    """(message, trailing metadata) of an upstream error, redacted consistently: pyspark
    checks that the status message in the details trailer equals the gRPC message."""
    message = redact_message(details, secrets)
    kept = []
    for key, value in trailing:
        if key != STATUS_DETAILS_KEY:
            kept.append((key, value))
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except DecodeError:
            continue  # unreadable details cannot be checked: dropped
        status.message = message
        details_out = []
        for detail in status.details:
            if not detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                continue  # nothing else Spark sends is needed; unknown kinds may quote text
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            _redact_info(info, secrets)
            detail.Pack(info)
            details_out.append(detail)
        del status.details[:]
        status.details.extend(details_out)
        kept.append((key, status.SerializeToString()))
    return message, tuple(kept)


# ErrorInfo metadata a client needs to raise the right exception. Everything else goes:
# `errorId` would let pyspark fetch the unredacted error (FetchErrorDetails), `stackTrace`
# starts with the full message, and keys a later Spark adds are unknown quantities.
KEPT_INFO_KEYS = frozenset({"classes", "sqlState", "errorClass", "messageParameters"})


def _redact_info(info: error_details_pb2.ErrorInfo, secrets: ErrorSecrets) -> None:
    for key in [k for k in info.metadata if k not in KEPT_INFO_KEYS]:
        del info.metadata[key]
    params = info.metadata.get("messageParameters")
    if params:
        try:
            values = json.loads(params)
        except ValueError:
            info.metadata.pop("messageParameters")
            return
        if isinstance(values, dict):
            safe = {k: REDACTED if not isinstance(v, str) or "\n" in v or secrets.found_in(v) else v for k, v in values.items()}
            info.metadata["messageParameters"] = json.dumps(safe)
        else:
            info.metadata.pop("messageParameters")

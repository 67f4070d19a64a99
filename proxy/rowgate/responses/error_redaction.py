"""Upstream errors of row-filtered operations: only what the error allow list relays.

Spark's error messages quote the query they failed on: the SQL around the failing
expression (`== SQL (line 1, position 130) ==`), the DataFrame call site, the analyzed plan
after `;` for analysis errors, and in message parameters values of rows. For a request
rowgate rewrote, that query is the rewritten one, so a caller's own `id / 0` error would
print the neighbouring policy predicate: other callers' names, lookup tables, the values
that decide who sees what. EXPLAIN is redacted for the same reason
(proxy/rowgate/pipeline/enforce/enforcement.py).

For an error of an operation that read a row-filtered table (for admins too: their reads
are filtered like anyone's), and of the ReattachExecute calls that continue it, the proxy
relays Spark's error class, SQLSTATE and exception classes, so pyspark raises the same
exception with the same condition, and of the message parameters only those the allow
list (proxy/rowgate/policy/error_allow_list.py) names for that class and whose values name
no literal or lookup table of an applied policy that the caller did not write themselves.
The message is rowgate's sentence from those parameters, or for a class not on the list
`[CLASS] rowgate withheld Spark's message ... (error class CLASS). SQLSTATE: xxxxx`. The
`errorId` pyspark would use to fetch the full error (FetchErrorDetails: messages, query
contexts with fragments of the rewritten SQL, the stack trace) and the server stack trace
are not relayed.

Where only a message text is at hand (a streaming query's exception, an error without
Spark's ErrorInfo), `withheld_message` keeps its leading error class and SQLSTATE and
nothing of Spark's text: without the parameters as data, no part of it is known to be safe.

Requests that read no protected table get Spark's errors untouched.
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

from rowgate.policy.error_allow_list import allowed, withheld

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


def withheld_message(message: str) -> str:
    """rowgate's message for an error of a filtered operation known only by its text (a
    streaming query's exception, an error without Spark's ErrorInfo): the leading error
    class and the SQLSTATE when Spark's text has them, and rowgate's sentence; nothing of
    Spark's message, which may quote the rewritten query, the plan or values of rows.

    >>> withheld_message("[DIVIDE_BY_ZERO] Division by zero. Use `try_divide` ... region = 'eu' SQLSTATE: 22012")
    "[DIVIDE_BY_ZERO] rowgate withheld Spark's message for a read of a protected table (error class DIVIDE_BY_ZERO). SQLSTATE: 22012"
    >>> withheld_message("Deadline Exceeded")
    "rowgate withheld Spark's message for a read of a protected table (an error without an error class)."
    """
    found = _LEADING_CLASS.match(message)
    error_class = found.group(1) if found else None
    state = _SQLSTATE.search(message)
    return " ".join(
        part
        for part in (f"[{error_class}]" if error_class else "", withheld(error_class), state.group(0) if state else "")
        if part
    )


def redact_status(details: str, trailing: tuple, secrets: ErrorSecrets) -> tuple[str, tuple]:
    """(message, trailing metadata) of an upstream error of a filtered operation, rebuilt
    from the error allow list (proxy/rowgate/policy/error_allow_list.py): error class,
    SQLSTATE, exception classes and the allowed message parameters, with rowgate's message.
    pyspark checks that the status message in the details trailer equals the gRPC message.

    An error without Spark's ErrorInfo is not Spark's (gRPC's own: a deadline, a message
    too large): its message is `withheld_message`'s, like every error known only by text."""
    kept: list = []
    rebuilt: tuple[str, bytes] | None = None
    message: str | None = None
    for key, value in trailing:
        if key != STATUS_DETAILS_KEY:
            kept.append((key, value))
            continue
        if rebuilt is not None:
            continue  # one status only
        try:
            status = status_pb2.Status.FromString(value)
        except DecodeError:
            continue  # unreadable details cannot be checked: dropped
        info = _error_info(status)
        if info is None:
            continue  # nothing pyspark reads is lost; other kinds may quote text
        message, out = rebuild_error(details, info, secrets)
        del status.details[:]
        status.message = message
        status.details.add().Pack(out)
        rebuilt = (key, status.SerializeToString())
    if rebuilt is None or message is None:
        return withheld_message(details), tuple(kept)
    kept.append(rebuilt)
    return message, tuple(kept)


def _error_info(status: status_pb2.Status) -> error_details_pb2.ErrorInfo | None:
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    return None


_JAVA_CLASS = re.compile(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*")
_ERROR_CLASS = re.compile(r"[A-Z][A-Z0-9_]*(\.[A-Z][A-Z0-9_]*)*")
_STATE = re.compile(r"[0-9A-Z]{5}")
_LEADING_CLASS = re.compile(r"\s*\[([A-Z][A-Z0-9_]*(?:\.[A-Z][A-Z0-9_]*)*)\]")
MAX_PARAMETER = 1000


def rebuild_error(
    details: str, info: error_details_pb2.ErrorInfo, secrets: ErrorSecrets
) -> tuple[str, error_details_pb2.ErrorInfo]:
    """rowgate's message and ErrorInfo for Spark's error (`details`, `info`) of a filtered
    operation: nothing of Spark's text but the allowed parameters (error_allow_list).

    ErrorInfo keeps what pyspark needs to raise the same exception (`classes`,
    `errorClass`, `sqlState`, `reason`) and the allowed `messageParameters`; the `errorId`
    pyspark would fetch the full error with (FetchErrorDetails: messages, query contexts
    quoting the rewritten SQL, the stack trace) and the `stackTrace` (which starts with
    the full message) are not relayed, nor anything a later Spark adds."""
    meta = info.metadata
    error_class = meta.get("errorClass", "")
    if not _ERROR_CLASS.fullmatch(error_class):
        found = _LEADING_CLASS.match(details)
        error_class = found.group(1) if found else ""
    state = meta.get("sqlState", "")
    if not _STATE.fullmatch(state):
        found_state = _SQLSTATE.search(details)
        state = found_state.group(0)[-5:] if found_state else ""
    classes = _classes(meta.get("classes", ""))
    reason = info.reason if _JAVA_CLASS.fullmatch(info.reason) else ""
    params = _relayable(error_class, meta.get("messageParameters", ""), secrets)

    entry = allowed(error_class) if error_class else None
    sentence = entry.render(params) if entry is not None else None
    if sentence is None:
        sentence = withheld(error_class or None, reason or (classes[0] if classes else None))
    message = " ".join(
        part for part in (f"[{error_class}]" if error_class else "", sentence, f"SQLSTATE: {state}" if state else "") if part
    )

    out = error_details_pb2.ErrorInfo(reason=reason, domain=info.domain if _JAVA_CLASS.fullmatch(info.domain) else "")
    if classes:
        out.metadata["classes"] = json.dumps(classes)
    if error_class:
        out.metadata["errorClass"] = error_class
    if state:
        out.metadata["sqlState"] = state
    if error_class:
        out.metadata["messageParameters"] = json.dumps(params)
    return message, out


def _classes(raw: str) -> list[str]:
    """The exception classes pyspark picks its exception type from (names of Java classes)."""
    try:
        values = json.loads(raw) if raw else []
    except ValueError:
        return []
    if not isinstance(values, list):
        return []
    return [v for v in values if isinstance(v, str) and _JAVA_CLASS.fullmatch(v)]


def _relayable(error_class: str, raw: str, secrets: ErrorSecrets) -> dict[str, str]:
    """The allowed message parameters of `error_class` whose values name no secret."""
    entry = allowed(error_class) if error_class else None
    if entry is None or not raw:
        return {}
    try:
        values = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(values, dict):
        return {}
    return {
        name: value
        for name in entry.params
        if isinstance(value := values.get(name), str)
        and len(value) <= MAX_PARAMETER
        and "\n" not in value
        and not secrets.found_in(value)
    }

"""What a row access policy's filter may be: one boolean expression, nothing that acts.

A filter runs inside every query of every caller it applies to, so it is checked before it
is stored, whichever way it arrives (the DDL grammar in ddl.py, the admin API): it must parse
as Spark SQL, be a boolean expression, and contain no statement and no function that runs
arbitrary JVM code. Whether its columns exist is Spark's to say, against the real table.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError


class FilterInvalid(ValueError):
    """A filter that cannot be a row predicate; `offset` is where in its text (0: the start)."""

    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.message = message
        self.offset = offset


_FORBIDDEN_IN_FILTER = tuple(
    getattr(exp, n)
    for n in (
        "DML",
        "DDL",
        "Insert",
        "Update",
        "Delete",
        "Merge",
        "Create",
        "Drop",
        "Alter",
        "TruncateTable",
        "Command",
        "Use",
        "Set",
        "Copy",
        "LoadData",
        "Cache",
        "Uncache",
        "Describe",
        "Pragma",
        "Grant",
        "Revoke",
        "Transaction",
        "Commit",
        "Rollback",
        "QueryTransform",
        "Analyze",
        "Refresh",
        "Show",
        "Kill",
        "Execute",
        "Declare",
    )
    if hasattr(exp, n)
)
# Functions that run arbitrary JVM code: a filter runs inside every caller's query.
_FORBIDDEN_FUNCTIONS = {"REFLECT", "JAVA_METHOD", "TRY_REFLECT"}
_NOT_BOOLEAN = (
    exp.Literal,
    exp.Null,
    exp.Star,
    exp.Alias,
    exp.Tuple,
    exp.Array,
    exp.Struct,
    exp.Interval,
    exp.Neg,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.IntDiv,
    exp.Mod,
    exp.DPipe,
    exp.BitwiseAnd,
    exp.BitwiseOr,
    exp.BitwiseXor,
    exp.BitwiseNot,
    exp.BitwiseLeftShift,
    exp.BitwiseRightShift,
)


def check_filter(text: str) -> None:
    """Reject filters that cannot be a row predicate before they ever reach Spark.

    Only syntax is checked here; whether the columns exist is checked against the real
    table by the caller, which knows the session. Raises `FilterInvalid`.

    >>> check_filter("region = 'EU' OR owner = current_user()")
    >>> check_filter("1 + 1")
    Traceback (most recent call last):
    ...
    rowgate.policy.filter_check.FilterInvalid: a filter must be a boolean expression, found '1 + 1'
    """
    try:
        tree = sqlglot.parse_one(text, read="spark")
    except ParseError as e:
        detail = e.errors[0] if e.errors else {}
        at = _offset_in(text, detail.get("line"), detail.get("col"))
        description = detail.get("description") or str(e).splitlines()[0]
        if description.startswith("Required keyword"):
            description = "the expression is incomplete"
        raise FilterInvalid(f"invalid filter: {description}", at) from None
    except TokenError:
        raise FilterInvalid("invalid filter: cannot tokenize it") from None
    for node in tree.walk():
        if isinstance(node, _FORBIDDEN_IN_FILTER):
            kind = node.key.upper() if not isinstance(node, exp.Command) else str(node.this).upper()
            raise FilterInvalid(f"a filter may not contain {kind} statements, only a boolean expression")
        if isinstance(node, exp.Anonymous) and str(node.this).upper() in _FORBIDDEN_FUNCTIONS:
            raise FilterInvalid(f"a filter may not call {str(node.this).lower()}()")
    root = tree.unnest() if isinstance(tree, exp.Paren) else tree
    if isinstance(root, exp.Query) and not isinstance(root, exp.Subquery):
        raise FilterInvalid("a filter must be a boolean expression, found a query (a scalar subquery needs its own parentheses)")
    if isinstance(root, _NOT_BOOLEAN):
        raise FilterInvalid(f"a filter must be a boolean expression, found '{root.sql(dialect='spark')}'")


def _offset_in(text: str, line: int | None, col: int | None) -> int:
    if not line or not col:
        return 0
    lines = text.split("\n")
    line = min(line, len(lines))
    return sum(len(text_line) + 1 for text_line in lines[: line - 1]) + max(min(col, len(lines[line - 1])) - 1, 0)

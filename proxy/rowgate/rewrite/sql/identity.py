"""Caller identity functions become the caller's email, fixed at rewrite time.

Spark evaluates `current_user()`, `session_user()` and `user()` (and the bare
`current_user` / `session_user` keywords) as the server's own user, which behind the proxy
is the proxy's service identity. In the caller's SQL they must mean the caller.

A bare `user` is left alone: sqlglot reads it as a column, and so does Spark whenever the
relation has a column of that name (common), so replacing it would change results.

>>> import sqlglot
>>> tree = sqlglot.parse_one("SELECT current_user(), session_user, user() FROM t", read="spark")
>>> bind_caller_identity(tree, "alice@example.com", name_columns=True)
True
>>> tree.sql("spark")
"SELECT 'alice@example.com' AS `current_user()`, 'alice@example.com' AS `session_user()`, 'alice@example.com' AS `user()` FROM t"

A projection keeps the column name Spark would have given the client's expression
(`current_user()`, `upper(current_user())`; issue #22), so code that reads
`row["current_user()"]` works the same behind the proxy.
"""

from __future__ import annotations

import re

from sqlglot import exp

IDENTITY_FUNCTION_NAMES = frozenset({"USER", "SESSION_USER", "CURRENT_USER"})
NAMED = "rowgate_named"  # meta of an alias that names a projection after the client's expression


def is_identity_function(node: exp.Expr) -> bool:
    if isinstance(node, (exp.CurrentUser, exp.SessionUser)):
        return True
    return isinstance(node, exp.Anonymous) and node.name.upper() in IDENTITY_FUNCTION_NAMES


def bind_caller_identity(
    root: exp.Expr,
    email: str,
    *,
    skip: frozenset[int] = frozenset(),
    name_columns: bool = False,
    text: str | None = None,
) -> bool:
    """Replace identity functions under `root` in place; True when any was replaced.

    `name_columns`: an unaliased projection holding an identity function is aliased with
    the name Spark gives the client's expression (`spark_name`, read from `text`, the text
    the tree was parsed from, when known), so the column keeps its name.

    Subtrees whose `id()` is in `skip` are left untouched (persistent view and function
    bodies, which must keep meaning "whoever reads this").
    """
    found = [
        node
        for node in root.walk(bfs=False, prune=lambda n: id(n) in skip)
        if id(node) not in skip and is_identity_function(node)
    ]
    if name_columns:
        for top in {id(p): p for p in (_projection(node) for node in found) if p is not None}.values():
            name = spark_name(top, text)
            if name is not None:
                alias = exp.Alias(this=top.copy(), alias=exp.to_identifier(name, quoted=True))
                alias.meta[NAMED] = True  # splice.py: only the alias is inserted into the client's text
                top.replace(alias)
        found = [
            node
            for node in root.walk(bfs=False, prune=lambda n: id(n) in skip)
            if id(node) not in skip and is_identity_function(node)
        ]
    for node in found:
        node.replace(exp.Literal.string(email))
    return bool(found)


def _projection(node: exp.Expr) -> exp.Expr | None:
    """The unaliased projection of a SELECT that `node` is part of (not through a subquery)."""
    child, parent = node, node.parent
    while parent is not None:
        if isinstance(parent, exp.Select):
            return child if any(e is child for e in parent.expressions) else None
        if isinstance(parent, (exp.Alias, exp.Query, exp.Subquery)):
            return None
        child, parent = parent, parent.parent
    return None


# ---------------------------------------------------------------------------- Spark's names

_BINARY: dict[type[exp.Expr], str] = {  # a <> b is named (NOT (a = b)), below
    exp.EQ: "=",
    exp.NullSafeEQ: "<=>",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
    exp.And: "AND",
    exp.Or: "OR",
}
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def spark_name(node: exp.Expr, text: str | None) -> str | None:
    """The column name Spark gives the unaliased projection `node` (its pretty SQL), or None
    where the proxy cannot be sure of it.

    Spark names a projection after its expression, printed its own way: functions by the
    name the client wrote, lower-cased, with their arguments; string literals unquoted;
    comparisons and arithmetic parenthesised; a bare `session_user` as `current_user()`.
    Only forms whose printing is known are named; for any other the column stays named
    after the bound literal.

    >>> from rowgate.rewrite.sql.canonical import parse_like_spark  # records source spans
    >>> sql = "SELECT UCASE(current_user), current_user() = 'a', nvl(user(), 1.50), session_user"
    >>> [spark_name(e, sql) for e in parse_like_spark(sql)[0].expressions]
    ['ucase(current_user())', '(current_user() = a)', 'nvl(user(), 1.50)', 'current_user()']
    """
    try:
        return _name(node, text)
    except _Unknown:
        return None


class _Unknown(Exception):
    pass


def _source(node: exp.Expr, text: str | None) -> str | None:
    from rowgate.rewrite.sql.splice import span

    where = span(node) if text is not None else None
    return None if where is None or text is None else text[where[0] : where[1] + 1]


def _name(node: exp.Expr, text: str | None) -> str:
    if is_identity_function(node):
        return _identity_name(node, text)
    if isinstance(node, exp.Paren):
        return _name(node.this, text)
    if isinstance(node, exp.Column) and not node.table:
        return node.name
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        raw = _source(node, text)
        if raw is None or not _NUMBER.fullmatch(raw):
            raise _Unknown
        return raw
    if isinstance(node, exp.Boolean):
        return "true" if node.this else "false"
    if isinstance(node, exp.Null):
        return "NULL"
    if isinstance(node, exp.Not):
        inner = node.this
        if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
            return f"({_name(inner.this, text)} IS NOT NULL)"
        return f"(NOT {_name(inner, text)})"
    if isinstance(node, exp.NEQ):
        return f"(NOT ({_name(node.this, text)} = {_name(node.expression, text)}))"
    if type(node) in _BINARY:
        return f"({_name(node.this, text)} {_BINARY[type(node)]} {_name(node.expression, text)})"
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return f"({_name(node.this, text)} IS NULL)"
    if isinstance(node, exp.DPipe):
        return f"concat({_name(node.this, text)}, {_name(node.expression, text)})"
    if isinstance(node, exp.Like) and not node.args.get("escape"):
        return f"{_name(node.this, text)} LIKE {_name(node.expression, text)}"
    if isinstance(node, exp.In) and node.expressions and not node.args.get("query"):
        return f"({_name(node.this, text)} IN ({', '.join(_name(e, text) for e in node.expressions)}))"
    if isinstance(node, exp.If) and (_source(node, text) or "").lower().startswith("if"):
        parts = [p for p in (node.this, node.args.get("true"), node.args.get("false")) if isinstance(p, exp.Expr)]
        if len(parts) != 3:
            raise _Unknown
        return f"(IF({', '.join(_name(p, text) for p in parts)}))"
    if isinstance(node, exp.Case) and not node.this:
        whens = " ".join(f"WHEN {_name(i.this, text)} THEN {_name(i.args['true'], text)}" for i in node.args["ifs"])
        default = node.args.get("default")
        return f"CASE {whens}{'' if default is None else ' ELSE ' + _name(default, text)} END"
    if isinstance(node, exp.Neg):
        return f"(- {_name(node.this, text)})"
    if isinstance(node, exp.Func):
        return _function_name(node, text)
    raise _Unknown


def _identity_name(node: exp.Expr, text: str | None) -> str:
    if isinstance(node, exp.SessionUser):
        raw = _source(node, text)
        bare = raw is not None and not raw.rstrip().endswith(")")
        return "current_user()" if bare else "session_user()"  # Spark names a bare session_user so
    if isinstance(node, exp.CurrentUser):
        return "current_user()"
    return node.name.lower() + "()"


def _function_name(node: exp.Func, text: str | None) -> str:
    """`name(arg, ...)` as the client wrote the name; arguments in the order written."""
    raw = _source(node, text)
    if raw is None or "(" not in raw or not raw.rstrip().endswith(")"):
        raise _Unknown
    written = raw[: raw.index("(")].strip()
    if not _WORD.fullmatch(written) or written.lower() in ("if", "cast", "try_cast", "trim", "extract", "count"):
        raise _Unknown  # Spark prints these its own way
    children = [c for v in node.args.values() for c in (v if isinstance(v, list) else [v]) if isinstance(c, exp.Expr)]
    placed = []
    for child in children:
        where = _source_span(child, text)
        if where is None:
            raise _Unknown
        placed.append((where, child))
    placed.sort(key=lambda item: item[0])
    return f"{written.lower()}({', '.join(_name(c, text) for _, c in placed)})"


def _source_span(node: exp.Expr, text: str | None) -> tuple[int, int] | None:
    from rowgate.rewrite.sql.splice import span

    return span(node) if text is not None else None

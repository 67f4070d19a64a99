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

A projection keeps the column name Spark would have given the function (`current_user()`),
so code that reads `row["current_user()"]` works the same behind the proxy.
"""

from __future__ import annotations

from sqlglot import exp

IDENTITY_FUNCTION_NAMES = frozenset({"USER", "SESSION_USER", "CURRENT_USER"})


def is_identity_function(node: exp.Expr) -> bool:
    if isinstance(node, (exp.CurrentUser, exp.SessionUser)):
        return True
    return isinstance(node, exp.Anonymous) and node.name.upper() in IDENTITY_FUNCTION_NAMES


def bind_caller_identity(root: exp.Expr, email: str, *, skip: frozenset[int] = frozenset(), name_columns: bool = False) -> bool:
    """Replace identity functions under `root` in place; True when any was replaced.

    `name_columns`: an unaliased projection gets Spark's column name for the function.

    Subtrees whose `id()` is in `skip` are left untouched (persistent view and function
    bodies, which must keep meaning "whoever reads this").
    """
    found = [
        node
        for node in root.walk(bfs=False, prune=lambda n: id(n) in skip)
        if id(node) not in skip and is_identity_function(node)
    ]
    for node in found:
        literal: exp.Expr = exp.Literal.string(email)
        parent = node.parent
        if name_columns and isinstance(parent, exp.Select) and any(e is node for e in parent.expressions):
            literal = exp.Alias(this=literal, alias=exp.to_identifier(_spark_column_name(node), quoted=True))
        node.replace(literal)
    return bool(found)


def _spark_column_name(node: exp.Expr) -> str:
    """What Spark names an unaliased identity function's column: its name as registered."""
    if isinstance(node, exp.CurrentUser):
        return "current_user()"
    if isinstance(node, exp.SessionUser):
        return "session_user()"
    return node.name.lower() + "()"

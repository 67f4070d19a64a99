"""Which rows of one table a caller may see: a pure function of the caller and the table's policies.

Kept free of I/O and of the rewriter so the rule that matters most - absence of a grant is
denial, several grants are OR-ed - can be tested and audited on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache, reduce

import sqlglot
from sqlglot import exp

from rowgate.identity.caller import Caller
from rowgate.policy.model import RowAccessPolicy

_USER_FUNCTION_NAMES = {"USER", "SESSION_USER", "CURRENT_USER"}


def row_filter(caller: Caller, policies: Sequence[RowAccessPolicy]) -> exp.Expression | None:
    """The predicate a read of the table must be filtered by; None when the table is unprotected.

    A protected table the caller holds no grant on yields FALSE (zero rows, same schema),
    never None: None would read as "unprotected" and expose every row.
    """
    if not policies:
        return None
    granted = _granted(caller, policies)
    if not granted:
        return exp.false()
    parts: list[exp.Expression] = [exp.Paren(this=_bound_filter(p.filter_sql, caller.email)) for p in granted]
    return reduce(lambda left, right: exp.Or(this=left, expression=right), parts)


def has_full_access(caller: Caller, policies: Sequence[RowAccessPolicy]) -> bool:
    """Whether nothing is withheld from the caller: writes and time travel need this.

    True for an unprotected table (no policies) and when a `FILTER USING (TRUE)` policy
    grants the caller.
    """
    if not policies:
        return True
    return any(p.is_full_access for p in _granted(caller, policies))


def applied_policies(caller: Caller, policies: Sequence[RowAccessPolicy]) -> tuple[str, ...]:
    """Names of the policies whose filters are OR-ed for this caller, in filter order (for audit)."""
    return tuple(p.name for p in _granted(caller, policies))


def _granted(caller: Caller, policies: Sequence[RowAccessPolicy]) -> list[RowAccessPolicy]:
    # Ordered by name so the same policies always give the same SQL (plan caches, audit logs).
    ordered = sorted(policies, key=lambda p: (p.name.casefold(), p.name))
    return [p for p in ordered if p.grantee_set.covers(caller)]


def _bound_filter(filter_sql: str, email: str) -> exp.Expression:
    """The filter with every "who is asking" function fixed to the caller.

    Spark would otherwise evaluate SESSION_USER() as the server's own user, so a filter like
    `owner = SESSION_USER()` would show the server's rows to everyone.
    """

    def bind(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.SessionUser, exp.CurrentUser)) or (
            isinstance(node, exp.Anonymous) and str(node.this).upper() in _USER_FUNCTION_NAMES
        ):
            return exp.Literal.string(email)
        return node

    return _parsed(filter_sql).copy().transform(bind, copy=False)


@lru_cache(maxsize=4096)
def _parsed(filter_sql: str) -> exp.Expression:
    # Filters were validated when stored; a parse error here raises, and the caller must
    # refuse the query rather than run it unfiltered.
    parsed = sqlglot.parse_one(filter_sql, read="spark")
    assert isinstance(parsed, exp.Expression)  # sqlglot types parse_one loosely (Expr)
    return parsed

"""SQL rewriting for row access policies: `rewrite_sql(sql, ctx, args=...)`.

See `rewriter.py` for the order of steps and the other modules for one step each:
`scope` (visible names), `names` (what a name refers to), `views` (view expansion),
`wrap` (protected reads), `identity` (caller identity functions), `statements` (statement
kinds, writes, session effects).
"""

from rowgate.rewrite.sql.errors import INVALID_ARGUMENT, PERMISSION_DENIED, RewriteRefused
from rowgate.rewrite.sql.result import PathRead, RewriteResult, SessionEffects
from rowgate.rewrite.sql.rewriter import protection_in_force, rewrite_sql

__all__ = [
    "INVALID_ARGUMENT",
    "PERMISSION_DENIED",
    "PathRead",
    "RewriteRefused",
    "RewriteResult",
    "SessionEffects",
    "protection_in_force",
    "rewrite_sql",
]

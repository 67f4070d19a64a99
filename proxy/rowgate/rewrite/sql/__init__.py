"""SQL rewriting for row access policies: `rewrite_sql(sql, ctx, args=...)`.

`rewriter.py` reads the text (tokens, text-level statements, parse); `passes.py` lists the
passes a parsed statement goes through, in order, as data. One job per module:
`text_statements` (SET/SHOW/EXPLAIN... read from tokens), `classify` (what a parsed
statement is; pure), `effects` (what it changes, refused writes), `identity` (caller
identity functions), `reads` (the walk over relation reads) with `resolve` (what a name
reads), `views` (view expansion), `protect` (protected reads wrapped) and `pin` (names
qualified), `scope` (visible names), `names` (name parts), `wrap` (filtering SELECTs and
rendering), `leakproof` (predicates placed below a guard), `canonical` (the proxy's own
text), `run` (one call's caches and findings).
"""

from rowgate.rewrite.sql.result import PathRead, RewriteResult, SessionEffects
from rowgate.rewrite.sql.rewriter import protection_in_force, rewrite_sql

__all__ = [
    "PathRead",
    "RewriteResult",
    "SessionEffects",
    "protection_in_force",
    "rewrite_sql",
]

"""Plan rewriting for row access policies: `rewrite_plan(message, ctx, sql_args=...)`.

See `rewrite.py` for how the pieces fit; `compression.py` opens compressed plans first.
"""

from rowgate.rewrite.plan.result import CatalogOp, PlanRewriteResult, TempView, UserCode
from rowgate.rewrite.plan.rewrite import rewrite_plan

__all__ = ["CatalogOp", "PlanRewriteResult", "TempView", "UserCode", "rewrite_plan"]

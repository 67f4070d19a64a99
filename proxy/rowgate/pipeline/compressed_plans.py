"""Opens compressed plans first and closes them last, around every step that inspects plans.

The opening and closing are rewrite/plan/compression.py's; here a plan the proxy cannot
open becomes the client's INVALID_ARGUMENT, since a plan the proxy cannot read is a plan
it cannot vouch for.
"""

from __future__ import annotations

from rowgate.pipeline.core import Answer, Call, Refusal
from rowgate.rewrite.plan.compression import CompressedPlanError, compress_plan, decompress_plan, plans_of

# The RPCs whose requests carry a Plan (tests/unit/pipeline/test_pipeline_order.py checks no other does).
PLAN_RPCS = frozenset({"ExecutePlan", "AnalyzePlan"})


async def open_compressed_plans(call: Call) -> Answer | None:
    compressed = [p for p in plans_of(call.request) if p.WhichOneof("op_type") == "compressed_operation"]
    for plan in compressed:
        try:
            decompress_plan(plan)
        except CompressedPlanError as e:
            raise Refusal.invalid(str(e), reason=e.reason) from e
    call.facts.compressed_plans = compressed
    return None


async def recompress_plans(call: Call) -> Answer | None:
    for plan in call.facts.compressed_plans:
        compress_plan(plan)
    return None

"""Plan text of a filtered plan is not shown: it would print the policy predicates.

`EXPLAIN`, `df.explain()` (AnalyzePlan explain / tree_string) of a plan that applies row
filters get a short note that a filter applies instead; `df.inputFiles()` of such a plan is
refused for non-admins (the file list of the unfiltered table).
"""

from __future__ import annotations

from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.findings import Findings

# AnalyzePlan answers that print the plan: the rewritten plan holds the policy predicates.
PLAN_TEXT_ANALYSES = ("explain", "tree_string")


def redacted_plan_text(call: Call, findings: Findings, admin: bool) -> str | None:
    """The text to answer instead of the plan, or None when the request goes upstream."""
    if not findings.filtered:
        return None
    if call.method.name == "ExecutePlan":
        return _note(findings) if findings.explain else None
    analysis = call.request.WhichOneof("analyze")
    if analysis not in PLAN_TEXT_ANALYSES:
        if analysis == "input_files" and not admin:
            raise Refusal.denied("input files of a plan that reads tables protected by row access policies are not shown")
        return None
    return _note(findings)


def _note(findings: Findings) -> str:
    return (
        "== rowgate ==\nThis plan reads tables protected by row access policies "
        f"({', '.join(sorted(str(t) for t in findings.tables_read))}); a row filter applies.\n"
        "The plan itself is not shown because it would reveal the policy predicates.\n"
    )

"""Plan text of a filtered plan is not shown: it would print the policy predicates.

`EXPLAIN`, `df.explain()` (AnalyzePlan explain / tree_string) of a plan that applies row
filters get a short note that a filter applies instead; `df.inputFiles()` of such a plan is
refused for non-admins (the file list of the unfiltered table). The same holds for a plan
that reads a temp view or checkpoint holding protected rows: Spark stored the filtered plan
for it, and explaining a read of it prints that plan, predicates and all.
"""

from __future__ import annotations

from collections.abc import Callable

from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.enforce.findings import Findings

# AnalyzePlan answers that print the plan: the rewritten plan holds the policy predicates.
PLAN_TEXT_ANALYSES = ("explain", "tree_string")


def redacted_plan_text(
    call: Call, findings: Findings, admin: bool, holds_protected_rows: Callable[[], bool] = lambda: False
) -> str | None:
    """The text to answer instead of the plan, or None when the request goes upstream.

    `holds_protected_rows`: whether the plan reads session data (a temp view, a checkpoint)
    made from protected tables; asked only for requests that would print a plan.
    """
    if call.method.name == "ExecutePlan":
        prints_plan = findings.explain
    else:
        analysis = call.request.WhichOneof("analyze")
        if findings.filtered and analysis == "input_files" and not admin:
            raise Refusal.denied("input files of a plan that reads tables protected by row access policies are not shown")
        prints_plan = analysis in PLAN_TEXT_ANALYSES
    if not prints_plan:
        return None
    if findings.filtered:
        return _note(findings)
    return VIEW_NOTE if holds_protected_rows() else None


def _note(findings: Findings) -> str:
    return (
        "== rowgate ==\nThis plan reads tables protected by row access policies "
        f"({', '.join(sorted(str(t) for t in findings.tables_read))}); a row filter applies.\n"
        "The plan itself is not shown because it would reveal the policy predicates.\n"
    )


VIEW_NOTE = (
    "== rowgate ==\nThis plan reads a temp view or checkpoint made from tables protected by row access "
    "policies; their row filter applies.\nThe plan itself is not shown because it would reveal the policy predicates.\n"
)

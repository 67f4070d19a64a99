"""What all the plans of one request do, merged over SQL texts and relation plans.

The rewriters report facts per plan and per SQL text (`PlanRewriteResult`, `RewriteResult`);
the enforcement step merges them here once (`Findings.merge`: each fact by the rule it
declares, rewrite/facts.py), so every rule (proxy/rowgate/pipeline/enforce/rules/) reads one
typed object instead of re-walking the results.
"""

from __future__ import annotations

from dataclasses import dataclass

from rowgate.policy.model import TableName
from rowgate.rewrite.facts import Mergeable, RewriteFacts, derived
from rowgate.rewrite.plan.result import PlanFacts
from rowgate.rewrite.sql.result import RewriteResult

# What Findings merges: one SQL text's result or one plan's (`PlanRewriteResult`).
Report = RewriteResult | PlanFacts

# The walker's names for shipped code, mapped to the operator settings that allow them.
CODE_KINDS = {
    "python_udf": "python_udf",
    "python_udtf": "python_udf",
    "python_data_source": "python_udf",
    "java_udf": "java_udf",
    "scalar_scala_udf": "java_udf",
}
# Catalog API calls that move the session's current catalog or database.
POSITION_OPS = frozenset({"set_current_database", "set_current_catalog"})
TEMP_VIEW_DROPS = frozenset({"drop_temp_view"})


def _paths(mine: set[str], report: Report) -> set[str]:
    return mine | {p.path for p in report.paths_read}


def _locations(mine: set[str], report: Report) -> set[str]:
    if isinstance(report, RewriteResult):
        # CREATE TABLE ... LOCATION, ALTER TABLE ... [ADD PARTITION ...] LOCATION, OPTIONS
        # (path ...), LOAD DATA INPATH: a table put over files reads (and may delete) them.
        return mine | set(report.session_effects.locations)
    # Writing to files by path, or creating a table over them, reaches those files as
    # surely as reading them: the same allow list applies (rules/file_paths.py).
    return mine | set(report.paths_written) | set(report.locations)


def _kinds(mine: set[str], report: Report) -> set[str]:
    if isinstance(report, RewriteResult):
        return mine | {f"sql:{report.statement_kind}"}
    return mine | set(report.constructs)


def _code(mine: set[str], report: Report) -> set[str]:
    return mine | {CODE_KINDS.get(code.kind, code.kind) for code in report.user_code}


def _sql_results(mine: list[RewriteResult], report: Report) -> list[RewriteResult]:
    return [*mine, report] if isinstance(report, RewriteResult) else mine


def _created(mine: dict[str, frozenset[TableName]], report: Report) -> dict[str, frozenset[TableName]]:
    if isinstance(report, RewriteResult):
        names = list(report.session_effects.temp_views_created)
    else:
        names = [("global_temp." if v.is_global else "") + v.name.lower() for v in report.temp_views_created]
    return {**mine, **dict.fromkeys(names, frozenset(report.tables_read))}


def _dropped(mine: set[str], report: Report) -> set[str]:
    if isinstance(report, RewriteResult):
        return mine | set(report.session_effects.temp_views_dropped)
    names = (op.get("view_name") for op in report.catalog_ops if op.op in TEMP_VIEW_DROPS)
    return mine | {name.lower() for name in names if name}


def _moved(mine: bool, report: Report) -> bool:
    if isinstance(report, RewriteResult):
        effects = report.session_effects
        return mine or bool(effects.use_target or effects.current_catalog or effects.current_schema)
    return mine or any(op.op in POSITION_OPS for op in report.catalog_ops)


def _explain(mine: bool, report: Report) -> bool:
    return mine or (isinstance(report, RewriteResult) and report.statement_kind == "explain")


def _checkpoints(mine: bool, report: Report) -> bool:
    return mine or (isinstance(report, PlanFacts) and bool(report.checkpoints))


def _cached(mine: bool, report: Report) -> bool:
    return mine or (isinstance(report, PlanFacts) and bool(report.cached_relations_used))


def _not_merged(mine: list[str], _report: Report) -> list[str]:
    return mine  # written by a later check, not by a rewrite


@dataclass(kw_only=True)
class Findings(RewriteFacts):
    """Facts of one request: the rewrite facts (rewrite/facts.py) of all its plans and SQL
    texts, plus what the pipeline derives from them, merged by the one `merge`.

    The fields below are the pipeline's own: what its rules and its record of the session
    read, in the form they read it (a path, an operator setting, a view name).
    """

    # Paths of files read by path (`PathRead.path`), checked against the allow list.
    paths_read: set[str] = derived(set, _paths)
    # Every other location the request names: write targets by path, table and partition
    # locations, LOAD DATA, directories.
    locations: set[str] = derived(set, _locations)
    # Every kind the request uses, as proxy/rowgate/policy/kinds.py names them
    # (``relation:read``, ``command:write_operation``, ``sql:insert``, ...).
    kinds: set[str] = derived(set, _kinds)
    # Shipped code by the operator setting that allows it (CODE_KINDS), e.g. "python_udf".
    user_code: set[str] = derived(set, _code)
    # The SQL rewriter's result of every SQL text, for what only the text says (its effects).
    sql_results: list[RewriteResult] = derived(list, _sql_results)
    # Each created temp view (lower-cased; `global_temp.` prefix for global ones) mapped to
    # the tables its plan read, so a later policy change can mark it stale.
    temp_views_created: dict[str, frozenset[TableName]] = derived(dict, _created)
    # Temp views dropped (DROP VIEW, Catalog.dropTempView), lower-cased.
    temp_views_dropped: set[str] = derived(set, _dropped)
    # The request moves the session's current catalog or database.
    moved_position: bool = derived(bool, _moved)
    # The request is an EXPLAIN statement.
    explain: bool = derived(bool, _explain)
    # The plan creates a cached relation (checkpoint).
    checkpoints: bool = derived(bool, _checkpoints)
    # The plan mentions cached relation ids (to be checked against the caller's session).
    cached_relations_used: bool = derived(bool, _cached)
    # Root operators of Spark's analyses of the request's plans (pipeline/enforce/second_opinion.py):
    # what Spark says each statement is, for what it changes (pipeline/session/epoch.py).
    analysed_roots: list[str] = derived(list, _not_merged)

    def merge(self, other: Mergeable, *, reads_only: bool = False) -> None:
        """Merges one SQL text's result, or a plan's result and then each of its SQL texts'."""
        super().merge(other, reads_only=reads_only)
        if isinstance(other, PlanFacts):
            for sql_result in other.sql_results:
                self.merge(sql_result, reads_only=reads_only)

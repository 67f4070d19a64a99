"""What all the plans of one request do, merged over SQL texts and relation plans.

The rewriters report facts per plan and per SQL text (`PlanRewriteResult`, `RewriteResult`);
the enforcement step merges them here once, so every rule (proxy/rowgate/pipeline/enforce/rules/)
reads one typed object instead of re-walking the results.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rowgate.policy.model import TableName
from rowgate.rewrite.plan.result import PlanRewriteResult
from rowgate.rewrite.sql.result import RewriteResult

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


@dataclass
class Findings:
    """Facts of one request: tables, policies, paths, session changes, shipped code.

    `temp_views_created` maps each created temp view (lower-cased; `global_temp.` prefix for
    global ones) to the tables its plan read, so a later policy change can mark it stale.
    `paths_read` are files read by path; `locations` every other location the request names
    (write targets by path, table and partition locations, LOAD DATA, directories).
    `kinds` holds every kind the request uses, as proxy/rowgate/policy/kinds.py names them
    (``relation:read``, ``command:write_operation``, ``sql:insert``, ...).
    """

    filtered: bool = False
    tables_read: set[TableName] = field(default_factory=set)
    tables_written: set[TableName] = field(default_factory=set)
    policies_applied: set[str] = field(default_factory=set)
    paths_read: set[str] = field(default_factory=set)
    locations: set[str] = field(default_factory=set)
    kinds: set[str] = field(default_factory=set)
    sql_results: list[RewriteResult] = field(default_factory=list)
    temp_views_read: set[str] = field(default_factory=set)
    # one-part names nothing rowgate knows explains, forwarded as `system.session.<name>`
    # (rewrite/sql/reads.py), refused unless Spark lists them (rules/unknown_relations.py)
    unknown_relations: set[str] = field(default_factory=set)
    temp_views_created: dict[str, frozenset[TableName]] = field(default_factory=dict)
    temp_views_dropped: set[str] = field(default_factory=set)
    moved_position: bool = False
    explain: bool = False
    user_code: set[str] = field(default_factory=set)
    checkpoints: bool = False  # the plan creates a cached relation (checkpoint)
    cached_relations_used: bool = False
    # (table, predicates) copied below a policy's barrier (rewrite/sql/leakproof.py)
    leakproof_placed: set[tuple[TableName, str]] = field(default_factory=set)
    # Root operators of Spark's analyses of the request's plans (pipeline/enforce/second_opinion.py):
    # what Spark says each statement is, for what it changes (pipeline/session/epoch.py).
    analysed_roots: list[str] = field(default_factory=list)

    def add_plan(self, result: PlanRewriteResult) -> None:
        """Merges a `PlanRewriteResult` (and the SQL results it carries)."""
        self.filtered |= result.filtered
        self.tables_read |= set(result.tables_read)
        self.tables_written |= set(result.tables_written)
        self.policies_applied |= set(result.policies_applied)
        self.paths_read |= {p.path for p in result.paths_read}
        # Writing to files by path, or creating a table over them, reaches those files as
        # surely as reading them: the same allow list applies (rules/file_paths.py).
        self.locations |= set(result.paths_written) | set(result.locations)
        self.kinds |= set(result.constructs)
        self.temp_views_read |= set(result.temp_views_read)
        self.unknown_relations |= set(result.unknown_relations)
        for view in result.temp_views_created:
            name = ("global_temp." if view.is_global else "") + view.name.lower()
            self.temp_views_created[name] = frozenset(result.tables_read)
        self.user_code |= {CODE_KINDS.get(code.kind, code.kind) for code in result.user_code}
        self.checkpoints |= bool(result.checkpoints)
        self.cached_relations_used |= bool(result.cached_relations_used)
        self.leakproof_placed |= set(result.leakproof_placed)
        for op in result.catalog_ops:
            if op.op in POSITION_OPS:
                self.moved_position = True
            view_name = op.get("view_name")
            if op.op in TEMP_VIEW_DROPS and view_name:
                self.temp_views_dropped.add(view_name.lower())
        for sql_result in result.sql_results:
            self.add_sql(sql_result)

    def add_sql(self, result: RewriteResult) -> None:
        """Merges the result of one SQL text."""
        self.sql_results.append(result)
        self.leakproof_placed |= set(result.leakproof_placed)
        self.filtered |= result.filtered
        self.tables_read |= set(result.tables_read)
        self.tables_written |= set(result.tables_written)
        self.policies_applied |= set(result.policies_applied)
        self.paths_read |= {p.path for p in result.paths_read}
        self.temp_views_read |= set(result.temp_views_read)
        self.unknown_relations |= set(result.unknown_relations)
        effects = result.session_effects
        for view in effects.temp_views_created:
            self.temp_views_created[view] = frozenset(result.tables_read)
        self.temp_views_dropped |= set(effects.temp_views_dropped)
        # CREATE TABLE ... LOCATION, ALTER TABLE ... [ADD PARTITION ...] LOCATION, OPTIONS
        # (path ...), LOAD DATA INPATH: a table put over files reads (and may delete) them.
        self.locations |= set(effects.locations)
        self.kinds.add(f"sql:{result.statement_kind}")
        if effects.use_target or effects.current_catalog or effects.current_schema:
            self.moved_position = True
        if result.statement_kind == "explain":
            self.explain = True
        self.user_code |= set(result.user_code)

"""What `rewrite_plan` hands back: the facts the pipeline decides on after the rewrite.

The plan rewriter filters reads and refuses what it must; everything that depends on who
owns what in the session (cached relation ids, locations of protected tables, shipped
code, catalog changes) is only reported here, because the pipeline holds that state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rowgate.policy.model import TableName
from rowgate.rewrite.sql.result import PathRead, RewriteResult


@dataclass(frozen=True)
class TempView:
    """A temp view a `create_dataframe_view` command creates (name as sent, not normalised)."""

    name: str
    is_global: bool
    replace: bool


@dataclass(frozen=True)
class UserCode:
    """Code the client ships to run inside Spark: it can open files behind the proxy's back.

    `kind` is python_udf, java_udf, scalar_scala_udf, python_udtf or python_data_source;
    `name` the function or data source name ("" when the message has none); `action`
    "register" under a register_* command, else "call".
    """

    kind: str
    name: str
    action: str


@dataclass(frozen=True)
class CatalogOp:
    """One Catalog API call (`Relation.catalog`): its op name and its string arguments."""

    op: str
    names: tuple[tuple[str, str], ...] = ()

    def get(self, key: str) -> str | None:
        return next((v for k, v in self.names if k == key), None)


@dataclass(frozen=True)
class PlanRewriteResult:
    """The outcome of rewriting one Relation or Command for one caller.

    `message` is the rewritten message (the one passed in, rewritten in place). `filtered`
    is True when at least one protected read is filtered, also when it arrived already
    filtered. `sql_results` holds the SQL rewriter's result for every SQL text in the plan,
    in plan order (their `session_effects` say what SQL statements change; temp views
    created by SQL text are reported there, not in `temp_views_created`).

    `paths_read` lists file reads: `read.data_source` paths and path options, path options
    of `read.named_table`, and `<format>.`<path>`` names. `paths_written` lists write
    targets given by path (also a `path` option of a table write: the table's location).
    `locations` lists locations of tables the Catalog API creates. `cached_relations_used`
    holds every `cached_remote_relation` id the plan mentions (reads and removals): the
    pipeline must check they belong to the caller's session. `checkpoints` holds "local"
    or "reliable" per checkpoint command (its answer creates a cached relation id).

    `unchecked` names constructs a non-admin would have been refused while protection is
    in force, let through because the caller is an admin or no table is protected (audit).
    `constructs` holds every relation, command and expression type seen
    ("relation:read", "command:write_operation", ...).
    """

    message: object
    filtered: bool = False
    changed: bool = False
    tables_read: frozenset[TableName] = frozenset()
    tables_written: frozenset[TableName] = frozenset()
    policies_applied: tuple[str, ...] = ()
    paths_read: tuple[PathRead, ...] = ()
    paths_written: tuple[str, ...] = ()
    locations: tuple[str, ...] = ()
    data_sources: tuple[str, ...] = ()
    temp_views_read: frozenset[str] = frozenset()
    unknown_relations: frozenset[str] = frozenset()  # forwarded as `system.session.<name>`
    temp_views_created: tuple[TempView, ...] = ()
    views_expanded: frozenset[TableName] = frozenset()
    statement_kinds: tuple[str, ...] = ()
    sql_results: tuple[RewriteResult, ...] = ()
    cached_relations_used: tuple[str, ...] = ()
    checkpoints: tuple[str, ...] = ()
    user_code: tuple[UserCode, ...] = ()
    catalog_ops: tuple[CatalogOp, ...] = ()
    table_functions: tuple[str, ...] = ()
    identity_bound: bool = False
    unchecked: tuple[str, ...] = ()
    constructs: frozenset[str] = frozenset()
    # (table, predicates) the SQL rewriter copied below a lookup policy's guard, in any SQL
    # text of the plan (statements and expression strings alike): the second opinion must
    # expect those filters.
    leakproof_placed: frozenset[tuple[TableName, str]] = frozenset()


@dataclass
class Found:
    """The mutable collector a walk fills in; `freeze` turns it into the result."""

    filtered: bool = False
    changed: bool = False
    identity_bound: bool = False
    tables_read: set[TableName] = field(default_factory=set)
    tables_written: set[TableName] = field(default_factory=set)
    policies: set[str] = field(default_factory=set)
    paths_read: list[PathRead] = field(default_factory=list)
    paths_written: list[str] = field(default_factory=list)
    locations: list[str] = field(default_factory=list)
    data_sources: list[str] = field(default_factory=list)
    temp_views_read: set[str] = field(default_factory=set)
    unknown_relations: set[str] = field(default_factory=set)
    temp_views_created: list[TempView] = field(default_factory=list)
    views_expanded: set[TableName] = field(default_factory=set)
    statement_kinds: list[str] = field(default_factory=list)
    sql_results: list[RewriteResult] = field(default_factory=list)
    cached_relations: list[str] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    user_code: list[UserCode] = field(default_factory=list)
    catalog_ops: list[CatalogOp] = field(default_factory=list)
    table_functions: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    constructs: set[str] = field(default_factory=set)
    leakproof_placed: set[tuple[TableName, str]] = field(default_factory=set)

    def add_reads(self, res: RewriteResult) -> None:
        """Take over what a SQL rewrite found about reads (not its statement facts)."""
        self.filtered |= res.filtered
        self.leakproof_placed |= set(res.leakproof_placed)
        self.identity_bound |= res.identity_bound
        self.tables_read |= res.tables_read
        self.policies.update(res.policies_applied)
        self.paths_read.extend(res.paths_read)
        self.temp_views_read |= res.temp_views_read
        self.unknown_relations |= res.unknown_relations
        self.views_expanded |= res.views_expanded
        self.table_functions.extend(res.table_functions)

    def add_statement(self, res: RewriteResult) -> None:
        """A SQL text of the plan itself: its reads, writes, kind and effects."""
        self.add_reads(res)
        self.tables_written |= res.tables_written
        self.statement_kinds.append(res.statement_kind)
        self.sql_results.append(res)
        self.changed |= res.changed

    def merge(self, other: Found) -> None:
        for name, value in vars(other).items():
            mine = getattr(self, name)
            if isinstance(mine, bool):
                setattr(self, name, mine or value)
            elif isinstance(mine, set):
                mine |= value
            else:
                mine.extend(value)

    def freeze(self, message: object) -> PlanRewriteResult:
        return PlanRewriteResult(
            message=message,
            filtered=self.filtered,
            changed=self.changed,
            tables_read=frozenset(self.tables_read),
            tables_written=frozenset(self.tables_written),
            policies_applied=tuple(sorted(self.policies)),
            paths_read=tuple(dict.fromkeys(self.paths_read)),
            paths_written=tuple(dict.fromkeys(self.paths_written)),
            locations=tuple(dict.fromkeys(self.locations)),
            data_sources=tuple(dict.fromkeys(self.data_sources)),
            temp_views_read=frozenset(self.temp_views_read),
            unknown_relations=frozenset(self.unknown_relations),
            temp_views_created=tuple(self.temp_views_created),
            views_expanded=frozenset(self.views_expanded),
            statement_kinds=tuple(self.statement_kinds),
            sql_results=tuple(self.sql_results),
            cached_relations_used=tuple(dict.fromkeys(self.cached_relations)),
            checkpoints=tuple(self.checkpoints),
            user_code=tuple(dict.fromkeys(self.user_code)),
            catalog_ops=tuple(self.catalog_ops),
            table_functions=tuple(dict.fromkeys(self.table_functions)),
            identity_bound=self.identity_bound,
            unchecked=tuple(dict.fromkeys(self.unchecked)),
            constructs=frozenset(self.constructs),
            leakproof_placed=frozenset(self.leakproof_placed),
        )

"""What `rewrite_plan` hands back: the facts the pipeline decides on after the rewrite.

The plan rewriter filters reads and refuses what it must; everything that depends on who
owns what in the session (cached relation ids, locations of protected tables, shipped
code, catalog changes) is only reported here, because the pipeline holds that state.
"""

from __future__ import annotations

from dataclasses import dataclass

from rowgate.rewrite.facts import PathRead as PathRead
from rowgate.rewrite.facts import ReportedFacts, every, fact, in_order, union
from rowgate.rewrite.facts import UserCode as UserCode
from rowgate.rewrite.sql.result import RewriteResult


@dataclass(frozen=True)
class TempView:
    """A temp view a `create_dataframe_view` command creates (name as sent, not normalised)."""

    name: str
    is_global: bool
    replace: bool


@dataclass(frozen=True)
class CatalogOp:
    """One Catalog API call (`Relation.catalog`): its op name and its string arguments."""

    op: str
    names: tuple[tuple[str, str], ...] = ()

    def get(self, key: str) -> str | None:
        return next((v for k, v in self.names if k == key), None)


@dataclass(kw_only=True)
class PlanFacts(ReportedFacts):
    """What a plan walk finds (rewrite/facts.py), filled in as it goes and merged from sub-walks.

    `sql_results` holds the SQL rewriter's result for every SQL text in the plan, in plan
    order (their `session_effects` say what SQL statements change; temp views created by SQL
    text are reported there, not in `temp_views_created`).

    `paths_read` lists file reads: `read.data_source` paths and path options, path options
    of `read.named_table`, and `<format>.`<path>`` names.
    """

    # Write targets given by path (also a `path` option of a table write: the table's location).
    paths_written: tuple[str, ...] = fact((), in_order)
    # Locations of tables the Catalog API creates, and other locations commands name.
    locations: tuple[str, ...] = fact((), in_order)
    # Formats of `read.data_source` relations.
    data_sources: tuple[str, ...] = fact((), in_order)
    # Temp views a `create_dataframe_view` command creates.
    temp_views_created: tuple[TempView, ...] = fact((), every)
    # The statement kind of each SQL text of the plan (and of each catalog call's SQL twin), in order.
    statement_kinds: tuple[str, ...] = fact((), every)
    # The SQL rewriter's result of each of those texts, in the same order.
    sql_results: tuple[RewriteResult, ...] = fact((), every)
    # Every `cached_remote_relation` id the plan mentions (reads and removals): the pipeline
    # must check they belong to the caller's session.
    cached_relations_used: tuple[str, ...] = fact((), in_order)
    # "local" or "reliable" per checkpoint command (its answer creates a cached relation id).
    checkpoints: tuple[str, ...] = fact((), every)
    # Catalog API calls, in order.
    catalog_ops: tuple[CatalogOp, ...] = fact((), every)
    # Constructs a non-admin would have been refused while protection is in force, let
    # through because the caller is an admin or no table is protected (audit).
    unchecked: tuple[str, ...] = fact((), in_order)
    # Every relation, command and expression type seen ("relation:read", "command:write_operation", ...).
    constructs: frozenset[str] = fact(frozenset(), union)


@dataclass
class PlanRewriteResult(PlanFacts):
    """The outcome of rewriting one Relation or Command for one caller: the message and its facts.

    `message` is the rewritten message (the one passed in, rewritten in place). `filtered`
    is True when at least one protected read is filtered, also when it arrived already
    filtered. A report, never merged into (`message` is not a fact).
    """

    message: object

    @classmethod
    def of(cls, facts: PlanFacts, message: object) -> PlanRewriteResult:
        return cls(message, **facts.values())

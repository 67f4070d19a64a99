"""What `rewrite_sql` hands back: the text to forward and the facts the pipeline acts on."""

from __future__ import annotations

from dataclasses import dataclass, field

from rowgate.policy.model import TableName
from rowgate.rewrite.facts import PathRead as PathRead
from rowgate.rewrite.facts import ReportedFacts


@dataclass(frozen=True)
class SessionEffects:
    """What the statement changes in the session or the catalog, as far as the text says.

    `current_catalog`/`current_schema` are the rewriter's reading of `USE`/`SET CATALOG`;
    a one-part `USE x` is read as a database, but Spark switches catalog when `x` is a
    catalog name, so the pipeline should read the session's state back from Spark after
    running it. Temp view names are lower-cased; global ones are ``global_temp.<name>``.
    """

    current_catalog: str | None = None
    current_schema: str | None = None
    use_target: tuple[str, ...] = ()
    config_set: tuple[tuple[str, str | None], ...] = ()  # SET key=value (value None: SET key)
    config_reset: tuple[str, ...] = ()
    config_reset_all: bool = False
    variables_set: tuple[str, ...] = ()  # SET VAR / DECLARE
    tables_created: frozenset[TableName] = frozenset()
    tables_dropped: frozenset[TableName] = frozenset()
    namespaces_dropped: frozenset[tuple[str, str]] = frozenset()  # (catalog, schema) of DROP DATABASE
    tables_altered: frozenset[TableName] = frozenset()
    tables_renamed: tuple[tuple[TableName, TableName], ...] = ()
    views_created: frozenset[TableName] = frozenset()
    views_dropped: frozenset[TableName] = frozenset()
    views_altered: frozenset[TableName] = frozenset()
    temp_views_created: frozenset[str] = frozenset()
    temp_views_dropped: frozenset[str] = frozenset()
    functions_created: tuple[str, ...] = ()
    functions_dropped: tuple[str, ...] = ()
    locations: tuple[str, ...] = ()  # LOCATION / OPTIONS(path) / LOAD DATA INPATH values
    metadata_read: frozenset[TableName] = frozenset()  # DESCRIBE, CACHE TABLE t, REFRESH ...

    @property
    def invalidates_catalog(self) -> bool:
        """Whether cached catalog answers (views, tables) may now be stale."""
        return bool(
            self.tables_created
            or self.tables_dropped
            or self.namespaces_dropped
            or self.tables_altered
            or self.tables_renamed
            or self.views_created
            or self.views_dropped
            or self.views_altered
        )


NO_EFFECTS = SessionEffects()


@dataclass
class RewriteResult(ReportedFacts):
    """The outcome of rewriting one SQL text for one caller: the text and its facts (rewrite/facts.py).

    `sql` is the input text itself, byte for byte, when nothing had to change; otherwise
    sqlglot's Spark rendering of the rewritten statement. `filtered` is True when at least
    one protected read is filtered (also when the text already carried this caller's exact
    filters, e.g. the echo of an earlier rewrite). `analysed` is False when the text was
    forwarded without being understood, which only happens when no table is protected.

    `statement_kind` is one of: query, insert, update, delete, merge, truncate, load,
    create_table (also CTAS and materialized views), create_view, create_function, drop,
    alter, cache, uncache, describe, analyze, refresh, ddl, use, set, reset, set_variable,
    declare, explain, show, row_access_policy (the proxy's own DDL: never forward it),
    add_resource, list_resources, command; and, only when no table is protected: unparsed, multiple, unknown.
    `empty` is a text without a statement.

    A report, never merged into: `sql`, `statement_kind`, `analysed` and `session_effects`
    are this text's alone (the plan walker and `Findings` take what they need of them).
    """

    sql: str
    statement_kind: str
    analysed: bool = True
    session_effects: SessionEffects = field(default=NO_EFFECTS)

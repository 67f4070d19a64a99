"""What `rewrite_sql` hands back: the text to forward and the facts the pipeline acts on."""

from __future__ import annotations

from dataclasses import dataclass, field

from rowgate.policy.model import TableName


@dataclass(frozen=True)
class PathRead:
    """A read of files by path, e.g. ``parquet.`/warehouse/orders` `` (format "parquet").

    The rewriter does not decide on these; the pipeline refuses them for non-admins.
    `certain` is False when the reference is a two-part name that the catalog does not know
    (Spark then tries it as `<format>.<path>`), True when the first part is a known file format.
    """

    format: str
    path: str
    certain: bool = True


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


@dataclass(frozen=True)
class RewriteResult:
    """The outcome of rewriting one SQL text for one caller.

    `sql` is the input text itself, byte for byte, when nothing had to change; otherwise
    sqlglot's Spark rendering of the rewritten statement. `filtered` is True when at least
    one protected read is filtered (also when the text already carried this caller's exact
    filters, e.g. the echo of an earlier rewrite). `analysed` is False when the text was
    forwarded without being understood, which only happens when no table is protected.

    `policies_applied` holds ``"<catalog>.<schema>.<table>:<policy>"`` entries, sorted.

    `statement_kind` is one of: query, insert, update, delete, merge, truncate, load,
    create_table (also CTAS and materialized views), create_view, create_function, drop,
    alter, cache, uncache, describe, analyze, refresh, ddl, use, set, reset, set_variable,
    declare, explain, show, row_access_policy (the proxy's own DDL: never forward it),
    add_resource, list_resources, command; and, only when no table is protected: unparsed, multiple, unknown.
    `empty` is a text without a statement.
    """

    sql: str
    statement_kind: str
    filtered: bool = False
    tables_read: frozenset[TableName] = frozenset()
    tables_written: frozenset[TableName] = frozenset()
    policies_applied: tuple[str, ...] = ()
    paths_read: tuple[PathRead, ...] = ()
    temp_views_read: frozenset[str] = frozenset()
    # one-part names nothing rowgate knows explains, forwarded as `system.session.<name>`
    unknown_relations: frozenset[str] = frozenset()
    views_expanded: frozenset[TableName] = frozenset()
    table_functions: tuple[str, ...] = ()  # table-valued functions that are not known built-ins
    user_code: tuple[str, ...] = ()  # "transform" (TRANSFORM ... USING), "reflect" (reflect/java_method)
    identity_bound: bool = False  # current_user()/session_user()/user() became a literal
    changed: bool = False  # `sql` differs from the input
    analysed: bool = True
    # (table, caller predicates copied below its lookup policy's guard), see leakproof.py
    leakproof_placed: tuple[tuple[TableName, str], ...] = ()
    session_effects: SessionEffects = field(default=NO_EFFECTS)

"""Names pinned: a relation the proxy resolved is forwarded fully qualified.

The proxy resolves a one- or two-part name against the session's current catalog and
database as it knows them. Spark resolves the forwarded text later, against its own
current namespace, which a concurrent `USE` or `SET CATALOG` of the same session may have
changed in between; the two could then mean different tables. Rendering every resolved
name as ``catalog.db.table`` (backtick-quoted) leaves Spark nothing to resolve (issue #12,
"names pinned").

Reads are pinned by the reads walk (reads.py, `qualify`); this module pins the names that are
not reads: write and DDL targets (`pin_targets`) and the relations inside stored view and
function bodies (`pin_relations`), which are analysed but never filtered. Temp views read
are pinned by the reads walk too (`pin_temp_view`: ``system.session.<view>``). CTEs,
`<format>.`<path>`` file reads, targets that are temp views and the new name of a RENAME
stay as written.

>>> import sqlglot
>>> from rowgate.rewrite.sql.scope import Scope
>>> body = sqlglot.parse_one("WITH c AS (SELECT 1) SELECT * FROM c JOIN db.t ON true", read="spark")
>>> pin_relations(body, Scope.view_body("spark_catalog", "sales"), None, lambda n: False, lambda n: "known")
>>> body.sql("spark")
'WITH c AS (SELECT 1) SELECT * FROM c JOIN `spark_catalog`.`db`.`t` ON TRUE'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from sqlglot import exp

from rowgate.policy.model import TableName
from rowgate.rewrite.sql.classify import (
    ALTER_TABLE,
    ALTER_VIEW,
    CLONE_SOURCE,
    CREATE_TABLE,
    CREATE_VIEW,
    DROP_TABLE,
    DROP_VIEW,
    METADATA,
    SENSITIVE_METADATA,
    WRITE,
    Target,
)
from rowgate.rewrite.sql.effects import ResolveTarget
from rowgate.rewrite.sql.names import (
    TEMP_VIEW_CATALOG,
    TEMP_VIEW_NAMESPACE,
    Args,
    Unresolvable,
    quoted_table,
    quoted_temp_view,
    resolve,
    written_parts,
)
from rowgate.rewrite.sql.scope import Scope, relation_references

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Target roles whose name is a relation of the catalog, resolved like a read.
PINNED_ROLES = frozenset(
    {
        WRITE,
        CREATE_TABLE,
        CREATE_VIEW,
        ALTER_VIEW,
        ALTER_TABLE,
        DROP_TABLE,
        DROP_VIEW,
        METADATA,
        SENSITIVE_METADATA,
        CLONE_SOURCE,
    }
)


def pin(node: exp.Table, name: TableName) -> None:
    """Replace the name parts of `node` (alias, version, sample... stay) by `name`'s."""
    qualified = quoted_table(name)
    for key in ("this", "db", "catalog"):
        node.set(key, qualified.args[key])


def pin_temp_view(node: exp.Table, view: str) -> None:
    """Replace the name parts of `node` by the session temp view `view`'s qualified name
    (``system.session.<view>``, which Spark resolves to that temp view or to nothing).

    The alias Spark gives the relation stays the view's name, so `SELECT *`, `v.col` and
    the output column names are those of the one-part name (checked on Spark 4.0 and 4.3).
    """
    qualified = quoted_temp_view(view)
    for key in ("this", "db", "catalog"):
        node.set(key, qualified.args[key])


def temp_view_column(view: str) -> exp.Column:
    """`system.session.<view>` as the column-shaped reference of a `TABLE(...)` argument."""
    return exp.Column(
        this=exp.to_identifier(view, quoted=True),
        table=exp.to_identifier(TEMP_VIEW_NAMESPACE, quoted=True),
        db=exp.to_identifier(TEMP_VIEW_CATALOG, quoted=True),
    )


def pinned_column(name: TableName) -> exp.Column:
    """`name` as the column-shaped reference `TABLE(<name>)` arguments are parsed into."""
    return exp.Column(
        this=exp.to_identifier(name.table, quoted=True),
        table=exp.to_identifier(name.schema, quoted=True),
        db=exp.to_identifier(name.catalog, quoted=True),
    )


def multipart_text(name: TableName) -> str:
    """`name` as the text of a multipart identifier (a table function's string argument).

    >>> from rowgate.policy.model import TableName
    >>> multipart_text(TableName("spark_catalog", "my db", "t"))
    'spark_catalog.`my db`.t'
    """
    return ".".join(
        p if _PLAIN.fullmatch(p) else "`" + p.replace("`", "``") + "`" for p in (name.catalog, name.schema, name.table)
    )


def pin_targets(targets: Sequence[Target], resolve_target: ResolveTarget) -> None:
    """Qualify the targets whose name the proxy resolved to a catalog relation."""
    for target in targets:
        if target.role not in PINNED_ROLES or not isinstance(target.node, exp.Table):
            continue
        if target.role == DROP_VIEW and target.temporary:
            continue  # DROP TEMPORARY VIEW names a temp view only
        resolved = resolve_target(target.node)
        if resolved.name is None or resolved.temp_view or resolved.global_temp_view or resolved.path:
            continue
        pin(target.node, resolved.name)


def pin_relations(
    root: exp.Expr,
    scope: Scope,
    args: Args,
    temp_view_exists: Callable[[str], bool],
    lookup: Callable,
) -> None:
    """Qualify every relation read under `root` (a stored body: no temp views in `scope`).

    A one-part name that is a session temp view is left alone: Spark refuses a persistent
    view or function over a temp view, and qualifying it would read a table instead.
    """
    for ref in relation_references(root, scope):
        node = ref.node
        if ref.kind != "relation" or not isinstance(node, exp.Table):
            continue
        if isinstance(node.this, exp.Func) and node.this.name.upper() != "IDENTIFIER":
            continue  # a table function
        try:
            parts = written_parts(node, args)
        except Unresolvable:
            continue  # refused by the analysis of the same body when protection is in force
        if len(parts) == 1 and temp_view_exists(parts[0]):
            continue
        resolved = resolve(parts, ref.scope, lambda _name: False)
        if resolved.kind != "catalog" or resolved.name is None:
            continue
        if resolved.maybe_path is not None and lookup(resolved.name) is None:
            continue  # `<format>.<path>`: Spark reads files (reported as a path read)
        pin(node, resolved.name)

"""What a relation name refers to, resolved the way Spark resolves it.

Two steps, kept apart: `written_parts` reads the name parts off a sqlglot `exp.Table`
(backticks, `IDENTIFIER('a.b')`, `IDENTIFIER(:param)`), and `resolve` turns parts plus a
`Scope` into what Spark would read:

- 1 part: a visible CTE, else a session temp view (not inside a persistent view's text),
  else ``<current catalog>.<current database>.<name>``;
- 2 parts: ``global_temp.<name>`` is a global temp view; ``session.<name>`` is the session
  temp view of that name when one exists and the server reads the temp-view namespace
  (Spark 4.3 looks there first; 4.0 reads the table); else
  ``<current catalog>.<part1>.<part2>`` (a database in the current catalog);
- 3 parts: ``system.session.<name>`` is a session temp view and nothing else where the
  server reads that form (Spark 4.3 never falls through to a table there; the scope's
  namespace says); ``spark_catalog.global_temp.<name>`` is a global temp view; else
  ``<catalog>.<database>.<name>``;
- more parts, `${var}`, and anything whose text is not known now: unresolved.

Identifiers are compared case-insensitively (the session catalog lower-cases names); a
backtick-quoted part is one part even when it contains a dot.

>>> parse_multipart("`default.orders`")
('default.orders',)
>>> parse_multipart("spark_catalog . default.`or``ders`")
('spark_catalog', 'default', 'or`ders')
>>> parse_multipart("a..b") is None
True
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlglot import exp

from rowgate.policy.model import TableName
from rowgate.rewrite.sql.scope import Scope

SESSION_CATALOG = "spark_catalog"
GLOBAL_TEMP_DATABASE = "global_temp"
# Where Spark 4 keeps the session's temp views: `system.session.<view>` names only a temp view.
TEMP_VIEW_CATALOG, TEMP_VIEW_NAMESPACE = "system", "session"

# Data source short names Spark accepts in `<format>.`<path>`` (spark.sql.runSQLOnFiles).
FILE_FORMATS = frozenset(
    {"parquet", "csv", "json", "orc", "delta", "text", "avro", "binaryfile", "xml", "iceberg", "hudi", "image", "libsvm"}
)

# Prefix of the names `rewrite_sql` gives positional `?` markers so they keep their text order.
POSITIONAL_PREFIX = "__rowgate_pos_"

Args = Mapping[str, Any] | Sequence[Any] | None


class Unresolvable(Exception):
    """The name's text is not known with certainty (the message says why)."""


ResolvedKind = Literal["cte", "temp_view", "global_temp_view", "catalog", "unresolved"]


@dataclass(frozen=True)
class Resolved:
    kind: ResolvedKind
    parts: tuple[str, ...] = ()
    name: TableName | None = None  # for "catalog"
    view: str = ""  # for temp views: the (lower-cased) name; global ones as global_temp.<name>
    reason: str = ""  # for "unresolved"
    cte_exact: bool = True  # for "cte": False when the CTE name matches only ignoring case

    @property
    def maybe_path(self) -> tuple[str, str] | None:
        """``(format, path)`` when this two-part name may be a file read (`parquet.`/p``)."""
        if self.kind != "catalog" or len(self.parts) != 2:
            return None
        return self.parts[0], self.parts[1]


_UNQUOTED_PART = re.compile(r"[A-Za-z0-9_]+")


def parse_multipart(text: str) -> tuple[str, ...] | None:
    """Spark's `parseMultipartIdentifier` for what `IDENTIFIER('...')` accepts; None if invalid."""
    parts: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == "`":
            j = i + 1
            buf = []
            while True:
                k = text.find("`", j)
                if k < 0:
                    return None
                buf.append(text[j:k])
                if k + 1 < n and text[k + 1] == "`":
                    buf.append("`")
                    j = k + 2
                    continue
                i = k + 1
                break
            part = "".join(buf)
        else:
            m = _UNQUOTED_PART.match(text, i)
            if not m:
                return None
            part = m.group(0)
            i = m.end()
        if not part:
            return None
        parts.append(part)
        while i < n and text[i].isspace():
            i += 1
        if i == n:
            return tuple(parts)
        if text[i] != ".":
            return None
        i += 1


def constant_string(node: exp.Expr, args: Args) -> str | None:
    """The value of a string constant expression: literals, bound parameters, `||`, concat()."""
    if isinstance(node, exp.Literal) and node.is_string:
        return node.this
    if isinstance(node, exp.Paren):
        return constant_string(node.this, args)
    if isinstance(node, exp.Placeholder):
        key = node.name
        if not key:
            return None  # an unnumbered `?`: rewrite_sql renames them before parsing
        if key.startswith(POSITIONAL_PREFIX) and isinstance(args, Sequence) and not isinstance(args, (str, bytes)):
            index = int(key[len(POSITIONAL_PREFIX) :])
            value = args[index] if 0 <= index < len(args) else None
        elif isinstance(args, Mapping):
            value = args.get(key)
        else:
            value = None
        return value if isinstance(value, str) else None
    if isinstance(node, exp.DPipe):
        left, right = constant_string(node.this, args), constant_string(node.expression, args)
        return None if left is None or right is None else left + right
    if isinstance(node, exp.Concat):
        pieces = [constant_string(e, args) for e in node.expressions]
        return None if any(p is None for p in pieces) else "".join(pieces)  # type: ignore[arg-type]
    return None


def is_identifier_clause(node: exp.Expr) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.upper() == "IDENTIFIER"


def written_parts(table: exp.Table, args: Args = None) -> tuple[str, ...]:
    """The name parts of a relation reference, as Spark reads them; raises `Unresolvable`.

    Not for table-valued functions (`table.this` a function other than IDENTIFIER).
    """
    this = table.this
    if is_identifier_clause(this):
        if table.args.get("db") or table.args.get("catalog") or len(this.expressions) != 1:
            raise Unresolvable("IDENTIFIER() must be the whole name")
        text = constant_string(this.expressions[0], args)
        if text is None:
            raise Unresolvable("IDENTIFIER() whose argument is not a constant string or a bound string parameter")
        parts = parse_multipart(text)
        if parts is None:
            raise Unresolvable("IDENTIFIER() with a malformed name")
        return parts
    tail: list[str] = []
    while isinstance(this, exp.Dot):
        if not isinstance(this.expression, exp.Identifier):
            raise Unresolvable("a relation name that is not a plain identifier")
        tail.insert(0, this.expression.this)
        this = this.this
    if not isinstance(this, exp.Identifier):
        kind = "a ${...} variable" if isinstance(this, exp.Parameter) else f"a {type(this).__name__} in a relation name"
        raise Unresolvable(kind)
    names: list[str] = [this.this, *tail]
    for key in ("db", "catalog"):
        ident = table.args.get(key)
        if ident is None:
            continue
        if not isinstance(ident, exp.Identifier):
            raise Unresolvable("a relation name that is not a plain identifier")
        names.insert(0, ident.this)
    if any(not p for p in names):
        raise Unresolvable("an empty name part")
    return tuple(names)


def column_parts(column: exp.Column) -> tuple[str, ...] | None:
    """A column reference read as a relation name (`TABLE(db.t)` arguments)."""
    parts = [p.this for p in column.parts if isinstance(p, exp.Identifier)]
    if len(parts) != len(column.parts) or not all(parts):
        return None
    return tuple(parts)


def resolve(parts: tuple[str, ...], scope: Scope, temp_view_exists: Callable[[str], bool], *, ctes: bool = True) -> Resolved:
    """What Spark reads for `parts` in `scope` (see the module docstring for the rules).

    `temp_view_exists(name)` answers for session temp views (only asked for one-part names
    in a scope that sees them). `ctes=False` for names CTEs cannot match (write targets).
    """
    ns = scope.namespace
    try:
        if len(parts) == 1:
            (name,) = parts
            if ctes:
                match = scope.cte_match(name)
                if match is not None:
                    return Resolved("cte", parts, cte_exact=match == "exact")
            if ns.temp_views and temp_view_exists(name):
                return Resolved("temp_view", parts, view=name.lower())
            return Resolved("catalog", parts, name=TableName(ns.catalog, ns.schema, name))
        if len(parts) == 2:
            db, name = parts
            if db.lower() == GLOBAL_TEMP_DATABASE:
                return Resolved("global_temp_view", parts, view=f"{GLOBAL_TEMP_DATABASE}.{name.lower()}")
            if db.lower() == TEMP_VIEW_NAMESPACE and ns.temp_view_namespace and ns.temp_views and temp_view_exists(name):
                return Resolved("temp_view", parts, view=name.lower())
            return Resolved("catalog", parts, name=TableName(ns.catalog, db, name))
        if len(parts) == 3:
            catalog, db, name = parts
            if catalog.lower() == TEMP_VIEW_CATALOG and db.lower() == TEMP_VIEW_NAMESPACE and ns.temp_view_namespace:
                return Resolved("temp_view", parts, view=name.lower())
            if catalog.lower() == SESSION_CATALOG and db.lower() == GLOBAL_TEMP_DATABASE:
                return Resolved("global_temp_view", parts, view=f"{GLOBAL_TEMP_DATABASE}.{name.lower()}")
            return Resolved("catalog", parts, name=TableName(catalog, db, name))
    except ValueError:
        return Resolved("unresolved", parts, reason="an empty name part")
    return Resolved("unresolved", parts, reason=f"a {len(parts)}-part relation name")


def quoted_table(name: TableName) -> exp.Table:
    """A fully qualified, backtick-quoted reference to `name`.

    >>> quoted_table(TableName("spark_catalog", "default", "orders")).sql("spark")
    '`spark_catalog`.`default`.`orders`'
    """
    return exp.Table(
        this=exp.to_identifier(name.table, quoted=True),
        db=exp.to_identifier(name.schema, quoted=True),
        catalog=exp.to_identifier(name.catalog, quoted=True),
    )


def quoted_temp_view(view: str) -> exp.Table:
    """The session temp view `view` in the only form that cannot name a table.

    >>> quoted_temp_view("v").sql("spark")
    '`system`.`session`.`v`'
    """
    return exp.Table(
        this=exp.to_identifier(view, quoted=True),
        db=exp.to_identifier(TEMP_VIEW_NAMESPACE, quoted=True),
        catalog=exp.to_identifier(TEMP_VIEW_CATALOG, quoted=True),
    )


def temp_view_text(view: str) -> str:
    """`quoted_temp_view` as a multipart identifier (DataFrame API names).

    >>> temp_view_text("my`v")
    '`system`.`session`.`my``v`'
    """
    return ".".join("`" + p.replace("`", "``") + "`" for p in (TEMP_VIEW_CATALOG, TEMP_VIEW_NAMESPACE, view))


def display(parts: tuple[str, ...]) -> str:
    """A name as it was written, for messages."""
    return ".".join(p if _UNQUOTED_PART.fullmatch(p) else "`" + p.replace("`", "``") + "`" for p in parts)

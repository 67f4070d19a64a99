"""The resolve pass: what one relation reference reads, as Spark will resolve it.

For each reference the reads walk (reads.py) meets, `resolve_read` answers with a typed
`Read` and changes nothing: a CTE, a temp view, a protected table (with its policies), a
persistent view, a file read by path (`parquet.`/p``), another catalog table, a table
function, or nothing the proxy can analyse (refused while protection is in force). The
name itself is read by names.py in the scope scope.py gives; this pass adds what only the
context knows (policies, catalog lookups, temp views) and the refusals that belong to
resolution:

- a CTE reference that matches the CTE only ignoring case and also names a protected
  relation (with `spark.sql.caseSensitive=true` Spark would read the table);
- `t@v12` (Delta's time travel by name) on a protected relation;
- a row access policy on a view (policies apply to tables only).

`resolve_target` does the same for a name that is not a read (a write or DDL target) and
answers with effects.py's `TargetName`.

`reaches(name)` says whether a catalog name reaches protected data (a protected table, or
a view expanding to one); the reads walk supplies it, since answering needs the walk.

>>> from types import SimpleNamespace
>>> import sqlglot
>>> from rowgate.identity.caller import Caller
>>> from rowgate.rewrite.sql.scope import relation_references, Scope
>>> ctx = SimpleNamespace(caller=Caller("user:ann@example.com"), temp_view_exists=lambda n: n == "tmp",
...     lookup=lambda n: None, policies_for=lambda n: ())
>>> run = Run(ctx, None, guarded=True)
>>> tree = sqlglot.parse_one("WITH c AS (SELECT 1) SELECT * FROM c, tmp, spark_catalog.db.t, parquet.`/d`", read="spark")
>>> refs = relation_references(tree, Scope.top("spark_catalog", "default"))
>>> [resolve_read(run, r, lambda n: False).kind for r in refs]
['cte', 'temp_view', 'table', 'path']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from rowgate.catalog.model import RelationInfo, RelationKind
from rowgate.policy.model import TableName
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.effects import TargetName
from rowgate.rewrite.sql.names import FILE_FORMATS, Unresolvable, display, is_identifier_clause, resolve, written_parts
from rowgate.rewrite.sql.result import PathRead
from rowgate.rewrite.sql.run import Run
from rowgate.rewrite.sql.scope import Reference, Scope

ReadKind = Literal["table_function", "unanalysable", "cte", "temp_view", "protected", "view", "path", "table"]


@dataclass(frozen=True)
class Read:
    """What one relation reference reads."""

    kind: ReadKind
    parts: tuple[str, ...] = ()  # the name as written (resolved text of IDENTIFIER(...) too)
    name: TableName | None = None  # protected, view, table: the catalog name
    info: RelationInfo | None = None  # view, table: the catalog's answer (None: unknown)
    policies: tuple = ()  # protected: every policy on the table
    temp_view: str = ""  # temp_view: lower-cased name, global ones as global_temp.<name>
    path: PathRead | None = None  # path: the file read Spark makes


def resolve_read(run: Run, ref: Reference, reaches: Callable[[TableName], bool]) -> Read:
    """Resolve the relation reference `ref` (an `exp.Table`); raises a `Refusal` (errors.py)."""
    node = ref.node
    assert isinstance(node, exp.Table)
    if isinstance(node.this, exp.Func) and not is_identifier_clause(node.this):
        return Read("table_function")
    try:
        parts = written_parts(node, run.args)
    except Unresolvable as e:
        run.unanalysable(f"a relation name ({e})")
        return Read("unanalysable")
    resolved = resolve(parts, ref.scope, run.temp_views_in(ref.scope))
    if resolved.kind == "cte":
        if not resolved.cte_exact and run.guarded:
            other = resolve(parts, ref.scope, run.temp_views_in(ref.scope), ctes=False)
            if other.kind == "catalog" and other.name is not None and reaches(other.name):
                raise refuse.invalid(
                    "cte_name_case_collision",
                    f"the CTE reference {display(parts)} differs only in letter case from the CTE's name and "
                    f"also names a protected relation; spell it exactly like the CTE",
                )
        return Read("cte", parts)
    if resolved.kind in ("temp_view", "global_temp_view"):
        return Read("temp_view", parts, temp_view=resolved.view)
    if resolved.kind == "unresolved" or resolved.name is None:
        run.unanalysable(f"the relation name {display(parts)} ({resolved.reason})")
        return Read("unanalysable", parts)
    name = resolved.name
    if run.guarded and "@" in parts[-1]:
        _check_at_suffix(run, parts, ref.scope, reaches)
    policies = run.policies_for(name)
    info = run.lookup(name)
    if policies:
        if info is not None and info.kind == RelationKind.VIEW:
            raise refuse.invalid("policy_on_view", f"row access policies on the view {name} are not supported")
        return Read("protected", parts, name, info, policies)
    if info is None and resolved.maybe_path is not None:
        # Spark reads files when the first part names any data source (a class name too)
        # and the catalog has no such table: always reported, the allow list judges.
        fmt, path = resolved.maybe_path
        return Read("path", parts, name, path=PathRead(fmt.lower(), path, certain=fmt.lower() in FILE_FORMATS))
    if info is not None and info.kind == RelationKind.VIEW and run.guarded:
        return Read("view", parts, name, info)
    return Read("table", parts, name, info)


def _check_at_suffix(run: Run, parts: tuple[str, ...], scope: Scope, reaches: Callable[[TableName], bool]) -> None:
    """`t@v12` is Delta's time travel by name; refuse it on protected relations."""
    base = parts[-1].split("@", 1)[0]
    if not base:
        return
    other = resolve((*parts[:-1], base), scope, run.temp_views_in(scope))
    if other.kind == "catalog" and other.name is not None and reaches(other.name):
        raise refuse.denied("time_travel_suffix", f"time travel by an @ suffix on protected table {other.name} is not supported")


def resolve_target(run: Run, node: exp.Expr) -> TargetName:
    """A write or DDL target resolved in the session's namespace (CTEs do not apply)."""
    if not isinstance(node, exp.Table):
        return TargetName((), None)
    try:
        parts = written_parts(node, run.args)
    except Unresolvable as e:
        run.unanalysable(f"the name of the statement's target ({e})")
        return TargetName((), None)
    scope = run.top_scope()
    resolved = resolve(parts, scope, run.temp_view_exists, ctes=False)
    if resolved.kind == "unresolved":
        run.unanalysable(f"the target name {display(parts)} ({resolved.reason})")
        return TargetName(parts, None)
    if resolved.kind == "global_temp_view":
        return TargetName(parts, None, global_temp_view=resolved.view)
    if resolved.kind == "temp_view":
        ns = scope.namespace
        return TargetName(parts, TableName(ns.catalog, ns.schema, parts[-1]), temp_view=resolved.view)
    path = None
    maybe = resolved.maybe_path
    if maybe is not None and resolved.name is not None and run.lookup(resolved.name) is None and _looks_like_path_read(*maybe):
        path = maybe[1]
    return TargetName(parts, resolved.name, path=path)


def _looks_like_path_read(fmt: str, path: str) -> bool:
    """`<format>.`<path>``: Spark reads files when the catalog has no such table."""
    return fmt.lower() in FILE_FORMATS or "/" in path or ":" in path

"""What a classified statement changes, and the writes it may not make.

`enforce` resolves every non-read name of a `Classified` statement (classify.py) through the
driver's `resolve_target`, refuses writes, replacements, clones, data-touching ALTERs and
statistics of protected tables unless the caller holds a FILTER USING (TRUE) grant, and
collects the session effects (tables, views, temp views and functions created, dropped,
altered, renamed; locations named; metadata read) the pipeline records once Spark has run
the statement. `use_effects` is the same for USE.

>>> from rowgate.identity.caller import Caller
>>> from rowgate.policy.model import TableName
>>> import sqlglot
>>> from rowgate.rewrite.sql.classify import classify
>>> c = classify(sqlglot.parse_one("DROP TABLE t", read="spark"))
>>> name = TableName("spark_catalog", "default", "t")
>>> e = enforce(c, lambda node: TargetName(("t",), name), lambda n: (), Caller("user:ann@example.com"))
>>> sorted(str(n) for n in e.effects.tables_dropped)
['spark_catalog.default.t']
>>> use_effects(("sales",), "", "spark_catalog").current_schema
'sales'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from rowgate.identity.caller import Caller
from rowgate.policy import decision
from rowgate.policy.model import TableName
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.classify import (
    ALTER_TABLE,
    ALTER_VIEW,
    CLONE_SOURCE,
    CREATE_GLOBAL_TEMP_VIEW,
    CREATE_TABLE,
    CREATE_TEMP_VIEW,
    CREATE_VIEW,
    DROP_FUNCTION,
    DROP_NAMESPACE,
    DROP_TABLE,
    DROP_VIEW,
    FUNCTION,
    METADATA,
    NOT_A_RELATION,
    RENAME_TO,
    SENSITIVE_METADATA,
    WRITE,
    Classified,
)
from rowgate.rewrite.sql.result import SessionEffects


@dataclass(frozen=True)
class TargetName:
    """A non-read name, resolved: the catalog interpretation and whether a temp view answers."""

    parts: tuple[str, ...]
    name: TableName | None  # the catalog table/view Spark would use without temp views
    temp_view: str | None = None  # lower-cased name when a session temp view of this name exists
    global_temp_view: str | None = None  # global_temp.<name>
    path: str | None = None  # `parquet.`/p``-style name the catalog does not know: files by path


ResolveTarget = Callable[[exp.Expr], TargetName]


@dataclass
class Enforced:
    tables_written: set[TableName]
    effects: SessionEffects


def enforce(
    classified: Classified,
    resolve_target: ResolveTarget,
    policies_for: Callable[[TableName], tuple],
    caller: Caller,
) -> Enforced:
    """Refuse writes the caller may not make; collect what the statement changes."""
    written: set[TableName] = set()
    created: set[TableName] = set()
    dropped: set[TableName] = set()
    namespaces_dropped: set[tuple[str, str]] = set()
    altered: set[TableName] = set()
    renamed: list[tuple[TableName, TableName]] = []
    views_created: set[TableName] = set()
    views_dropped: set[TableName] = set()
    views_altered: set[TableName] = set()
    temp_created: set[str] = set()
    temp_dropped: set[str] = set()
    functions_created: list[str] = []
    functions_dropped: list[str] = []
    metadata: set[TableName] = set()
    locations: list[str] = list(classified.locations)

    def full_access_or_refuse(name: TableName | None, what: str) -> None:
        if name is None:
            return
        policies = policies_for(name)
        if policies and not decision.has_full_access(caller, policies):
            raise refuse.denied("write_needs_full_access", f"{what} {name} requires a FILTER USING (TRUE) grant")

    for target in classified.targets:
        role = target.role
        if role == NOT_A_RELATION:
            continue
        if role in (FUNCTION, DROP_FUNCTION):
            shown = target.node.sql("spark") if isinstance(target.node, exp.Expression) else str(target.node)
            (functions_created if role == FUNCTION else functions_dropped).append(shown)
            continue
        resolved = resolve_target(target.node)
        name = resolved.name
        if resolved.path is not None and role in (WRITE, CREATE_TABLE, CLONE_SOURCE, METADATA, SENSITIVE_METADATA):
            locations.append(resolved.path)
        if role == WRITE:
            full_access_or_refuse(name, "writing to")
            if name is not None:
                written.add(name)
        elif role == CREATE_TABLE:
            if target.replace:
                full_access_or_refuse(name, "replacing")
            if name is not None:
                written.add(name)
                created.add(name)
        elif role == CREATE_VIEW:
            if name is not None:
                views_created.add(name)
        elif role == CREATE_TEMP_VIEW:
            temp_created.add(resolved.parts[-1].lower())
        elif role == CREATE_GLOBAL_TEMP_VIEW:
            temp_created.add(f"global_temp.{resolved.parts[-1].lower()}")
        elif role == ALTER_VIEW:
            if name is not None:
                views_altered.add(name)
        elif role == ALTER_TABLE:
            if target.data:
                full_access_or_refuse(name, "altering the data or location of")
            if name is not None:
                altered.add(name)
        elif role == RENAME_TO:
            source = resolve_target(target.rename_from.node) if target.rename_from is not None else None
            if source is not None and source.name is not None:
                parts = resolved.parts
                old = source.name
                new: TableName | None
                try:
                    if len(parts) == 1:
                        new = TableName(old.catalog, old.schema, parts[0])
                    elif len(parts) == 2:
                        new = TableName(old.catalog, parts[0], parts[1])
                    else:
                        new = resolved.name
                except ValueError:
                    new = None
                if new is not None:
                    renamed.append((old, new))
        elif role == DROP_TABLE or role == DROP_VIEW:
            if resolved.global_temp_view is not None:
                temp_dropped.add(resolved.global_temp_view)
            elif resolved.temp_view is not None or (role == DROP_VIEW and target.temporary):
                temp_dropped.add(resolved.parts[-1].lower())
            elif name is not None:
                (dropped if role == DROP_TABLE else views_dropped).add(name)
        elif role == DROP_NAMESPACE:
            if name is not None:
                namespaces_dropped.add((name.catalog, name.schema))
        elif role == METADATA:
            if name is not None and resolved.temp_view is None:
                metadata.add(name)
        elif role == CLONE_SOURCE:
            full_access_or_refuse(name, "cloning")
            if name is not None:
                metadata.add(name)
        elif role == SENSITIVE_METADATA:
            if name is not None and resolved.temp_view is None:
                full_access_or_refuse(name, "statistics or history of")
                metadata.add(name)
    effects = SessionEffects(
        tables_created=frozenset(created),
        tables_dropped=frozenset(dropped),
        namespaces_dropped=frozenset(namespaces_dropped),
        tables_altered=frozenset(altered),
        tables_renamed=tuple(renamed),
        views_created=frozenset(views_created),
        views_dropped=frozenset(views_dropped),
        views_altered=frozenset(views_altered),
        temp_views_created=frozenset(temp_created),
        temp_views_dropped=frozenset(temp_dropped),
        functions_created=tuple(functions_created),
        functions_dropped=tuple(functions_dropped),
        locations=tuple(dict.fromkeys(locations)),
        metadata_read=frozenset(metadata),
        variables_set=tuple(classified.variables),
    )
    return Enforced(written, effects)


def use_effects(parts: tuple[str, ...], kind: str, current_catalog: str) -> SessionEffects:
    """The rewriter's best reading of `USE [CATALOG|DATABASE|SCHEMA|NAMESPACE] <parts>`.

    Spark switches catalog when a one-part `USE x` names a catalog; only `spark_catalog`
    and the current catalog are known here, so the pipeline should read the session's
    current catalog and database back from Spark after running a USE.
    """
    kind = kind.upper()
    if kind == "CATALOG":
        return SessionEffects(current_catalog=parts[0] if len(parts) == 1 else ".".join(parts), use_target=parts)
    if len(parts) == 1:
        if not kind and parts[0].lower() in ("spark_catalog", current_catalog.lower()):
            return SessionEffects(current_catalog=parts[0].lower(), use_target=parts)
        return SessionEffects(current_schema=parts[0].lower(), use_target=parts)
    if len(parts) == 2:
        return SessionEffects(current_catalog=parts[0].lower(), current_schema=parts[1].lower(), use_target=parts)
    return SessionEffects(use_target=parts)

"""What a parsed statement is: its kind, the names it writes, creates, drops or only
describes (not reads), the bodies it stores for later readers, the locations it names.

A pure function of the tree: `classify` never changes the statement (the one rewrite
that used to happen here, `INSERT INTO t TABLE s` read as `INSERT INTO t SELECT * FROM s`,
is part of the `normalize` pass in shape.py, which runs before it).

The catalogue is data-like on purpose (one branch per statement type, every unknown type
is "unknown" and refused when protection is in force): a missing entry must fail closed,
never pass through. Names are not resolved here; effects.py resolves them and decides what
the statement changes.

>>> import sqlglot
>>> c = classify(sqlglot.parse_one("INSERT INTO t SELECT * FROM s", read="spark"))
>>> c.kind, [(t.node.name, t.role) for t in c.targets]
('insert', [('t', 'write')])
>>> c = classify(sqlglot.parse_one("CREATE VIEW v AS SELECT 1", read="spark"))
>>> c.kind, [t.role for t in c.targets], [what for what, _ in c.definer_bodies]
('create_view', ['create_view'], ['view'])
>>> classify(sqlglot.parse_one("GRANT SELECT ON t TO u", read="spark")).kind
'unknown'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

# Roles of names that are not reads.
WRITE = "write"  # INSERT/UPDATE/DELETE/MERGE/TRUNCATE/LOAD target
CREATE_TABLE = "create_table"
CREATE_VIEW = "create_view"
CREATE_TEMP_VIEW = "create_temp_view"
CREATE_GLOBAL_TEMP_VIEW = "create_global_temp_view"
ALTER_VIEW = "alter_view"
ALTER_TABLE = "alter_table"
RENAME_TO = "rename_to"
DROP_TABLE = "drop_table"
DROP_VIEW = "drop_view"
FUNCTION = "function"
DROP_FUNCTION = "drop_function"
# DROP DATABASE/SCHEMA/NAMESPACE: the target is a stand-in table inside the namespace, so
# that the namespace is resolved (catalog, case) exactly like a table name would be.
DROP_NAMESPACE = "drop_namespace"
NAMESPACE_PROBE = "__rowgate_namespace__"
METADATA = "metadata"  # DESCRIBE t, CACHE TABLE t, REFRESH t, LIKE t, COMMENT ON t ...
SENSITIVE_METADATA = "sensitive_metadata"  # DESCRIBE EXTENDED/FORMATTED/HISTORY, ANALYZE
NOT_A_RELATION = "not_a_relation"  # DESCRIBE DATABASE d, DESCRIBE FUNCTION f
CLONE_SOURCE = "clone_source"  # CREATE TABLE c [SHALLOW|DEEP] CLONE t: copies every row of t


@dataclass(frozen=True)
class Target:
    """A name the statement uses other than to read rows from it, and in which role."""

    node: exp.Expr  # an exp.Table (or the function's name node)
    role: str
    replace: bool = False  # CREATE OR REPLACE TABLE: overwrites an existing table
    temporary: bool = False
    data: bool = True  # ALTER TABLE: whether an action touches data or location
    rename_from: Target | None = None


@dataclass(frozen=True)
class Classified:
    """The typed answer of `classify`; sequences given as lists are kept as tuples."""

    kind: str
    targets: Sequence[Target] = ()
    definer_bodies: Sequence[tuple[str, exp.Expr]] = ()  # ("view"|"function", body)
    locations: Sequence[str] = ()
    variables: Sequence[str] = ()
    creates_function: bool = False

    def __post_init__(self) -> None:
        for key in ("targets", "definer_bodies", "locations", "variables"):
            object.__setattr__(self, key, tuple(getattr(self, key)))

    def excluded_ids(self) -> frozenset[int]:
        """`id()`s of the nodes that are not reads: targets and stored bodies."""
        ids = {id(t.node) for t in self.targets}
        ids.update(id(body) for _, body in self.definer_bodies)
        return frozenset(ids)


def _table_of(node: exp.Expr | None) -> exp.Table | None:
    if isinstance(node, exp.Schema):
        node = node.this
    if isinstance(node, exp.UserDefinedFunction):
        node = node.this
    return node if isinstance(node, exp.Table) else None


# A location given by anything but one string literal (a parameter, adjacent literals):
# reported as this text, which is no absolute path, so the allow list refuses it.
UNREADABLE_LOCATION = "<a location that is not one string literal>"


def _location_text(node: exp.Expr | None) -> str | None:
    """The location a clause names (None: the clause is absent)."""
    if node is None:
        return None
    if isinstance(node, exp.LocationProperty):
        node = node.this
    return str(node.this) if isinstance(node, exp.Literal) and node.is_string else UNREADABLE_LOCATION


def _properties(node: exp.Expr) -> list[exp.Expr]:
    props = node.args.get("properties")
    return list(props.expressions) if isinstance(props, exp.Properties) else []


def _locations_of(props: list[exp.Expr]) -> list[str]:
    out = []
    for prop in props:
        if isinstance(prop, exp.LocationProperty):
            out.append(_location_text(prop.this) or UNREADABLE_LOCATION)
        elif isinstance(prop, exp.OptionsProperty):
            for option in prop.expressions:
                if isinstance(option, exp.Property) and option.name.lower() in ("path", "paths"):
                    out.append(_location_text(option.args.get("value")) or UNREADABLE_LOCATION)
    return out


_METADATA_ONLY_ALTER = (exp.AlterRename, exp.RenameColumn, exp.ColumnDef, exp.Schema, exp.AlterColumn, exp.Comment)


def classify(stmt: exp.Expr) -> Classified:
    """Kind, non-read names and stored bodies of one parsed statement."""
    if isinstance(stmt, (exp.Query, exp.Values)):
        return Classified("query")
    if isinstance(stmt, exp.Insert):
        targets, locations = _insert(stmt)
        return Classified("insert", targets, locations=locations)
    if isinstance(stmt, exp.MultitableInserts):
        all_targets: list[Target] = []
        all_locations: list[str] = []
        for insert in stmt.expressions:
            if isinstance(insert, exp.Insert):
                targets, locations = _insert(insert)
                all_targets += targets
                all_locations += locations
        return Classified("insert", all_targets, locations=all_locations)
    if isinstance(stmt, (exp.Update, exp.Delete, exp.Merge)):
        kind = {exp.Update: "update", exp.Delete: "delete", exp.Merge: "merge"}[type(stmt)]
        table = _table_of(stmt.this)
        return Classified(kind, [Target(table, WRITE)] if table is not None else [])
    if isinstance(stmt, exp.TruncateTable):
        if stmt.args.get("is_database"):
            return Classified("unknown")
        return Classified("truncate", [Target(t, WRITE) for t in stmt.expressions if isinstance(t, exp.Table)])
    if isinstance(stmt, exp.LoadData):
        inpath = _location_text(stmt.args.get("inpath")) or UNREADABLE_LOCATION
        return Classified("load", [Target(stmt.this, WRITE)], locations=[inpath])
    if isinstance(stmt, exp.Create):
        return _create(stmt)
    if isinstance(stmt, exp.Drop):
        kind = (stmt.args.get("kind") or "").upper()
        role = {"TABLE": DROP_TABLE, "VIEW": DROP_VIEW, "FUNCTION": DROP_FUNCTION}.get(kind)
        if role is None and kind in ("SCHEMA", "DATABASE", "NAMESPACE"):
            dropped: list[Target] = []
            for t in stmt.args.get("tables") or []:
                parts = [p.name for p in t.parts] if isinstance(t, exp.Table) else []
                if 1 <= len(parts) <= 2:
                    probe = exp.Table(
                        this=exp.to_identifier(NAMESPACE_PROBE),
                        db=exp.to_identifier(parts[-1]),
                        catalog=exp.to_identifier(parts[0]) if len(parts) == 2 else None,
                    )
                    dropped.append(Target(probe, DROP_NAMESPACE))
                if isinstance(t, exp.Table):
                    dropped.append(Target(t, NOT_A_RELATION))  # a namespace, not a table
            return Classified("drop", dropped)
        if role is None:
            return Classified("unknown")
        return Classified(
            "drop",
            [
                Target(t, role, temporary=bool(stmt.args.get("temporary")))
                for t in (stmt.args.get("tables") or stmt.expressions or [])
                if isinstance(t, exp.Table)
            ],
        )
    if isinstance(stmt, exp.Alter):
        return _alter(stmt)
    if isinstance(stmt, exp.Cache):
        table = _table_of(stmt.this)
        if stmt.expression is not None:
            return Classified("cache", [Target(table, CREATE_TEMP_VIEW, temporary=True)] if table is not None else [])
        return Classified("cache", [Target(table, METADATA)] if table is not None else [])
    if isinstance(stmt, exp.Uncache):
        table = _table_of(stmt.this)
        return Classified("uncache", [Target(table, METADATA)] if table is not None else [])
    if isinstance(stmt, exp.Describe):
        return _describe(stmt)
    if isinstance(stmt, exp.Analyze):
        return Classified(
            "analyze", [Target(t, SENSITIVE_METADATA) for t in stmt.args.get("tables") or [] if isinstance(t, exp.Table)]
        )
    if isinstance(stmt, exp.Refresh):
        if isinstance(stmt.this, exp.Literal):  # REFRESH '<path>'
            return Classified("refresh", locations=[_location_text(stmt.this) or UNREADABLE_LOCATION])
        table = _table_of(stmt.this)
        return Classified("refresh", [Target(table, METADATA)] if table is not None else [])
    if isinstance(stmt, exp.Comment):
        table = _table_of(stmt.this)
        kind = (stmt.args.get("kind") or "").upper()
        if table is not None and kind in ("DATABASE", "SCHEMA", "NAMESPACE"):
            return Classified("ddl", [Target(table, NOT_A_RELATION)])
        if table is None or kind not in ("TABLE", "VIEW", "COLUMN"):
            return Classified("ddl")
        return Classified("ddl", [Target(table, METADATA)])
    if isinstance(stmt, exp.Use):
        return Classified("use", [Target(stmt.this, NOT_A_RELATION)] if stmt.this is not None else [])
    if isinstance(stmt, exp.Set):
        items = [i for i in stmt.expressions if isinstance(i, exp.SetItem)]
        if items and all((i.args.get("kind") or "").upper() == "VARIABLE" for i in items):
            names = []
            for item in items:
                target = item.this.this if isinstance(item.this, exp.EQ) else item.this
                names.append(target.sql("spark") if isinstance(target, exp.Expression) else str(target))
            return Classified("set_variable", variables=names)
        return Classified("unknown")
    if isinstance(stmt, exp.Declare):
        names = []
        for item in stmt.expressions:
            for ident in item.this if isinstance(item.this, list) else [item.this]:
                if isinstance(ident, exp.Expression):
                    names.append(ident.name)
        return Classified("declare", variables=names)
    return Classified("unknown")


def _insert(stmt: exp.Insert) -> tuple[list[Target], list[str]]:
    """The written table or directory of one INSERT (its source is a read)."""
    target = stmt.this
    if isinstance(target, exp.Directory):
        return [], [_location_text(target.this) or UNREADABLE_LOCATION]
    table = _table_of(target)
    return ([Target(table, WRITE)] if table is not None else []), []


def _create(stmt: exp.Create) -> Classified:
    kind = (stmt.args.get("kind") or "").upper()
    props = _properties(stmt)
    temporary = any(isinstance(p, exp.TemporaryProperty) for p in props)
    is_global = any(isinstance(p, exp.GlobalProperty) for p in props)
    locations = _locations_of(props)
    table = _table_of(stmt.this)
    materialized = any(isinstance(p, exp.MaterializedProperty) for p in props)
    if kind == "TABLE" or (kind == "VIEW" and materialized):
        # A materialized view stores the creator's rows, like CTAS: its query is a read.
        targets: list[Target] = []
        if table is not None:
            targets.append(Target(table, CREATE_TABLE, replace=bool(stmt.args.get("replace"))))
        for prop in props:
            if isinstance(prop, exp.LikeProperty) and isinstance(prop.this, exp.Table):
                targets.append(Target(prop.this, METADATA))
        clone = stmt.args.get("clone")
        if isinstance(clone, exp.Clone) and isinstance(clone.this, exp.Table):
            targets.append(Target(clone.this, CLONE_SOURCE))
        return Classified("create_table", targets, locations=locations)
    if kind == "VIEW":
        targets = []
        bodies: list[tuple[str, exp.Expr]] = []
        if temporary:
            role = CREATE_GLOBAL_TEMP_VIEW if is_global else CREATE_TEMP_VIEW
            if table is not None:
                targets.append(Target(table, role, replace=bool(stmt.args.get("replace")), temporary=True))
        else:
            if table is not None:
                targets.append(Target(table, CREATE_VIEW, replace=bool(stmt.args.get("replace"))))
            if stmt.expression is not None:
                bodies.append(("view", stmt.expression))
        return Classified("create_view", targets, bodies, locations=locations)
    if kind == "FUNCTION":
        targets = [Target(table, FUNCTION, temporary=temporary)] if table is not None else []
        bodies = [("function", stmt.expression)] if stmt.expression is not None and not temporary else []
        return Classified("create_function", targets, bodies, creates_function=True)
    if kind in ("SCHEMA", "DATABASE", "NAMESPACE"):
        # the name is a namespace, not a relation: neither read nor pinned as one
        return Classified("ddl", [Target(table, NOT_A_RELATION)] if table is not None else [], locations=locations)
    return Classified("unknown")


def _alter(stmt: exp.Alter) -> Classified:
    kind = (stmt.args.get("kind") or "").upper()
    table = _table_of(stmt.this)
    if table is None or kind not in ("TABLE", "VIEW"):
        return Classified("unknown")
    renames: list[Target] = []
    bodies: list[tuple[str, exp.Expr]] = []
    locations: list[str] = []
    data = False
    target = Target(table, ALTER_VIEW if kind == "VIEW" else ALTER_TABLE)
    for action in stmt.args.get("actions") or []:
        if isinstance(action, exp.AlterRename):
            new = _table_of(action.this)
            if new is not None:
                renames.append(Target(new, RENAME_TO, rename_from=target))
        elif kind == "VIEW" and isinstance(action, exp.Query):
            bodies.append(("view", action))
        elif isinstance(action, exp.AlterSet):
            location = _location_text(action.args.get("location"))
            if location is not None:
                locations.append(location)
                data = True
            elif any(action.args.get(k) for k in ("tablespace", "access_method", "file_format", "serde", "copy_options", "tag")):
                data = True
        elif not isinstance(action, _METADATA_ONLY_ALTER):
            data = True  # partitions, unknown actions: treat as touching data
            if isinstance(action, exp.AddPartition) and action.args.get("location") is not None:
                locations.append(_location_text(action.args["location"]) or UNREADABLE_LOCATION)
    altered = Target(target.node, target.role, data=data)
    return Classified("alter", [altered, *renames], bodies, locations=locations)


def _describe(stmt: exp.Describe) -> Classified:
    subject = stmt.this
    if isinstance(subject, exp.Query):
        return Classified("describe")  # DESCRIBE <query>: its relations are reads
    kind = (stmt.args.get("kind") or "").upper()
    table = _table_of(subject)
    if table is None:
        return Classified("describe")
    if kind and kind not in ("TABLE", "VIEW"):
        return Classified("describe", [Target(table, NOT_A_RELATION)])
    style = (stmt.args.get("style") or "").upper()
    sensitive = (
        style in ("EXTENDED", "FORMATTED", "HISTORY", "DETAIL")
        or bool(stmt.args.get("partition"))
        or bool(stmt.args.get("expressions"))
    )
    return Classified("describe", [Target(table, SENSITIVE_METADATA if sensitive else METADATA)])

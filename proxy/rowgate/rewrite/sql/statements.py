"""What kind of statement this is, which names it writes or defines, and what it changes.

The catalogue of statements is data-like on purpose (one branch per statement type, every
unknown type is "unknown" and refused when protection is in force): a missing entry must
fail closed, never pass through.

Two layers:
- `classify_text` reads statements Spark itself parses by regular expression or that sqlglot
  only knows as an opaque `Command` (`SET k=v`, `RESET`, `SET CATALOG`, `EXPLAIN`, `SHOW`,
  the proxy's own row access policy DDL) from the token stream;
- `classify` reads a parsed sqlglot tree: statement kind, the relation names that are
  written, created, dropped or only described (not reads), and the bodies that are stored
  for later readers (persistent views and functions: analysed, never rewritten).
`enforce` then resolves those names, refuses writes the caller may not make and returns
the session effects.

>>> from sqlglot.dialects.spark import Spark
>>> t = classify_text(Spark().tokenize("SET spark.sql.ansi.enabled = false;"), "SET spark.sql.ansi.enabled = false;")
>>> t.kind, t.effects.config_set
('set', (('spark.sql.ansi.enabled', 'false'),))
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Token, TokenType

from rowgate.identity.caller import Caller
from rowgate.policy import decision
from rowgate.policy.model import TableName
from rowgate.rewrite.sql.errors import RewriteRefused
from rowgate.rewrite.sql.result import NO_EFFECTS, SessionEffects

# ---------------------------------------------------------------------------------------------
# Text-level statements


@dataclass(frozen=True)
class TextStatement:
    kind: str
    effects: SessionEffects = NO_EFFECTS
    explained_offset: int | None = None  # EXPLAIN: where the explained statement starts in the text
    explain_mode: str = ""  # EXPLAIN EXTENDED/CODEGEN/...: the mode, upper-cased
    refusal: str | None = None  # refuse with this message when protection is in force
    admin_only: str | None = None  # refuse non-admins with this message when protection is in force


_EXPLAIN_MODES = frozenset({"EXTENDED", "CODEGEN", "COST", "FORMATTED", "LOGICAL"})
# SHOW forms that list names or schemas only; every other SHOW is refused under protection
# (SHOW PARTITIONS lists data values, SHOW TBLPROPERTIES / TABLE EXTENDED carry statistics,
# SHOW CREATE TABLE is an opaque command for sqlglot).
_SAFE_SHOW = frozenset({"TABLES", "VIEWS", "DATABASES", "SCHEMAS", "NAMESPACES", "CATALOGS", "FUNCTIONS", "COLUMNS", "CURRENT"})
_SAFE_SHOW_PREFIXED = frozenset({"USER", "SYSTEM", "ALL"})  # SHOW USER FUNCTIONS ...

_KEY = r"[a-zA-Z_0-9\\.:]+"
_SET_KEY_VALUE = re.compile(rf"({_KEY})\s*=([^;]*);*", re.S)
_SET_KEY = re.compile(rf"({_KEY})")
_QUOTED_KEY = re.compile(r"`((?:[^`]|``)+)`\s*(?:=\s*(.*?))?\s*;*", re.S)
_RESET_KEY = re.compile(rf"({_KEY})\s*;*")


def _word(tokens: list[Token], i: int) -> str:
    if i >= len(tokens):
        return ""
    token = tokens[i]
    if token.token_type in (TokenType.STRING, TokenType.IDENTIFIER):
        return ""  # quoted text is never a keyword
    return token.text.upper()


def _remainder(sql: str, token: Token) -> str:
    return sql[token.end + 1 :].strip()


def _unquote_key(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "`":
        return text[1:-1].replace("``", "`")
    return text


def parse_set(remainder: str) -> tuple[tuple[str, str | None], ...] | None:
    """Spark's reading of `SET <remainder>` (SparkSqlAstBuilder): () lists all, None if invalid.

    >>> parse_set("spark.sql.shuffle.partitions=4"), parse_set("a.b"), parse_set("`a b` = `v`")
    ((('spark.sql.shuffle.partitions', '4'),), (('a.b', None),), (('a b', 'v'),))
    """
    text = remainder.strip()
    if not text or text.strip(";").strip() == "":
        return ()
    if text == "-v":
        return (("-v", None),)
    m = _SET_KEY_VALUE.fullmatch(text)
    if m:
        return ((m.group(1), m.group(2).strip()),)
    m = _SET_KEY.fullmatch(text.rstrip(";").rstrip())
    if m:
        return ((m.group(1), None),)
    m = _QUOTED_KEY.fullmatch(text)
    if m:
        key = m.group(1).replace("``", "`")
        value = m.group(2)
        return ((key, _unquote_key(value) if value is not None else None),)
    if "=" in text:
        key, _, value = text.partition("=")
        m = _SET_KEY.fullmatch(key.strip())
        if m:
            return ((m.group(1), _unquote_key(value.strip().rstrip(";").strip())),)
    return None


def parse_reset(remainder: str) -> tuple[str, ...] | None:
    """Spark's reading of `RESET <remainder>`: () resets everything, None if invalid."""
    text = remainder.strip().rstrip(";").strip()
    if not text:
        return ()
    if _RESET_KEY.fullmatch(text):
        return (text,)
    if text.startswith("`") and text.endswith("`") and len(text) > 2:
        return (_unquote_key(text),)
    return None


_COMMAND_TOKENS = frozenset({TokenType.COMMAND, TokenType.SHOW, TokenType.EXECUTE, TokenType.FETCH, TokenType.RENAME})


def command_rest(tokens: list[Token], sql: str) -> tuple[str, int, str] | None:
    """For a statement sqlglot's tokenizer reads as a command (`EXPLAIN ...`, `SHOW ...`):
    its head keyword(s), and where the rest of its text starts and what it is."""
    if tokens[0].token_type not in _COMMAND_TOKENS:
        return None
    head = " ".join(tokens[0].text.upper().split())
    if len(tokens) < 2:
        return head, len(sql), ""
    rest = tokens[1].text
    after = tokens[0].end + 1
    tail = sql[after:]
    offset = after + (len(tail) - len(tail.lstrip()))
    if not sql.startswith(rest, offset):
        return None
    return head, offset, rest


def classify_text(tokens: list[Token], sql: str) -> TextStatement | None:
    """Statements read from tokens; None for everything sqlglot parses properly."""
    if not tokens:
        return None
    command = command_rest(tokens, sql)
    if command is not None:
        return _command(command, sql)
    if tokens[0].token_type in _COMMAND_TOKENS:
        return TextStatement("command", refusal=f"the {tokens[0].text.upper()} statement")
    w0, w1, w2 = (_word(tokens, i) for i in range(3))
    if _is_row_access_policy([w for w in (_word(tokens, i) for i in range(6))]):
        return TextStatement("row_access_policy")
    if w0 == "SET":
        if w1 in ("VAR", "VARIABLE"):
            return None
        if w1 == "CATALOG":
            if len(tokens) != 3 or tokens[2].token_type not in (TokenType.VAR, TokenType.IDENTIFIER, TokenType.STRING):
                return TextStatement("use", refusal="SET CATALOG with a name the proxy cannot read")
            catalog = tokens[2].text
            return TextStatement("use", SessionEffects(current_catalog=catalog, use_target=(catalog,)))
        if w1 == "TIME" and w2 == "ZONE":
            value = sql[tokens[2].end + 1 :].strip().rstrip(";").strip()
            return TextStatement("set", SessionEffects(config_set=(("spark.sql.session.timeZone", value),)))
        if w1 in ("ROLE", "COLLATION"):
            return TextStatement("set", SessionEffects(config_set=((w1.lower(), None),)))
        pairs = parse_set(_remainder(sql, tokens[0]))
        if pairs is None:
            return TextStatement("set", refusal="a SET statement the proxy cannot read")
        return TextStatement("set", SessionEffects(config_set=pairs))
    if w0 == "RESET":
        keys = parse_reset(_remainder(sql, tokens[0]))
        if keys is None:
            return TextStatement("reset", refusal="a RESET statement the proxy cannot read")
        return TextStatement("reset", SessionEffects(config_reset=keys, config_reset_all=not keys))
    if w0 == "CLEAR" and w1 == "CACHE" and len(tokens) == 2:
        return TextStatement("cache")
    if w0 == "LIST" and w1 in ("FILE", "FILES", "JAR", "JARS", "ARCHIVE", "ARCHIVES"):
        return TextStatement("list_resources")
    return None


def _command(command: tuple[str, int, str], sql: str) -> TextStatement:
    head, offset, rest = command
    try:
        rest_tokens = Dialect.get_or_raise("spark").tokenize(rest) if rest else []
    except Exception:  # noqa: BLE001 - untokenisable text is classified by its first word alone
        rest_tokens = []
    words = [_word(rest_tokens, i) for i in range(3)]
    if head == "EXPLAIN":
        if not rest_tokens:
            return TextStatement("explain", refusal="EXPLAIN without a statement the proxy can read")
        index = 1 if words[0] in _EXPLAIN_MODES else 0
        if index >= len(rest_tokens):
            return TextStatement("explain", refusal="EXPLAIN without a statement")
        return TextStatement(
            "explain", explained_offset=offset + rest_tokens[index].start, explain_mode=words[0] if index else ""
        )
    if head == "SHOW":
        if _is_row_access_policy(["SHOW", *words]):
            return TextStatement("row_access_policy")
        w1, w2, w3 = words
        safe = w1 in _SAFE_SHOW or (w1 in _SAFE_SHOW_PREFIXED and w2 == "FUNCTIONS")
        if w1 == "TABLES" and "EXTENDED" in (w2, w3):
            safe = False
        return TextStatement("show", refusal=None if safe else f"SHOW {w1 or '...'}")
    if head.startswith("ADD "):
        return TextStatement("add_resource", admin_only=f"{head} is reserved to admins while row access policies are in force")
    return TextStatement("command", refusal=f"the {head} statement")


def _is_row_access_policy(words: list[str]) -> bool:
    if words[:1] == ["CREATE"]:
        rest = words[3:6] if words[1:3] == ["OR", "REPLACE"] else words[1:4]
        return rest[:2] == ["ROW", "ACCESS"]
    if words[:1] == ["DROP"]:
        return words[1:3] == ["ROW", "ACCESS"] or words[1:4] == ["ALL", "ROW", "ACCESS"]
    if words[:1] == ["SHOW"]:
        return words[1:3] == ["ROW", "ACCESS"]
    return False


# ---------------------------------------------------------------------------------------------
# Parsed statements

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


@dataclass
class Target:
    node: exp.Expression  # an exp.Table (or the function's name node)
    role: str
    replace: bool = False  # CREATE OR REPLACE TABLE: overwrites an existing table
    temporary: bool = False
    data: bool = True  # ALTER TABLE: whether an action touches data or location
    rename_from: Target | None = None


@dataclass
class Classified:
    kind: str
    targets: list[Target] = field(default_factory=list)
    definer_bodies: list[tuple[str, exp.Expr]] = field(default_factory=list)  # ("view"|"function", body)
    locations: list[str] = field(default_factory=list)
    variables: list[str] = field(default_factory=list)
    creates_function: bool = False

    def excluded_ids(self) -> frozenset[int]:
        ids = {id(t.node) for t in self.targets}
        ids.update(id(body) for _, body in self.definer_bodies)
        return frozenset(ids)


def _table_of(node: exp.Expression | None) -> exp.Table | None:
    if isinstance(node, exp.Schema):
        node = node.this
    if isinstance(node, exp.UserDefinedFunction):
        node = node.this
    return node if isinstance(node, exp.Table) else None


def _literal_text(node: exp.Expression | None) -> str | None:
    if isinstance(node, exp.Literal):
        return str(node.this)
    return None


# A location given by anything but one string literal (a parameter, adjacent literals):
# reported as this text, which is no absolute path, so the allow list refuses it.
UNREADABLE_LOCATION = "<a location that is not one string literal>"


def _location_text(node: exp.Expression | None) -> str | None:
    """The location a clause names (None: the clause is absent)."""
    if node is None:
        return None
    if isinstance(node, exp.LocationProperty):
        node = node.this
    return str(node.this) if isinstance(node, exp.Literal) and node.is_string else UNREADABLE_LOCATION


def _properties(node: exp.Expression) -> list[exp.Expression]:
    props = node.args.get("properties")
    return list(props.expressions) if isinstance(props, exp.Properties) else []


def _locations_of(props: list[exp.Expression]) -> list[str]:
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


def classify(stmt: exp.Expression) -> Classified:
    """Kind, non-read names and stored bodies of one parsed statement."""
    if isinstance(stmt, (exp.Query, exp.Values)):
        return Classified("query")
    if isinstance(stmt, exp.Insert):
        return _insert(stmt, Classified("insert"))
    if isinstance(stmt, exp.MultitableInserts):
        out = Classified("insert")
        for insert in stmt.expressions:
            if isinstance(insert, exp.Insert):
                _insert(insert, out)
        return out
    if isinstance(stmt, (exp.Update, exp.Delete, exp.Merge)):
        kind = {exp.Update: "update", exp.Delete: "delete", exp.Merge: "merge"}[type(stmt)]
        table = _table_of(stmt.this)
        return Classified(kind, [Target(table, WRITE)] if table is not None else [])
    if isinstance(stmt, exp.TruncateTable):
        if stmt.args.get("is_database"):
            return Classified("unknown")
        return Classified("truncate", [Target(t, WRITE) for t in stmt.expressions if isinstance(t, exp.Table)])
    if isinstance(stmt, exp.LoadData):
        out = Classified("load", [Target(stmt.this, WRITE)])
        out.locations.append(_location_text(stmt.args.get("inpath")) or UNREADABLE_LOCATION)
        return out
    if isinstance(stmt, exp.Create):
        return _create(stmt)
    if isinstance(stmt, exp.Drop):
        kind = (stmt.args.get("kind") or "").upper()
        role = {"TABLE": DROP_TABLE, "VIEW": DROP_VIEW, "FUNCTION": DROP_FUNCTION}.get(kind)
        if role is None and kind in ("SCHEMA", "DATABASE", "NAMESPACE"):
            out = Classified("drop")
            for t in stmt.args.get("tables") or []:
                parts = [p.name for p in t.parts] if isinstance(t, exp.Table) else []
                if 1 <= len(parts) <= 2:
                    probe = exp.Table(
                        this=exp.to_identifier(NAMESPACE_PROBE),
                        db=exp.to_identifier(parts[-1]),
                        catalog=exp.to_identifier(parts[0]) if len(parts) == 2 else None,
                    )
                    out.targets.append(Target(probe, DROP_NAMESPACE))
                if isinstance(t, exp.Table):
                    out.targets.append(Target(t, NOT_A_RELATION))  # a namespace, not a table
            return out
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
            out = Classified("set_variable", variables=names)
            return out
        return Classified("unknown")
    if isinstance(stmt, exp.Declare):
        names = []
        for item in stmt.expressions:
            for ident in item.this if isinstance(item.this, list) else [item.this]:
                if isinstance(ident, exp.Expression):
                    names.append(ident.name)
        return Classified("declare", variables=names)
    return Classified("unknown")


def _insert(stmt: exp.Insert, out: Classified) -> Classified:
    target = stmt.this
    if isinstance(target, exp.Directory):
        out.locations.append(_location_text(target.this) or UNREADABLE_LOCATION)
        out.kind = "insert"
        return out
    table = _table_of(target)
    if table is not None:
        out.targets.append(Target(table, WRITE))
    source = stmt.args.get("source")
    if isinstance(source, exp.Table) and stmt.expression is None:
        # INSERT INTO t TABLE s: read as INSERT INTO t SELECT * FROM s so `s` can be filtered.
        stmt.set("source", None)
        stmt.set("expression", exp.Select(expressions=[exp.Star()], from_=exp.From(this=source)))
    return out


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
        out = Classified("create_table", locations=locations)
        if table is not None:
            out.targets.append(Target(table, CREATE_TABLE, replace=bool(stmt.args.get("replace"))))
        for prop in props:
            if isinstance(prop, exp.LikeProperty) and isinstance(prop.this, exp.Table):
                out.targets.append(Target(prop.this, METADATA))
        clone = stmt.args.get("clone")
        if isinstance(clone, exp.Clone) and isinstance(clone.this, exp.Table):
            out.targets.append(Target(clone.this, CLONE_SOURCE))
        return out
    if kind == "VIEW":
        out = Classified("create_view", locations=locations)
        if temporary:
            role = CREATE_GLOBAL_TEMP_VIEW if is_global else CREATE_TEMP_VIEW
            if table is not None:
                out.targets.append(Target(table, role, replace=bool(stmt.args.get("replace")), temporary=True))
        else:
            if table is not None:
                out.targets.append(Target(table, CREATE_VIEW, replace=bool(stmt.args.get("replace"))))
            if stmt.expression is not None:
                out.definer_bodies.append(("view", stmt.expression))
        return out
    if kind == "FUNCTION":
        out = Classified("create_function", creates_function=True)
        if table is not None:
            out.targets.append(Target(table, FUNCTION, temporary=temporary))
        if stmt.expression is not None and not temporary:
            out.definer_bodies.append(("function", stmt.expression))
        return out
    if kind in ("SCHEMA", "DATABASE", "NAMESPACE"):
        # the name is a namespace, not a relation: neither read nor pinned as one
        return Classified("ddl", [Target(table, NOT_A_RELATION)] if table is not None else [], locations=locations)
    return Classified("unknown")


def _alter(stmt: exp.Alter) -> Classified:
    kind = (stmt.args.get("kind") or "").upper()
    table = _table_of(stmt.this)
    if table is None or kind not in ("TABLE", "VIEW"):
        return Classified("unknown")
    out = Classified("alter")
    data = False
    target = Target(table, ALTER_VIEW if kind == "VIEW" else ALTER_TABLE)
    for action in stmt.args.get("actions") or []:
        if isinstance(action, exp.AlterRename):
            new = _table_of(action.this)
            if new is not None:
                out.targets.append(Target(new, RENAME_TO, rename_from=target))
        elif kind == "VIEW" and isinstance(action, exp.Query):
            out.definer_bodies.append(("view", action))
        elif isinstance(action, exp.AlterSet):
            location = _location_text(action.args.get("location"))
            if location is not None:
                out.locations.append(location)
                data = True
            elif any(action.args.get(k) for k in ("tablespace", "access_method", "file_format", "serde", "copy_options", "tag")):
                data = True
        elif not isinstance(action, _METADATA_ONLY_ALTER):
            data = True  # partitions, unknown actions: treat as touching data
            if isinstance(action, exp.AddPartition) and action.args.get("location") is not None:
                out.locations.append(_location_text(action.args["location"]) or UNREADABLE_LOCATION)
    target.data = data
    out.targets.insert(0, target)
    return out


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


# ---------------------------------------------------------------------------------------------
# Enforcement and effects


@dataclass(frozen=True)
class TargetName:
    """A non-read name, resolved: the catalog interpretation and whether a temp view answers."""

    parts: tuple[str, ...]
    name: TableName | None  # the catalog table/view Spark would use without temp views
    temp_view: str | None = None  # lower-cased name when a session temp view of this name exists
    global_temp_view: str | None = None  # global_temp.<name>
    path: str | None = None  # `parquet.`/p``-style name the catalog does not know: files by path


ResolveTarget = Callable[[exp.Expression], TargetName]


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
            raise RewriteRefused.denied(f"{what} {name} requires a FILTER USING (TRUE) grant")

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

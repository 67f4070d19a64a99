"""Whether a policy's filter means the same under every value of the caller's own settings.

Two settings a non-admin may change (settings_allow_list.py) change what an expression
returns: the session time zone (`CAST(ts AS DATE)`, `hour(ts)`, `current_date()`, a string
or `TIMESTAMP '...'` literal compared with a timestamp) and ANSI mode (`CAST('1.5' AS INT)`
is 1 without ANSI and an error with it; `int_col = '1.5'`, `str_col = 10.0` and arithmetic
that overflows select other rows); so does a third, nanosecond timestamps (Spark 4.3:
`TIMESTAMP '... .0000005'` keeps its nanoseconds). A caller who changes one must not widen a policy's
boundary, so each policy's filter is classified once per table schema:

- *setting-independent*: built only from the constructs in the allow list below, each of
  whose meaning is fixed whatever `SEMANTIC_SETTINGS` hold. The caller may change them freely.
- *setting-dependent*: anything else (casts, every function but the identity functions,
  arithmetic, a comparison whose operands are not of one type family, a column whose type
  is unknown). A read it filters runs only while the reading session holds the values
  Spark gives a session nobody changed (proxy/rowgate/pipeline/enforce/predicate_settings.py).

Why not make Spark evaluate the filter under fixed semantics instead: Spark has no
expression that fixes the time zone or ANSI mode of a sub-expression (the analyzer stamps
the session's zone on every zone-aware expression, and `current_date()` is computed at
optimization in the session's zone), so rewriting filters would have to re-implement each
function's zone handling. A short allow list that is proven independent is the part that
can be got right; everything else fails closed.

Types come from DESCRIBE (the catalog's `column_types`); comparisons need both operands of
one family, where implicit coercion never parses or truncates (`FAMILIES`). A `TIMESTAMP`
column may be compared with another one (instants), never with a literal (a literal is read
in the session's zone). Columns inside a lookup subquery are typed from that lookup table.

>>> from rowgate.policy.model import TableName
>>> t = TableName("spark_catalog", "default", "orders")
>>> types = {t: {"region": "string", "ts": "timestamp", "n": "int", "d": "date"}}
>>> dependence("region = 'EU' OR owner_is(region)", t, types)
'calls owner_is()'
>>> dependence("region IN ('EU', 'US') AND n BETWEEN 1 AND 9 AND d >= DATE '2024-01-01'", t, types) is None
True
>>> dependence("ts >= '2024-01-01'", t, types)
"compares timestamp with string ('2024-01-01')"
>>> dependence("n = '1.5'", t, types)
"compares numeric with string ('1.5')"
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from functools import lru_cache

import sqlglot
from sqlglot import exp

from rowgate.policy.model import TableName

# The settings whose value may change what a setting-dependent filter selects (all are on
# the non-admin allow list; every other setting that changes evaluation is refused there).
# Nanosecond timestamps (Spark 4.3) change what a timestamp literal with more than six
# fractional digits and a `TIMESTAMP(9)` column mean; the allow list below admits neither
# (a timestamp is compared with timestamp columns only, `timestamp_ntz(9)` has no family).
SEMANTIC_SETTINGS: tuple[str, ...] = (
    "spark.sql.session.timeZone",
    "spark.sql.ansi.enabled",
    "spark.sql.timestampNanosTypes.enabled",
)

# -- the allow list, as data -------------------------------------------------------------
# Boolean structure: evaluated the same whatever the settings.
CONNECTIVES: tuple[type[exp.Expr], ...] = (exp.And, exp.Or, exp.Not, exp.Paren)
# Comparisons: setting-free when both operands are of one family (`comparable`).
COMPARISONS: tuple[type[exp.Expr], ...] = (
    exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Like,
)  # fmt: skip
# Functions: the caller's identity (a string the rewriter binds before Spark sees it).
IDENTITY_FUNCTIONS = frozenset({"USER", "SESSION_USER", "CURRENT_USER"})
# DESCRIBE data types by family: within a family implicit coercion only widens (integral ->
# decimal -> double), never parses a string, reads a zone or truncates.
FAMILIES: tuple[tuple[str, str], ...] = (
    (r"(string|varchar\(\d+\)|char\(\d+\))", "string"),
    (r"(tinyint|smallint|int|bigint|float|double|decimal(\(\d+,\s*\d+\))?)", "numeric"),
    (r"boolean", "boolean"),
    (r"date", "date"),
    (r"timestamp_ntz", "timestamp_ntz"),
    (r"timestamp", "timestamp"),
)
# Typed literals read the same in every zone and mode (a well-formed DATE literal).
_DATE_LITERAL = re.compile(r"\d{4}-\d{2}-\d{2}")
_ANY = "null"  # NULL compares with every family


class _Dependent(Exception):
    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def family(data_type: str | None) -> str | None:
    """The family of a DESCRIBE data type, or None (unknown: compares with nothing).

    >>> family("decimal(10,2)"), family("varchar(3)"), family("timestamp"), family("array<int>")
    ('numeric', 'string', 'timestamp', None)
    """
    if not data_type:
        return None
    text = data_type.strip().lower()
    return next((name for pattern, name in FAMILIES if re.fullmatch(pattern, text)), None)


def qualified(table: exp.Table, home: TableName) -> TableName | None:
    """A lookup table's name as the rewriter qualifies it (against the policy table's namespace)."""
    parts = [p for p in (table.catalog, table.db, table.name) if p]
    if not parts or not all(isinstance(table.args.get(k), (exp.Identifier, type(None))) for k in ("catalog", "db", "this")):
        return None
    if len(parts) == 1:
        return TableName(home.catalog, home.schema, parts[0])
    if len(parts) == 2:
        return TableName(home.catalog, parts[0], parts[1])
    return TableName(*parts)


def lookup_tables(filter_sql: str, home: TableName) -> frozenset[TableName]:
    """The tables a filter reads besides its own (their column types are needed too)."""
    try:
        tree = sqlglot.parse_one(filter_sql, read="spark")
    except sqlglot.errors.SqlglotError:
        return frozenset()
    found = {qualified(t, home) for t in tree.find_all(exp.Table)}
    return frozenset(n for n in found if n is not None)


def dependence(filter_sql: str, home: TableName, types: Mapping[TableName, Mapping[str, str] | None]) -> str | None:
    """None when the filter is setting-independent; else what makes it depend (for messages).

    `types`: each table's column -> DESCRIBE data type (None or missing: unknown).
    """
    frozen = tuple(sorted((str(t), tuple(sorted((c.lower(), v) for c, v in (m or {}).items()))) for t, m in types.items()))
    return _dependence(filter_sql, home, frozen)


@lru_cache(maxsize=4096)
def _dependence(filter_sql: str, home: TableName, frozen: tuple) -> str | None:
    by_table = {name: dict(columns) for name, columns in frozen}
    try:
        tree = sqlglot.parse_one(filter_sql, read="spark")
    except sqlglot.errors.SqlglotError:
        return "cannot be read"
    try:
        _predicate(tree, [[(home.table, by_table.get(str(home)))]], home, by_table)
    except _Dependent as e:
        return e.why
    return None


Scopes = list[list[tuple[str, dict | None]]]  # innermost last: [(alias or name, columns)]


def _predicate(node: exp.Expr, scopes: Scopes, home: TableName, by_table: dict) -> None:
    """A boolean expression built only from allowed constructs, else `_Dependent`."""
    if isinstance(node, CONNECTIVES):
        for child in (node.args.get("this"), node.args.get("expression")):
            if child is not None:
                _predicate(child, scopes, home, by_table)
        return
    if isinstance(node, exp.Boolean):
        return
    if isinstance(node, exp.Column):
        _comparable(_family(node, scopes, home, by_table), "boolean", node)
        return
    if isinstance(node, COMPARISONS):
        if set(node.args) - {"this", "expression"}:
            raise _Dependent(f"uses {node.key.upper()} with options")
        left = _family(node.this, scopes, home, by_table)
        right = _family(node.expression, scopes, home, by_table)
        _comparable(left, right, node.expression)
        if isinstance(node, exp.Like) and _ANY not in (left, right) and left != "string":
            raise _Dependent("uses LIKE on a non-string")
        return
    if isinstance(node, exp.Is):
        _family(node.this, scopes, home, by_table)
        if not isinstance(node.expression, (exp.Null, exp.Boolean)):
            raise _Dependent("uses IS with something other than NULL, TRUE or FALSE")
        return
    if isinstance(node, exp.Between):
        this = _family(node.this, scopes, home, by_table)
        for bound in (node.args.get("low"), node.args.get("high")):
            _comparable(this, _family(bound, scopes, home, by_table), bound)
        return
    if isinstance(node, exp.In):
        if set(node.args) - {"this", "expressions", "query"}:
            raise _Dependent("uses IN with options")
        this = _family(node.this, scopes, home, by_table)
        for item in node.expressions:
            _comparable(this, _family(item, scopes, home, by_table), item)
        query = node.args.get("query")
        if query is not None:
            select = query.this if isinstance(query, exp.Subquery) else query
            columns = _select(select, scopes, home, by_table)
            if len(columns) != 1:
                raise _Dependent("uses IN with a subquery of other than one column")
            _comparable(this, columns[0], node.this)
        return
    if isinstance(node, exp.Exists):
        _select(node.this, scopes, home, by_table)
        return
    raise _Dependent(_what(node))


def _select(select: exp.Expr, scopes: Scopes, home: TableName, by_table: dict) -> list[str | None]:
    """A lookup subquery `SELECT cols FROM one_table [alias] [WHERE allowed predicate]`;
    returns its columns' families."""
    if not isinstance(select, exp.Select) or set(k for k, v in select.args.items() if v) - {"expressions", "from_", "where"}:
        raise _Dependent("uses a subquery other than SELECT columns FROM one table WHERE ...")
    source = select.args["from_"].this
    if not isinstance(source, exp.Table) or set(k for k, v in source.args.items() if v) - {"this", "db", "catalog", "alias"}:
        raise _Dependent("uses a subquery over something other than one table")
    name = qualified(source, home)
    if name is None:
        raise _Dependent("uses a subquery over a table it cannot name")
    inner = [*scopes, [(source.alias_or_name, by_table.get(str(name)))]]
    where = select.args.get("where")
    if where is not None:
        _predicate(where.this, inner, home, by_table)
    families = []
    for projection in select.expressions:
        if isinstance(projection, exp.Alias):
            projection = projection.this
        families.append(_family(projection, inner, home, by_table))
    return families


def _family(node: exp.Expr | None, scopes: Scopes, home: TableName, by_table: dict) -> str | None:
    """The family of an operand, or `_Dependent` when it is no setting-free operand."""
    if isinstance(node, exp.Paren):
        return _family(node.this, scopes, home, by_table)
    if isinstance(node, exp.Null):
        return _ANY
    if isinstance(node, exp.Boolean):
        return "boolean"
    if isinstance(node, exp.Literal):
        return "string" if node.is_string else "numeric"
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return "numeric"
    if isinstance(node, (exp.CurrentUser, exp.SessionUser)) or (
        isinstance(node, exp.Anonymous) and node.name.upper() in IDENTITY_FUNCTIONS and not node.expressions
    ):
        return "string"
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        if node.to.this == exp.DataType.Type.DATE and _is_date(node.this.this):
            return "date"
    if isinstance(node, exp.Column) and isinstance(node.this, exp.Identifier):
        return _column_family(node, scopes)
    raise _Dependent(_what(node) if node is not None else "is incomplete")


def _is_date(text: str) -> bool:
    """A date every mode reads alike: `CAST('2024-02-30' AS DATE)` is NULL without ANSI (so
    `... IS NULL` would hold for every row) and an error with it."""
    if not _DATE_LITERAL.fullmatch(text):
        return False
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _column_family(column: exp.Column, scopes: Scopes) -> str | None:
    """Resolved as Spark does: the innermost scope that has the column; unknown when no
    table's columns are known there or the name is ambiguous (then nothing compares)."""
    name, qualifier = column.name.lower(), column.table.lower()
    if column.args.get("db") or column.args.get("catalog"):
        return None
    for scope in reversed(scopes):
        candidates = [cols for alias, cols in scope if not qualifier or alias.lower() == qualifier]
        if qualifier and not candidates:
            continue
        if any(cols is None for cols in candidates):
            return None  # a table of unknown columns could hold it
        having = [cols[name] for cols in candidates if cols is not None and name in cols]
        if len(having) == 1:
            return family(having[0])
        if len(having) > 1:
            return None
    return None


def _comparable(left: str | None, right: str | None, shown: exp.Expr | None) -> None:
    """Both operands of one family (only columns are `timestamp`: two instants, no zone)."""
    if _ANY in (left, right) and None not in (left, right):
        return
    if left is None or right is None:
        raise _Dependent("compares a column whose type is not known")
    if left != right:
        text = shown.sql(dialect="spark") if shown is not None else "?"
        raise _Dependent(f"compares {left} with {right} ({text})")


def _what(node: exp.Expr) -> str:
    if isinstance(node, exp.Cast):
        return f"casts ({node.sql(dialect='spark')})"
    if isinstance(node, exp.Func):
        name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
        return f"calls {name.lower()}()"
    if isinstance(node, exp.Binary):
        return f"computes {node.sql(dialect='spark')}"
    return f"uses {node.key.upper()}"

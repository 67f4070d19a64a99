"""Where a literal's value cannot change what Spark resolves or reads: the allow list, as data.

The second opinion (proxy/rowgate/pipeline/enforce/second_opinion.py) may reuse one verdict of
Spark's analysis for every plan that differs from an analysed one only in the values of
literals at these positions (proxy/rowgate/rewrite/plan/literal_shape.py). A value there is
compared with a column's values or counts rows: Spark resolves the same names, reads the
same tables and places the same filters whatever it is, so long as its type is the same
(the type is part of the shape). Everything else keeps its value in the shape: literals in
`IDENTIFIER(...)`, ordinals (`GROUP BY 1`, `ORDER BY 2`), function and table-valued-function
arguments (`range(3)`, `reflect(...)`, `java_method(...)`), options, hints, `TABLESAMPLE`,
time travel (`VERSION AS OF`), `EXECUTE IMMEDIATE` text, select-list values, and columns
whose name starts with `_` (`_metadata.file_path` and other hidden columns).

Names are sqlglot expression classes (SQL text) and Spark Connect function names (plans);
a position missing here only costs a second analysis.
"""

from __future__ import annotations

# SQL text: a literal compared with a plain column ...
SQL_COMPARISONS = frozenset({"EQ", "NEQ", "GT", "GTE", "LT", "LTE", "NullSafeEQ"})
SQL_LISTS = frozenset({"In"})  # `col IN (lit, ...)`, not `IN (SELECT ...)`
SQL_RANGES = frozenset({"Between"})  # `col BETWEEN lit AND lit`
# ... reached from one of these clauses through nothing but these connectives
SQL_CLAUSES = frozenset({"Where", "Having"})  # and a join's ON condition
SQL_JOIN_CONDITION = "on"
SQL_CONNECTIVES = frozenset({"And", "Or", "Not", "Paren"})
# Row counts: `LIMIT n`, `OFFSET n` (a plain non-negative integer, no suffix)
SQL_COUNTS = frozenset({"Limit", "Offset"})

# DataFrame plans: `filter(col(...) <op> lit)` in a Filter relation's condition
PLAN_COMPARISONS = frozenset({"==", "<", ">", "<=", ">=", "<=>", "!="})
PLAN_CONNECTIVES = frozenset({"and", "or", "not"})
# Literal kinds whose value may be abstracted (others keep theirs); decimals keep precision and scale.
PLAN_LITERAL_KINDS = frozenset(
    {"string", "integer", "long", "short", "byte", "double", "float", "decimal", "date", "timestamp", "timestamp_ntz"}
)

# Column names whose comparisons keep their values (hidden and metadata columns).
HIDDEN_COLUMN_PREFIX = "_"

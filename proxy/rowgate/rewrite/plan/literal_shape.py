"""A plan's shape: the plan with the values of literals Spark reads only as values left out.

Why: a dashboard sends one query with a new day each time, and the second opinion
(proxy/rowgate/pipeline/enforce/second_opinion.py) would have Spark analyse each text anew. Spark's
verdict on where the plan reads protected tables and under which filter is the same for
every value of a literal that is only compared with a column's values or counts rows, so
one analysis per shape suffices. The positions are an allow list held as data
(proxy/rowgate/policy/literal_positions.py); every other literal keeps its value, and each
abstracted one leaves its Spark type (`string`, `int`, `bigint`, `decimal(p,s)`, ...) in the
shape.

Why the SQL shape cannot be fooled by a parser that reads the text unlike Spark (the very
mistake the second opinion is the net under): a text gets a shape only when its lexing is
beyond dispute: ASCII, no backslash, no double quote, no comments, no `$` and no `;`, so
that any SQL lexer pairs its quotes alike. Only the inside of a `'...'` string or a plain
number token is left out, and only when sqlglot's tree puts exactly that token at an
allowed position (each candidate token is replaced by a sentinel value and looked up in the
tree). Two texts with one shape are then the same bytes but for the values inside such
tokens: whatever Spark makes of them, it makes the same of both but for those values.

What the rewriter itself wrote into a text (a policy's filter, the caller's email for
`SESSION_USER()`) is compared by the second opinion against Spark's rendering of the
policy filter; `kept(value)` says which values stay in the shape for that reason, so that a
text holding a look-alike filter with another value never shares a shape with a filtered
read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

import sqlglot
from pyspark.sql.connect.proto import expressions_pb2, relations_pb2
from sqlglot import exp

from rowgate.message_walk import messages
from rowgate.policy import literal_positions as allowed

MAX_TEXT_CHARS = 8_000  # longer texts are analysed per text (the parse is not free)
_DISPUTED = re.compile(r"[^\x09\x0a\x0d\x20-\x7e]|[\\\"$;]|--|/\*|\*/")
_WORD = re.compile(r"[A-Za-z0-9_]+")
_NUMBER = re.compile(r"(\d+)(?:\.(\d+))?(L|S|Y|BD|D|F)?", re.IGNORECASE)
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
_SENTINEL = "rowgatelit{}x"
_SENTINEL_NUMBER = 7_654_321_000_000
_WHERE_PREFIX = "SELECT 1 WHERE "


def _candidates(sql: str) -> list[tuple[int, int, str]] | None:
    """(start, end, 'string'|'prefixed'|'number') of every `'...'` string (`prefixed`: right
    after a letter, `X'1F'`, or another quote) and plain number token; None
    when the lexing of the text could be disputed."""
    if len(sql) > MAX_TEXT_CHARS or _DISPUTED.search(sql):
        return None
    out: list[tuple[int, int, str]] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "'":
            j = sql.find("'", i + 1)
            if j < 0:
                return None
            prefixed = i > 0 and (sql[i - 1].isalnum() or sql[i - 1] in "_`'")  # X'1F', r'..', DATE'..'
            out.append((i, j + 1, "prefixed" if prefixed else "string"))
            i = j + 1
        elif c == "`":
            j = i + 1
            while True:
                j = sql.find("`", j)
                if j < 0:
                    return None
                if sql.startswith("``", j):
                    j += 2
                    continue
                break
            i = j + 1
        elif c.isalnum() or c == "_":
            word = _WORD.match(sql, i)
            assert word is not None
            end = word.end()
            if word.group().isdigit() and sql.startswith(".", end) and end + 1 < n and sql[end + 1].isdigit():
                more = _WORD.match(sql, end + 1)
                assert more is not None
                end = more.end()
            token = sql[i:end]
            before = sql[i - 1] if i else " "
            after = sql[end] if end < n else " "
            if _NUMBER.fullmatch(token) and before != "." and not (after.isalnum() or after in "_.`'"):
                out.append((i, end, "number"))
            i = end
        else:
            i += 1
    return out


def spark_type(token: str) -> str | None:
    """Spark's type of a literal token (a string `'...'` or a number), as the shape keeps it.

    >>> [spark_type(t) for t in ("'x'", "5", "3000000000", "5L", "007.50", "2BD", "1.5D", "99999999999999999999")]
    ['string', 'int', 'bigint', 'bigint', 'decimal(3,2)', 'decimal(1,0)', 'double', 'decimal(20,0)']
    """
    if token.startswith("'"):
        return "string"
    match = _NUMBER.fullmatch(token)
    if match is None:
        return None
    whole, fraction, suffix = match.group(1), match.group(2) or "", (match.group(3) or "").upper()
    simple = {"L": "bigint", "S": "smallint", "Y": "tinyint", "D": "double", "F": "float"}
    if suffix in simple:
        return simple[suffix]
    digits = (whole + fraction).lstrip("0")
    if not fraction and suffix == "":
        value = int(whole)
        if value <= _INT_MAX:
            return "int"
        if value <= _LONG_MAX:
            return "bigint"
    return f"decimal({max(len(digits), len(fraction), 1)},{len(fraction)})"


def sql_shape(sql: str, kept: Callable[[str], bool]) -> str | None:
    """`sql` with each literal at an allowed position replaced by `\\0<type>\\0`; None when
    the text has no shape (disputed lexing, no such literal, unparsable).

    >>> keep = lambda v: v == "EU"
    >>> sql_shape("SELECT * FROM t WHERE day = '2024-01-05' AND region = 'EU' LIMIT 10", keep)
    "SELECT * FROM t WHERE day = \\x00string\\x00 AND region = 'EU' LIMIT \\x00int\\x00"
    >>> print(sql_shape("SELECT * FROM IDENTIFIER('t') GROUP BY 1", keep))
    None
    """
    spans = _candidates(sql)
    if not spans:
        return None
    marked, at, sentinels = [], 0, {}
    for k, (start, end, kind) in enumerate(spans):
        marked.append(sql[at:start])
        if kind == "prefixed":
            marked.append(sql[start:end])
            at = end
            continue
        if kind == "string":
            sentinel = _SENTINEL.format(k)
            marked.append(f"'{sentinel}'")
        else:
            sentinel = str(_SENTINEL_NUMBER + k)
            marked.append(sentinel)
        sentinels[sentinel] = k
        at = end
    marked.append(sql[at:])
    try:
        trees = sqlglot.parse("".join(marked), read="spark")
    except (sqlglot.errors.SqlglotError, RecursionError, ValueError):
        return None
    if len(trees) != 1 or trees[0] is None:
        return None
    found: dict[int, exp.Literal] = {}
    for literal in trees[0].find_all(exp.Literal):
        index = sentinels.get(str(literal.this))
        if index is None:
            if "rowgatelit" in str(literal.this):
                return None  # a sentinel inside another literal: the lexers disagree
            continue
        if index in found or literal.is_string != (spans[index][2] == "string"):
            return None
        found[index] = literal
    out, at, abstracted = [], 0, 0
    for k, (start, end, kind) in enumerate(spans):
        if kind == "prefixed":
            continue
        token = sql[start:end]
        value = token[1:-1] if kind == "string" else _NUMBER.fullmatch(token).group(0)  # type: ignore[union-attr]
        at_position = found.get(k)
        type_name = spark_type(token)
        if at_position is None or type_name is None or kept(value) or not _allowed(at_position, kind, token):
            continue
        out.append(sql[at:start])
        out.append(f"\x00{type_name}\x00")
        at = end
        abstracted += 1
    if not abstracted:
        return None
    out.append(sql[at:])
    return "".join(out)


def _allowed(literal: exp.Literal, kind: str, token: str) -> bool:
    node: exp.Expression = literal
    parent = node.parent
    if isinstance(parent, exp.Neg) and kind == "number":
        node, parent = parent, parent.parent
    if parent is None:
        return False
    name = type(parent).__name__
    if name in allowed.SQL_COUNTS:
        return node is literal and node.arg_key == "expression" and spark_type(token) == "int"
    if name in allowed.SQL_COMPARISONS:
        other = parent.expression if node.arg_key == "this" else parent.this
        ok = node.arg_key in ("this", "expression") and _plain_column(other)
    elif name in allowed.SQL_LISTS:
        ok = node.arg_key == "expressions" and _plain_column(parent.this) and not parent.args.get("query")
        ok = ok and not parent.args.get("unnest") and not parent.args.get("field")
    elif name in allowed.SQL_RANGES:
        ok = node.arg_key in ("low", "high") and _plain_column(parent.this)
    else:
        return False
    return ok and _in_condition(parent)


def _plain_column(node: exp.Expr | None) -> bool:
    return isinstance(node, exp.Column) and not any(
        part.name.startswith(allowed.HIDDEN_COLUMN_PREFIX) or not isinstance(part, exp.Identifier) for part in node.parts
    )


def _in_condition(node: exp.Expr) -> bool:
    """Whether `node` is a WHERE/HAVING/ON condition's, through connectives only."""
    while isinstance(node.parent, exp.Expression) and type(node.parent).__name__ in allowed.SQL_CONNECTIVES:
        node = node.parent
    parent = node.parent
    if parent is None:
        return False
    if type(parent).__name__ in allowed.SQL_CLAUSES:
        return node.arg_key == "this"
    return isinstance(parent, exp.Join) and node.arg_key == allowed.SQL_JOIN_CONDITION


# -- plans ---------------------------------------------------------------------------------


def abstract_relation(relation: relations_pb2.Relation, kept: Callable[[str], bool]) -> int:
    """Abstracts, in place, the SQL texts and the DataFrame filter literals of `relation` at
    allowed positions; returns how many texts and literals it abstracted."""
    count = 0
    # Each message is changed before the walk reads what is inside it (message_walk.messages).
    for msg in messages([relation], into_maps=True):
        if isinstance(msg, relations_pb2.Relation):
            kind = msg.WhichOneof("rel_type")
            if kind == "sql":
                shape = sql_shape(msg.sql.query, kept)
                if shape is not None:
                    msg.sql.query = shape
                    count += 1
            elif kind == "filter":
                count += _abstract_condition(msg.filter.condition, kept)
    return count


def _abstract_condition(condition: expressions_pb2.Expression, kept: Callable[[str], bool]) -> int:
    kind = condition.WhichOneof("expr_type")
    if kind == "expression_string":
        # SQL text read as a WHERE condition (the proxy's filtered reads are such texts,
        # with the caller's placed conditions in them): shaped inside a fixed statement.
        text = condition.expression_string.expression
        shape = sql_shape(_WHERE_PREFIX + text, kept)
        if shape is None or not shape.startswith(_WHERE_PREFIX):
            return 0
        condition.expression_string.expression = shape[len(_WHERE_PREFIX) :]
        return 1
    if kind != "unresolved_function":
        return 0
    function = condition.unresolved_function
    name = function.function_name
    if name in allowed.PLAN_CONNECTIVES and not function.is_distinct:
        return sum(_abstract_condition(arg, kept) for arg in function.arguments)
    if name not in allowed.PLAN_COMPARISONS or function.is_distinct or len(function.arguments) != 2:
        return 0
    count = 0
    for this, other in ((0, 1), (1, 0)):
        arg, column = function.arguments[this], function.arguments[other]
        if arg.WhichOneof("expr_type") == "literal" and _plain_attribute(column):
            count += _abstract_literal(arg.literal, kept)
    return count


def _plain_attribute(expression: expressions_pb2.Expression) -> bool:
    if expression.WhichOneof("expr_type") != "unresolved_attribute":
        return False
    attribute = expression.unresolved_attribute
    if attribute.is_metadata_column:
        return False
    name = attribute.unparsed_identifier
    return bool(name) and not any(part.strip("`").startswith(allowed.HIDDEN_COLUMN_PREFIX) for part in name.split("."))


def _abstract_literal(literal: expressions_pb2.Expression.Literal, kept: Callable[[str], bool]) -> int:
    kind = literal.WhichOneof("literal_type")
    if kind not in allowed.PLAN_LITERAL_KINDS:
        return 0
    if kind == "decimal":
        value = literal.decimal.value
        type_name = f"decimal({literal.decimal.precision},{literal.decimal.scale})"
        if not (literal.decimal.HasField("precision") and literal.decimal.HasField("scale")):
            return 0  # the type would be inferred from the value
        try:
            Decimal(value)
        except InvalidOperation:
            return 0
    else:
        value = str(getattr(literal, kind))
        type_name = kind
    if kept(value):
        return 0
    literal.Clear()
    literal.string = "\x00" + type_name
    return 1

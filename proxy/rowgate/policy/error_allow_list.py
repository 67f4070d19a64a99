"""Which parts of Spark's errors may reach a caller whose operation read row-filtered data.

Spark's message of an error quotes what it failed on: the query around the failing
expression (for a filtered read, rowgate's rewrite with the policy predicate), the analysed
plan, and in message parameters values of rows (`CAST_INVALID_INPUT`'s `expression` is the
value that failed to cast, `DUPLICATED_MAP_KEY`'s `key` a map key, `INVALID_ARRAY_INDEX`'s
`arraySize` the length of an array read from a row). A deny list (withhold a message when it
names a policy literal) misses what the list does not name: a hidden row's value, a column of
a lookup table, the text of a predicate. So for a filtered operation rowgate relays an
error's class, its SQLSTATE and exception classes, and of its message parameters only those
listed here: parameters that hold names (of tables, columns, functions, settings), types and
counts taken from the query text, never values of rows or text of a predicate. The message
is rowgate's own sentence built from them (`text`), so nothing Spark wrote around them comes
along. An error class not listed here is relayed with its class and SQLSTATE and rowgate's
`withheld` sentence (`WITHHELD`).

Each relayed parameter value is also checked against the literals and lookup tables of the
policies applied (proxy/rowgate/responses/error_redaction.py): a name of a policy's lookup
table (a dropped lookup table is a TABLE_OR_VIEW_NOT_FOUND) withholds the parameters too.

The list is data: the README's threat model prints it (`markdown_table`), and a unit test
checks every class and parameter against Spark's error-conditions.json.

>>> allowed("DIVIDE_BY_ZERO").render({"config": '"spark.sql.ansi.enabled"'})
'Division by zero. Use `try_divide` ... If necessary set "spark.sql.ansi.enabled" to "false" to bypass this error.'
>>> allowed("CAST_INVALID_INPUT").params  # `expression`, the value that failed, is not relayed
('sourceType', 'targetType')
>>> allowed("NO_SUCH_CLASS") is None
True
>>> withheld("CAST_OVERFLOW")
"rowgate withheld Spark's message for a read of a protected table (error class CAST_OVERFLOW)."
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass

WITHHELD = "rowgate withheld Spark's message for a read of a protected table ({what})."


@dataclass(frozen=True)
class AllowedError:
    """Of one error class: the message parameters relayed, and rowgate's sentence from them."""

    params: tuple[str, ...]
    text: str

    def render(self, values: Mapping[str, str]) -> str | None:
        """The sentence, or None when a parameter it names is missing from `values`."""
        try:
            return self.text.format_map({k: values[k] for k in self.params if k in values})
        except KeyError:
            return None

    def placeholders(self) -> set[str]:
        return {name for _, name, _, _ in string.Formatter().parse(self.text) if name}


def _e(text: str, *params: str) -> AllowedError:
    return AllowedError(tuple(params), text)


# Error class (with its sub-class: allowed one by one) -> what is relayed.
ALLOWED_ERRORS: Mapping[str, AllowedError] = {
    # names the caller typed: tables, schemas, columns, fields, functions, variables
    "TABLE_OR_VIEW_NOT_FOUND": _e("The table or view {relationName} cannot be found.", "relationName"),
    "TABLE_OR_VIEW_ALREADY_EXISTS": _e("Cannot create table or view {relationName} because it already exists.", "relationName"),
    "SCHEMA_NOT_FOUND": _e("The schema {schemaName} cannot be found.", "schemaName"),
    "UNRESOLVED_COLUMN.WITH_SUGGESTION": _e(
        "A column, variable, or function parameter with name {objectName} cannot be resolved. "
        "Did you mean one of the following? [{proposal}].",
        "objectName",
        "proposal",  # column names of the query's inputs (names, not values)
    ),
    "UNRESOLVED_COLUMN.WITHOUT_SUGGESTION": _e(
        "A column, variable, or function parameter with name {objectName} cannot be resolved.", "objectName"
    ),
    "UNRESOLVED_FIELD.WITH_SUGGESTION": _e(
        "A field with name {fieldName} cannot be resolved with the struct-type column {columnPath}. "
        "Did you mean one of the following? [{proposal}].",
        "fieldName",
        "columnPath",
        "proposal",
    ),
    "UNRESOLVED_FIELD.WITHOUT_SUGGESTION": _e(
        "A field with name {fieldName} cannot be resolved with the struct-type column {columnPath}.", "fieldName", "columnPath"
    ),
    "UNRESOLVED_ROUTINE": _e("Cannot resolve routine {routineName} on search path {searchPath}.", "routineName", "searchPath"),
    "UNRESOLVED_VARIABLE": _e(
        "Cannot resolve variable {variableName} on search path {searchPath}.", "variableName", "searchPath"
    ),
    "VARIABLE_ALREADY_EXISTS": _e("Cannot create the variable {variableName} because it already exists.", "variableName"),
    "AMBIGUOUS_REFERENCE": _e("Reference {name} is ambiguous, could be: {referenceNames}.", "name", "referenceNames"),
    "COLUMN_ALREADY_EXISTS": _e("The column {columnName} already exists.", "columnName"),
    "WRONG_NUM_ARGS.WITHOUT_SUGGESTION": _e(
        "The {functionName} requires {expectedNum} parameters but the actual number is {actualNum}.",
        "functionName",
        "expectedNum",
        "actualNum",
    ),
    # the shape of the query
    "MISSING_GROUP_BY": _e("The query does not include a GROUP BY clause."),
    "MISSING_AGGREGATION": _e(
        "A non-aggregating expression is based on columns which are not participating in the GROUP BY clause."
    ),
    "UNRESOLVED_ALL_IN_GROUP_BY": _e("Cannot infer grouping columns for GROUP BY ALL based on the select clause."),
    "GROUP_BY_POS_OUT_OF_RANGE": _e(
        "GROUP BY position {index} is not in select list (valid range is [1, {size}]).", "index", "size"
    ),
    "ORDER_BY_POS_OUT_OF_RANGE": _e(
        "ORDER BY position {index} is not in select list (valid range is [1, {size}]).", "index", "size"
    ),
    "NUM_COLUMNS_MISMATCH": _e(
        "{operator} can only be performed on inputs with the same number of columns, but the first input has "
        "{firstNumColumns} columns and the {invalidOrdinalNum} input has {invalidNumColumns} columns.",
        "operator",
        "firstNumColumns",
        "invalidOrdinalNum",
        "invalidNumColumns",
    ),
    "INCOMPATIBLE_COLUMN_TYPE": _e(
        "{operator} can only be performed on tables with compatible column types. The {columnOrdinalNumber} column "
        "of the {tableOrdinalNumber} table is {dataType1} type which is not compatible with {dataType2}.",
        "operator",
        "columnOrdinalNumber",
        "tableOrdinalNumber",
        "dataType1",
        "dataType2",
    ),
    # types only: the expression (`sqlExpr`) may be a policy's
    "DATATYPE_MISMATCH.BINARY_OP_DIFF_TYPES": _e(
        "Data type mismatch: the left and right operands of the binary operator have incompatible types ({left} and {right}).",
        "left",
        "right",
    ),
    "DATATYPE_MISMATCH.CAST_WITHOUT_SUGGESTION": _e(
        "Data type mismatch: cannot cast {srcType} to {targetType}.", "srcType", "targetType"
    ),
    "DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE": _e(
        "Data type mismatch: the {paramIndex} parameter requires the {requiredType} type, however it has the type {inputType}.",
        "paramIndex",
        "requiredType",
        "inputType",
    ),
    "PARSE_SYNTAX_ERROR": _e("Syntax error at or near {error}.", "error"),
    # errors of evaluation: the settings and types involved, never the values
    "DIVIDE_BY_ZERO": _e(
        "Division by zero. Use `try_divide` to tolerate divisor being 0 and return NULL instead. "
        'If necessary set {config} to "false" to bypass this error.',
        "config",
    ),
    "INTERVAL_DIVIDED_BY_ZERO": _e("Division by zero."),
    "REMAINDER_BY_ZERO": _e('Remainder by zero (set {config} to "false" to return NULL instead).', "config"),
    "ARITHMETIC_OVERFLOW": _e('Arithmetic overflow (set {config} to "false" to bypass this error).', "config"),
    "CAST_INVALID_INPUT": _e(
        "A value of the type {sourceType} cannot be cast to {targetType} because it is malformed.", "sourceType", "targetType"
    ),
    "CAST_OVERFLOW": _e(
        "A value of the type {sourceType} cannot be cast to {targetType} due to an overflow.", "sourceType", "targetType"
    ),
    "NUMERIC_VALUE_OUT_OF_RANGE.WITH_SUGGESTION": _e(
        "A value cannot be represented as Decimal({precision}, {scale}).", "precision", "scale"
    ),
    "NUMERIC_VALUE_OUT_OF_RANGE.WITHOUT_SUGGESTION": _e(
        "A value cannot be represented as Decimal({precision}, {scale}).", "precision", "scale"
    ),
    "INVALID_ARRAY_INDEX": _e("An array index is out of bounds."),
    "INVALID_ARRAY_INDEX_IN_ELEMENT_AT": _e("An array index is out of bounds."),
    "DUPLICATED_MAP_KEY": _e("A duplicate map key was found."),
    "NULL_MAP_KEY": _e("Cannot use null as map key."),
    "SCALAR_SUBQUERY_TOO_MANY_ROWS": _e("More than one row returned by a subquery used as an expression."),
    "ROW_SUBQUERY_TOO_MANY_ROWS": _e("More than one row returned by a subquery used as a row."),
    "USER_RAISED_EXCEPTION": _e("raise_error() was called (its message may quote row values and is withheld)."),
    # the session and operation handles pyspark's retries and reattaches look for
    "INVALID_HANDLE.OPERATION_NOT_FOUND": _e("The handle {handle} is invalid. Operation not found.", "handle"),
    "INVALID_HANDLE.SESSION_NOT_FOUND": _e("The handle {handle} is invalid. Session not found.", "handle"),
    "INVALID_HANDLE.SESSION_CLOSED": _e("The handle {handle} is invalid. Session was closed.", "handle"),
    "INVALID_HANDLE.SESSION_CHANGED": _e(
        "The handle {handle} is invalid. The existing Spark server driver instance has restarted.", "handle"
    ),
    "INVALID_HANDLE.OPERATION_ABANDONED": _e("The handle {handle} is invalid. Operation was considered abandoned.", "handle"),
    "OPERATION_CANCELED": _e("Operation has been canceled."),
}

_CLASS = re.compile(r"[A-Z][A-Z0-9_]*(\.[A-Z][A-Z0-9_]*)*")
_JAVA_CLASS = re.compile(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*")


def allowed(error_class: str) -> AllowedError | None:
    return ALLOWED_ERRORS.get(error_class)


def withheld(error_class: str | None, exception: str | None = None) -> str:
    """rowgate's sentence for an error whose message is not relayed (`exception`: the
    name of its Java class, for an error without an error class)."""
    if error_class and _CLASS.fullmatch(error_class):
        return WITHHELD.format(what=f"error class {error_class}")
    if exception and _JAVA_CLASS.fullmatch(exception):
        return WITHHELD.format(what=f"{exception}, no error class")
    return WITHHELD.format(what="an error without an error class")


def markdown_table() -> str:
    """The list as the README's threat model prints it."""
    rows = ["| error class | message parameters relayed |", "|---|---|"]
    for name in sorted(ALLOWED_ERRORS):
        params = ", ".join(f"`{p}`" for p in ALLOWED_ERRORS[name].params) or "none"
        rows.append(f"| `{name}` | {params} |")
    return "\n".join(rows)

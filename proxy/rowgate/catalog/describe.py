"""Reading `DESCRIBE TABLE EXTENDED` output, the one catalog answer every Spark catalog gives.

Spark 4.1 answers with (col_name, data_type, comment) rows: the relation's columns first,
then sections that start with a row whose data_type is empty (a blank separator, `# Partition
Information`, `# Clustering Information`, `# Detailed Table Information`). A real column
always has a type, so the first typeless row ends the column list, whatever the columns are
called (`#c` and `Type` are legal column names). Key/value rows after
`# Detailed Table Information` carry Catalog, Database, Table, Type, Location, View Text,
View Catalog and Namespace and more; anything the proxy cannot interpret for sure is an
error, never a guess, because a wrong answer here would let a view's text resolve names in
the wrong schema or a table pass for a view.
"""

from __future__ import annotations

from rowgate.catalog.model import RelationInfo, RelationKind
from rowgate.policy.model import TableName

DETAILS_HEADER = "# Detailed Table Information"
TABLE_TYPES = {"MANAGED", "EXTERNAL"}
VIEW_TYPES = {"VIEW"}


class DescribeError(ValueError):
    """The output does not say what the relation is in a way the proxy can trust."""


def parse_describe(name: TableName, rows: list[tuple]) -> RelationInfo:
    columns: list[str] = []
    types: list[str] = []
    details: dict[str, str] = {}
    in_columns = True
    in_details = False
    for row in rows:
        if len(row) < 2:
            raise DescribeError(f"DESCRIBE of {name} returned a row with {len(row)} fields")
        col, kind = row[0] or "", row[1] or ""
        if in_columns:
            if kind:
                columns.append(col)
                types.append(kind)
                continue
            in_columns = False
        if not kind and col.startswith("# "):
            in_details = col == DETAILS_HEADER
            continue
        if in_details and col and col not in details:
            details[col] = kind
    if not columns:
        raise DescribeError(f"DESCRIBE of {name} listed no columns")
    if not details:
        raise DescribeError(f"DESCRIBE of {name} has no '{DETAILS_HEADER}' section")
    _check_same(name, details)
    table_type = details.get("Type", "").upper()
    if table_type in VIEW_TYPES:
        catalog, schema = _view_scope(name, details)
        text = details.get("View Text") or details.get("View Original Text")
        if not text:
            raise DescribeError(f"view {name} has no View Text")
        return RelationInfo(
            name,
            RelationKind.VIEW,
            tuple(columns),
            view_sql=text,
            view_catalog=catalog,
            view_schema=schema,
            properties=details,
            column_types=tuple(types),
        )
    if table_type in TABLE_TYPES:
        return RelationInfo(
            name,
            RelationKind.TABLE,
            tuple(columns),
            location=details.get("Location") or None,
            properties=details,
            column_types=tuple(types),
        )
    raise DescribeError(f"{name} has a relation type the proxy does not know: {table_type or '(none)'}")


def _check_same(name: TableName, details: dict[str, str]) -> None:
    """A sanity check that the rows describe the asked name, i.e. that the parse lined up."""
    for key, part in (("Catalog", name.catalog), ("Database", name.schema), ("Table", name.table)):
        value = details.get(key)
        if value is not None and value.lower() != part:
            raise DescribeError(f"DESCRIBE of {name} answered {key} = {value!r}")


def _view_scope(name: TableName, details: dict[str, str]) -> tuple[str, str]:
    """Where the view's text resolves unqualified names: the creator's catalog and database.

    Views written by Spark 2 carry only `View Default Database`, which is in the session
    catalog by construction.
    """
    scope = details.get("View Catalog and Namespace")
    if scope:
        parts = split_multipart(scope)
        if len(parts) != 2:
            raise DescribeError(f"view {name} resolves names in {scope!r}, not in a catalog.database")
        return parts[0].lower(), parts[1].lower()
    database = details.get("View Default Database")
    if database:
        return "spark_catalog", database.lower()
    raise DescribeError(f"view {name} does not say which catalog and database its text uses")


def split_multipart(text: str) -> list[str]:
    """`a.b`, `` `my.cat`.b `` and `` `x``y` `` the way Spark quotes identifiers (backticks, `` `` `` escapes)."""
    parts: list[str] = []
    current: list[str] = []
    i, n = 0, len(text)
    quoted_part = False
    while i < n:
        ch = text[i]
        if ch == "`":
            if current or quoted_part:
                raise DescribeError(f"cannot read identifier {text!r}")
            i += 1
            while True:
                if i >= n:
                    raise DescribeError(f"unterminated quote in identifier {text!r}")
                if text[i] == "`":
                    if i + 1 < n and text[i + 1] == "`":
                        current.append("`")
                        i += 2
                        continue
                    i += 1
                    break
                current.append(text[i])
                i += 1
            quoted_part = True
            continue
        if ch == ".":
            if not current and not quoted_part:
                raise DescribeError(f"empty part in identifier {text!r}")
            parts.append("".join(current))
            current, quoted_part = [], False
            i += 1
            continue
        if quoted_part:
            raise DescribeError(f"cannot read identifier {text!r}")
        current.append(ch)
        i += 1
    if not current and not quoted_part:
        raise DescribeError(f"empty part in identifier {text!r}")
    parts.append("".join(current))
    return parts

"""The policy model shared by the store, the decision and the rewriters."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from rowgate.identity.members import GranteeSet


def _quote(part: str) -> str:
    return "`" + part.replace("`", "``") + "`"


@dataclass(frozen=True, order=True)
class TableName:
    """A fully qualified Spark table name, normalised the way Spark compares names.

    Spark's session catalog is case-insensitive, so every part is stored lower-cased;
    two references name the same table exactly when their `TableName`s are equal.
    """

    catalog: str
    schema: str
    table: str

    def __post_init__(self) -> None:
        for part in (self.catalog, self.schema, self.table):
            if not part:
                raise ValueError("a table name needs catalog, schema and table")
        object.__setattr__(self, "catalog", self.catalog.lower())
        object.__setattr__(self, "schema", self.schema.lower())
        object.__setattr__(self, "table", self.table.lower())

    def sql(self) -> str:
        """Backtick-quoted three-part name, safe to splice into Spark SQL."""
        return ".".join(_quote(p) for p in (self.catalog, self.schema, self.table))

    def namespace_sql(self) -> str:
        """Backtick-quoted `catalog`.`schema`, e.g. for `USE`."""
        return f"{_quote(self.catalog)}.{_quote(self.schema)}"

    def __str__(self) -> str:
        return f"{self.catalog}.{self.schema}.{self.table}"


@dataclass(frozen=True)
class RowAccessPolicy:
    """One row access policy as BigQuery models it: who (grantees) sees which rows (filter)."""

    table: TableName
    name: str
    grantees: tuple[str, ...]
    filter_sql: str
    created_at: datetime
    updated_at: datetime

    @cached_property
    def grantee_set(self) -> GranteeSet:
        """The grantees parsed and indexed once per policy object (snapshots keep their
        policies, so a request never parses a grantee)."""
        return GranteeSet.of(self.grantees)

    @property
    def is_full_access(self) -> bool:
        """`FILTER USING (TRUE)`: the grant that also allows writes and time travel."""
        return self.filter_sql.strip().strip("()").strip().upper() == "TRUE"

"""What the upstream catalog says a name is, as far as enforcement needs to know."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from rowgate.policy.model import TableName


class RelationKind(Enum):
    TABLE = "TABLE"
    VIEW = "VIEW"  # persistent view: its text is expanded by the rewriter
    TEMP_VIEW = "TEMP_VIEW"  # session-local or global temp view


@dataclass(frozen=True)
class RelationInfo:
    name: TableName
    kind: RelationKind
    columns: tuple[str, ...] = ()
    view_sql: str | None = None  # for VIEW: the stored SELECT text
    view_catalog: str | None = None  # for VIEW: the catalog/database the text was written in
    view_schema: str | None = None
    location: str | None = None  # for TABLE: storage location URI, if known
    properties: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    column_types: tuple[str, ...] = ()  # DESCRIBE's data_type of each column, as `columns`

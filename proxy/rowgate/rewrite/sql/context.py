"""What the SQL rewriter may ask about the world, and nothing more.

The rewriter never talks to gRPC, the policy store or Spark directly: the pipeline hands it
a `RewriteContext` bound to one caller and one Spark session. Unit tests hand it a fake.
"""

from __future__ import annotations

from typing import Protocol

from rowgate.catalog.model import RelationInfo
from rowgate.identity.caller import Caller
from rowgate.policy.model import RowAccessPolicy, TableName


class RewriteContext(Protocol):
    caller: Caller
    is_admin: bool
    current_catalog: str  # the session's current catalog, e.g. "spark_catalog"
    current_schema: str  # the session's current database, e.g. "default"

    def temp_view_exists(self, name: str) -> bool:
        """A session-local temp view of this (one-part, case-insensitive) name exists."""

    def lookup(self, name: TableName) -> RelationInfo | None:
        """The upstream catalog's answer for a fully qualified name (cached); None if absent."""

    def policies_for(self, name: TableName) -> tuple[RowAccessPolicy, ...]:
        """Every policy on the table, whoever it grants. Empty: the table is unprotected."""

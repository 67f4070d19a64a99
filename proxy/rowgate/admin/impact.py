"""Impact preview: how many rows each principal sees of each table a policy change touches,
now and after the change, counted by Spark before anything is changed.

The filter a principal's read of a table gets is the rewriter's own: `protect.row_filter`
(the policies that grant the principal, OR-ed, none granting: FALSE; `SESSION_USER()` bound
to the principal; lookup tables qualified against the table's namespace), placed by
`wrap.unambiguous` exactly as the filtering SELECT places it. A table without policies is
read whole. So a preview and enforcement cannot disagree about a row, and the integration
tests compare the preview with what the principals then read through the proxy.

All principals' counts of one table come from one query and one scan, the aggregation done
by Spark (only the counts leave it), in a Spark session of the proxy's own, which sees
lookup tables unfiltered as policy filters do:

    SELECT COUNT_IF(c0) AS c0, COUNT_IF(c1) AS c1, ...
    FROM (SELECT <filter 0> AS c0, <filter 1> AS c1, ... FROM `cat`.`db`.`t`) AS q

(each distinct filter once: principals with the same grants share a column). The filters
are projected first because Spark refuses a non-deterministic argument to an aggregate, and
a filter may hold non-deterministic expressions.

>>> from datetime import datetime
>>> t = TableName("spark_catalog", "sales", "orders")
>>> p = RowAccessPolicy(t, "mine", ("domain:example.com",), "owner = SESSION_USER()", datetime.min, datetime.min)
>>> ann, eve = Caller("user:ann@example.com"), Caller("user:eve@other.org")
>>> print(count_query(t, [visible_filter(ann, t, (p,)), visible_filter(eve, t, (p,)), visible_filter(eve, t, ())]))
SELECT COUNT_IF(c0) AS c0, COUNT_IF(c1) AS c1, COUNT_IF(c2) AS c2
FROM (SELECT TRUE AND ((owner = 'ann@example.com')) AS c0, TRUE AND (FALSE) AS c1, TRUE AS c2
FROM `spark_catalog`.`sales`.`orders`) AS q
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import grpc
from sqlglot import exp

from rowgate.catalog.upstream_sql import SessionRef, UpstreamSqlError, sql_rows
from rowgate.identity.caller import Caller
from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy_service import release_session
from rowgate.refusal import Refusal
from rowgate.rewrite.sql.names import quoted_table
from rowgate.rewrite.sql.protect import row_filter
from rowgate.rewrite.sql.wrap import render, unambiguous
from rowgate.upstream.channel import Upstream

IMPACT_USER = "rowgate-impact"


@dataclass(frozen=True)
class ImpactRow:
    table: TableName
    caller: Caller
    rows_now: int
    rows_after: int

    @property
    def change(self) -> int:
        return abs(self.rows_after - self.rows_now)


def visible_filter(caller: Caller, table: TableName, policies: Sequence[RowAccessPolicy]) -> exp.Expr:
    """The condition a row of `table` must meet for `caller` to read it under `policies`:
    the WHERE the rewriter gives the caller's read (TRUE for an unprotected table)."""
    if not policies:
        return exp.true()
    return unambiguous(row_filter(caller, table, tuple(policies)))


def count_query(table: TableName, filters: Sequence[exp.Expr]) -> str:
    """One aggregation over one scan of `table`: column i counts the rows filter i keeps."""
    projected = exp.select(*(exp.alias_(f.copy(), f"c{i}") for i, f in enumerate(filters))).from_(quoted_table(table))
    counts = [exp.alias_(exp.Anonymous(this="count_if", expressions=[exp.column(f"c{i}")]), f"c{i}") for i in range(len(filters))]
    return render(exp.select(*counts).from_(exp.Subquery(this=projected, alias=exp.TableAlias(this=exp.to_identifier("q")))))


def by_table(policies: Iterable[RowAccessPolicy]) -> dict[TableName, tuple[RowAccessPolicy, ...]]:
    grouped: dict[TableName, list[RowAccessPolicy]] = {}
    for p in policies:
        grouped.setdefault(p.table, []).append(p)
    return {t: tuple(ps) for t, ps in grouped.items()}


class ImpactPreview:
    """Counts rows through Spark; `timeout` bounds one table's query (a full scan)."""

    def __init__(self, upstream: Upstream, *, timeout: float = 900.0) -> None:
        self.upstream = upstream
        self.timeout = timeout

    async def rows(
        self,
        tables: Iterable[TableName],
        now: Iterable[RowAccessPolicy],
        after: Iterable[RowAccessPolicy],
        callers: Sequence[Caller],
    ) -> list[ImpactRow]:
        """One row per table in `tables` and caller, largest change first."""
        before_by, after_by = by_table(now), by_table(after)
        session = SessionRef(IMPACT_USER, str(uuid.uuid4()))
        rows: list[ImpactRow] = []
        try:
            for table in sorted(set(tables)):
                rows += await self._table(table, before_by.get(table, ()), after_by.get(table, ()), callers, session)
        finally:
            await release_session(self.upstream, (session.user_id, session.session_id))
        return sorted(rows, key=lambda r: (-r.change, r.table, r.caller.principal))

    async def _table(
        self,
        table: TableName,
        now: Sequence[RowAccessPolicy],
        after: Sequence[RowAccessPolicy],
        callers: Sequence[Caller],
        session: SessionRef,
    ) -> list[ImpactRow]:
        columns: dict[str, int] = {}  # rendered filter -> its column
        filters: list[exp.Expr] = []
        wanted: list[tuple[Caller, int, int]] = []
        for caller in callers:
            pair = []
            for policies in (now, after):
                condition = visible_filter(caller, table, policies)
                text = render(condition)
                if text not in columns:
                    columns[text] = len(filters)
                    filters.append(condition)
                pair.append(columns[text])
            wanted.append((caller, pair[0], pair[1]))
        try:
            [counts] = await sql_rows(self.upstream, count_query(table, filters), session, timeout=self.timeout)
        except UpstreamSqlError as e:
            first_line = str(e).splitlines()[0] if str(e) else "rejected by Spark"
            raise Refusal(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"cannot count the rows of {table}: {first_line}",
                reason="impact_count_failed",
            ) from e
        return [ImpactRow(table, caller, int(counts[i] or 0), int(counts[j] or 0)) for caller, i, j in wanted]

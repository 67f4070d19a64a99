"""CallerLanes: a caller's checks wait behind its own only; bounds of the SQL text budget."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import grpc
import pytest

from rowgate.pipeline.enforce.caller_lanes import CallerLanes
from rowgate.refusal import Refusal
from rowgate.rewrite.sql import rewrite_sql
from rowgate.rewrite.sql.text_budget import TextBudget


def test_a_full_lane_holds_back_its_own_caller_only() -> None:
    async def scenario() -> list[str]:
        lanes = CallerLanes(width=1, threads=4)
        release = threading.Event()
        order: list[str] = []

        async def check(who: str, work) -> None:
            async with lanes.lane(who):
                await lanes.run(work)
                order.append(who)

        blocked = asyncio.ensure_future(check("mallory", lambda: release.wait(30)))
        queued = asyncio.ensure_future(check("mallory", lambda: None))
        await _until(lambda: lanes.running >= 1 and lanes.waiting >= 1)
        assert (lanes.running, lanes.waiting) == (1, 1)
        await asyncio.wait_for(check("ann", lambda: None), 30)  # not behind mallory's
        release.set()
        await asyncio.gather(blocked, queued)
        assert lanes.lanes_open() == 0  # nobody left: lanes forgotten
        lanes.close()
        return order

    assert asyncio.run(scenario()) == ["ann", "mallory", "mallory"]


def test_a_lane_admits_width_checks_at_once() -> None:
    async def scenario() -> int:
        lanes = CallerLanes(width=2, threads=4)
        release = threading.Event()
        tasks = [asyncio.ensure_future(_hold(lanes, "svc", release)) for _ in range(3)]
        await _until(lambda: lanes.running + lanes.waiting >= 3)
        seen = lanes.running
        release.set()
        await asyncio.gather(*tasks)
        lanes.close()
        return seen

    assert asyncio.run(scenario()) == 2


async def _until(condition) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.001)

    await asyncio.wait_for(poll(), 30)


async def _hold(lanes: CallerLanes, who: str, release: threading.Event) -> None:
    async with lanes.lane(who):
        await lanes.run(release.wait, 30)


def test_lanes_need_a_width_and_enough_threads() -> None:
    with pytest.raises(ValueError):
        CallerLanes(width=0)
    with pytest.raises(ValueError):
        CallerLanes(width=3, threads=2)


def _ctx(protected: bool, budget: TextBudget | None) -> SimpleNamespace:
    from rowgate.identity.caller import Caller

    return SimpleNamespace(
        caller=Caller("user:ann@example.com"), is_admin=False, current_catalog="spark_catalog",
        current_schema="default", temp_view_exists=lambda n: False, lookup=lambda n: None,
        policies_for=lambda n: (), has_protected_tables=lambda: protected, text_budget=budget,
    )  # fmt: skip


def test_text_over_the_budget_is_refused_while_tables_are_protected() -> None:
    text = "SELECT 1 + 1 AS c -- " + "x" * 200
    with pytest.raises(Refusal) as refused:
        rewrite_sql(text, _ctx(True, TextBudget(100)))
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "--max-sql-kib" in refused.value.message
    assert rewrite_sql(text, _ctx(True, TextBudget(1000))).sql.startswith("SELECT 1 + 1")


def test_text_over_the_budget_is_forwarded_unread_with_nothing_protected() -> None:
    text = "SELECT 1 AS c; SELECT 2 AS d -- " + "x" * 200  # not the unparsed fast path
    result = rewrite_sql(text, _ctx(False, TextBudget(100)))
    assert (result.sql, result.statement_kind) == (text, "unparsed")

"""The pipeline's rewrite context keys remembered rewrites by everything a rewrite reads."""

from __future__ import annotations

import asyncio

import pytest

from rowgate.catalog.upstream_catalog import NotCached
from rowgate.identity.caller import Caller
from rowgate.pipeline.enforce.rewrite_context import SessionRewriteContext
from rowgate.pipeline.session.registry import SessionState
from rowgate.rewrite.sql.memo import NotAnswerable

ANN = Caller("user:ann@example.com", frozenset({"eu@example.com"}))


class Catalog:
    def peek(self, name):
        raise NotCached(name)


def context(caller=ANN, admin=False, global_temp=(), **state) -> SessionRewriteContext:
    loop = asyncio.new_event_loop()
    try:
        return SessionRewriteContext(
            caller=caller, is_admin=admin, state=SessionState(**state), snapshot=object(), catalog=Catalog(),
            global_temp_views=set(global_temp), loop=loop,
        )  # fmt: skip
    finally:
        loop.close()


BASE = context().memo_context()


@pytest.mark.parametrize(
    "changed",
    [
        {"caller": Caller("user:bob@example.com", frozenset({"eu@example.com"}))},
        {"caller": Caller("user:ann@example.com")},  # same principal, other groups
        {"admin": True},
        {"current_catalog": "other"},
        {"current_schema": "sales"},
        {"temp_views": {"orders"}},
        {"global_temp": {"orders"}},
    ],
    ids=lambda d: next(iter(d)),
)
def test_each_input_of_a_rewrite_is_part_of_the_key(changed):
    assert context(**changed).memo_context() != BASE
    assert context().memo_context() == BASE


def test_a_name_missing_from_the_catalog_cache_cannot_be_answered_from_memory():
    with pytest.raises(NotAnswerable):
        context().cached_lookup(("spark_catalog", "default", "orders"))

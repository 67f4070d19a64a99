"""An in-process PolicyAdmin server for unit tests: the real servicer, the real
`PolicyService` and SQLite store, a real header-identity resolver, and a fake catalog
instead of Spark (tables are declared; a filter mentioning `no_such_column` is rejected
the way Spark would reject it)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import grpc
import pytest

from rowgate.admin.service import add_policy_admin
from rowgate.catalog.model import RelationInfo, RelationKind
from rowgate.catalog.upstream_catalog import NotCached
from rowgate.catalog.upstream_sql import UpstreamSqlError
from rowgate.identity.members import is_admin, validate_admin_member
from rowgate.identity.resolver import build_resolver
from rowgate.policy.model import TableName
from rowgate.policy.snapshot import PolicyCache
from rowgate.policy.store import open_store
from rowgate.policy_service import PolicyService
from tests.harness.callers import ADMIN

ADMINS = [validate_admin_member(ADMIN), validate_admin_member("group:admins@example.com")]


class FakeUpstream:
    async def call(self, name, request):
        return None


@dataclass
class FakeCatalog:
    tables: dict[TableName, RelationInfo] = field(default_factory=dict)
    sql: list[str] = field(default_factory=list)
    upstream: FakeUpstream = field(default_factory=FakeUpstream)

    def add(self, name: str, *columns: str, kind: RelationKind = RelationKind.TABLE) -> TableName:
        t = TableName(*name.split("."))
        self.tables[t] = RelationInfo(t, kind, tuple(columns))
        return t

    async def lookup(self, name: TableName):
        return self.tables.get(name)

    def peek(self, name: TableName):
        raise NotCached(name)  # every lookup of the rewriter goes through the loop bridge

    async def run_sql_rows(self, sql: str, *, session=None):
        self.sql.append(sql)
        if "no_such_column" in sql:
            raise UpstreamSqlError("[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column `no_such_column` cannot be resolved.")
        return []


@dataclass
class AdminServer:
    target: str
    catalog: FakeCatalog
    cache: PolicyCache
    servicer: object = None  # the PolicyAdminService, e.g. to replace its impact counter

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.target)


@pytest.fixture
def admin_server(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'policies.db'}")
    cache = PolicyCache(store, start=False)
    catalog = FakeCatalog()
    catalog.add("spark_catalog.default.orders", "id", "region", "owner")
    catalog.add("spark_catalog.sales.items", "id", "owner")
    catalog.add("spark_catalog.default.orders_view", "id", kind=RelationKind.VIEW)
    service = PolicyService(store, cache, catalog)
    resolver = build_resolver("header")

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="admin-test-loop", daemon=True)
    thread.start()

    async def start():
        server = grpc.aio.server()
        servicer = add_policy_admin(server, service, resolver.resolve, lambda c: is_admin(c, ADMINS), cache, catalog)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port, servicer

    server, port, servicer = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield AdminServer(f"127.0.0.1:{port}", catalog, cache, servicer)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        cache.close()
        store.close()

"""The admin API answers a dependency's failure with UNAVAILABLE naming it, not INTERNAL
(proxy/rowgate/pipeline/dependency_errors.py)."""

from __future__ import annotations

import sqlite3

import grpc
import psycopg

from rowgate.catalog.upstream_catalog import CatalogUnavailable

from .test_service import client, code_of


def test_a_policy_store_error_the_store_did_not_wrap_is_unavailable(admin_server, monkeypatch):
    store = admin_server.cache.store
    monkeypatch.setattr(store, "list", lambda *a, **k: (_ for _ in ()).throw(sqlite3.OperationalError("database is locked")))
    with client(admin_server) as c:
        error = code_of(lambda: c.list_policies())
    assert error.code == grpc.StatusCode.UNAVAILABLE, error
    assert "policy store" in error.message and "database is locked" in error.message


def test_a_postgres_driver_error_is_unavailable(admin_server, monkeypatch):
    store = admin_server.cache.store
    monkeypatch.setattr(store, "list", lambda *a, **k: (_ for _ in ()).throw(psycopg.InterfaceError("the connection is closed")))
    with client(admin_server) as c:
        error = code_of(lambda: c.list_policies())
    assert error.code == grpc.StatusCode.UNAVAILABLE and "policy store" in error.message


def test_a_catalog_that_does_not_answer_is_unavailable_naming_the_upstream(admin_server, monkeypatch):
    async def lookup(name):
        raise CatalogUnavailable("upstream Spark Connect did not answer within 30s (DEADLINE_EXCEEDED: Deadline Exceeded)")

    monkeypatch.setattr(admin_server.catalog, "lookup", lookup)
    with client(admin_server) as c:
        error = code_of(lambda: c.create_policy("orders", "p", [], "TRUE"))
    assert error.code == grpc.StatusCode.UNAVAILABLE and "did not answer within 30s" in error.message

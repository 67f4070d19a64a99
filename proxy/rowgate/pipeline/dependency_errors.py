"""A dependency that failed is UNAVAILABLE (or DEADLINE_EXCEEDED), named; never INTERNAL.

The proxy depends on three things: the upstream Spark Connect server, the policy store and
the upstream's catalog (asked through the same server, but a question of its own with its
own timeout). When one of them fails or does not answer in time, the client must learn that
it may retry and what it waited for; INTERNAL means a bug in rowgate and is kept for those.

The steps map the failures they expect where they happen (that is where the message can say
the most); `dependency_refusal` is the one mapping for whatever still escapes them, used by
the transport before it would answer INTERNAL (proxy/rowgate/transport/server.py `_abort`)
and by the admin API. `upstream_status` names the upstream in the statuses of forwarded
calls.
"""

from __future__ import annotations

import logging
import sqlite3

import grpc

from rowgate.catalog.upstream_catalog import CatalogUnavailable
from rowgate.catalog.upstream_sql import UpstreamSqlError, UpstreamUnavailable, no_verdict
from rowgate.pipeline.core import Refusal
from rowgate.policy.snapshot import PolicyStoreUnavailable
from rowgate.policy.store.base import PolicyExists, PolicyNotFound, PolicyStoreError

try:
    import psycopg
except ImportError:  # the PostgreSQL store is optional at run time
    psycopg = None  # type: ignore[assignment]

log = logging.getLogger("rowgate.pipeline")

STORE_REFUSAL = "the row access policy store"
CATALOG_REFUSAL = "cannot check the catalog"
UPSTREAM_REFUSAL = "upstream Spark Connect"


def _store_failure(error: BaseException) -> bool:
    """The store (not rowgate's use of it) failed: unreachable, read-only, shut down, locked."""
    if isinstance(error, (PolicyExists, PolicyNotFound)):
        return False  # answers about the policies, which the steps turn into statuses
    if isinstance(error, (PolicyStoreUnavailable, PolicyStoreError)):
        return True
    if isinstance(error, sqlite3.OperationalError):  # locked, disk I/O error, read-only file
        return True
    if psycopg is not None:
        # OperationalError: connection trouble, cancelled statements, server shutdown;
        # InterfaceError: a connection psycopg already closed; InternalError: the server
        # refused the transaction (a read-only standby after a failover, ...). Programming
        # and data errors are rowgate's own mistakes.
        return isinstance(error, (psycopg.OperationalError, psycopg.InterfaceError, psycopg.InternalError))
    return False


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def dependency_refusal(error: BaseException) -> Refusal | None:
    """The refusal a dependency's failure deserves; None when `error` is no dependency's."""
    if isinstance(error, Refusal):
        return error
    if _store_failure(error):
        return Refusal(
            grpc.StatusCode.UNAVAILABLE,
            f"{STORE_REFUSAL} is unavailable: {_first_line(error)}",
            reason="policy_store_unavailable",
        )
    if isinstance(error, CatalogUnavailable):
        return Refusal(grpc.StatusCode.UNAVAILABLE, f"{CATALOG_REFUSAL}: {error}", reason="catalog_unavailable")
    if isinstance(error, UpstreamUnavailable):
        return Refusal(grpc.StatusCode.UNAVAILABLE, f"{UPSTREAM_REFUSAL} is unavailable: {error}", reason="upstream")
    if isinstance(error, UpstreamSqlError) and (error.error_class or "").startswith("OPERATION_CANCELED"):
        # rowgate's own questions for a request run in the caller's Spark session, so the
        # caller's interruptAll/interruptTag can cancel them: the request was interrupted,
        # as it would have been directly, and the client is told so.
        return Refusal(
            grpc.StatusCode.CANCELLED,
            f"the request was interrupted while rowgate asked Spark about it: {_first_line(error)}",
            reason="interrupted",
        )
    if isinstance(error, grpc.aio.AioRpcError):
        # The proxy's own call to the upstream (not a forwarded one, whose status is the
        # upstream's answer to the client): anything but a transport failure is Spark's.
        if error.code() in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.PERMISSION_DENIED,
        ):
            return Refusal(grpc.StatusCode.UNAVAILABLE, no_verdict(error, None), reason="upstream")
        return None
    if isinstance(error, TimeoutError):  # also asyncio's and concurrent.futures' TimeoutError
        # A wait with no dependency named: still not the client's fault nor a crash, but the
        # place that waited should say what for. Logged with its traceback to find it.
        log.error("a wait timed out without naming its dependency", exc_info=error)
        return Refusal(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "rowgate gave up waiting for a dependency (Spark Connect, its catalog or the policy store)",
            reason="dependency_timeout",
        )
    return None


def upstream_status(code: grpc.StatusCode, details: str, target: str) -> tuple[grpc.StatusCode, str]:
    """The status a client gets for an error the upstream answered a forwarded call with.

    The upstream's own verdicts pass unchanged; the transport's failures name the upstream.
    UNAUTHENTICATED can only be about rowgate's credentials (the client's never travel
    upstream), so the client is told the upstream is unavailable, not that it is unknown.
    """
    if code == grpc.StatusCode.UNAVAILABLE:
        return code, f"upstream Spark Connect at {target} is unavailable: {details}"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return code, f"upstream Spark Connect at {target} did not answer before the call's deadline: {details}"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return (
            grpc.StatusCode.UNAVAILABLE,
            f"upstream Spark Connect at {target} rejected rowgate's credentials: {details}",
        )
    return code, details

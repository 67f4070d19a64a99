"""Streaming queries a policy change concerns are stopped.

A streaming query's plan is rewritten once, when it starts, under the policies in force
then: the filter it runs with is theirs (none at all for a table that was not protected
yet), and it keeps applying it to every new row for as long as it runs. A policy created,
replaced or dropped later would never reach it, so a stream started before a table was
protected kept copying that table's new rows, unfiltered, into a sink its owner reads. Like
a temp view made before a policy change (refused until recreated,
proxy/rowgate/pipeline/enforce/rules/stale_session_data.py), such a query is stale: when this
process installs a snapshot in which the policies of any table the query reads or writes
differ from those it started under, rowgate stops the query in its own session
(`StreamingQueryCommand.stop`) and logs why. Its owner starts it again, and the new start is
rewritten under the current policies. A stop that fails is retried with the next snapshot
and logged; the query's id stays known until it is stopped.

What this process knows: the queries whose start it relayed (Spark's answer names them),
with the tables enforcement found in the start's plan. Every replica installs every change,
so each stops the queries it started; a query started before this process restarted is not
known to it and keeps running (README, Limitations).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from dataclasses import dataclass

import grpc
from pyspark.sql.connect.proto import base_pb2

from rowgate.catalog.upstream_sql import CLIENT_TYPE
from rowgate.pipeline.core import Call, Step, step
from rowgate.policy.model import RowAccessPolicy
from rowgate.policy.snapshot import PolicyCache, PolicySnapshot
from rowgate.responses.streaming_redaction import started_instance
from rowgate.upstream.channel import Upstream

log = logging.getLogger(__name__)
# Queries that ended without a stop through this process stay until a change concerns them
# (the stop then finds none); past this many, the oldest are forgotten.
MAX_WATCHED = 10_000


@dataclass(frozen=True)
class _Stream:
    user_context: bytes  # the pinned UserContext of the start, serialized
    session_id: str
    query_id: str
    run_id: str
    tables: frozenset[str]
    policies: tuple[RowAccessPolicy, ...]  # the policies on `tables` the start was rewritten under


def by_name(snapshot: PolicySnapshot | None) -> dict[str, tuple[RowAccessPolicy, ...]]:
    """The policies of `snapshot` per protected table, keyed by `str(TableName)`."""
    if snapshot is None:
        return {}
    return {str(table): snapshot.policies_for(table) for table in snapshot.protected_tables()}


def policies_on(policies: dict[str, tuple[RowAccessPolicy, ...]], tables: frozenset[str]) -> tuple[RowAccessPolicy, ...]:
    """The policies on any of `tables` (names as `str(TableName)`), in a fixed order."""
    return tuple(p for table in sorted(tables) for p in policies.get(table, ()))


class StaleStreams:
    def __init__(self, policies: PolicyCache, upstream: Upstream, timeout: float = 30.0) -> None:
        self.policies = policies
        self.upstream = upstream
        self.timeout = timeout
        self._running: dict[tuple[str, str, str], _Stream] = {}
        self._stopping: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        policies.on_installed(self._installed)

    def step(self) -> Step:
        async def watch_stream_starts(call: Call) -> None:
            self._watch(call)

        return step(watch_stream_starts, ("ExecutePlan",), reads=("tables", "policy_snapshot"), hooks=("response",))

    def _watch(self, call: Call) -> None:
        plan = call.request.plan
        kind = plan.command.WhichOneof("command_type") if plan.WhichOneof("op_type") == "command" else None
        context = call.request.user_context.SerializeToString()
        session_id = call.session_id
        if kind == "streaming_query_command" and plan.command.streaming_query_command.stop:
            with self._lock:  # its owner stops it: nothing left to watch
                self._running.pop((context.hex(), session_id, plan.command.streaming_query_command.query_id.id), None)
            return
        if kind != "write_stream_operation_start":
            return
        self._loop = asyncio.get_running_loop()
        tables = frozenset(call.facts.tables)
        under = policies_on(by_name(call.facts.policy_snapshot), tables)

        def hook(raw: bytes) -> bytes:
            started = started_instance(raw)
            if started is not None:
                stream = _Stream(context, session_id, started[0], started[1], tables, under)
                with self._lock:
                    self._running[(context.hex(), session_id, started[0])] = stream
                    while len(self._running) > MAX_WATCHED:  # the oldest first (dicts keep order)
                        del self._running[next(iter(self._running))]
                # A change installed between the rewrite and Spark's answer: stale already.
                self._installed(self.policies.snapshot)
            return raw

        call.add_hook("response", hook)

    def running(self) -> int:
        with self._lock:
            return len(self._running)

    def _installed(self, snapshot: PolicySnapshot) -> None:
        """On the refreshing thread: hands the stale queries to the event loop to stop."""
        current = by_name(snapshot)  # once per snapshot, not per query
        with self._lock:
            stale = [
                (key, s)
                for key, s in self._running.items()
                if key not in self._stopping and policies_on(current, s.tables) != s.policies
            ]
            self._stopping.update(key for key, _ in stale)
        loop = self._loop
        if not stale or loop is None or loop.is_closed():
            return
        for key, stream in stale:
            asyncio.run_coroutine_threadsafe(self._stop(key, stream), loop)

    async def _stop(self, key: tuple[str, str, str], stream: _Stream) -> None:
        request = base_pb2.ExecutePlanRequest(
            session_id=stream.session_id, operation_id=str(uuid.uuid4()), client_type=CLIENT_TYPE
        )
        request.user_context.ParseFromString(stream.user_context)
        command = request.plan.command.streaming_query_command
        command.query_id.id, command.query_id.run_id = stream.query_id, stream.run_id
        command.stop = True
        try:
            call = self.upstream.raw("ExecutePlan")(
                request.SerializeToString(), metadata=self.upstream.extra_metadata, timeout=self.timeout
            )
            async for _ in call:
                pass
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND or "NOT_FOUND" in (err.details() or ""):
                with self._lock:  # it ended already (or its session did)
                    self._running.pop(key, None)
                    self._stopping.discard(key)
                return
            log.warning(
                "could not stop streaming query %s, started before a change to the policies of %s: %s %s; "
                "retrying with the next policy change",
                stream.query_id, ", ".join(sorted(stream.tables)), err.code().name, (err.details() or "")[:200],
            )  # fmt: skip
            with self._lock:
                self._stopping.discard(key)
            return
        log.warning(
            "stopped streaming query %s (user %s): it started before a change to the row access policies of %s; "
            "its owner may start it again under the current policies",
            stream.query_id, request.user_context.user_id, ", ".join(sorted(stream.tables)),
        )  # fmt: skip
        with self._lock:
            self._running.pop(key, None)
            self._stopping.discard(key)

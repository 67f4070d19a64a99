"""Liveness and readiness, told apart, over the standard gRPC health protocol.

A replica that cannot enforce must get no traffic, but it must not be restarted for it:
a PostgreSQL or Spark outage is shared by every replica, and restarting them all turns a
refused query into a fleet that does not answer at all (and loses nothing by waiting,
since the proxy recovers by itself when the dependency returns). So the two questions an
orchestrator asks get two answers (services of `grpc.health.v1.Health`):

- `liveness`: the process answers. SERVING from the moment the server listens until it
  shuts down; the answer comes from the event loop itself, so a wedged loop fails it.
- `readiness` (and `spark.connect.SparkConnectService`, and the empty service name, which
  probes and load balancers ask when they name no service): the upstream answers a call
  made with the proxy's own credentials AND the policy snapshot is current. Anything else
  is NOT_SERVING, with the reason logged once each time it changes.

The upstream is asked with a Config call (it creates or finds the proxy's own probe
session), every `upstream_interval` seconds; the policy half is read every
`policy_interval` seconds, because it costs nothing and readiness should come back as soon
as the store does. An upstream that rejects the proxy's token (UNAUTHENTICATED,
PERMISSION_DENIED) or answers with any other error is not ready: only an OK answer shows a
working server that accepts the proxy.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2
from pyspark.sql.connect.proto import base_pb2

from rowgate.policy.snapshot import PolicyCache
from rowgate.upstream.channel import Upstream

log = logging.getLogger("rowgate.health")

LIVENESS = "liveness"
READINESS = "readiness"
# Every name that answers readiness: "" is what a probe that names no service asks.
READINESS_SERVICES = ("", READINESS, "spark.connect.SparkConnectService")
SERVICES = (LIVENESS, *READINESS_SERVICES)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

PROBE_USER = "rowgate-health"  # not a member's form (user:...), so no caller can reach its session
# Spark's words for a session id it will not take again (released, expired): start a new one.
SESSION_GONE = ("INVALID_HANDLE.SESSION_CLOSED", "INVALID_HANDLE.SESSION_NOT_FOUND", "INVALID_HANDLE.SESSION_CHANGED")
_UNSET = object()  # nothing published yet


@dataclass(frozen=True)
class NotReady:
    """Why readiness is NOT_SERVING: `kind` is stable across checks (the log says each change
    once), `detail` is for the operator."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return self.detail


def upstream_verdict(err: grpc.aio.AioRpcError, target: str) -> NotReady:
    """What a failed probe call says about the upstream; never "ready"."""
    code, details = err.code(), (err.details() or "").strip()
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return NotReady(
            f"upstream_rejects_credentials:{code.name}",
            f"upstream Spark Connect at {target} rejects rowgate's credentials ({code.name}: {details});"
            " check the upstream token (--upstream ;token= or --upstream-token-file)",
        )
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return NotReady(
            f"upstream_unreachable:{code.name}", f"upstream Spark Connect at {target} does not answer ({code.name}: {details})"
        )
    return NotReady(f"upstream_error:{code.name}", f"upstream Spark Connect at {target} answered {code.name}: {details}")


class Health:
    """Owns the health servicer's statuses; `start()` once the server listens, `stop()` first
    thing on shutdown (every service turns NOT_SERVING for good)."""

    def __init__(
        self,
        upstream: Upstream,
        policies: PolicyCache | None,
        *,
        upstream_interval: float = 2.0,
        policy_interval: float = 0.25,
        probe_timeout: float = 10.0,
    ) -> None:
        self.upstream = upstream
        self.policies = policies
        self.servicer = health.aio.HealthServicer()
        self.upstream_interval = upstream_interval
        self.policy_interval = policy_interval
        self.probe_timeout = probe_timeout
        self._probe_session = str(uuid.uuid4())
        self._upstream_problem: NotReady | None = NotReady("upstream_unchecked", "the upstream has not been asked yet")
        self._published: object = _UNSET
        self._tasks: list[asyncio.Task] = []

    async def prepare(self) -> None:
        """Before the server starts: every service NOT_SERVING (the servicer's default for
        "" would be SERVING), so nothing is ready before it has been checked."""
        for service in SERVICES:
            await self.servicer.set(service, NOT_SERVING)

    async def start(self) -> None:
        await self.servicer.set(LIVENESS, SERVING)
        await self.check_upstream()
        await self.publish()
        self._tasks = [
            asyncio.create_task(self._every(self.upstream_interval, self.check_upstream), name="rowgate-health-upstream"),
            asyncio.create_task(self._every(self.policy_interval, self.publish), name="rowgate-health-publish"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.servicer.enter_graceful_shutdown()

    # -- the two halves of readiness -------------------------------------------------------

    def policy_problem(self) -> NotReady | None:
        policies = self.policies
        if policies is None:
            return NotReady("policy_store", "the policy store is not open")
        if policies.healthy:
            return None
        error = policies.last_error
        since = policies.stale_since
        when = f" since {since:%Y-%m-%dT%H:%M:%SZ}" if since is not None else ""
        why = f": {error}" if error is not None else " (a refresh is waiting for it)"
        return NotReady("policy_store", f"the policy store is unreachable{when}{why}; the policy snapshot may be outdated")

    async def check_upstream(self) -> NotReady | None:
        """Ask the upstream once (a second time with a new probe session if Spark says the
        session is gone); the answer is kept for `publish`."""
        problem = await self._probe()
        if problem is not None and any(marker in problem.detail for marker in SESSION_GONE):
            self._probe_session = str(uuid.uuid4())
            problem = await self._probe()
        self._upstream_problem = problem
        return problem

    async def _probe(self) -> NotReady | None:
        request = base_pb2.ConfigRequest(
            session_id=self._probe_session,
            user_context=base_pb2.UserContext(user_id=PROBE_USER, user_name=PROBE_USER),
            operation=base_pb2.ConfigRequest.Operation(
                get_option=base_pb2.ConfigRequest.GetOption(keys=["spark.sql.session.timeZone"])
            ),
        )
        try:
            await self.upstream.call("Config", request, timeout=self.probe_timeout)
        except grpc.aio.AioRpcError as err:
            return upstream_verdict(err, self.upstream.url.target)
        except Exception as err:  # noqa: BLE001 - e.g. the channel closing at shutdown: not ready
            return NotReady("upstream_probe_failed", f"asking upstream Spark Connect failed: {type(err).__name__}: {err}")
        return None

    def problem(self) -> NotReady | None:
        """Why the proxy is not ready now, or None; the policy store is named first because
        it refuses every query while the upstream may still answer some."""
        return self.policy_problem() or self._upstream_problem

    async def publish(self) -> None:
        problem = self.problem()
        if isinstance(self._published, NotReady | None) and _same(problem, self._published):
            return
        status = SERVING if problem is None else NOT_SERVING
        for service in READINESS_SERVICES:
            await self.servicer.set(service, status)
        if problem is None:
            log.info("readiness SERVING: the upstream answers and the policy snapshot is current")
        else:
            log.warning("readiness NOT_SERVING: %s", problem.detail, extra={"reason": problem.kind})
        self._published = problem

    @staticmethod
    async def _every(seconds: float, work: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await work()
            except Exception:  # never let a watcher die; the next round tries again
                log.exception("health check failed")


def _same(a: NotReady | None, b: NotReady | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and a.kind == b.kind)

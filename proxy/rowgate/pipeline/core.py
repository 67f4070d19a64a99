"""Types of the request pipeline; see the package docstring for the flow."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from google.protobuf.message import Message

from rowgate.identity.caller import Caller
from rowgate.responses.answer import Answer
from rowgate.upstream.methods import METHODS, Method

if TYPE_CHECKING:
    from pyspark.sql.connect.proto import base_pb2

    from rowgate.policy.snapshot import PolicySnapshot
    from rowgate.responses.error_redaction import ErrorSecrets
    from rowgate.upstream.channel import Upstream


class Refusal(Exception):
    """The proxy will not let this request through; becomes a gRPC status for the client."""

    def __init__(self, code: grpc.StatusCode, message: str, *, reason: str = "refused"):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason  # a short label for metrics and the audit log
        self.call: Call | None = None  # set by the transport when a pipeline step refused

    @classmethod
    def invalid(cls, message: str, reason: str = "invalid_argument") -> Refusal:
        return cls(grpc.StatusCode.INVALID_ARGUMENT, message, reason=reason)

    @classmethod
    def denied(cls, message: str, reason: str = "permission_denied") -> Refusal:
        return cls(grpc.StatusCode.PERMISSION_DENIED, message, reason=reason)


class StateHold(Protocol):
    """A request's hold on its session's state: session/state_gate.py's `ReadTicket`, named
    here by what the steps use of it so the types of the pipeline know nothing of sessions."""

    gate: Any  # the session's StateGate the hold is on
    version: int  # the gate's version the holder saw
    released: bool

    def release(self) -> None: ...


@dataclass
class Facts:
    """What the steps learned about one call, for later steps, the transport and the audit log.

    Each field is a fact a step declares it writes (`Step.writes`) or reads (`Step.reads`),
    so the pipeline can check when it is built that every fact is written before it is read.
    """

    # Plans that arrived compressed and were opened in place; compressed again before forwarding.
    compressed_plans: list[base_pb2.Plan] = field(default_factory=list)
    # The request's hold on its session's state (proxy/rowgate/pipeline/session/state_gate.py).
    state_read: StateHold | None = None
    # The policy statement the proxy ran itself (e.g. "CREATE ROW ACCESS POLICY"), for the audit log.
    policy_statement: str = ""
    # Whether rows were filtered; None when no step looked (then no trailer says either).
    row_filter_applied: bool | None = None
    # Tables the request reads or writes and the policies applied, for the audit log.
    tables: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    # What the upstream's errors must not reveal to this caller (None: relayed as they are).
    error_secrets: ErrorSecrets | None = None
    # The policy snapshot enforcement decided the request under (None: it decided nothing).
    policy_snapshot: PolicySnapshot | None = None
    # What the statement may change of the state Spark resolves plans with, when it is left
    # to the last step to run it inside a change of the state version
    # (proxy/rowgate/pipeline/session/epoch.py); "" when nothing or already done.
    state_scope: str = ""


FACTS: frozenset[str] = frozenset(f.name for f in fields(Facts))


@dataclass
class Call:
    method: Method
    caller: Caller
    request: Message
    upstream: Upstream
    metadata: tuple[tuple[str, str | bytes], ...] = ()
    # The request as the client sent it, before any step changed it.
    raw_request: bytes = b""
    # The connection the request came on (gRPC's peer address), as the transport saw it.
    peer: str = ""
    facts: Facts = field(default_factory=Facts)
    # Run by the transport once the upstream completed the call successfully (e.g. drop a
    # table's policies only after Spark dropped the table).
    after_success: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # Given the raw bytes of the first upstream response (of a stream: its first message),
    # e.g. to learn the upstream's server-side session id without decoding every message.
    first_response: Callable[[bytes], None] | None = None
    # Given the details of an error the upstream answered with.
    upstream_error: Callable[[str], None] | None = None
    # Applied to every raw upstream response of a stream before it is relayed; may return
    # other bytes (e.g. the row-filter metric added to the metrics message).
    response_hook: Callable[[bytes], bytes] | None = None
    # Run once when the call is over, however it ended (answered, refused, relayed, failed,
    # cancelled); e.g. release the session's state for a statement that waits on this one.
    on_finish: list[Callable[[], None]] = field(default_factory=list)

    def finish(self) -> None:
        actions, self.on_finish = self.on_finish, []
        for action in actions:
            action()

    @property
    def session_id(self) -> str:
        return getattr(self.request, "session_id", "")

    @property
    def user_id(self) -> str:
        """What the upstream keys sessions by; equal to the caller's principal after pinning."""
        ctx = getattr(self.request, "user_context", None)
        return ctx.user_id if ctx is not None else ""


EVERY_RPC: frozenset[str] = frozenset(METHODS)


@dataclass(frozen=True)
class Step:
    """One step and what it declares: the RPCs it handles, the facts it reads and writes.

    The pipeline runs a step only for the RPCs it names, and refuses to be built when a
    step reads a fact that no earlier step handling the same RPC writes.
    """

    run: Callable[[Call], Awaitable[Answer | None]]
    rpcs: frozenset[str]
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    name: str = ""


def step(
    run: Callable[[Call], Awaitable[Answer | None]],
    rpcs: Iterable[str],
    *,
    reads: Iterable[str] = (),
    writes: Iterable[str] = (),
) -> Step:
    """A `Step` named after its function."""
    name = getattr(run, "__qualname__", repr(run))
    return Step(run, frozenset(rpcs), frozenset(reads), frozenset(writes), name)


class PipelineOrderError(ValueError):
    """The steps as listed cannot work: a fact read before it is written, or a name unknown."""


class Pipeline:
    """Runs the steps that handle the call's RPC in order; the first answer wins, a refusal
    stops everything."""

    def __init__(self, steps: Sequence[Step] = ()):
        self.steps = tuple(steps)
        _check_order(self.steps)
        self._by_rpc = {rpc: tuple(s.run for s in self.steps if rpc in s.rpcs) for rpc in EVERY_RPC}

    async def run(self, call: Call) -> Answer | None:
        for run in self._by_rpc.get(call.method.name, ()):
            answer = await run(call)
            if answer is not None:
                return answer
        return None


def _check_order(steps: Sequence[Step]) -> None:
    written: dict[str, set[str]] = {rpc: set() for rpc in EVERY_RPC}
    for s in steps:
        if unknown := s.rpcs - EVERY_RPC:
            raise PipelineOrderError(f"step {s.name} names RPCs Spark Connect does not have: {sorted(unknown)}")
        if unknown := (s.reads | s.writes) - FACTS:
            raise PipelineOrderError(f"step {s.name} names facts `Facts` does not have: {sorted(unknown)}")
        for rpc in sorted(s.rpcs):
            if missing := s.reads - written[rpc]:
                raise PipelineOrderError(f"step {s.name} reads {sorted(missing)} for {rpc}, which no earlier step writes")
        for rpc in s.rpcs:
            written[rpc] |= s.writes

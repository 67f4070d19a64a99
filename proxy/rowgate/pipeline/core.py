"""Types of the request pipeline; see the package docstring for the flow."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

from google.protobuf.message import Message

from rowgate.identity.caller import Caller
from rowgate.refusal import Refusal as Refusal  # the steps refuse with rowgate's one refusal type
from rowgate.responses.answer import Answer
from rowgate.upstream.methods import METHODS, Method

if TYPE_CHECKING:
    from pyspark.sql.connect.proto import base_pb2

    from rowgate.policy.snapshot import PolicySnapshot
    from rowgate.responses.error_redaction import ErrorSecrets
    from rowgate.upstream.channel import Upstream


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


@dataclass(frozen=True)
class Hook:
    """A way for a step to hear about, or change, what the upstream answers a call.

    Steps declare the hooks they add (`Step.hooks`) as they declare facts; a hook has
    several listeners, run in pipeline order, unless it is `sole`: then at most one step
    handling an RPC may add it, which `Pipeline` checks when it is built.
    """

    doc: str
    sole: bool = False


HOOKS: dict[str, Hook] = {
    # e.g. to learn the upstream's server-side session id without decoding every message
    "first_response": Hook("given the raw bytes of the first upstream response (of a stream: its first message)"),
    "upstream_error": Hook("given the details of an error the upstream answered with"),
    # Spark's bytes rewritten back into what the client asked (the SQL echo of a filtered
    # operation): it must see them as Spark sent them, so it is applied before every other
    # transform, and two would each expect the other's input.
    "response_as_sent": Hook("applied first to every raw upstream response of a stream; returns the bytes to relay", sole=True),
    # e.g. the row-filter metric added, streaming progress redacted; each gets the bytes the
    # previous one returned
    "response": Hook("applied to every raw upstream response of a stream before it is relayed; returns the bytes to relay"),
    "upstream_response": Hook("given every raw upstream response as Spark sent it, after the transforms ran"),
}


# A hook's listener: its argument (bytes or an error's details) and result depend on the
# hook, so the overloads of `Call.add_hook` check them per name; stored together, they are this.
Listener = Callable[[Any], Any]


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
    # What the steps added to hear about or change the upstream's answer, by hook (`HOOKS`),
    # in pipeline order; added with `add_hook`, read composed as `first_response`,
    # `upstream_error` and `response_hook`.
    hooks: dict[str, list[Listener]] = field(default_factory=lambda: {name: [] for name in HOOKS})
    # The step `Pipeline.run` is running: a hook it adds must be one it declared.
    running: Step | None = field(default=None, repr=False, compare=False)
    # Run once when the call is over, however it ended (answered, refused, relayed, failed,
    # cancelled); e.g. release the session's state for a statement that waits on this one.
    on_finish: list[Callable[[], None]] = field(default_factory=list)

    def finish(self) -> None:
        actions, self.on_finish = self.on_finish, []
        for action in actions:
            action()

    @overload
    def add_hook(self, name: Literal["first_response", "upstream_response"], listener: Callable[[bytes], object]) -> None: ...
    @overload
    def add_hook(self, name: Literal["upstream_error"], listener: Callable[[str], object]) -> None: ...
    @overload
    def add_hook(self, name: Literal["response_as_sent", "response"], listener: Callable[[bytes], bytes]) -> None: ...

    def add_hook(self, name: str, listener: Listener) -> None:
        """Adds `listener` to hook `name` (see `HOOKS`), after those of earlier steps."""
        if name not in HOOKS:
            raise PipelineOrderError(f"no hook {name!r}; the hooks are {sorted(HOOKS)}")
        if self.running is not None and name not in self.running.hooks:
            raise PipelineOrderError(f"step {self.running.name} adds hook {name!r} it does not declare")
        self.hooks[name].append(listener)

    @property
    def first_response(self) -> Callable[[bytes], None] | None:
        """Every `first_response` listener in turn; None when there is none."""
        return _each(self.hooks["first_response"])

    @property
    def upstream_error(self) -> Callable[[str], None] | None:
        """Every `upstream_error` listener in turn; None when there is none."""
        return _each(self.hooks["upstream_error"])

    @property
    def response_hook(self) -> Callable[[bytes], bytes] | None:
        """What is applied to every raw upstream response before it is relayed: the
        `response_as_sent` transform, then the `response` transforms in pipeline order (each
        given the bytes the previous returned), then every `upstream_response` listener given
        the bytes as Spark sent them. None when no step added any."""
        transforms = [*self.hooks["response_as_sent"], *self.hooks["response"]]
        observers = list(self.hooks["upstream_response"])
        if not observers and len(transforms) <= 1:
            return transforms[0] if transforms else None

        def hook(raw: bytes) -> bytes:
            out = raw
            for transform in transforms:
                out = transform(out)
            for observe in observers:
                observe(raw)
            return out

        return hook

    @property
    def session_id(self) -> str:
        return getattr(self.request, "session_id", "")

    @property
    def user_id(self) -> str:
        """What the upstream keys sessions by; equal to the caller's principal after pinning."""
        ctx = getattr(self.request, "user_context", None)
        return ctx.user_id if ctx is not None else ""


def _each(listeners: list[Listener]) -> Callable[[Any], None] | None:
    if not listeners:
        return None
    if len(listeners) == 1:
        return listeners[0]
    listeners = list(listeners)

    def each(value: object) -> None:
        for listener in listeners:
            listener(value)

    return each


EVERY_RPC: frozenset[str] = frozenset(METHODS)


@dataclass(frozen=True)
class Step:
    """One step and what it declares: the RPCs it handles, the facts it reads and writes,
    the hooks it adds.

    The pipeline runs a step only for the RPCs it names, and refuses to be built when a
    step reads a fact that no earlier step handling the same RPC writes, or when two steps
    handling the same RPC add a hook only one may. A step adding a hook it did not declare
    fails the call (`Call.add_hook`).
    """

    run: Callable[[Call], Awaitable[Answer | None]]
    rpcs: frozenset[str]
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    name: str = ""
    hooks: frozenset[str] = frozenset()  # the hooks (`HOOKS`) it may add to a call


def step(
    run: Callable[[Call], Awaitable[Answer | None]],
    rpcs: Iterable[str],
    *,
    reads: Iterable[str] = (),
    writes: Iterable[str] = (),
    hooks: Iterable[str] = (),
) -> Step:
    """A `Step` named after its function."""
    name = getattr(run, "__qualname__", repr(run))
    return Step(run, frozenset(rpcs), frozenset(reads), frozenset(writes), name, frozenset(hooks))


class PipelineOrderError(ValueError):
    """The steps as listed cannot work: a fact read before it is written, a hook claimed
    twice or added undeclared, or a name unknown."""


class Pipeline:
    """Runs the steps that handle the call's RPC in order; the first answer wins, a refusal
    stops everything."""

    def __init__(self, steps: Sequence[Step] = ()):
        self.steps = tuple(steps)
        _check_order(self.steps)
        self._by_rpc = {rpc: tuple(s for s in self.steps if rpc in s.rpcs) for rpc in EVERY_RPC}

    async def run(self, call: Call) -> Answer | None:
        try:
            for s in self._by_rpc.get(call.method.name, ()):
                call.running = s
                answer = await s.run(call)
                if answer is not None:
                    return answer
            return None
        finally:
            call.running = None


def _check_order(steps: Sequence[Step]) -> None:
    written: dict[str, set[str]] = {rpc: set() for rpc in EVERY_RPC}
    held: dict[tuple[str, str], str] = {}  # (rpc, hook) -> the step that added it
    for s in steps:
        if unknown := s.rpcs - EVERY_RPC:
            raise PipelineOrderError(f"step {s.name} names RPCs Spark Connect does not have: {sorted(unknown)}")
        if unknown := (s.reads | s.writes) - FACTS:
            raise PipelineOrderError(f"step {s.name} names facts `Facts` does not have: {sorted(unknown)}")
        if unknown := s.hooks - HOOKS.keys():
            raise PipelineOrderError(f"step {s.name} names hooks `HOOKS` does not have: {sorted(unknown)}")
        for rpc in sorted(s.rpcs):
            for hook in sorted(s.hooks):
                if HOOKS[hook].sole and (other := held.get((rpc, hook))) is not None:
                    raise PipelineOrderError(f"steps {other} and {s.name} both add {hook} for {rpc}; only one may")
                held[(rpc, hook)] = s.name
        for rpc in sorted(s.rpcs):
            if missing := s.reads - written[rpc]:
                raise PipelineOrderError(f"step {s.name} reads {sorted(missing)} for {rpc}, which no earlier step writes")
        for rpc in s.rpcs:
            written[rpc] |= s.writes

"""ReleaseAcks: release_until answered by the proxy, forwarded late and coalesced."""

from __future__ import annotations

import asyncio

import grpc
from pyspark.sql.connect.proto import base_pb2

from rowgate.identity.caller import Caller
from rowgate.pipeline.core import Call
from rowgate.pipeline.operations.release_acks import ReleaseAcks
from rowgate.pipeline.operations.steps import release_acks_step
from rowgate.upstream.methods import METHODS

USER, SESSION, OPERATION = "user:ann@example.com", "00000000-0000-4000-8000-000000000001", "op-1"


class FakeUpstream:
    """Records forwarded ReleaseExecute requests; may fail them."""

    def __init__(self, fail: bool = False):
        self.sent: list[base_pb2.ReleaseExecuteRequest] = []
        self.fail = fail

    def raw(self, name: str):
        assert name == "ReleaseExecute"

        async def send(raw: bytes, *, metadata, timeout):
            self.sent.append(base_pb2.ReleaseExecuteRequest.FromString(raw))
            if self.fail:
                raise grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), "gone")
            return b""

        return send


def call(name: str, request, upstream) -> Call:
    return Call(method=METHODS[name], caller=Caller(principal=USER), request=request, upstream=upstream)


def release(upstream, *, until: str | None = None, session: str = SESSION, operation: str = OPERATION) -> Call:
    req = base_pb2.ReleaseExecuteRequest(
        session_id=session, operation_id=operation, user_context=base_pb2.UserContext(user_id=USER)
    )
    if until is None:
        req.release_all.SetInParent()
    else:
        req.release_until.response_id = until
    return call("ReleaseExecute", req, upstream)


async def learn_session(acks: ReleaseAcks, upstream, server_side: str = "server-side-1") -> None:
    acks.known[(USER, SESSION)] = server_side


def new_acks(delay: float = 0.01) -> ReleaseAcks:
    known: dict[tuple[str, str], str] = {}
    acks = ReleaseAcks(known.get, delay=delay)
    acks.known = known  # the test's stand-in for the upstream session ids
    return acks


def run(coro):
    return asyncio.run(coro)


def test_release_until_is_answered_locally_and_only_the_newest_is_forwarded():
    async def scenario():
        upstream, acks = FakeUpstream(), new_acks()
        await learn_session(acks, upstream)
        answers = [await release_acks_step(acks).run(release(upstream, until=f"r{i}")) for i in range(50)]
        assert all(a is not None for a in answers)
        response = answers[-1].responses[0]
        assert (response.session_id, response.server_side_session_id, response.operation_id) == (
            SESSION,
            "server-side-1",
            OPERATION,
        )
        assert upstream.sent == []  # nothing before the delay
        await acks.flush()
        assert [r.release_until.response_id for r in upstream.sent] == ["r49"]
        assert upstream.sent[0].user_context.user_id == USER

    run(scenario())


def test_release_all_is_forwarded_and_drops_the_pending_release_until():
    async def scenario():
        upstream, acks = FakeUpstream(), new_acks()
        await learn_session(acks, upstream)
        await release_acks_step(acks).run(release(upstream, until="r1"))
        assert await release_acks_step(acks).run(release(upstream)) is None  # the transport forwards it
        await acks.flush()
        assert upstream.sent == []

    run(scenario())


def test_operations_are_coalesced_separately():
    async def scenario():
        upstream, acks = FakeUpstream(), new_acks()
        await learn_session(acks, upstream)
        await release_acks_step(acks).run(release(upstream, until="a1", operation="a"))
        await release_acks_step(acks).run(release(upstream, until="b1", operation="b"))
        await release_acks_step(acks).run(release(upstream, until="a2", operation="a"))
        await acks.flush()
        assert sorted(r.release_until.response_id for r in upstream.sent) == ["a2", "b1"]

    run(scenario())


def test_a_session_whose_server_side_id_is_unknown_is_forwarded_as_before():
    async def scenario():
        upstream, acks = FakeUpstream(), new_acks()
        await learn_session(acks, upstream)
        assert (
            await release_acks_step(acks).run(release(upstream, until="r1", session="00000000-0000-4000-8000-000000000002"))
            is None
        )

    run(scenario())


def test_a_failed_forward_is_swallowed_and_later_releases_still_go():
    async def scenario():
        upstream, acks = FakeUpstream(fail=True), new_acks()
        await learn_session(acks, upstream)
        await release_acks_step(acks).run(release(upstream, until="r1"))
        await acks.flush()
        await release_acks_step(acks).run(release(upstream, until="r2"))
        await acks.flush()
        assert [r.release_until.response_id for r in upstream.sent] == ["r1", "r2"]

    run(scenario())

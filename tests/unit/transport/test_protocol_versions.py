"""The proxy's knowledge of which fields older Spark servers lack, and what it does with it."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2, relations_pb2

from rowgate.embedded.spark import free_port
from rowgate.identity.caller import Caller
from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.enforce.upstream_compat import upstream_compat
from rowgate.upstream import protocol_versions as pv
from rowgate.upstream.channel import Upstream, UpstreamVersionUnknown
from rowgate.upstream.methods import METHODS
from rowgate.upstream.url import parse_upstream_url


def _descriptor(full_name: str):
    from google.protobuf import descriptor_pool

    return descriptor_pool.Default().FindMessageTypeByName(full_name)


def test_every_entry_names_a_real_field():
    for (message, field), version in pv.SINCE.items():
        assert field in _descriptor(message).fields_by_name, (message, field)
        assert (4, 1) <= version <= pv.newest()
    for rpc in pv.RPCS_SINCE:
        assert rpc in METHODS


def test_versions_parse():
    assert pv.parse_version("4.0.5") == (4, 0)
    assert pv.parse_version("4.3.0-SNAPSHOT") == (4, 3)
    assert pv.parse_version("garbage") is None


def test_newer_fields_are_found_anywhere():
    request = base_pb2.ExecutePlanRequest()
    request.plan.root.project.input.zip.left.range.end = 3
    request.plan.root.project.input.zip.right.range.end = 3
    assert pv.newer_fields(request) == {("spark.connect.Relation", "zip")}
    assert pv.newer_fields(base_pb2.ExecutePlanRequest()) == set()


class FakeUpstream:
    def __init__(self, text: str | None):
        self.text = text

    async def spark_version(self):
        if self.text is None:
            raise UpstreamVersionUnknown("UNAVAILABLE: connection refused")
        return self.text, pv.parse_version(self.text)


def _call(client: base_pb2.ExecutePlanRequest, version: str | None) -> Call:
    return Call(
        method=METHODS["ExecutePlan"],
        caller=Caller("user:alice@example.com"),
        request=base_pb2.ExecutePlanRequest.FromString(client.SerializeToString()),
        upstream=FakeUpstream(version),
        raw_request=client.SerializeToString(),
    )


def _plain() -> base_pb2.ExecutePlanRequest:
    request = base_pb2.ExecutePlanRequest(session_id="s")
    request.plan.root.range.end = 3
    return request


def test_a_field_the_proxy_added_that_the_upstream_lacks_is_refused_naming_versions():
    call = _call(_plain(), "4.1.4")
    inner = relations_pb2.Relation()
    inner.CopyFrom(call.request.plan.root)
    call.request.plan.root.zip.left.CopyFrom(inner)  # as if a rewrite had used 4.3's zip
    call.request.plan.root.zip.right.CopyFrom(inner)
    with pytest.raises(Refusal) as e:
        asyncio.run(upstream_compat(call))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "spark.connect.Relation.zip" in e.value.message and "Spark 4.3 added" in e.value.message
    assert "Spark 4.1.4" in e.value.message


def test_the_same_field_is_fine_on_a_server_that_has_it():
    call = _call(_plain(), "4.3.0")
    call.request.plan.root.zip.left.range.end = 1
    assert asyncio.run(upstream_compat(call)) is None


def test_fields_the_client_sent_itself_get_the_servers_own_answer():
    client = base_pb2.ExecutePlanRequest(session_id="s")
    client.plan.root.relation_changes.unparsed_identifier = "t"
    assert asyncio.run(upstream_compat(_call(client, "4.0.5"))) is None


def test_an_upstream_that_does_not_say_its_version_is_a_dependency_failure():
    with pytest.raises(Refusal) as e:
        asyncio.run(upstream_compat(_call(_plain(), None)))
    assert e.value.code == grpc.StatusCode.UNAVAILABLE and "Spark version" in e.value.message


def _version_server(port: int, version: str, asked: list):
    def analyze(raw: bytes, context) -> bytes:
        request = base_pb2.AnalyzePlanRequest.FromString(raw)
        asked.append(version)
        assert request.WhichOneof("analyze") == "spark_version" and request.user_context.user_id == "rowgate-internal"
        response = base_pb2.AnalyzePlanResponse(session_id=request.session_id)
        response.spark_version.version = version
        return response.SerializeToString()

    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(analyze)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("spark.connect.SparkConnectService", {"AnalyzePlan": handler}),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    return server


def test_the_version_is_asked_once_and_again_after_a_reconnect():
    async def go():
        port, asked = free_port(), []
        first = _version_server(port, "4.1.4", asked)
        await first.start()
        upstream = Upstream(parse_upstream_url(f"sc://127.0.0.1:{port}"), max_message_bytes=1 << 20)
        upstream.open()
        try:
            assert await upstream.spark_version() == ("4.1.4", (4, 1))
            assert await upstream.spark_version() == ("4.1.4", (4, 1))
            assert asked == ["4.1.4"]  # cached
            await first.stop(None)  # the upstream is replaced by a newer one on the same address
            second = _version_server(port, "4.3.0", asked)
            await second.start()
            try:
                for _ in range(600):  # waits on the condition; the suite's timeout bounds it
                    try:
                        if (await upstream.spark_version())[0] == "4.3.0":
                            break
                    except UpstreamVersionUnknown:
                        pass
                    await asyncio.sleep(0.05)
                assert await upstream.spark_version() == ("4.3.0", (4, 3))
            finally:
                await second.stop(None)
        finally:
            await upstream.close()

    asyncio.run(go())

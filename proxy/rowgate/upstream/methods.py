"""The RPCs of `spark.connect.SparkConnectService`, read from the protobuf classes in pyspark.

Deriving the table from the descriptor (instead of listing methods by hand) means an RPC the
pinned pyspark knows is forwarded with its real streaming shape, and an RPC it does not know
is never routed at all: gRPC answers UNIMPLEMENTED for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import message_factory
from google.protobuf.message import Message
from pyspark.sql.connect.proto import base_pb2

SERVICE_NAME = "spark.connect.SparkConnectService"


@dataclass(frozen=True)
class Method:
    name: str
    client_streaming: bool
    server_streaming: bool
    request_type: type[Message]
    response_type: type[Message]

    @property
    def path(self) -> str:
        return f"/{SERVICE_NAME}/{self.name}"


def _load() -> dict[str, Method]:
    service = base_pb2.DESCRIPTOR.services_by_name["SparkConnectService"]
    methods = {}
    for m in service.methods:
        methods[m.name] = Method(
            name=m.name,
            client_streaming=m.client_streaming,
            server_streaming=m.server_streaming,
            request_type=message_factory.GetMessageClass(m.input_type),
            response_type=message_factory.GetMessageClass(m.output_type),
        )
    return methods


METHODS: dict[str, Method] = _load()

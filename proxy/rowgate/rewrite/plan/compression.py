"""Opens `Plan.compressed_operation` (zstd, Spark 4.1+) so later steps can see the plan.

pyspark compresses any plan above a size threshold; a proxy that only looked at `root` and
`command` would be blind to exactly the largest plans. The plan is decompressed in place
before the other steps run and compressed again before forwarding, so the upstream gets the
same compact form the client chose (and nothing the proxy did not inspect).
"""

from __future__ import annotations

import zstandard
from google.protobuf.message import DecodeError, Message
from pyspark.sql.connect.proto import base_pb2, commands_pb2, relations_pb2

from rowgate.rewrite.plan.nesting import NestedTooDeep, check_nesting

# A decompression bomb must not take the proxy down; Spark's own inbound limit is 128 MiB.
MAX_PLAN_BYTES = 512 * 1024 * 1024
Compressed = base_pb2.Plan.CompressedOperation


class CompressedPlanError(ValueError):
    """A compressed plan the proxy cannot open, so cannot inspect: the request is invalid.

    `reason` is the short label metrics and the audit log use for the refusal.
    """

    def __init__(self, message: str, reason: str = "compressed_plan"):
        super().__init__(message)
        self.reason = reason


def plans_of(request: Message) -> list[base_pb2.Plan]:
    """Every Plan a request carries (ExecutePlan has one, AnalyzePlan variants one or two)."""
    found: list[base_pb2.Plan] = []

    def visit(msg: Message) -> None:
        for field, value in msg.ListFields():
            if field.message_type is None:
                continue
            if field.message_type.full_name == base_pb2.Plan.DESCRIPTOR.full_name:
                found.append(value)
            elif field.message_type.full_name.startswith("spark.connect.AnalyzePlanRequest"):
                visit(value)

    visit(request)
    return found


def decompress_plan(plan: base_pb2.Plan) -> None:
    op = plan.compressed_operation
    if op.compression_codec != base_pb2.CompressionCodec.COMPRESSION_CODEC_ZSTD:
        raise CompressedPlanError(f"unsupported plan compression codec {op.compression_codec}")
    try:
        data = zstandard.ZstdDecompressor().decompress(op.data, max_output_size=MAX_PLAN_BYTES)
    except zstandard.ZstdError as e:
        raise CompressedPlanError(f"compressed plan is not valid zstd data: {e}") from e
    try:
        inner: type[Message]
        if op.op_type == Compressed.OP_TYPE_RELATION:
            inner = relations_pb2.Relation
        elif op.op_type == Compressed.OP_TYPE_COMMAND:
            inner = commands_pb2.Command
        else:
            raise CompressedPlanError(f"compressed plan has unknown op_type {op.op_type}")
        # The transport's depth check saw only the compressed bytes. Spark counts the
        # decompressed plan from its own top with the same limit, and so does this check.
        check_nesting(data, inner.DESCRIPTOR)
        decoded = inner.FromString(data)
    except NestedTooDeep as e:
        raise CompressedPlanError(str(e), reason="plan_too_deep") from e
    except DecodeError as e:
        raise CompressedPlanError(f"compressed plan does not decode: {e}") from e
    (plan.root if inner is relations_pb2.Relation else plan.command).CopyFrom(decoded)


def compress_plan(plan: base_pb2.Plan) -> None:
    kind = plan.WhichOneof("op_type")
    if kind == "root":
        data, op_type = plan.root.SerializeToString(), Compressed.OP_TYPE_RELATION
    elif kind == "command":
        data, op_type = plan.command.SerializeToString(), Compressed.OP_TYPE_COMMAND
    else:
        return
    plan.compressed_operation.CopyFrom(
        Compressed(
            data=zstandard.ZstdCompressor().compress(data),
            op_type=op_type,
            compression_codec=base_pb2.CompressionCodec.COMPRESSION_CODEC_ZSTD,
        )
    )

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

from rowgate.pipeline.core import Answer, Call, Refusal
from rowgate.rewrite.plan.nesting import NestedTooDeep, check_nesting

# A decompression bomb must not take the proxy down; Spark's own inbound limit is 128 MiB.
MAX_PLAN_BYTES = 512 * 1024 * 1024
Compressed = base_pb2.Plan.CompressedOperation


def plans_of(request) -> list[base_pb2.Plan]:
    """Every Plan a request carries (ExecutePlan has one, AnalyzePlan variants one or two)."""
    found: list[base_pb2.Plan] = []

    def visit(msg) -> None:
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
        raise Refusal.invalid(f"unsupported plan compression codec {op.compression_codec}", reason="compressed_plan")
    try:
        data = zstandard.ZstdDecompressor().decompress(op.data, max_output_size=MAX_PLAN_BYTES)
    except zstandard.ZstdError as e:
        raise Refusal.invalid(f"compressed plan is not valid zstd data: {e}", reason="compressed_plan") from e
    try:
        inner: type[Message]
        if op.op_type == Compressed.OP_TYPE_RELATION:
            inner = relations_pb2.Relation
        elif op.op_type == Compressed.OP_TYPE_COMMAND:
            inner = commands_pb2.Command
        else:
            raise Refusal.invalid(f"compressed plan has unknown op_type {op.op_type}", reason="compressed_plan")
        # The transport's depth check saw only the compressed bytes. Spark counts the
        # decompressed plan from its own top with the same limit, and so does this check.
        check_nesting(data, inner.DESCRIPTOR)
        decoded = inner.FromString(data)
    except NestedTooDeep as e:
        raise Refusal.invalid(str(e), reason="plan_too_deep") from e
    except DecodeError as e:
        raise Refusal.invalid(f"compressed plan does not decode: {e}", reason="compressed_plan") from e
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


async def open_compressed_plans(call: Call) -> Answer | None:
    compressed = [p for p in plans_of(call.request) if p.WhichOneof("op_type") == "compressed_operation"]
    for plan in compressed:
        decompress_plan(plan)
    if compressed:
        call.notes["compressed_plans"] = compressed
    return None


async def recompress_plans(call: Call) -> Answer | None:
    for plan in call.notes.get("compressed_plans", ()):
        compress_plan(plan)
    return None

"""A scripted stand-in for `Upstream`: answers ExecutePlan with Arrow batches or gRPC errors.

It speaks the same bytes-in, bytes-out multicallable shape as `Upstream.raw`, so the real
request encoding, Arrow decoding and error decoding run in the unit tests.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import grpc
import pyarrow as pa
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from pyspark.sql.connect.proto import base_pb2

DESCRIBE_COLUMNS = ("col_name", "data_type", "comment")


def arrow_ipc(rows: list[tuple], names: tuple[str, ...] = DESCRIBE_COLUMNS) -> bytes:
    columns = list(zip(*rows)) if rows else [[] for _ in names]
    table = pa.table({f"c{i}": pa.array(list(col), type=pa.string()) for i, col in enumerate(columns)})
    table = table.rename_columns(list(names))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def spark_rpc_error(error_class: str, message: str, params: dict | None = None, sql_state: str = "42P01") -> grpc.aio.AioRpcError:
    info = error_details_pb2.ErrorInfo(
        reason="org.apache.spark.sql.AnalysisException",
        domain="org.apache.spark",
        metadata={"errorClass": error_class, "sqlState": sql_state, "messageParameters": json.dumps(params or {})},
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=13, message=message, details=[detail])
    trailing = grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString()))
    return grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), trailing, details=message)


def not_found(name_sql: str) -> grpc.aio.AioRpcError:
    return spark_rpc_error(
        "TABLE_OR_VIEW_NOT_FOUND",
        f"[TABLE_OR_VIEW_NOT_FOUND] The table or view {name_sql} cannot be found.",
        {"relationName": name_sql},
    )


def unavailable() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details="connection refused"
    )


Answer = list[tuple] | grpc.aio.AioRpcError | Callable[[base_pb2.ExecutePlanRequest], object]


class FakeUpstream:
    """`answer(request)` decides each reply: rows, an error to raise, or a callable for either."""

    def __init__(self, answer: Callable[[base_pb2.ExecutePlanRequest], Answer]):
        self.answer = answer
        self.extra_metadata = (("x-extra", "1"),)
        self.requests: list[base_pb2.ExecutePlanRequest] = []
        self.metadata: list[tuple] = []
        self.gate: asyncio.Event | None = None  # when set, every call waits for it
        self.released: list[str] = []

    def raw(self, name: str):
        assert name == "ExecutePlan", name

        def call(data: bytes, *, metadata=None, timeout=None):
            request = base_pb2.ExecutePlanRequest.FromString(data)
            self.requests.append(request)
            self.metadata.append(tuple(metadata or ()))
            return self._stream(request)

        return call

    async def _stream(self, request):
        if self.gate is not None:
            await self.gate.wait()
        answer = self.answer(request)
        if isinstance(answer, BaseException):
            raise answer
        yield base_pb2.ExecutePlanResponse(session_id=request.session_id).SerializeToString()  # schema-ish first message
        if answer:
            response = base_pb2.ExecutePlanResponse(session_id=request.session_id)
            response.arrow_batch.row_count = len(answer)
            response.arrow_batch.data = arrow_ipc(answer, tuple(f"c{i}" for i in range(len(answer[0]))))
            yield response.SerializeToString()

    async def call(self, name, request, *, timeout=None):
        self.released.append(request.session_id)
        return base_pb2.ReleaseSessionResponse(session_id=request.session_id)


def query_of(request: base_pb2.ExecutePlanRequest) -> str:
    return request.plan.root.sql.query


# What Spark 4.1.4 answered for DESCRIBE TABLE EXTENDED (trimmed of timestamps that do not matter).
TABLE_ROWS = [
    ("id", "int", None),
    ("name", "string", None),
    ("dt", "string", None),
    ("# Partition Information", "", ""),
    ("# col_name", "data_type", "comment"),
    ("dt", "string", None),
    ("", "", ""),
    ("# Detailed Table Information", "", ""),
    ("Catalog", "spark_catalog", ""),
    ("Database", "db1", ""),
    ("Table", "t1", ""),
    ("Owner", "root", ""),
    ("Created Time", "Sat Nov 21 12:39:42 UTC 2026", ""),
    ("Last Access", "UNKNOWN", ""),
    ("Created By", "Spark 4.1.4", ""),
    ("Type", "MANAGED", ""),
    ("Provider", "parquet", ""),
    ("Location", "file:/data/warehouse/db1.db/t1", ""),
    ("Serde Library", "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe", ""),
    ("InputFormat", "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat", ""),
    ("OutputFormat", "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat", ""),
    ("Partition Provider", "Catalog", ""),
]

VIEW_ROWS = [
    ("a", "int", "x"),
    ("b", "string", None),
    ("", "", ""),
    ("# Detailed Table Information", "", ""),
    ("Catalog", "spark_catalog", ""),
    ("Database", "db1", ""),
    ("Table", "v2", ""),
    ("Owner", "root", ""),
    ("Created Time", "Sat Nov 21 12:39:56 UTC 2026", ""),
    ("Last Access", "UNKNOWN", ""),
    ("Created By", "Spark 4.1.4", ""),
    ("Type", "VIEW", ""),
    ("View Text", "SELECT * FROM db1.v1", ""),
    ("View Original Text", "SELECT * FROM db1.v1", ""),
    ("View Schema Mode", "COMPENSATION", ""),
    ("View Catalog and Namespace", "spark_catalog.default", ""),
    ("View Query Output Columns", "[`id`, `name`]", ""),
    ("Table Properties", "[transient_lastDdlTime=1795264796]", ""),
    ("Serde Library", "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe", ""),
    ("InputFormat", "org.apache.hadoop.mapred.SequenceFileInputFormat", ""),
    ("OutputFormat", "org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat", ""),
    ("Storage Properties", "[serialization.format=1]", ""),
]


def table_rows(schema: str, table: str, *columns: str, location: str | None = None) -> list[tuple]:
    rows: list[tuple] = [(c, "int", None) for c in columns or ("x",)]
    rows += [
        ("", "", ""),
        ("# Detailed Table Information", "", ""),
        ("Catalog", "spark_catalog", ""),
        ("Database", schema, ""),
        ("Table", table, ""),
        ("Type", "MANAGED", ""),
        ("Location", location or f"file:/w/{schema}.db/{table}", ""),
    ]
    return rows

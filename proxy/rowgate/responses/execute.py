"""ExecutePlan answers made by the proxy (policy DDL results, refusals shaped as results).

pyspark accepts a made-up stream when it looks exactly like a server's: the request's
session_id, the real server-side session id (checked against every other response of the
session), the request's operation_id, a fresh response_id per message, and a final
`result_complete`. A `spark.sql(...)` command gets its rows as a LocalRelation the real
server can run later (collect/show/toPandas send it back upstream); a relation root gets
Arrow batches directly.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
from pyspark.sql.connect.proto import base_pb2, relations_pb2

from rowgate.responses.answer import Answer
from rowgate.upstream.channel import Upstream


def arrow_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


async def result_answer(req: base_pb2.ExecutePlanRequest, user_id: str, upstream: Upstream, table: pa.Table) -> Answer:
    """A complete ExecutePlan stream carrying `table` as the statement's result."""
    server_side = await upstream.server_side_session_id(req.session_id, user_id)
    operation_id = req.operation_id or str(uuid.uuid4())

    def response(**fields: Any) -> base_pb2.ExecutePlanResponse:
        return base_pb2.ExecutePlanResponse(
            session_id=req.session_id,
            server_side_session_id=server_side,
            operation_id=operation_id,
            response_id=str(uuid.uuid4()),
            **fields,
        )

    data = arrow_ipc(table)
    if req.plan.HasField("command"):
        relation = relations_pb2.Relation(local_relation=relations_pb2.LocalRelation(data=data))
        first = response(sql_command_result=base_pb2.ExecutePlanResponse.SqlCommandResult(relation=relation))
    else:
        first = response(arrow_batch=base_pb2.ExecutePlanResponse.ArrowBatch(row_count=table.num_rows, data=data, start_offset=0))
    last = response(result_complete=base_pb2.ExecutePlanResponse.ResultComplete())
    return Answer(
        [first, last],
        operation_key=(user_id, req.session_id, operation_id),
        server_side_session_id=server_side,
    )

"""Run one SQL statement upstream and get its rows back, for the proxy's own questions.

The statement travels as `Plan.root = Relation.sql`, which Spark runs at once (DDL too) and
answers with Arrow IPC batches. The request is not reattachable: the server only cuts
reattachable streams, so a short answer arrives whole and a stream that ends with status OK
is complete. Spark's refusal of a statement (an error carrying Spark's `ErrorInfo`) and the
upstream being unable to answer at all are different failures, and are told apart here once,
so that callers can fail closed on the second without parsing messages.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

import grpc
import pyarrow as pa
from google.rpc import error_details_pb2, status_pb2
from pyspark.sql.connect.proto import base_pb2, relations_pb2

from rowgate.upstream.channel import Upstream

SPARK_DOMAIN = "org.apache.spark"
CLIENT_TYPE = "rowgate"
_CLASS_IN_MESSAGE = re.compile(r"^\[([A-Z][A-Z0-9_]*(?:\.[A-Z][A-Z0-9_]*)*)\]")


class UpstreamUnavailable(Exception):
    """The upstream gave no verdict on the statement (down, timed out, refused the channel)."""


class UpstreamSqlError(Exception):
    """Spark rejected the statement itself; `error_class` is Spark's name for the reason."""

    def __init__(
        self,
        message: str,
        error_class: str | None = None,
        sql_state: str | None = None,
        parameters: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.error_class = error_class
        self.sql_state = sql_state
        self.parameters = parameters or {}


@dataclass(frozen=True)
class SessionRef:
    """The upstream keys sessions by both parts; one without the other is a different session."""

    user_id: str
    session_id: str

    @staticmethod
    def fresh(user_id: str) -> SessionRef:
        return SessionRef(user_id, str(uuid.uuid4()))


async def sql_rows(upstream: Upstream, sql: str, session: SessionRef, *, timeout: float = 30.0) -> list[tuple]:
    """The statement's result rows, as tuples in column order (duplicate names survive)."""
    request = base_pb2.ExecutePlanRequest(
        session_id=session.session_id,
        user_context=base_pb2.UserContext(user_id=session.user_id, user_name=session.user_id),
        operation_id=str(uuid.uuid4()),
        client_type=CLIENT_TYPE,
        plan=base_pb2.Plan(root=relations_pb2.Relation(sql=relations_pb2.SQL(query=sql))),
    )
    rows: list[tuple] = []
    try:
        call = upstream.raw("ExecutePlan")(request.SerializeToString(), metadata=upstream.extra_metadata, timeout=timeout)
        async for raw in call:
            response = base_pb2.ExecutePlanResponse.FromString(raw)
            if response.HasField("arrow_batch"):
                rows.extend(arrow_rows(response.arrow_batch.data))
    except grpc.aio.AioRpcError as err:
        refusal = spark_error(err)
        if refusal is None:
            raise UpstreamUnavailable(no_verdict(err, timeout)) from None
        raise refusal from None
    return rows


def no_verdict(err: grpc.aio.AioRpcError, timeout: float | None) -> str:
    """Why the upstream gave no answer, naming it: the text reaches the client in the refusal."""
    code, details = err.code(), (err.details() or "").strip()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and timeout is not None:
        return f"upstream Spark Connect did not answer within {timeout:g}s ({code.name}: {details})"
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return f"upstream Spark Connect rejected rowgate's credentials ({code.name}: {details})"
    return f"upstream Spark Connect gave no answer ({code.name}: {details})"


def arrow_rows(data: bytes) -> list[tuple]:
    rows: list[tuple] = []
    with pa.ipc.open_stream(data) as reader:
        for batch in reader:
            rows.extend(zip(*(column.to_pylist() for column in batch.columns)))
    return rows


def spark_error(err: grpc.aio.AioRpcError) -> UpstreamSqlError | None:
    """Spark's verdict carried by a failed call, or None when the failure is not Spark's answer.

    Spark attaches a `google.rpc.ErrorInfo` (domain `org.apache.spark`) whose metadata hold
    `errorClass`, `sqlState` and `messageParameters`. A server that sent no details but a
    message starting with `[ERROR_CLASS]` on INTERNAL is Spark too; anything else (UNAVAILABLE,
    DEADLINE_EXCEEDED, UNAUTHENTICATED from a token check, ...) is not a verdict on the SQL.
    """
    message = err.details() or ""
    info = _error_info(err)
    if info is not None:
        meta = dict(info.metadata)
        try:
            params = json.loads(meta.get("messageParameters") or "{}")
        except ValueError:
            params = {}
        error_class = meta.get("errorClass") or _class_in(message)
        return UpstreamSqlError(
            message,
            error_class,
            meta.get("sqlState") or None,
            {str(k): str(v) for k, v in params.items()} if isinstance(params, dict) else {},
        )
    error_class = _class_in(message)
    if error_class and err.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT):
        return UpstreamSqlError(message, error_class)
    return None


def _error_info(err: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo | None:
    for key, value in err.trailing_metadata() or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except Exception:  # noqa: BLE001 - details that do not decode are simply absent
            return None
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info) and info.domain == SPARK_DOMAIN:
                return info
    return None


def _class_in(message: str) -> str | None:
    match = _CLASS_IN_MESSAGE.match(message)
    return match.group(1) if match else None

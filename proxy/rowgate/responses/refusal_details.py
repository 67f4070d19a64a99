"""Rich error details for the proxy's own refusals, so pyspark raises a readable exception.

A gRPC status without details reaches a pyspark program as a `SparkConnectGrpcException`
that prints the client library's call object (`<_MultiThreadedRendezvous of RPC that
terminated with: status = StatusCode.PERMISSION_DENIED ...>`). Spark's own errors carry a
`google.rpc.Status` in the `grpc-status-details-bin` trailer instead, holding an
`ErrorInfo` whose metadata pyspark turns into an exception (pyspark's
`_handle_rpc_error` -> `convert_exception`): `classes` (the JVM exception classes, the first
one pyspark knows picks the Python class), `errorClass`, `sqlState` and
`messageParameters` (JSON). The proxy's refusals now carry the same, so a program gets

    AnalysisException: [ROWGATE_PERMISSION_DENIED] reading ... is refused ...

with `getCondition()` (`getErrorClass()`) = `ROWGATE_PERMISSION_DENIED`, `getSqlState()`,
and `getGrpcStatusCode()` the gRPC status, which itself is unchanged (clients that read the
status code, pyspark's retries of UNAVAILABLE included, behave as before).

| gRPC status | error class | SQLSTATE | pyspark raises |
|---|---|---|---|
| PERMISSION_DENIED | ROWGATE_PERMISSION_DENIED | 42501 | AnalysisException |
| INVALID_ARGUMENT | ROWGATE_INVALID_REQUEST | 42000 | AnalysisException |
| FAILED_PRECONDITION | ROWGATE_FAILED_PRECONDITION | 55000 | AnalysisException |
| NOT_FOUND | ROWGATE_NOT_FOUND | 42704 | AnalysisException |
| ALREADY_EXISTS | ROWGATE_ALREADY_EXISTS | 42710 | AnalysisException |
| UNAUTHENTICATED | ROWGATE_UNAUTHENTICATED | 28000 | SparkException |
| UNAVAILABLE | ROWGATE_UNAVAILABLE | 08000 | SparkException |
| DEADLINE_EXCEEDED | ROWGATE_DEADLINE_EXCEEDED | 57014 | SparkException |
| RESOURCE_EXHAUSTED | ROWGATE_RESOURCE_EXHAUSTED | 53000 | SparkException |
| UNIMPLEMENTED | ROWGATE_UNIMPLEMENTED | 0A000 | SparkException |
| INTERNAL, any other | ROWGATE_INTERNAL_ERROR | XX000 | SparkException |

The status message starts with the error class in brackets, as Spark's do; pyspark checks
that the message inside the details equals the gRPC message, so both are this same text.
`ErrorInfo.reason` is the JVM class name (older pyspark clients pick the exception by it),
its domain is `rowgate`, and the refusal's short label (the one metrics and the audit log
use) is the `rowgateReason` metadata entry and the `reason` message parameter.

Only errors the proxy makes get these details; errors of the upstream keep Spark's own.
"""

from __future__ import annotations

import json

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

STATUS_DETAILS_KEY = "grpc-status-details-bin"
DOMAIN = "rowgate"

_ANALYSIS = "org.apache.spark.sql.AnalysisException"
_SPARK = "org.apache.spark.SparkException"
_S = grpc.StatusCode
# gRPC status -> (error class, SQLSTATE, JVM class whose Python twin pyspark raises)
ERROR_CLASSES: dict[grpc.StatusCode, tuple[str, str, str]] = {
    _S.PERMISSION_DENIED: ("ROWGATE_PERMISSION_DENIED", "42501", _ANALYSIS),
    _S.INVALID_ARGUMENT: ("ROWGATE_INVALID_REQUEST", "42000", _ANALYSIS),
    _S.FAILED_PRECONDITION: ("ROWGATE_FAILED_PRECONDITION", "55000", _ANALYSIS),
    _S.NOT_FOUND: ("ROWGATE_NOT_FOUND", "42704", _ANALYSIS),
    _S.ALREADY_EXISTS: ("ROWGATE_ALREADY_EXISTS", "42710", _ANALYSIS),
    _S.UNAUTHENTICATED: ("ROWGATE_UNAUTHENTICATED", "28000", _SPARK),
    _S.UNAVAILABLE: ("ROWGATE_UNAVAILABLE", "08000", _SPARK),
    _S.DEADLINE_EXCEEDED: ("ROWGATE_DEADLINE_EXCEEDED", "57014", _SPARK),
    _S.RESOURCE_EXHAUSTED: ("ROWGATE_RESOURCE_EXHAUSTED", "53000", _SPARK),
    _S.UNIMPLEMENTED: ("ROWGATE_UNIMPLEMENTED", "0A000", _SPARK),
    _S.CANCELLED: ("ROWGATE_OPERATION_CANCELED", "HY008", _SPARK),
}
INTERNAL = ("ROWGATE_INTERNAL_ERROR", "XX000", _SPARK)


def error_class(code: grpc.StatusCode) -> str:
    return ERROR_CLASSES.get(code, INTERNAL)[0]


def refusal_status(code: grpc.StatusCode, message: str, reason: str, trailing: tuple = ()) -> tuple[str, tuple]:
    """(status message, trailing metadata) for a refusal of the proxy's own.

    Trailing metadata that already carries status details (an upstream error the proxy
    passes on) is returned with the message unchanged: those details are Spark's.
    """
    if any(key == STATUS_DETAILS_KEY for key, _ in trailing):
        return message, trailing
    name, sql_state, jvm_class = ERROR_CLASSES.get(code, INTERNAL)
    text = message if message.startswith(f"[{name}]") else f"[{name}] {message}"
    info = error_details_pb2.ErrorInfo(reason=jvm_class, domain=DOMAIN)
    info.metadata["classes"] = json.dumps([jvm_class])
    info.metadata["errorClass"] = name
    info.metadata["sqlState"] = sql_state
    info.metadata["messageParameters"] = json.dumps({"message": message, "reason": reason})
    info.metadata["rowgateReason"] = reason
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code.value[0], message=text, details=[detail])
    return text, tuple(trailing) + ((STATUS_DETAILS_KEY, status.SerializeToString()),)

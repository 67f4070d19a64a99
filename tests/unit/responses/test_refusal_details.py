"""The proxy's refusals carry the details pyspark turns into an exception with an error class."""

from __future__ import annotations

import warnings

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from pyspark.errors.exceptions.connect import AnalysisException, SparkConnectGrpcException, SparkException, convert_exception

from rowgate.responses.refusal_details import ERROR_CLASSES, STATUS_DETAILS_KEY, refusal_status


class _Ended:
    """What pyspark's `_handle_rpc_error` reads from a failed call."""

    def __init__(self, code, details, trailing):
        self._code, self._details, self._trailing = code, details, trailing

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailing


def _as_pyspark_raises(code: grpc.StatusCode, message: str, reason: str = "rewrite_refused"):
    """The exception pyspark's client would raise for this refusal (same steps, no server)."""
    details, trailing = refusal_status(code, message, reason)
    status = rpc_status.from_call(_Ended(code, details, trailing))  # raises if message and details disagree
    assert status is not None and status.code == code.value[0]
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return convert_exception(info, status.message, None, False, code), info


@pytest.mark.parametrize(
    "code, error_class, python_class",
    [
        (grpc.StatusCode.PERMISSION_DENIED, "ROWGATE_PERMISSION_DENIED", AnalysisException),
        (grpc.StatusCode.INVALID_ARGUMENT, "ROWGATE_INVALID_REQUEST", AnalysisException),
        (grpc.StatusCode.UNAVAILABLE, "ROWGATE_UNAVAILABLE", SparkException),
        (grpc.StatusCode.UNAUTHENTICATED, "ROWGATE_UNAUTHENTICATED", SparkException),
        (grpc.StatusCode.INTERNAL, "ROWGATE_INTERNAL_ERROR", SparkException),
        (grpc.StatusCode.DATA_LOSS, "ROWGATE_INTERNAL_ERROR", SparkException),  # any other status
    ],
)
def test_pyspark_raises_a_readable_exception_with_the_rowgate_error_class(code, error_class, python_class):
    message = "reading spark_catalog.db.t is reserved to admins while row access policies are in force"
    error, info = _as_pyspark_raises(code, message)
    assert type(error) is python_class and isinstance(error, SparkConnectGrpcException)
    assert error.getCondition() == error_class
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        assert error.getErrorClass() == error_class
    assert str(error) == f"[{error_class}] {message}"  # no rendezvous dump
    assert error.getGrpcStatusCode() == code  # the status itself is unchanged
    assert error.getSqlState() == ERROR_CLASSES.get(code, ("", "XX000"))[1]
    assert error.getMessageParameters() == {"message": message, "reason": "rewrite_refused"}
    assert info.domain == "rowgate" and info.metadata["rowgateReason"] == "rewrite_refused"
    assert "errorId" not in info.metadata  # nothing for pyspark to fetch from Spark


def test_a_message_already_naming_the_class_is_not_prefixed_twice():
    details, _ = refusal_status(grpc.StatusCode.PERMISSION_DENIED, "[ROWGATE_PERMISSION_DENIED] no", "x")
    assert details == "[ROWGATE_PERMISSION_DENIED] no"


def test_details_of_an_upstream_error_are_kept():
    theirs = ((STATUS_DETAILS_KEY, b"spark's own"), ("x-other", "kept"))
    assert refusal_status(grpc.StatusCode.UNAVAILABLE, "Spark says", "upstream_error", theirs) == ("Spark says", theirs)
    details, trailing = refusal_status(grpc.StatusCode.UNAVAILABLE, "gone", "upstream", (("x-other", "kept"),))
    assert trailing[0] == ("x-other", "kept") and trailing[1][0] == STATUS_DETAILS_KEY

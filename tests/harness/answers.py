"""Reading answers and refusals the same way in every test."""

from __future__ import annotations

import re

import pytest

_STATUS = re.compile(r"StatusCode\.([A-Z_]+)")


def ids(df) -> list[int]:
    """The first column of a DataFrame's rows, sorted: which rows a caller sees."""
    return sorted(r[0] for r in df.collect())


def id_set(df) -> set[int]:
    """The `id` column of a DataFrame's rows, as a set."""
    return {row.id for row in df.collect()}


def grpc_status(error: BaseException) -> str | None:
    """The gRPC status name of a refusal made by rowgate (`PERMISSION_DENIED`, ...), else None.

    Rowgate's refusals reach pyspark as exceptions with a `ROWGATE_*` error class and the
    refusal's gRPC status (proxy/rowgate/responses/refusal_details.py); errors Spark raised
    carry Spark's error classes instead. A raw gRPC error's text holds `StatusCode.<NAME>`.
    """
    condition = getattr(error, "getCondition", None)
    if condition is not None and (condition() or "").startswith("ROWGATE_"):
        return error.getGrpcStatusCode().name
    match = _STATUS.search(str(error))
    return match.group(1) if match else None


def refusal(action) -> tuple[str | None, str]:
    """Runs `action`, which must raise; the status it carries and its text."""
    with pytest.raises(Exception) as info:
        action()
    return grpc_status(info.value), str(info.value)

"""The one way the SQL rewriter says no.

A `RewriteRefused` carries a gRPC-style status name and a message for the caller. Messages
name the construct or the table and the reason; they never carry policy filter text (a
filter can hold other callers' emails and lookup values).

>>> e = RewriteRefused.denied("writing to spark_catalog.default.orders requires a FILTER USING (TRUE) grant")
>>> e.code, str(e)
('PERMISSION_DENIED', 'writing to spark_catalog.default.orders requires a FILTER USING (TRUE) grant')
"""

from __future__ import annotations

INVALID_ARGUMENT = "INVALID_ARGUMENT"
PERMISSION_DENIED = "PERMISSION_DENIED"


class RewriteRefused(Exception):
    """The statement must not reach Spark: it cannot be analysed with certainty, or it is denied."""

    def __init__(self, code: str, message: str):
        if code not in (INVALID_ARGUMENT, PERMISSION_DENIED):
            raise ValueError(f"unknown refusal code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def invalid(cls, message: str) -> RewriteRefused:
        return cls(INVALID_ARGUMENT, message)

    @classmethod
    def denied(cls, message: str) -> RewriteRefused:
        return cls(PERMISSION_DENIED, message)

    def __repr__(self) -> str:
        return f"RewriteRefused({self.code!r}, {self.message!r})"

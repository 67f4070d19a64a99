"""The transport's observer that feeds metrics and the audit log from each finished call.

It turns a call's facts into the plain `Access` record observability/audit.py writes, so
the audit log needs to know nothing of the pipeline or the transport.
"""

from __future__ import annotations

import grpc

from rowgate.observability import audit
from rowgate.pipeline.core import Call
from rowgate.transport.server import Observer
from rowgate.upstream.methods import Method


def access_of(call: Call) -> audit.Access:
    facts = call.facts
    return audit.Access(
        principal=call.caller.principal,
        session_id=getattr(call.request, "session_id", ""),
        operation_id=getattr(call.request, "operation_id", ""),
        tables=facts.tables,
        policies=facts.policies,
        statement=facts.policy_statement,
        row_filter_applied=facts.row_filter_applied,
    )


class AuditingObserver(Observer):
    def inspected(self, call: Call, seconds: float) -> None:
        audit.inspected(call.method.name, seconds)

    def request_done(
        self, call: Call | None, method: Method, code: grpc.StatusCode, seconds: float, reason: str = "", rule: str = ""
    ) -> None:
        audit.request_done(method.name, code, reason, None if call is None else access_of(call), rule=rule)

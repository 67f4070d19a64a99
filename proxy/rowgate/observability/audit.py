"""One JSON line per request that touched a protected table, on the `rowgate.audit` logger.

An operator must be able to answer "who read or tried to read what, under which policies"
without the audit trail itself becoming a leak: it records names and decisions, never
rows, filter predicates or SQL text.
"""

from __future__ import annotations

import logging

import grpc

from rowgate.observability import metrics
from rowgate.pipeline.core import Call
from rowgate.transport.server import Observer
from rowgate.upstream.methods import Method

audit_log = logging.getLogger("rowgate.audit")


class AuditingObserver(Observer):
    def inspected(self, call: Call, seconds: float) -> None:
        metrics.REWRITE_SECONDS.labels(call.method.name).observe(seconds)

    def request_done(self, call: Call | None, method: Method, code: grpc.StatusCode, seconds: float, reason: str = "") -> None:
        metrics.REQUESTS.labels(method.name, code.name).inc()
        if reason == "upstream_error":
            metrics.UPSTREAM_ERRORS.labels(code.name).inc()
        elif reason:
            metrics.REFUSED.labels(reason).inc()
        if call is None:
            return
        if call.notes.get("row_filter_applied"):
            metrics.FILTERED.inc()
        tables = call.notes.get("tables") or ()
        statement = call.notes.get("policy_statement")
        if (
            not (tables and (call.notes.get("row_filter_applied") or call.notes.get("policies")))
            and not statement
            and not (reason and reason != "upstream_error")
        ):
            return
        if code == grpc.StatusCode.OK:
            decision = "filtered" if call.notes.get("row_filter_applied") else "allowed"
        else:
            decision = "refused" if reason and reason != "upstream_error" else "failed"
        request = call.request
        audit_log.info(
            "access",
            extra={
                "principal": call.caller.principal,
                "rpc": method.name,
                "session_id": getattr(request, "session_id", ""),
                "operation_id": getattr(request, "operation_id", ""),
                "tables": list(tables),
                "policies": list(call.notes.get("policies") or ()),
                "statement": statement or "",
                "decision": decision,
                "reason": reason,
                "status": code.name,
            },
        )

"""One JSON line per request that touched a protected table, on the `rowgate.audit` logger.

An operator must be able to answer "who read or tried to read what, under which policies"
without the audit trail itself becoming a leak: it records names and decisions, never
rows, filter predicates or SQL text. It takes plain data (`Access`), so it knows nothing of
the pipeline that gathered it (the transport's observer fills it in).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import grpc

from rowgate.observability import metrics

audit_log = logging.getLogger("rowgate.audit")


@dataclass(frozen=True)
class Access:
    """Who asked for what and what the proxy learned about it, as the audit line records it."""

    principal: str
    session_id: str = ""
    operation_id: str = ""
    tables: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    statement: str = ""  # a policy statement the proxy ran itself
    row_filter_applied: bool | None = None


def inspected(rpc: str, seconds: float) -> None:
    """The pipeline (identity to rewrite) took `seconds` for one call of `rpc`."""
    metrics.REWRITE_SECONDS.labels(rpc).observe(seconds)


def request_done(rpc: str, code: grpc.StatusCode, reason: str, access: Access | None, *, rule: str = "") -> None:
    """Counts the request and writes its audit line when it touched protected data or was refused.

    A refused request's line names the `rule` that refused it (a rule of the enforcement's
    `RULES`, a rewriter's check (rewrite/sql/errors.py), or the check's own reason), so an
    operator can tell which rule to look at."""
    metrics.REQUESTS.labels(rpc, code.name).inc()
    if reason == "upstream_error":
        metrics.UPSTREAM_ERRORS.labels(code.name).inc()
    elif reason:
        metrics.REFUSED.labels(reason).inc()
    if access is None:
        return
    if access.row_filter_applied:
        metrics.FILTERED.inc()
    refused = bool(reason) and reason != "upstream_error"
    if not (access.tables and (access.row_filter_applied or access.policies)) and not access.statement and not refused:
        return
    if code == grpc.StatusCode.OK:
        decision = "filtered" if access.row_filter_applied else "allowed"
    else:
        decision = "refused" if refused else "failed"
    audit_log.info(
        "access",
        extra={
            "principal": access.principal,
            "rpc": rpc,
            "session_id": access.session_id,
            "operation_id": access.operation_id,
            "tables": list(access.tables),
            "policies": list(access.policies),
            "statement": access.statement,
            "decision": decision,
            "reason": reason,
            "rule": rule if refused else "",
            "status": code.name,
        },
    )

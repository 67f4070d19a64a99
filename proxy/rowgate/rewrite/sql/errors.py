"""How the rewriters say no: rowgate's one `Refusal`, naming the check that refused.

Every refusal of rewrite/ (SQL and plans) is built here, so each carries the same metrics
reason, `rewrite_refused`, as before the types were one, and a `rule`: a short, stable name
of the rewriter check that refused (`write_needs_full_access`, `unanalysable_sql`...),
which the audit log records so an operator can tell which check stopped a request. The rule
comes first and is required; tests/unit/structure/test_refusal_rules.py checks every
refusal built in rewrite/ names one.

Messages name the construct or the table and the reason; they never carry policy filter
text (a filter can hold other callers' emails and lookup values).

>>> e = denied("write_needs_full_access", "writing to spark_catalog.default.orders requires a FILTER USING (TRUE) grant")
>>> e.code.name, e.reason, e.rule, str(e)
('PERMISSION_DENIED', 'rewrite_refused', 'write_needs_full_access', 'writing to spark_catalog.default.orders requires a FILTER USING (TRUE) grant')
"""

from __future__ import annotations

from rowgate.refusal import Refusal

REASON = "rewrite_refused"  # the metrics label of every rewriter refusal


def invalid(rule: str, message: str) -> Refusal:
    """The statement cannot be analysed with certainty (or is malformed): INVALID_ARGUMENT."""
    return Refusal.invalid(message, REASON, rule=rule)


def denied(rule: str, message: str) -> Refusal:
    """The caller may not do this while row access policies are in force: PERMISSION_DENIED."""
    return Refusal.denied(message, REASON, rule=rule)

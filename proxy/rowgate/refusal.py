"""The one way rowgate says no: a `Refusal`, whichever layer decided it.

The rewriters, the policy service, the pipeline's steps and the admin API all refuse with
this type, so a refusal reaches the client, the metrics and the audit log the same way
wherever it was raised, and no layer converts one kind of refusal into another. It lives at
the bottom of the layers (tests/unit/structure/test_layers.py) because rewrite/ and
policy_service raise it and must not import the pipeline.

It carries what each reader needs: `code`, the gRPC status the client gets; `message`, the
words the client reads (never policy filter text: a filter can hold other callers' emails
and lookup values); `reason`, a short label metrics count by; and `rule`, the check that
refused, for the audit log. A refusal that names no rule is its own rule, named by its
reason.

>>> r = Refusal.denied("writing to t requires a FILTER USING (TRUE) grant", "rewrite_refused", rule="write_needs_full_access")
>>> r.code.name, r.reason, r.rule, str(r)
('PERMISSION_DENIED', 'rewrite_refused', 'write_needs_full_access', 'writing to t requires a FILTER USING (TRUE) grant')
>>> Refusal.denied("no", reason="guarded_config").rule
'guarded_config'
"""

from __future__ import annotations

import grpc


class Refusal(Exception):
    """The proxy will not let this request through; becomes a gRPC status for the client.

    A rule of `RULES` (pipeline/enforce/rules/) is stamped with its name by `apply_rules`;
    a rewriter's check names itself (rewrite/sql/errors.py)."""

    def __init__(self, code: grpc.StatusCode, message: str, *, reason: str = "refused", rule: str = ""):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason  # a short label for metrics and the audit log
        self.rule = rule or reason  # the check that refused, for the audit log
        # The pipeline's Call the refusal stopped, set by the transport so the refusal is
        # audited with who asked for what; opaque here, below the pipeline that defines it.
        self.call: object = None

    @classmethod
    def invalid(cls, message: str, reason: str = "invalid_argument", *, rule: str = "") -> Refusal:
        return cls(grpc.StatusCode.INVALID_ARGUMENT, message, reason=reason, rule=rule)

    @classmethod
    def denied(cls, message: str, reason: str = "permission_denied", *, rule: str = "") -> Refusal:
        return cls(grpc.StatusCode.PERMISSION_DENIED, message, reason=reason, rule=rule)

    def __repr__(self) -> str:
        return f"Refusal({self.code.name}, {self.message!r}, reason={self.reason!r}, rule={self.rule!r})"

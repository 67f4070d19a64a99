"""GetStatus (Spark 4.2+): the states of a session's operations, relayed for the caller.

The request is pinned to the caller like every other (session/pin.py), so the upstream
answers about the caller's own session only: operation ids and their states (running,
succeeded, failed, ...), never plans, rows or errors. The proxy's own questions to Spark
(catalog lookups, the second opinion) are analyses, not operations, so they are not listed.
What the proxy cannot read are the `extensions` (`google.protobuf.Any`, at request and at
operation level): custom status requests a server plugin interprets, which may ask for
anything. While a table is protected they are refused for every caller, as unknown fields
of a plan are (rewrite/plan/walker.py); otherwise the request is relayed as sent. A server
older than 4.2 answers UNIMPLEMENTED itself, as it would directly.

Operations the proxy answered itself (pipeline/operations/local.py) never reached Spark,
so Spark does not list them; pyspark asks GetStatus only for monitoring, never to decide
what a result was.
"""

from __future__ import annotations

from rowgate.pipeline.core import Answer, Call, Refusal
from rowgate.policy.snapshot import PolicyCache, PolicyStoreUnavailable

METHOD = "GetStatus"


class StatusRequests:
    def __init__(self, policies: PolicyCache) -> None:
        self.policies = policies

    async def step(self, call: Call) -> Answer | None:
        if call.method.name != METHOD:
            return None
        request = call.request
        if not (len(request.extensions) or len(request.operation_status.extensions)):
            return None
        try:
            protected = self.policies.fresh_snapshot().has_any()
        except PolicyStoreUnavailable:
            protected = True  # fail closed: the store cannot say nothing is protected
        if protected:
            raise Refusal.invalid(
                "GetStatus extensions are opaque to rowgate, which cannot tell what they ask for; they are "
                "refused for every caller while row access policies are in force",
                reason="opaque_status_extension",
            )
        return None

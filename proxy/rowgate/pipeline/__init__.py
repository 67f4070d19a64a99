"""The request path: resolve caller -> inspect/rewrite request -> forward or answer locally.

Every RPC the proxy serves goes through one `Pipeline`. A step sees a `Call` (the caller,
the decoded request, the session it targets) and may change the request in place, answer
it itself by returning an `Answer`, or refuse it by raising `Refusal`. When no step answers,
the transport forwards the (possibly rewritten) request upstream. Steps never touch gRPC.
"""

from rowgate.pipeline.core import Answer, Call, Pipeline, Refusal, Step

__all__ = ["Answer", "Call", "Pipeline", "Refusal", "Step"]

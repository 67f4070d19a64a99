"""Operations that read row-filtered data, so that their whole result says so.

The enforcement step sees only the ExecutePlan that starts an operation; its result may
continue on ReattachExecute calls (pyspark reattaches whenever a stream ends early), and
the last part of a result (the metrics message, an error that happens late) often arrives
there. This step remembers, bounded, the operations of requests the enforcement step
row-filtered and gives their reattaches the same treatment:

- `row_filter_applied` (the trailer) and the row-filter metric in the metrics message
  (proxy/rowgate/responses/row_filter_metrics.py);
- for non-admins, `error_secrets`: the upstream's error is redacted
  (proxy/rowgate/responses/error_redaction.py).

The operation is forgotten at its release_all.
"""

from __future__ import annotations

from collections import OrderedDict

from rowgate.pipeline.core import Answer, Call
from rowgate.responses.error_redaction import ErrorSecrets
from rowgate.responses.row_filter_metrics import mark_row_filter_applied

OperationKey = tuple[str, str, str]  # (user_id, session_id, operation_id) after pinning


class FilteredOperations:
    def __init__(self, max_operations: int = 100_000):
        self._operations: OrderedDict[OperationKey, ErrorSecrets | None] = OrderedDict()
        self.max_operations = max_operations

    async def step(self, call: Call) -> Answer | None:
        name = call.method.name
        req = call.request
        if name == "ExecutePlan":
            if call.notes.get("row_filter_applied"):
                call.response_hook = mark_row_filter_applied
                if req.operation_id:  # enforcement names every filtered operation
                    self._operations[(call.user_id, req.session_id, req.operation_id)] = call.notes.get("error_secrets")
                    while len(self._operations) > self.max_operations:
                        self._operations.popitem(last=False)
        elif name in ("ReattachExecute", "ReleaseExecute"):
            key = (call.user_id, req.session_id, req.operation_id)
            if key not in self._operations:
                return None
            secrets = self._operations[key]
            if secrets is not None:
                call.notes["error_secrets"] = secrets
            if name == "ReattachExecute":
                call.notes["row_filter_applied"] = True
                call.response_hook = mark_row_filter_applied
            elif req.HasField("release_all"):
                del self._operations[key]
        return None

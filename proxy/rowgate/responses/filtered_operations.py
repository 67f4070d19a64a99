"""Operations that read row-filtered data, so that their whole result says so.

The enforcement step sees only the ExecutePlan that starts an operation; its result may
continue on ReattachExecute calls (pyspark reattaches whenever a stream ends early), and
the last part of a result (the metrics message, an error that happens late) often arrives
there. This step remembers, bounded, every operation the enforcement step passed and
whether it was row-filtered, and gives the reattaches of filtered ones the same treatment:

- `row_filter_applied` (the trailer), and the response hook that leaves only the row-filter
  metric in the metrics message and empties progress messages, whose numbers are computed
  over unfiltered rows (proxy/rowgate/responses/row_filter_metrics.py);
- for non-admins, `error_secrets`: the upstream's error is redacted
  (proxy/rowgate/responses/error_redaction.py).

A reattach of an operation the proxy does not remember (it was pushed out by newer ones,
or the proxy restarted) may continue a filtered result: Spark's metrics and progress are
withheld from it too (without claiming that a filter applied). Remembering unfiltered
operations as well keeps their reattaches untouched.

An operation is forgotten at its release_all.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import partial

from rowgate.pipeline.core import Answer, Call
from rowgate.responses.error_redaction import ErrorSecrets
from rowgate.responses.row_filter_metrics import relay_filtered

OperationKey = tuple[str, str, str]  # (user_id, session_id, operation_id) after pinning


class _Plain:
    """The verdict of an operation that read no row-filtered data."""


PLAIN = _Plain()
# For reattaches of operations nobody remembers: Spark's numbers withheld, no marker added.
withhold_spark_metrics = partial(relay_filtered, mark=False)


class FilteredOperations:
    def __init__(self, max_operations: int = 100_000):
        # A filtered operation maps to its error secrets (None for admins), others to PLAIN.
        self._operations: OrderedDict[OperationKey, ErrorSecrets | _Plain | None] = OrderedDict()
        self.max_operations = max_operations

    async def step(self, call: Call) -> Answer | None:
        name = call.method.name
        req = call.request
        if name == "ExecutePlan":
            filtered = bool(call.notes.get("row_filter_applied"))
            if filtered:
                call.response_hook = relay_filtered
            if req.operation_id:  # enforcement names every filtered operation
                verdict = call.notes.get("error_secrets") if filtered else PLAIN
                self._operations[(call.user_id, req.session_id, req.operation_id)] = verdict
                self._operations.move_to_end((call.user_id, req.session_id, req.operation_id))
                while len(self._operations) > self.max_operations:
                    self._operations.popitem(last=False)
        elif name in ("ReattachExecute", "ReleaseExecute"):
            key = (call.user_id, req.session_id, req.operation_id)
            if key not in self._operations:
                if name == "ReattachExecute":
                    call.response_hook = withhold_spark_metrics
                return None
            verdict = self._operations[key]
            if verdict is PLAIN:
                pass
            elif name == "ReattachExecute":
                call.notes["row_filter_applied"] = True
                call.response_hook = relay_filtered
            if isinstance(verdict, ErrorSecrets):
                call.notes["error_secrets"] = verdict
            if name == "ReleaseExecute" and req.HasField("release_all"):
                del self._operations[key]
        return None

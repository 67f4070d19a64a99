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
  (proxy/rowgate/responses/error_redaction.py);
- the echo of a `spark.sql` query is the client's own relation, not the rewrite with its
  policy predicates (proxy/rowgate/responses/sql_echo.py).

A reattach of an operation the proxy does not remember (it was pushed out by newer ones,
or the proxy restarted) may continue a filtered result: Spark's metrics and progress are
withheld from it too (without claiming that a filter applied). Remembering unfiltered
operations as well keeps their reattaches untouched.

An operation is forgotten at its release_all.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import partial

from rowgate.pipeline.core import Answer, Call
from rowgate.responses.error_redaction import ErrorSecrets
from rowgate.responses.row_filter_metrics import relay_filtered
from rowgate.responses.sql_echo import client_echo

OperationKey = tuple[str, str, str]  # (user_id, session_id, operation_id) after pinning


class _Plain:
    """The verdict of an operation that read no row-filtered data."""


PLAIN = _Plain()
# Echoes longer than this are not kept for reattaches (which then withhold the echo):
# 100,000 remembered operations must not hold that many large SQL texts.
MAX_KEPT_ECHO = 64 * 1024


@dataclass(frozen=True)
class _Filtered:
    secrets: ErrorSecrets | None  # None for admins: their errors are not redacted
    echo: bytes | None  # the client's relation for a `spark.sql` query's echo

    @property
    def hook(self):
        return partial(relay_filtered, echo=self.echo)


# For reattaches of operations nobody remembers: Spark's numbers withheld, no marker added.
withhold_spark_metrics = partial(relay_filtered, mark=False)


class FilteredOperations:
    def __init__(self, max_operations: int = 100_000):
        self._operations: OrderedDict[OperationKey, _Filtered | _Plain] = OrderedDict()
        self.max_operations = max_operations

    async def step(self, call: Call) -> Answer | None:
        name = call.method.name
        req = call.request
        if name == "ExecutePlan":
            verdict: _Filtered | _Plain = PLAIN
            if call.notes.get("row_filter_applied"):
                echo = _echo(call)
                call.response_hook = _Filtered(call.notes.get("error_secrets"), echo).hook
                kept = echo if echo is None or len(echo) <= MAX_KEPT_ECHO else None
                verdict = _Filtered(call.notes.get("error_secrets"), kept)
            if req.operation_id:  # enforcement names every filtered operation
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
            if isinstance(verdict, _Filtered):
                if name == "ReattachExecute":
                    call.notes["row_filter_applied"] = True
                    call.response_hook = verdict.hook
                if verdict.secrets is not None:
                    call.notes["error_secrets"] = verdict.secrets
            if name == "ReleaseExecute" and req.HasField("release_all"):
                del self._operations[key]
        return None


def _echo(call: Call) -> bytes | None:
    """The client's relation for the echo of its `spark.sql` query (None: not one, or unknown)."""
    try:
        return client_echo(call.request, call.raw_request)
    except Exception:  # noqa: BLE001 - an echo that cannot be rebuilt is withheld, not relayed
        return None

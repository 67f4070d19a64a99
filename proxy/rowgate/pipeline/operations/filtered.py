"""Operations that read row-filtered data, so that their whole result says so.

The enforcement step sees only the ExecutePlan that starts an operation; its result may
continue on ReattachExecute calls (pyspark reattaches whenever a stream ends early), and
the last part of a result (the metrics message, an error that happens late) often arrives
there. This memory (its steps are in proxy/rowgate/pipeline/operations/steps.py) remembers,
bounded, every operation the enforcement step passed and whether it was row-filtered, and
gives the reattaches of filtered ones the same treatment:

- `row_filter_applied` (the trailer), and the response hook that leaves only the row-filter
  metric in the metrics message and empties progress messages, whose numbers are computed
  over unfiltered rows (proxy/rowgate/responses/row_filter_metrics.py);
- `error_secrets`: the upstream's error is rebuilt from the error allow list, for admins
  too (proxy/rowgate/responses/error_redaction.py);
- the echo of a `spark.sql` query is the client's own relation, not the rewrite with its
  policy predicates (proxy/rowgate/responses/sql_echo.py).

A reattach of an operation the proxy does not remember (it was pushed out by newer ones,
the proxy restarted, or another replica started it) may continue a filtered result: Spark's
metrics and progress are withheld from it too (without claiming that a filter applied),
and an upstream error on it keeps its error class but not its message or parameters,
which could quote a policy this replica cannot name. Remembering unfiltered operations as
well keeps their reattaches untouched.

An operation is forgotten at its release_all.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from pyspark.sql.connect.proto import base_pb2

from rowgate.identity.caller import Caller
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
    secrets: ErrorSecrets | None
    echo: bytes | None  # the client's relation for a `spark.sql` query's echo

    @property
    def hook(self) -> Callable[[bytes], bytes]:
        return partial(relay_filtered, echo=self.echo)


# For reattaches of operations nobody remembers: Spark's numbers withheld, no marker added.
withhold_spark_metrics = partial(relay_filtered, mark=False)


@dataclass(frozen=True)
class Continued:
    """How one ReattachExecute or ReleaseExecute of a remembered operation is treated."""

    row_filter_applied: bool | None = None  # None: say nothing about filtering
    error_secrets: ErrorSecrets | None = None
    response_hook: Callable[[bytes], bytes] | None = None


@dataclass(frozen=True)
class _Unknown(ErrorSecrets):
    """The secrets of an operation this process did not see start: any text may hold one."""

    def found_in(self, text: str) -> bool:
        return True


UNKNOWN_SECRETS = _Unknown(frozenset())


class FilteredOperations:
    def __init__(self, max_operations: int = 100_000):
        self._operations: OrderedDict[OperationKey, _Filtered | _Plain] = OrderedDict()
        self.max_operations = max_operations

    def started(
        self,
        key: OperationKey,
        filtered: bool,
        secrets: ErrorSecrets | None,
        request: base_pb2.ExecutePlanRequest,
        raw_request: bytes,
    ) -> Callable[[bytes], bytes] | None:
        """Remembers an ExecutePlan's verdict; the hook for its own result (None: relayed as is)."""
        verdict: _Filtered | _Plain = PLAIN
        hook = None
        if filtered:
            echo = _echo(request, raw_request)
            hook = _Filtered(secrets, echo).hook
            kept = echo if echo is None or len(echo) <= MAX_KEPT_ECHO else None
            verdict = _Filtered(secrets, kept)
        if key[2]:  # enforcement names every filtered operation
            self._operations[key] = verdict
            self._operations.move_to_end(key)
            while len(self._operations) > self.max_operations:
                self._operations.popitem(last=False)
        return hook

    def reattached(self, key: OperationKey, caller: Caller | None = None) -> Continued:
        verdict = self._operations.get(key)
        if verdict is None:
            # Started elsewhere (another replica, before a restart): it may be filtered, for
            # admins too.
            return Continued(response_hook=withhold_spark_metrics, error_secrets=UNKNOWN_SECRETS)
        if isinstance(verdict, _Filtered):
            return Continued(row_filter_applied=True, error_secrets=verdict.secrets, response_hook=verdict.hook)
        return Continued()

    def released(self, key: OperationKey, release_all: bool) -> Continued:
        verdict = self._operations.get(key)
        if verdict is not None and release_all:
            del self._operations[key]
        if isinstance(verdict, _Filtered):
            return Continued(error_secrets=verdict.secrets)
        return Continued()


def _echo(request: base_pb2.ExecutePlanRequest, raw_request: bytes) -> bytes | None:
    """The client's relation for the echo of its `spark.sql` query (None: not one, or unknown)."""
    try:
        return client_echo(request, raw_request)
    except Exception:  # noqa: BLE001 - an echo that cannot be rebuilt is withheld, not relayed
        return None

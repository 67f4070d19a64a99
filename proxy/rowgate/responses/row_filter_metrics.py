"""What the metrics of a row-filtered result may say: that a filter applied, nothing more.

The trailer `x-rowgate-row-filter-applied` is free, but pyspark does not show trailers to
programs. What it does show is the metrics message Spark sends near the end of a result
(`df.executionInfo.metrics` after a collect): for a result that read row-filtered data the
proxy puts a metric object `RowLevelSecurity` with `rowLevelSecurityApplied = 1` there, the
way BigQuery marks a job with rowLevelSecurityApplied.

Spark's own metrics of such a result are withheld. They describe the physical plan, and
below the policy filter that plan runs over rows the caller may not see: a scan's
`numOutputRows`, files and bytes read, pruned partitions, codegen and AQE statistics.
With a pushed caller predicate (`amount > x`, pruning row groups by their statistics) the
scan's counts answer yes/no questions about hidden rows, and a binary search over `x`
recovers their values. Which metric objects sit above the filter cannot be told safely:
the optimizer merges the policy filter with the caller's, pushes parts of it into the scan,
reorders joins, and the tree's node names are no contract. So the whole tree goes, and
`RowLevelSecurity` becomes the only (root) object.

Every part of an ExecutePlanResponse, for a result the proxy row-filtered:

| field | computed over | relayed |
|---|---|---|
| `arrow_batch` (rows, `row_count`, `start_offset`) | the caller's rows | as is |
| `schema` | the plan's output columns | as is |
| `metrics` | the physical plan, scans below the filter included | Spark's objects dropped, `RowLevelSecurity` only |
| `observed_metrics` (`df.observe`) | the caller's `collect_metrics` node, which sits above every filter the proxy placed (filters are pushed down, never up) | as is |
| `execution_progress` | tasks per stage and `input_bytes_read`: the scans' files, hidden rows included | emptied (no stages, no task counts) |
| `sql_command_result` of a query | the echo of the SQL Spark ran: rowgate's rewrite, policy predicates included | the client's own relation instead (proxy/rowgate/responses/sql_echo.py) |
| `sql_command_result` of a command, `result_complete`, command results | the statement, not table rows | as is |
| ids (`session_id`, `operation_id`, `response_id`, ...) | nothing | as is, so reattach keeps working |

AnalyzePlan answers of filtered plans are handled before they are asked for: `explain` and
`tree_string` are answered by the proxy without the plan (proxy/rowgate/pipeline/enforce/plan_text.py),
`input_files` (the unfiltered table's file list) is refused for non-admins; `schema`,
`is_local`, `is_streaming`, `same_semantics`, `semantic_hash`, storage levels and DDL
conversions do not depend on rows.

What remains is time: how long a query runs, and how many progress messages (now empty)
arrive, still depends on the data it scans, hidden rows included.

Responses are relayed as raw bytes; only a message that carries metrics, progress or a
`sql_command_result` is decoded and encoded again. Which one does is read from the wire format (top-level field
numbers and lengths), so an Arrow batch is skipped over, not parsed.
"""

from __future__ import annotations

from pyspark.sql.connect.proto import base_pb2

from rowgate.responses.sql_echo import replace_echo

_FIELDS = base_pb2.ExecutePlanResponse.DESCRIPTOR.fields_by_name
METRICS_FIELD = _FIELDS["metrics"].number
PROGRESS_FIELD = _FIELDS["execution_progress"].number
SQL_RESULT_FIELD = _FIELDS["sql_command_result"].number
_DECODED = frozenset({METRICS_FIELD, PROGRESS_FIELD, SQL_RESULT_FIELD})
METRIC_OBJECT = "RowLevelSecurity"
METRIC_NAME = "rowLevelSecurityApplied"
PLAN_ID = -1  # Spark numbers its plan nodes from 0


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def top_fields(raw: bytes) -> frozenset[int] | None:
    """The top-level field numbers of a serialized message; None if it is malformed."""
    found: set[int] = set()
    pos, end = 0, len(raw)
    try:
        while pos < end:
            key, pos = _varint(raw, pos)
            found.add(key >> 3)
            wire = key & 7
            if wire == 0:
                _, pos = _varint(raw, pos)
            elif wire == 1:
                pos += 8
            elif wire == 2:
                length, pos = _varint(raw, pos)
                pos += length
            elif wire == 5:
                pos += 4
            else:
                return None  # groups are not used by Spark Connect
    except IndexError:
        return None
    return frozenset(found) if pos == end else None


def has_field(raw: bytes, number: int) -> bool:
    """Whether a serialized message has top-level field `number`; False if malformed."""
    fields = top_fields(raw)
    return fields is not None and number in fields


def relay_filtered(raw: bytes, *, mark: bool = True, echo: bytes | None = None) -> bytes:
    """A response of a row-filtered result as it may reach the caller (see the table above).

    Messages with neither metrics nor progress pass as the same bytes. A message the scanner
    cannot read is decoded in full, so nothing escapes the check by being malformed. With
    `mark=False` (a result the proxy cannot tell was filtered) Spark's metric objects are
    withheld the same way, but no `RowLevelSecurity` object claims that a filter applied.
    `echo` is the client's own relation for a query's `sql_command_result` (None: unknown).
    """
    fields = top_fields(raw)
    if fields is not None and not fields & _DECODED:
        return raw
    response = base_pb2.ExecutePlanResponse.FromString(raw)
    if response.HasField("metrics"):
        del response.metrics.metrics[:]
        if mark:
            _add_row_level_security(response.metrics)
    if response.HasField("execution_progress"):
        response.execution_progress.Clear()  # stays the message's type, says nothing
    if response.HasField("sql_command_result"):
        replace_echo(response, echo)
    return response.SerializeToString()


def _add_row_level_security(metrics: base_pb2.ExecutePlanResponse.Metrics) -> None:
    # pyspark builds a tree of these objects and insists on exactly one root: ours, now
    # alone, is its own parent.
    metric = metrics.metrics.add(name=METRIC_OBJECT, plan_id=PLAN_ID, parent=PLAN_ID)
    value = metric.execution_metrics[METRIC_NAME]
    value.name, value.value, value.metric_type = METRIC_NAME, 1, "rowgate"

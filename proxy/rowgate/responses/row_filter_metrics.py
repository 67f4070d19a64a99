"""The row-filter signal inside the result itself, next to Spark's own execution metrics.

The trailer `x-rowgate-row-filter-applied` is free, but pyspark does not show trailers to
programs. What it does show is the metrics message Spark sends near the end of a result
(`df.executionInfo.metrics` after a collect): for a result that read row-filtered data the
proxy adds a metric object `RowLevelSecurity` with `rowLevelSecurityApplied = 1` to that
message, the way BigQuery marks a job with rowLevelSecurityApplied.

Responses are relayed as raw bytes; only a message that carries metrics is decoded and
encoded again. Which one does is read from the wire format (top-level field numbers and
lengths), so an Arrow batch is skipped over, not parsed.
"""

from __future__ import annotations

from pyspark.sql.connect.proto import base_pb2

METRICS_FIELD = base_pb2.ExecutePlanResponse.DESCRIPTOR.fields_by_name["metrics"].number
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


def has_field(raw: bytes, number: int) -> bool:
    """Whether a serialized message has top-level field `number`; False if malformed."""
    pos, end = 0, len(raw)
    try:
        while pos < end:
            key, pos = _varint(raw, pos)
            if key >> 3 == number:
                return True
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
                return False  # groups are not used by Spark Connect
    except IndexError:
        return False
    return False


def mark_row_filter_applied(raw: bytes) -> bytes:
    """The response with the row-filter metric added if it carries metrics, else as it was."""
    if not has_field(raw, METRICS_FIELD):
        return raw
    response = base_pb2.ExecutePlanResponse.FromString(raw)
    if any(m.name == METRIC_OBJECT for m in response.metrics.metrics):
        return raw
    # pyspark builds a tree of these objects and insists on exactly one root; Spark's root
    # is its own parent. Ours hangs below that root (or is the root when there is none).
    objects = response.metrics.metrics
    roots = [m.plan_id for m in objects if m.parent == m.plan_id]
    parent = roots[0] if roots else (objects[0].plan_id if objects else PLAN_ID)
    metric = objects.add(name=METRIC_OBJECT, plan_id=PLAN_ID, parent=parent)
    value = metric.execution_metrics[METRIC_NAME]
    value.name, value.value, value.metric_type = METRIC_NAME, 1, "rowgate"
    return response.SerializeToString()

"""Which session each checkpointed DataFrame belongs to, so a foreign one is refused readably.

`df.checkpoint()` / `df.localCheckpoint()` make Spark cache the rows in the session that ran
it and answer with a relation id; pyspark 4.1 binds the DataFrame it builds from that answer
to the process's *active* session (`SparkSession.active()`), not to the session that
checkpointed. In a process with several sessions (an admin's and a reader's, two callers'),
the DataFrame is then used on another session, whose Spark session has no such relation:
Spark answers `[INTERNAL_ERROR] No DataFrame with id ...`. Running the request in the owning
session instead is not safe: the rows were filtered for the owner's caller, and Spark keeps
cached relations apart per session for exactly that reason.

So the proxy learns, from Spark's checkpoint answers only (`checkpoint_command_result`, on
the ExecutePlan or a ReattachExecute continuing it), which session owns each relation id,
and refuses a request of another session that names one with PERMISSION_DENIED saying what
happened and what to do. Ids the proxy did not see made (another replica, a restart) go to
Spark, which keeps sessions apart either way.

Finding ids in a request costs a regex scan of its bytes for encoded relation ids; only a
request holding an id some other session owns is looked at further. This is for a readable
answer, not a boundary: Spark keeps cached relations per session whatever the proxy finds.
"""

from __future__ import annotations

import re
from collections import OrderedDict

from google.protobuf.message import Message
from pyspark.sql.connect.proto import base_pb2

from rowgate.message_walk import set_fields
from rowgate.pipeline.core import Call, Refusal, Step, step
from rowgate.responses.row_filter_metrics import top_fields
from rowgate.rewrite.plan.compression import plans_of

SessionKey = tuple[str, str]
OperationKey = tuple[str, str, str]
CHECKPOINT_RESULT = base_pb2.ExecutePlanResponse.DESCRIPTOR.fields_by_name["checkpoint_command_result"].number
# A `relation_id` as protobuf encodes it: field 1, length 36, a UUID (Spark's ids). The two
# literal bytes in front let the regex engine skip ahead instead of trying every position:
# about 10 us for a 2 KB request, 0.3 ms for 100 KB (a UUID class alone costs 25x that).
_RELATION_ID = re.compile(rb"\x0a\x24([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})")

FOREIGN = (
    "this DataFrame was checkpointed in another Spark session, and Spark keeps checkpointed data with the "
    "session that made it; pyspark binds the result of checkpoint()/localCheckpoint() to the process's active "
    "session (SparkSession.active()), not to the session that checkpointed it. Checkpoint only DataFrames of "
    "the active session (or use one session per process)"
)


class CheckpointOwners:
    def __init__(self, max_relations: int = 100_000, max_operations: int = 10_000):
        self.max_relations = max_relations
        self.max_operations = max_operations
        self._owners: OrderedDict[str, SessionKey] = OrderedDict()
        self._operations: OrderedDict[OperationKey, None] = OrderedDict()

    def learned(self, relation_id: str, session: SessionKey) -> None:
        self._owners[relation_id] = session
        self._owners.move_to_end(relation_id)
        while len(self._owners) > self.max_relations:
            self._owners.popitem(last=False)

    def owner(self, relation_id: str) -> SessionKey | None:
        return self._owners.get(relation_id)

    def steps(self) -> tuple[Step, Step]:
        """The check (early: before anything is rewritten or asked) and the learning, from
        Spark's own answer (`upstream_response`)."""

        async def refuse_foreign_checkpoints(call: Call) -> None:
            self.check(call)

        async def learn_checkpoints(call: Call) -> None:
            self.learn(call)

        return (
            step(refuse_foreign_checkpoints, ("ExecutePlan", "AnalyzePlan"), reads=("compressed_plans",)),
            step(learn_checkpoints, ("ExecutePlan", "ReattachExecute", "ReleaseExecute"), hooks=("upstream_response",)),
        )

    def check(self, call: Call) -> None:
        if not self._owners:
            return
        session = (call.user_id, call.session_id)
        candidates = {m.decode() for m in _RELATION_ID.findall(call.raw_request)}
        foreign = {c for c in candidates if self._owners.get(c, session) != session}
        if not foreign and not _compressed(call):
            return
        for relation_id in _relation_ids(call.request):
            owner = self._owners.get(relation_id)
            if owner is not None and owner != session:
                raise Refusal.denied(f"{FOREIGN} (relation {relation_id})", reason="foreign_checkpoint")

    def learn(self, call: Call) -> None:
        req = call.request
        key = (call.user_id, req.session_id, req.operation_id)
        if call.method.name == "ReleaseExecute":
            if req.HasField("release_all"):
                self._operations.pop(key, None)
            return
        if call.method.name == "ExecutePlan":
            plan = req.plan
            if plan.WhichOneof("op_type") != "command" or plan.command.WhichOneof("command_type") != "checkpoint_command":
                return
            if req.operation_id:
                self._operations[key] = None
                while len(self._operations) > self.max_operations:
                    self._operations.popitem(last=False)
        elif key not in self._operations:
            return
        session = (call.user_id, req.session_id)

        def learn(raw: bytes) -> None:
            relation_id = _checkpointed(raw)
            if relation_id:  # Spark made it: from here on this session owns it
                self.learned(relation_id, session)

        call.add_hook("upstream_response", learn)


def _compressed(call: Call) -> bool:
    """A compressed plan's ids are not in the raw bytes: look inside (rare, large plans)."""
    return bool(call.facts.compressed_plans)


def _checkpointed(raw: bytes) -> str | None:
    fields = top_fields(raw)
    if fields is not None and CHECKPOINT_RESULT not in fields:
        return None
    response = base_pb2.ExecutePlanResponse.FromString(raw)
    if not response.HasField("checkpoint_command_result"):
        return None
    return response.checkpoint_command_result.relation.relation_id or None


def _relation_ids(request: Message) -> list[str]:
    """Every `cached_remote_relation` id in the request's plans (a walk by descriptor)."""
    return [
        value.relation_id
        for field, value in set_fields(plans_of(request))
        if field.name == "cached_remote_relation" and field.message_type is not None
    ]

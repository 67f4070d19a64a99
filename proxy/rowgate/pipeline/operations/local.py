"""ExecutePlan operations the proxy answered itself, kept so Reattach/Release make sense.

The upstream never saw these operations, so a ReattachExecute or ReleaseExecute for one of
them must be answered here: forwarding would fail with OPERATION_NOT_FOUND, and pyspark's
reattach logic would then re-send the whole ExecutePlan. Entries are tiny (a schema and a
few rows of a statement result) and bounded in number and age.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from google.protobuf.message import Message
from pyspark.sql.connect.proto import base_pb2

from rowgate.responses.answer import Answer

OperationKey = tuple[str, str, str]  # (user_id, session_id, operation_id)


@dataclass
class LocalOperation:
    server_side_session_id: str
    responses: list[base_pb2.ExecutePlanResponse]
    created: float


class LocalOperations:
    def __init__(self, max_operations: int = 10_000, ttl_seconds: float = 3600.0):
        self._ops: OrderedDict[OperationKey, LocalOperation] = OrderedDict()
        self.max_operations = max_operations
        self.ttl_seconds = ttl_seconds

    def add(self, key: OperationKey, server_side_session_id: str, responses: list[Message]) -> None:
        self._expire()
        self._ops[key] = LocalOperation(server_side_session_id, list(responses), time.monotonic())
        while len(self._ops) > self.max_operations:
            self._ops.popitem(last=False)

    def get(self, key: OperationKey) -> LocalOperation | None:
        return self._ops.get(key)

    def release(self, key: OperationKey) -> LocalOperation | None:
        return self._ops.pop(key, None)

    def __len__(self) -> int:
        return len(self._ops)

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.ttl_seconds
        while self._ops:
            key, op = next(iter(self._ops.items()))
            if op.created >= cutoff:
                break
            self._ops.popitem(last=False)

    def answer(self, name: str, user_id: str, req: Message) -> Answer | None:
        """Answers Reattach/Release of local operations; None for everything else (`req` is
        the request of RPC `name`)."""
        if name not in ("ReattachExecute", "ReleaseExecute"):
            return None
        key = (user_id, req.session_id, req.operation_id)
        op = self.get(key)
        if op is None:
            return None
        if name == "ReattachExecute":
            remaining = op.responses
            if req.HasField("last_response_id"):
                ids = [r.response_id for r in op.responses]
                if req.last_response_id in ids:
                    remaining = op.responses[ids.index(req.last_response_id) + 1 :]
            return Answer(remaining)
        if req.HasField("release_all"):
            self.release(key)
        return Answer(
            [
                base_pb2.ReleaseExecuteResponse(
                    session_id=req.session_id,
                    server_side_session_id=op.server_side_session_id,
                    operation_id=req.operation_id,
                )
            ]
        )

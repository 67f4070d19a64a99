"""Configuration a non-admin may not change, and settings every session gets first.

Some Spark settings change what a query means after the proxy has checked it: a new
catalog pointing at the same warehouse names protected data under another name, variable
substitution makes Spark parse different text than the proxy did, parser flags change how
strings and identifiers read, excluded optimizer rules or extensions change plans. Those
keys are refused for non-admins through every route (Config RPC, `SET`, `RESET`).

Two settings are forced on every session before its first request is forwarded:
`spark.sql.variable.substitute=false` (so `${x}` is never rewritten behind the proxy's
back) and `spark.sql.legacy.storeAnalyzedPlanForView=true` (so a temp view keeps the
filtered plan it was created with instead of re-reading its SQL text later).
"""

from __future__ import annotations

import grpc
from pyspark.sql.connect.proto import base_pb2

from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.sessions import SessionRegistry
from rowgate.responses.answer import Answer

GUARDED_PREFIXES = (
    "spark.sql.catalog.",
    "spark.sql.extensions",
    "spark.sql.hive.",
    "spark.hadoop.",
    "spark.hive.",
    "javax.jdo.",
    "spark.sql.legacy.",
    "spark.sql.warehouse.",
    "spark.sql.optimizer.excludedrules",
    "spark.sql.optimizer.excludedrule",
)
GUARDED_KEYS = frozenset(
    {
        "spark.sql.variable.substitute",
        "spark.sql.defaultcatalog",
        "spark.sql.catalogimplementation",
        "spark.sql.parser.escapedstringliterals",
        "spark.sql.ansi.doublequotedidentifiers",
        "spark.sql.casesensitive",
        "spark.sql.sources.default",
        "spark.sql.session.state.builder",
        "spark.sql.datasource.v2.bucketing.enabled",
    }
)
FORCED_SETTINGS = (
    ("spark.sql.variable.substitute", "false"),
    ("spark.sql.legacy.storeAnalyzedPlanForView", "true"),
)


# Written only by the proxy itself: the record of a session's temp views and checkpoints
# that every replica reads back (proxy/rowgate/pipeline/session_recall.py). Refused to
# every caller, admins included, through every route.
PROXY_OWNED_PREFIX = "rowgate."


def refuse_proxy_owned(keys, how: str) -> None:
    owned = sorted({k for k in keys if k.strip().lower().startswith(PROXY_OWNED_PREFIX)})
    if owned:
        raise Refusal(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{how} of {', '.join(owned)} is reserved for rowgate itself: it records when the session's "
            "temp views and checkpoints were made",
            reason="guarded_config",
        )


def is_guarded(key: str) -> bool:
    """Keys compare case-insensitively, as Spark's SQLConf does."""
    k = key.strip().lower()
    return k in GUARDED_KEYS or k.startswith(GUARDED_PREFIXES)


def refuse_guarded(keys, how: str) -> None:
    guarded = sorted({k for k in keys if is_guarded(k)})
    if guarded:
        raise Refusal(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{how} of {', '.join(guarded)} is reserved for rowgate admins: "
            "these settings change what a query reads after rowgate has checked it",
            reason="guarded_config",
        )


class ConfigGuard:
    def __init__(self, sessions: SessionRegistry, is_admin, learned=None):
        self.sessions = sessions
        self.is_admin = is_admin
        # (session key, server-side id) -> None: the forcing Config's answer says which
        # upstream session got the settings (proxy/rowgate/pipeline/upstream_session.py).
        self.learned = learned

    async def prepare_session(self, call: Call) -> Answer | None:
        """Applies FORCED_SETTINGS upstream the first time a session shows up."""
        if call.method.name not in ("ExecutePlan", "AnalyzePlan", "Config", "AddArtifacts"):
            return None
        state = self.sessions.get((call.user_id, call.session_id))
        if state.prepared:
            return None
        async with state.lock:
            if not state.prepared:
                request = base_pb2.ConfigRequest(
                    session_id=call.session_id,
                    user_context=base_pb2.UserContext(user_id=call.user_id, user_name=call.user_id),
                    operation=base_pb2.ConfigRequest.Operation(
                        set=base_pb2.ConfigRequest.Set(pairs=[base_pb2.KeyValue(key=k, value=v) for k, v in FORCED_SETTINGS])
                    ),
                )
                if call.session_id:
                    # An invalid session id is the upstream's to reject on the real request.
                    try:
                        response = await call.upstream.call("Config", request)
                        if self.learned is not None:
                            self.learned((call.user_id, call.session_id), response.server_side_session_id)
                    except grpc.aio.AioRpcError as e:
                        if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                            raise
                state.prepared = True
        return None

    async def config_rpc(self, call: Call) -> Answer | None:
        if call.method.name != "Config":
            return None
        op = call.request.operation
        kind = op.WhichOneof("op_type")
        if kind == "set":
            refuse_proxy_owned([p.key for p in op.set.pairs], "setting")
        elif kind == "unset":
            refuse_proxy_owned(op.unset.keys, "unsetting")
        if self.is_admin(call.caller):
            return None
        if kind == "set":
            refuse_guarded([p.key for p in op.set.pairs], "setting")
        elif kind == "unset":
            refuse_guarded(op.unset.keys, "unsetting")
        return None

"""Settings a non-admin may change, and settings every session holds before it reads.

Some Spark settings change what a query means after the proxy has checked it: a new
catalog pointing at the same warehouse names protected data under another name, the SQL
path moves one-part names, variable substitution makes Spark parse different text than the
proxy did, parser flags change how strings and identifiers read, excluded optimizer rules
or extensions change plans. So a non-admin may change only the settings on the allow list
(proxy/rowgate/policy/settings_allow_list.py), through every route: the Config RPC in
proxy/rowgate/pipeline/enforce/rules/config_settings.py, `SET`/`RESET` in SQL text in
proxy/rowgate/pipeline/enforce/rules/guarded_settings.py, whether or not policies exist yet. Reading settings stays open. A *silent* Config set (what
`SparkSession.builder.config(...)` sends: Spark ignores a pair it cannot apply) drops the
pairs a non-admin may not change and forwards the rest, as Spark does with a static setting.
A non-admin's `RESET` of every setting is refused: it would undo the forced settings.

`FORCED_SETTINGS` (variable substitution off, analysed plans kept for views, the SQL path
off) are applied to every session before its first request is forwarded, whether or not
policies exist, and applied again before the next request after anything could have reset
them: an admin's `RESET` (all, or of a forced key) or an admin's Config unset of a forced
key. A non-admin cannot reach them (none is on the allow list). An admin who *sets* a
forced key to another value keeps it: admins may set anything.

Forcing an admin's session is a change of its state (pipeline/session/epoch.py): an admin's
session may hold other values of the forced keys (the admin set them, or reset them and the
forcing comes again after), and a replica that forces them on its first contact with that
session (it never saw the session, forgot it, or restarted) changes what Spark analyses
under the session's unchanged version. So an admin's forcing runs inside a change of the
session, like any other setting change, and no verdict or memory of the old values outlives
it. A non-admin's forcing runs bare: a non-admin cannot change a forced key, so a forcing
after the first finds the same values, and the first precedes the session's first state read
(this step runs before every step that reads it). A caller who stops being an admin while
their session holds other values is the exception (their session forced bare by a replica
new to it): not handled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import grpc
from pyspark.sql.connect.proto import base_pb2

from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.session.epoch import StateVersions
from rowgate.pipeline.session.registry import SessionKey, SessionRegistry, SessionState
from rowgate.policy import state_effects
from rowgate.policy.access_control import AccessControl
from rowgate.policy.settings_allow_list import FORCED_SETTINGS
from rowgate.responses.answer import Answer

log = logging.getLogger("rowgate.settings")

__all__ = ["FORCED_SETTINGS", "ConfigGuard", "refuse_unlisted", "refuse_proxy_owned", "unlisted", "reassert_forced_after"]

# Written only by the proxy itself: the record of a session's temp views and checkpoints
# that every replica reads back (proxy/rowgate/pipeline/session/recall.py). Refused to
# every caller, admins included, through every route.
PROXY_OWNED_PREFIX = "rowgate."


def refuse_proxy_owned(keys: Iterable[str], how: str) -> None:
    owned = sorted({k for k in keys if k.strip().lower().startswith(PROXY_OWNED_PREFIX)})
    if owned:
        raise Refusal(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{how} of {', '.join(owned)} is reserved for rowgate itself: it records when the session's "
            "temp views and checkpoints were made",
            reason="guarded_config",
        )


def unlisted(keys: Iterable[str]) -> list[str]:
    """The keys a non-admin may not change (not on the settings allow list), sorted."""
    return sorted({k for k in keys if AccessControl.setting_refusal(k) is not None})


def refuse_unlisted(keys: Iterable[str], how: str) -> None:
    """Refuses a non-admin's change of any key not on the allow list, naming each key and why."""
    refused = unlisted(keys)
    if refused:
        why = "; ".join(f"{k}: {AccessControl.setting_refusal(k)}" for k in refused)
        raise Refusal(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{how} of {', '.join(refused)} is reserved for rowgate admins ({why}); non-admins may change "
            "only the settings on rowgate's allow list",
            reason="guarded_config",
        )


def reassert_forced_after(call: Call, state: SessionState) -> None:
    """The request may reset forced settings: apply them again before the session's next request.

    Marked now (a request racing this one prepares the session again, harmlessly) and once
    the call is over, however it ended (a request that ran meanwhile found the settings
    still in place and must not count for after the reset).
    """

    def unprepare() -> None:
        state.prepared = False

    unprepare()
    call.on_finish.append(unprepare)


class ConfigGuard:
    def __init__(
        self,
        sessions: SessionRegistry,
        access: AccessControl,
        learned: Callable[[SessionKey, str], None] | None = None,
        versions: StateVersions | None = None,
    ) -> None:
        self.sessions = sessions
        self.access = access
        # Marks an admin's forcing as a change of the session's state (module docstring).
        self.versions = versions
        # (session key, server-side id) -> None: the forcing Config's answer says which
        # upstream session got the settings (proxy/rowgate/pipeline/session/upstream.py).
        self.learned = learned

    async def prepare_session(self, call: Call) -> Answer | None:
        """Applies FORCED_SETTINGS upstream the first time a session shows up, and again
        after a request that may have reset them (`reassert_forced_after`)."""
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
                        response = await self._force(call, state, request)
                        if self.learned is not None:
                            self.learned((call.user_id, call.session_id), response.server_side_session_id)
                    except grpc.aio.AioRpcError as e:
                        if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                            raise
                state.prepared = True
        return None

    async def _force(self, call: Call, state: SessionState, request: base_pb2.ConfigRequest) -> base_pb2.ConfigResponse:
        async def run() -> base_pb2.ConfigResponse:
            return await call.upstream.call("Config", request)

        if self.versions is None or not self.access.is_admin(call.caller):
            return await run()
        return await self.versions.changing(call, state, state_effects.SESSION, run)

    async def drop_unlisted_silent_pairs(self, call: Call) -> Answer | None:
        """A non-admin's silent Config set loses the pairs they may not change.

        `SparkSession.builder.config(...)` sends a silent set: Spark itself ignores a pair
        it cannot apply (a static or core setting); the proxy ignores a pair the caller may
        not change. Runs after the rule that refuses what may not pass
        (proxy/rowgate/pipeline/enforce/rules/config_settings.py: the proxy's own keys,
        refused in a silent set too)."""
        if call.method.name != "Config":
            return None
        op = call.request.operation
        if op.WhichOneof("op_type") != "set" or not op.set.silent or self.access.is_admin(call.caller):
            return None
        dropped = unlisted(p.key for p in op.set.pairs)
        if dropped:
            log.info("silent Config set: not applied for a non-admin: %s", ", ".join(dropped))
            keep = [p for p in op.set.pairs if AccessControl.setting_refusal(p.key) is None]
            del op.set.pairs[:]
            op.set.pairs.extend(keep)
        return None

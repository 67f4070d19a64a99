"""Rule: the Config RPC changes only settings its caller may change.

The settings allow list (proxy/rowgate/policy/settings_allow_list.py, asked through
proxy/rowgate/policy/access_control.py) applied to the Config RPC, as
guarded_settings.py applies it to `SET`/`RESET` in SQL text; why each setting is guarded
is in proxy/rowgate/pipeline/statements/guard_config.py. Nobody, admins included, sets or
unsets the proxy's own `rowgate.` keys. A non-admin's set or unset of a key not on the
list is refused, naming each key; an admin's unset of a forced setting passes and the
forced settings are applied again before the session's next request.

A *silent* set (`SparkSession.builder.config(...)`) is not refused here: the step after
this rule drops the pairs a non-admin may not change, as Spark ignores a pair it cannot
apply (guard_config.py `ConfigGuard.drop_unlisted_silent_pairs`).
"""

from __future__ import annotations

from rowgate.pipeline.enforce.rules import Decision, Rule
from rowgate.pipeline.statements.guard_config import reassert_forced_after, refuse_proxy_owned, refuse_unlisted
from rowgate.policy.settings_allow_list import is_forced


async def check(d: Decision) -> None:
    op = d.call.request.operation
    kind = op.WhichOneof("op_type")
    if kind == "set":
        refuse_proxy_owned([p.key for p in op.set.pairs], "setting")
    elif kind == "unset":
        refuse_proxy_owned(op.unset.keys, "unsetting")
    if d.admin:
        if kind == "unset" and any(is_forced(k) for k in op.unset.keys):
            # The session's own state, made now if the proxy has none yet: the next step
            # (ConfigGuard.prepare_session) would make it and apply the forced settings
            # before this unset undoes them, and nothing would apply them again.
            if d.settings.sessions is None:
                raise RuntimeError("the config_settings rule needs RuleSettings.sessions (pipeline/assembly.py)")
            reassert_forced_after(d.call, d.settings.sessions.get((d.call.user_id, d.call.session_id)))
        return
    if kind == "set" and not op.set.silent:
        refuse_unlisted([p.key for p in op.set.pairs], "setting")
    elif kind == "unset":
        refuse_unlisted(op.unset.keys, "unsetting")


RULE = Rule("config_settings", check, admins=True, rpcs=frozenset({"Config"}))

"""Rule: `SET`/`RESET` in SQL text of settings that change what a query reads after the
proxy checked it (the same keys the Config RPC guard refuses, proxy/rowgate/pipeline/guard_config.py).
"""

from __future__ import annotations

from rowgate.pipeline.core import Refusal
from rowgate.pipeline.guard_config import refuse_guarded, refuse_proxy_owned
from rowgate.pipeline.rules import Decision, Rule


async def check(d: Decision) -> None:
    for result in d.findings.sql_results:
        effects = result.session_effects
        # The session's record (proxy/rowgate/pipeline/session_recall.py): nobody's to change.
        refuse_proxy_owned([k for k, _ in effects.config_set], "setting")
        refuse_proxy_owned(effects.config_reset, "resetting")
        if d.admin:
            if effects.config_reset_all and d.snapshot.has_any():
                # It would erase the record of the session's checkpoints that other replicas read.
                raise Refusal.denied("RESET of all settings is refused while policies exist; reset settings by name")
            continue
        refuse_guarded([k for k, _ in effects.config_set], "setting")
        refuse_guarded(effects.config_reset, "resetting")
        if effects.config_reset_all and d.snapshot.has_any():
            raise Refusal.denied("RESET of all settings is reserved for rowgate admins while policies exist")


RULE = Rule("guarded_settings", check, admins=True)

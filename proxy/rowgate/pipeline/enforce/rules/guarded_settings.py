"""Rule: `SET`/`RESET` in SQL text of settings a non-admin may not change (the allow list
the Config RPC guard applies too: proxy/rowgate/policy/settings_allow_list.py,
proxy/rowgate/pipeline/statements/guard_config.py), whether or not policies exist yet.

`SET k` (no value), `SET` and `SET -v` only read. `SET ROLE` and `SET COLLATION` change the
session (read here as the keys `role` and `collation`), and are not on the list. A
non-admin's `RESET` of every setting is refused: it would undo the settings rowgate forces
(variable substitution off, the SQL path off, ...), and translating it into a reset of the
caller's own settings would need the proxy to know them; `RESET k` of a listed key passes.
An admin's `RESET` (all, or of a forced key) passes, and the forced settings are applied
again before the session's next request.

A text the proxy cannot read (Spark's `EXECUTE IMMEDIATE`, a SQL script, a statement
sqlglot cannot parse) may hold a `SET` or `RESET` the proxy never sees. While a table is
protected such texts are refused anyway; before, a non-admin's is refused when it mentions
SET, RESET or EXECUTE: `EXECUTE IMMEDIATE 'SET spark.sql.path.enabled=true'` run before
the first policy would otherwise keep the SQL path on once a policy exists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.rules import Decision, Rule
from rowgate.pipeline.statements.guard_config import reassert_forced_after, refuse_proxy_owned, refuse_unlisted
from rowgate.policy.settings_allow_list import is_forced

# Statements that change the session although the proxy reads them without a value.
_STATEMENT_KEYS = frozenset({"role", "collation"})
# What the rewriter reports for a text it forwarded unread (rewrite/sql/result.py).
_UNREAD_KINDS = frozenset({"command", "multiple", "unparsed", "unknown"})
_MAY_SET = re.compile(r"\b(?:SET|RESET|EXECUTE)\b", re.IGNORECASE)


def _changes(config_set: Iterable[tuple[str, str | None]]) -> list[str]:
    """The keys a `SET` changes: those with a value, and SET ROLE / SET COLLATION."""
    return [k for k, v in config_set if v is not None or k.strip().lower() in _STATEMENT_KEYS]


async def check(d: Decision) -> None:
    for result in d.findings.sql_results:
        effects = result.session_effects
        # The session's record (proxy/rowgate/pipeline/session/recall.py): nobody's to change.
        refuse_proxy_owned([k for k, _ in effects.config_set], "setting")
        refuse_proxy_owned(effects.config_reset, "resetting")
        if d.admin:
            if effects.config_reset_all and d.snapshot.has_any():
                # It would erase the record of the session's checkpoints that other replicas read.
                raise Refusal.denied("RESET of all settings is refused while policies exist; reset settings by name")
            if effects.config_reset_all or any(is_forced(k) for k in effects.config_reset):
                reassert_forced_after(d.call, d.state)
            continue
        if result.statement_kind in _UNREAD_KINDS and _MAY_SET.search(result.sql):
            raise Refusal.denied(
                "rowgate cannot read this statement, and it may change settings (SET, RESET, EXECUTE IMMEDIATE, a "
                "SQL script): reserved for rowgate admins, whether or not row access policies exist",
                reason="guarded_config",
            )
        refuse_unlisted(_changes(effects.config_set), "setting")
        refuse_unlisted(effects.config_reset, "resetting")
        if effects.config_reset_all:
            raise Refusal.denied(
                "RESET of all settings is reserved for rowgate admins: it would also undo the settings rowgate "
                "forces on every session; reset the settings you changed by name (RESET <key>)",
                reason="guarded_config",
            )


RULE = Rule("guarded_settings", check, admins=True)

"""The rules of `RULES` for the RPCs that carry no plan (Config, AddArtifacts): one step each.

A plan-carrying request meets its rules inside enforcement (enforcement.py), after the
rewriters reported what it does; a Config or AddArtifacts request has nothing to rewrite,
so this step decides it from the request alone: the caller, the policy snapshot, the
session's state as the proxy knows it, and the rules that name its RPC (`Rule.rpcs`).
It runs where each RPC's guard ran before the rules held them (pipeline/assembly.py), so
a refused request reaches neither Spark nor the proxy's session bookkeeping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rowgate.pipeline.core import Call
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.enforce.rules import RULES, Decision, Rule, RuleSettings, apply_rules
from rowgate.pipeline.session.registry import SessionRegistry, SessionState
from rowgate.policy.access_control import AccessControl
from rowgate.responses.answer import Answer

if TYPE_CHECKING:
    from rowgate.policy.snapshot import PolicyCache


class RequestRules:
    def __init__(
        self,
        access: AccessControl,
        policies: PolicyCache,
        sessions: SessionRegistry,
        settings: RuleSettings,
        rules: tuple[Rule, ...] = RULES,
    ):
        self.access = access
        self.policies = policies
        self.sessions = sessions
        self.settings = settings  # shared with enforcement: one set of operator settings
        self.rules = rules

    async def step(self, call: Call) -> Answer | None:
        # A session the proxy does not know yet has the empty state; looking does not make
        # one (a refused request leaves no session behind).
        state = self.sessions.find((call.user_id, call.session_id)) or SessionState()
        admin = self.access.is_admin(call.caller)
        decision = Decision(call, call.caller, admin, self.policies.snapshot, state, Findings(), self.settings)
        await apply_rules(decision, self.rules)
        return None

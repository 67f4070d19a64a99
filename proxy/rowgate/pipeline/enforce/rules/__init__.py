"""The enforcement rules: one module per concern, applied in the order of `RULES`.

The rewriters place policy filters and report what a request does (`Findings`); each rule
here reads those facts, the caller and the session, and either lets the request pass or
raises `Refusal` naming why. Adding a concern is adding a module and a line to `RULES`,
in the manner of sqlglot's optimizer rules.

Rules run for non-admins only (`Rule.admins` says otherwise): admins may use the routes
these rules close, while their reads are still filtered by the rewrite itself.

Each rule names the RPCs it covers (`Rule.rpcs`; by default the plan-carrying ExecutePlan
and AnalyzePlan, decided inside enforcement after the rewrite). The rules of the RPCs that
carry no plan, Config and AddArtifacts, are applied by one step per RPC
(proxy/rowgate/pipeline/enforce/request_rules.py), with no findings.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rowgate.identity.caller import Caller
from rowgate.pipeline.core import Call, Refusal
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.session.registry import SessionState
from rowgate.policy.snapshot import PolicySnapshot

if TYPE_CHECKING:
    from rowgate.catalog.upstream_catalog import UpstreamCatalog
    from rowgate.pipeline.enforce.rules.file_paths import PathRules
    from rowgate.pipeline.session.registry import SessionRegistry
    from rowgate.pipeline.statements.shipped_code import CodeRules


@dataclass
class Decision:
    """Everything a rule may read about one request; rules never change it."""

    call: Call
    caller: Caller
    admin: bool
    snapshot: PolicySnapshot
    state: SessionState
    findings: Findings
    settings: RuleSettings


@dataclass
class RuleSettings:
    """What the operator configured and what the proxy shares across sessions."""

    code_rules: CodeRules
    catalog: UpstreamCatalog
    # global temp view -> (policy version at creation, tables it read); shared by all sessions
    global_temp_view_versions: dict[str, tuple[int, frozenset]] = field(default_factory=dict)
    # --allow-path and the places never allowed (proxy/rowgate/pipeline/enforce/rules/file_paths.py)
    paths: PathRules = field(default_factory=lambda: _path_rules())
    # Every session's state, for a rule that must mark a session the proxy may not know yet
    # (rules/config_settings.py); set by pipeline/assembly.py.
    sessions: SessionRegistry | None = None


PLAN_RPCS: frozenset[str] = frozenset({"ExecutePlan", "AnalyzePlan"})


@dataclass(frozen=True)
class Rule:
    name: str  # what a refusal it raises names as its rule (the audit log records it)
    check: Callable[[Decision], Awaitable[None]]
    admins: bool = False  # also applied to admins
    rpcs: frozenset[str] = PLAN_RPCS  # the RPCs whose requests it decides


def _path_rules() -> PathRules:
    from rowgate.pipeline.enforce.rules.file_paths import PathRules

    return PathRules()


def _rules() -> tuple[Rule, ...]:
    from rowgate.pipeline.enforce.rules import (
        allowed_kinds,
        artifacts,
        config_settings,
        file_paths,
        guarded_settings,
        protected_lifecycle,
        server_side_listeners,
        shipped_code,
        stale_session_data,
        unknown_relations,
    )

    return (
        allowed_kinds.RULE,
        shipped_code.RULE,
        guarded_settings.RULE,
        protected_lifecycle.RULE,
        file_paths.RULE,
        stale_session_data.RULE,
        server_side_listeners.RULE,
        unknown_relations.RULE,
        config_settings.RULE,
        artifacts.RULE,
    )


RULES: tuple[Rule, ...] = _rules()


async def apply_rules(decision: Decision, rules: tuple[Rule, ...] = RULES) -> None:
    """Runs every rule that covers the request's RPC and applies to the caller; the first
    refusal stops the request, stamped with the name of the rule that raised it (the audit
    log records it)."""
    rpc = decision.call.method.name
    for rule in rules:
        if rpc not in rule.rpcs or (decision.admin and not rule.admins):
            continue
        try:
            await rule.check(decision)
        except Refusal as refusal:
            refusal.rule = rule.name
            raise

"""What a request changes in the proxy's memory of the session and of the policies, once
Spark confirmed it.

The proxy's memory (temp views, current catalog and database, cached catalog answers, which
table a policy is on) must never claim more than Spark did: a temp view Spark refused to
create, remembered anyway, makes `SELECT * FROM t` read the protected table `t`
unfiltered. So a request that changes state is run by the proxy itself to its end
(proxy/rowgate/pipeline/session/confirmed_run.py), as the session's writer
(proxy/rowgate/pipeline/session/state_gate.py), and its effects are recorded from Spark's answer:

- before it runs, only changes in the safe direction: temp views it drops are forgotten,
  the session's position is marked unknown (asked again from Spark), catalog answers are
  dropped and none is cached until it ended;
- after Spark finished it: temp views it creates, with the policy version they were made
  under; policies follow the protected tables it dropped or renamed
  (proxy/rowgate/pipeline/enforce/policy_lifecycle.py);
- after Spark refused it: nothing more; when the outcome is unknown, nothing that claims
  more (and the policy lifecycle asks Spark what exists).

The run is shielded from the client: a client that goes away mid-statement does not stop
the bookkeeping of what Spark did.
"""

from __future__ import annotations

import asyncio

from rowgate.catalog.upstream_catalog import UpstreamCatalog
from rowgate.pipeline.core import Call
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.enforce.policy_lifecycle import LifecycleChange, PolicyLifecycle, lifecycle_of
from rowgate.pipeline.enforce.second_opinion import QUERY_ROOTS
from rowgate.pipeline.session.confirmed_run import Outcome, run_to_end
from rowgate.pipeline.session.epoch import request_scope, session_busy, session_changed
from rowgate.pipeline.session.position import SessionPositions
from rowgate.pipeline.session.registry import SessionState
from rowgate.pipeline.session.state_gate import GateTimeout
from rowgate.policy import state_effects
from rowgate.policy.snapshot import PolicyCache, PolicySnapshot
from rowgate.responses.answer import Answer

# Only ExecutePlan runs statements: Spark analyses an AnalyzePlan's commands without running
# them, so an AnalyzePlan of `CREATE TEMP VIEW t ...` must not make `t` a temp view.
STATEMENT_RPCS = ("ExecutePlan",)


def changes_state(findings: Findings) -> bool:
    """The request changes what the proxy remembers, so its outcome must be learned."""
    return bool(
        findings.temp_views_created
        or findings.temp_views_dropped
        or findings.moved_position
        or any(r.session_effects.invalidates_catalog for r in findings.sql_results)
    )


class SessionEffects:
    def __init__(
        self,
        policies: PolicyCache,
        catalog: UpstreamCatalog,
        positions: SessionPositions,
        global_temp_views: set[str],
        global_temp_view_versions: dict[str, tuple[int, frozenset]],
    ) -> None:
        self.policies = policies
        self.catalog = catalog
        self.positions = positions
        self.global_temp_views = global_temp_views
        self.global_temp_view_versions = global_temp_view_versions
        self.lifecycle = PolicyLifecycle(policies, catalog)

    async def apply(self, call: Call, state: SessionState, snapshot: PolicySnapshot, findings: Findings) -> Answer | None:
        """Records the request's effects; answers it when the proxy ran it itself."""
        if findings.checkpoints:
            # Recorded before it runs: an extra entry only makes the staleness rule stricter.
            created = (snapshot.version, frozenset(findings.tables_read))
            state.checkpoint_versions.append(created)
            if self.positions.recorder is not None:  # and in Spark's session, for other replicas
                await self.positions.recorder.record_checkpoint(call, state, created)
        if call.method.name not in STATEMENT_RPCS:
            return None
        # What it may change of the state Spark resolves plans with (pipeline/session/epoch.py):
        # run to its end inside a change of the state version, so no remembered verdict or
        # rewrite outlives it on any replica.
        scope = request_scope(call.request.plan, findings, QUERY_ROOTS)
        if not changes_state(findings):
            # Nothing the proxy remembers changes: the last step runs it inside a change of
            # the version, after every response hook is in place (pipeline/session/epoch.py).
            call.facts.state_scope = "" if scope == state_effects.NONE else scope
            return None
        # Shielded: the client going away must not stop the bookkeeping half-way.
        run = asyncio.ensure_future(self._confirmed(call, state, snapshot, findings, scope))
        return await asyncio.shield(run)

    async def _confirmed(
        self, call: Call, state: SessionState, snapshot: PolicySnapshot, findings: Findings, scope: str = state_effects.ALL
    ) -> Answer:
        ticket = call.facts.state_read
        seen = ticket.version if ticket is not None else state.gate.version
        if ticket is not None:
            ticket.release()  # this request's own read must not hold its write back
        try:
            await state.gate.enter_write(self.positions.wait_seconds)
        except GateTimeout:
            raise session_busy() from None
        try:
            if state.gate.version != seen:
                raise session_changed()
            change = lifecycle_of(snapshot, findings, author=call.caller.principal)
            await self.lifecycle.before(change, snapshot)
            self._forget_first(call, state, findings)
            catalog_ddl = any(r.session_effects.invalidates_catalog for r in findings.sql_results)
            if catalog_ddl:
                self.catalog.begin_ddl()
            versions = self.positions.versions
            try:
                if versions is None:
                    outcome = await run_to_end(call)
                else:
                    outcome = await versions.changing(call, state, scope, lambda: run_to_end(call))
            finally:
                if catalog_ddl:
                    self.catalog.end_ddl()
            if outcome.status == "ok":
                self._record_created(state, snapshot, findings)
                if self.positions.recorder is not None:  # in Spark's session too, for other replicas
                    local = [v for v in findings.temp_views_created if not v.startswith("global_temp.")]
                    dropped = [v for v in findings.temp_views_dropped if not v.startswith("global_temp.")]
                    await self.positions.recorder.record_views(call, state, local, dropped)
            await self._settle_lifecycle(change, outcome)
        finally:
            state.gate.leave_write()
        return outcome.answer(call)

    def _forget_first(self, call: Call, state: SessionState, findings: Findings) -> None:
        for view in findings.temp_views_dropped:
            if view.startswith("global_temp."):
                name = view.split(".", 1)[1]
                self.global_temp_views.discard(name)
                self.global_temp_view_versions.pop(name, None)
            else:
                state.temp_views.discard(view)
                state.temp_view_versions.pop(view, None)
        if findings.moved_position:
            self.positions.moved(call)

    def _record_created(self, state: SessionState, snapshot: PolicySnapshot, findings: Findings) -> None:
        for view, tables in findings.temp_views_created.items():
            if view.startswith("global_temp."):
                name = view.split(".", 1)[1]
                self.global_temp_views.add(name)
                self.global_temp_view_versions[name] = (snapshot.version, tables)
            else:
                state.temp_views.add(view)
                state.temp_view_versions[view] = (snapshot.version, tables)

    async def _settle_lifecycle(self, change: LifecycleChange, outcome: Outcome) -> None:
        if change:
            await self.lifecycle.after(change, outcome.status)

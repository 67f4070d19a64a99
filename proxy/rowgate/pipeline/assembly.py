"""The steps of the request path, in order: the one place that says where a request goes.

Each step names the RPCs it handles, the facts (core.py `Facts`) it reads and writes and the
hooks (core.py `HOOKS`) it adds; `Pipeline` checks when it is built that every fact is
written before it is read and that no two steps add a hook only one may. Listeners of a
hook run in the order of this list. app.py only
opens what the steps need (the upstream, the policy store) and hands over the configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rowgate.catalog.upstream_catalog import UpstreamCatalog
from rowgate.config import ServeConfig
from rowgate.observability import metrics
from rowgate.pipeline.compressed_plans import PLAN_RPCS, open_compressed_plans, recompress_plans
from rowgate.pipeline.core import EVERY_RPC, Pipeline, step
from rowgate.pipeline.enforce.caller_lanes import CallerLanes
from rowgate.pipeline.enforce.enforcement import Enforcement, rewrite_plans
from rowgate.pipeline.enforce.request_rules import RequestRules
from rowgate.pipeline.enforce.rules.file_paths import PathRules
from rowgate.pipeline.enforce.second_opinion import SecondOpinion
from rowgate.pipeline.enforce.session_data_reads import SessionDataReads
from rowgate.pipeline.operations.checkpoint_owners import CheckpointOwners
from rowgate.pipeline.operations.filtered import FilteredOperations
from rowgate.pipeline.operations.local import LocalOperations
from rowgate.pipeline.operations.release_acks import ReleaseAcks
from rowgate.pipeline.operations.stale_streams import StaleStreams
from rowgate.pipeline.operations.status_requests import StatusRequests
from rowgate.pipeline.operations.steps import filtered_operations_steps, local_operations_step, release_acks_step
from rowgate.pipeline.operations.streaming_queries import StreamingQueries
from rowgate.pipeline.session.epoch import StateVersions
from rowgate.pipeline.session.pin import pin_session
from rowgate.pipeline.session.position import SessionPositions
from rowgate.pipeline.session.recall import SessionRecall
from rowgate.pipeline.session.registry import SessionRegistry
from rowgate.pipeline.session.upstream import UpstreamSessions
from rowgate.pipeline.statements.guard_config import ConfigGuard
from rowgate.pipeline.statements.policy_statements import PolicyStatements
from rowgate.pipeline.statements.shipped_code import CodeRules
from rowgate.policy.access_control import AccessControl
from rowgate.policy_service import PolicyService
from rowgate.rewrite.sql.memo import RewriteMemo

if TYPE_CHECKING:
    from rowgate.policy.snapshot import PolicyCache
    from rowgate.policy.store import PolicyStore
    from rowgate.upstream.channel import Upstream


@dataclass(frozen=True)
class Assembled:
    """The pipeline, and what the rest of the proxy shares with it (the admin API, start/stop)."""

    pipeline: Pipeline
    versions: StateVersions  # started and stopped with the server: keeps the shared session alive
    policy_service: PolicyService
    catalog: UpstreamCatalog
    access: AccessControl  # who is an admin, for the admin API too


def build_pipeline(
    config: ServeConfig,
    upstream: Upstream,
    store: PolicyStore,
    policies: PolicyCache,
    local_operations: LocalOperations,
) -> Assembled:
    # Who may do what (policy/access_control.py): built once, handed to every step that decides.
    access = AccessControl.of(config.admin)

    sessions = SessionRegistry()
    catalog = UpstreamCatalog(upstream, timeout_seconds=config.catalog_timeout_seconds)
    recall = SessionRecall(sessions, catalog)
    # the state versions Spark holds, which every change of state moves (pipeline/session/epoch.py)
    # A question of the catalog's state like the catalog's own (DESCRIBE ...): the same bound.
    versions = StateVersions(upstream, sessions, timeout=config.catalog_timeout_seconds, observe=metrics.observe_state_read)
    positions = SessionPositions(sessions, catalog, recorder=recall, versions=versions)
    upstream_sessions = UpstreamSessions(sessions)
    release_acks = ReleaseAcks(upstream_sessions.server_side_id)
    guard = ConfigGuard(sessions, access, learned=upstream_sessions.learned, versions=versions)
    policy_service = PolicyService(store, policies, catalog)
    statements = PolicyStatements(policy_service, positions, access)
    code_rules = CodeRules.from_config(config)
    lanes = CallerLanes(width=config.checks_per_caller)
    enforcement = Enforcement(
        policies, catalog, positions, access, rewrite_plans, code_rules,
        rewrite_memo=RewriteMemo(observe=metrics.observe_sql_rewrite), path_rules=PathRules.from_config(config),
        lanes=lanes, max_sql_kib=config.max_sql_kib,
    )  # fmt: skip
    metrics.track_lanes(lanes)
    # One set of rule settings: the rules of plan requests (in enforcement) and of Config
    # and AddArtifacts (RequestRules) see the same operator settings and sessions.
    enforcement.settings.sessions = sessions
    request_rules = RequestRules(access, policies, sessions, enforcement.settings)
    if not config.no_second_opinion:
        enforcement.second_opinion = SecondOpinion(upstream, observe=metrics.observe_second_opinion, offload=lanes.run)
    remember_filtered, continue_filtered = filtered_operations_steps(FilteredOperations())
    refuse_foreign_checkpoints, learn_checkpoints = CheckpointOwners().steps()
    # In order; each step names the RPCs it handles, the facts (pipeline/core.py `Facts`) it
    # reads and writes and the hooks it adds, and Pipeline checks that every fact is written
    # before it is read and that no two steps claim a hook only one may hold.
    pipeline = Pipeline(
        [
            step(open_compressed_plans, PLAN_RPCS, writes=["compressed_plans"]),
            step(pin_session, EVERY_RPC),
            refuse_foreign_checkpoints,
            step(recall.connection_step, EVERY_RPC),
            step(StatusRequests(policies).step, ["GetStatus"]),
            local_operations_step(local_operations),
            release_acks_step(release_acks),
            step(request_rules.step, ["Config"]),  # rules/config_settings.py
            step(guard.drop_unlisted_silent_pairs, ["Config"]),
            step(guard.prepare_session, ["ExecutePlan", "AnalyzePlan", "Config", "AddArtifacts"]),
            step(upstream_sessions.step, EVERY_RPC, hooks=["first_response", "upstream_error"]),
            step(versions.config_step, ["Config"]),  # settings change inside a version change
            step(request_rules.step, ["AddArtifacts"]),  # rules/artifacts.py
            # both hold the session's state until Spark analysed the request (session/position.py)
            step(statements.step, PLAN_RPCS, writes=["policy_statement", "state_read"], hooks=["first_response"]),
            step(
                enforcement.step,
                PLAN_RPCS,
                writes=[
                    "row_filter_applied",
                    "tables",
                    "policies",
                    "error_secrets",
                    "state_read",
                    "policy_snapshot",
                    "state_scope",
                ],
                hooks=["first_response"],
            ),
            SessionDataReads(sessions, policies).step(),  # before remember_filtered reads the verdict
            remember_filtered,
            continue_filtered,
            *StreamingQueries(policies, sessions).steps(),
            StaleStreams(policies, upstream).step(),
            learn_checkpoints,
            step(recompress_plans, PLAN_RPCS, reads=["compressed_plans"]),
            step(versions.analysis_step, ["AnalyzePlan"]),  # persist/unpersist inside a version change
            # statements that change settings, variables, functions or the catalog: run to
            # their end inside a version change, every response hook applied
            step(versions.statement_step, ["ExecutePlan"], reads=["state_scope", "state_read"]),
        ]
    )
    return Assembled(pipeline, versions, policy_service, catalog, access)

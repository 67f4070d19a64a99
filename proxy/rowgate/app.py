"""Assembles the proxy from its configuration and runs it until a signal stops it."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2_grpc

from rowgate.catalog.upstream_catalog import UpstreamCatalog
from rowgate.config import ServeConfig
from rowgate.embedded.spark import EmbeddedSparkConnect
from rowgate.health import Health
from rowgate.identity.errors import IdentityError
from rowgate.identity.members import is_admin, validate_admin_member
from rowgate.identity.resolver import IdentityResolver, build_resolver
from rowgate.observability import metrics
from rowgate.observability.metrics import serve_metrics
from rowgate.pipeline.compressed_plans import PLAN_RPCS, open_compressed_plans, recompress_plans
from rowgate.pipeline.core import EVERY_RPC, Pipeline, step
from rowgate.pipeline.enforce.caller_lanes import CallerLanes
from rowgate.pipeline.enforce.enforcement import Enforcement, rewrite_plans
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
from rowgate.pipeline.statements.shipped_code import ArtifactGuard, CodeRules
from rowgate.policy.snapshot import PolicyCache
from rowgate.policy.store import PolicyStore, open_store
from rowgate.policy_service import PolicyService
from rowgate.rewrite.sql.memo import RewriteMemo
from rowgate.transport.audit_observer import AuditingObserver
from rowgate.transport.protobuf_limits import allow_deep_plans
from rowgate.transport.server import SparkConnectProxy, server_options
from rowgate.upstream.channel import Upstream
from rowgate.upstream.url import parse_upstream_url

log = logging.getLogger("rowgate")


class RowgateApp:
    def __init__(self, config: ServeConfig):
        self.config = config
        self.embedded: EmbeddedSparkConnect | None = None
        self.upstream: Upstream | None = None
        self.server: grpc.aio.Server | None = None
        self.health: Health | None = None  # liveness and readiness (proxy/rowgate/health.py)
        self.port: int | None = None
        self.store: PolicyStore | None = None
        self.policies: PolicyCache | None = None
        self.versions: StateVersions | None = None

    def _embedded_conf(self) -> dict[str, str]:
        conf = {}
        for item in self.config.spark_conf:
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--spark-conf wants KEY=VALUE, got {item!r}")
            conf[key.strip()] = value.strip()
        return conf

    def build_resolver(self) -> IdentityResolver:
        config = self.config
        return build_resolver(
            config.identity_sources,
            jwt_secret_file=config.jwt_secret_file,
            jwt_public_key_file=config.jwt_public_key_file,
            jwt_jwks_file=config.jwt_jwks_file,
            jwt_issuer=config.jwt_issuer,
            jwt_audience=config.jwt_audience,
            jwt_principal_claim=config.jwt_principal_claim,
            jwt_groups_claim=config.jwt_groups_claim,
            token_file=config.token_file,
            require_auth=config.require_auth,
        )

    def build_pipeline(self, local_operations: LocalOperations) -> Pipeline:
        admins = [validate_admin_member(member) for member in self.config.admin]

        def caller_is_admin(caller) -> bool:
            return is_admin(caller, admins)

        # start() opened these before it builds the pipeline
        assert self.upstream is not None and self.store is not None and self.policies is not None
        sessions = SessionRegistry()
        catalog = UpstreamCatalog(self.upstream, timeout_seconds=self.config.catalog_timeout_seconds)
        recall = SessionRecall(sessions, catalog)
        # the state versions Spark holds, which every change of state moves (pipeline/session/epoch.py)
        # A question of the catalog's state like the catalog's own (DESCRIBE ...): the same bound.
        self.versions = versions = StateVersions(
            self.upstream, sessions, timeout=self.config.catalog_timeout_seconds, observe=metrics.observe_state_read
        )
        positions = SessionPositions(sessions, catalog, recorder=recall, versions=versions)
        upstream_sessions = UpstreamSessions(sessions)
        release_acks = ReleaseAcks(upstream_sessions.server_side_id)
        guard = ConfigGuard(sessions, caller_is_admin, learned=upstream_sessions.learned)
        policy_service = PolicyService(self.store, self.policies, catalog)
        statements = PolicyStatements(policy_service, positions, caller_is_admin)
        # kept for the admin API (proxy/rowgate/admin), added to the server in start()
        self.policy_service, self.catalog, self.caller_is_admin = policy_service, catalog, caller_is_admin
        code_rules = CodeRules.from_config(self.config)
        artifacts = ArtifactGuard(code_rules, self.policies, caller_is_admin)
        lanes = CallerLanes(width=self.config.checks_per_caller)
        enforcement = Enforcement(
            self.policies, catalog, positions, caller_is_admin, rewrite_plans, code_rules,
            rewrite_memo=RewriteMemo(observe=metrics.observe_sql_rewrite), path_rules=PathRules.from_config(self.config),
            lanes=lanes, max_sql_kib=self.config.max_sql_kib,
        )  # fmt: skip
        metrics.track_lanes(lanes)
        if not self.config.no_second_opinion:
            enforcement.second_opinion = SecondOpinion(self.upstream, observe=metrics.observe_second_opinion, offload=lanes.run)
        remember_filtered, continue_filtered = filtered_operations_steps(FilteredOperations(caller_is_admin))
        refuse_foreign_checkpoints, learn_checkpoints = CheckpointOwners().steps()
        # In order; each step names the RPCs it handles and the facts (pipeline/core.py `Facts`)
        # it reads and writes, and Pipeline checks that every fact is written before it is read.
        return Pipeline(
            [
                step(open_compressed_plans, PLAN_RPCS, writes=["compressed_plans"]),
                step(pin_session, EVERY_RPC),
                refuse_foreign_checkpoints,
                step(recall.connection_step, EVERY_RPC),
                step(StatusRequests(self.policies).step, ["GetStatus"]),
                local_operations_step(local_operations),
                release_acks_step(release_acks),
                step(guard.config_rpc, ["Config"]),
                step(guard.prepare_session, ["ExecutePlan", "AnalyzePlan", "Config", "AddArtifacts"]),
                step(upstream_sessions.step, EVERY_RPC),
                step(versions.config_step, ["Config"]),  # settings change inside a version change
                step(artifacts.step, ["AddArtifacts"]),
                step(statements.step, PLAN_RPCS, writes=["policy_statement", "state_read"]),
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
                ),
                SessionDataReads(sessions, self.policies).step(),  # before remember_filtered reads the verdict
                remember_filtered,
                continue_filtered,
                *StreamingQueries(self.policies, sessions).steps(),  # after: composes hooks
                StaleStreams(self.policies, self.upstream).step(),
                learn_checkpoints,
                step(recompress_plans, PLAN_RPCS, reads=["compressed_plans"]),
                step(versions.analysis_step, ["AnalyzePlan"]),  # persist/unpersist inside a version change
                # statements that change settings, variables, functions or the catalog: run to
                # their end inside a version change, every response hook applied
                step(versions.statement_step, ["ExecutePlan"], reads=["state_scope", "state_read"]),
            ]
        )

    async def start(self) -> None:
        config = self.config
        allow_deep_plans()
        # Identity and store problems are configuration errors: find them before starting Spark.
        resolver = self.build_resolver()
        Path(config.data_dir).mkdir(parents=True, exist_ok=True)
        self.store = open_store(config.resolved_policy_store())
        self.policies = PolicyCache(self.store)
        if config.upstream:
            upstream_url = parse_upstream_url(config.upstream)
            if config.upstream_token_file:
                token = Path(config.upstream_token_file).read_text().strip()
                upstream_url = dataclasses.replace(upstream_url, token=token)
        else:
            self.embedded = EmbeddedSparkConnect(
                data_dir=Path(config.data_dir) / "spark",
                driver_memory=config.spark_driver_memory,
                conf=self._embedded_conf(),
            )
            await asyncio.to_thread(self.embedded.start)
            upstream_url = parse_upstream_url(self.embedded.url)
        max_bytes = config.max_message_mb * 1024 * 1024
        self.upstream = Upstream(upstream_url, max_message_bytes=max_bytes, ca_file=config.upstream_ca_file)
        self.upstream.open()

        local_operations = LocalOperations()
        proxy = SparkConnectProxy(
            self.upstream,
            self.build_pipeline(local_operations),
            resolve_caller=resolver.resolve,
            identity_errors=(IdentityError,),
            local_operations=local_operations,
            observer=AuditingObserver(),
        )
        if config.metrics_listen:
            serve_metrics(config.metrics_listen)
        self.server = grpc.aio.server(options=server_options(max_bytes))
        self.server.add_generic_rpc_handlers((proxy.generic_handler(),))
        # rowgate.v1.PolicyAdmin on the same port (proxy/rowgate/admin/service.py)
        from rowgate.admin.service import add_policy_admin

        add_policy_admin(self.server, self.policy_service, resolver.resolve, self.caller_is_admin, self.policies, self.catalog)
        self.health = Health(self.upstream, self.policies)
        await self.health.prepare()
        health_pb2_grpc.add_HealthServicer_to_server(self.health.servicer, self.server)
        if config.tls_cert:
            if not config.tls_key:
                raise ValueError("--tls-cert needs --tls-key")
            creds = grpc.ssl_server_credentials([(Path(config.tls_key).read_bytes(), Path(config.tls_cert).read_bytes())])
            self.port = self.server.add_secure_port(config.listen, creds)
        else:
            self.port = self.server.add_insecure_port(config.listen)
        if not self.port:
            raise OSError(f"cannot listen on {config.listen}")
        await self.server.start()
        await self.health.start()
        if self.versions is not None:
            self.versions.start()  # keeps the shared state session alive
        log.info(
            "rowgate is serving",
            extra={
                "listen": config.listen,
                "port": self.port,
                "upstream": upstream_url.redacted(),
                "embedded": self.embedded is not None,
                "tls": bool(config.tls_cert),
            },
        )

    async def stop(self) -> None:
        grace = self.config.shutdown_grace_seconds
        if self.health is not None:
            await self.health.stop()  # every service NOT_SERVING from here on
        if self.server is not None:
            log.info("stopping: no new calls; running streams get %.0fs", grace)
            await self.server.stop(grace)
        if self.versions is not None:
            await self.versions.stop()
        if self.upstream is not None:
            await self.upstream.close()
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)
        if self.policies is not None:
            self.policies.close()
        if self.store is not None:
            self.store.close()
        log.info("rowgate stopped")


async def _serve(config: ServeConfig) -> int:
    app = RowgateApp(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await app.start()
        await stop.wait()
    finally:
        await app.stop()
    return 0


def serve(config: ServeConfig) -> int:
    # gRPC's asyncio stack spends most of the proxy's CPU in event-loop machinery (wakeups,
    # callbacks, the poller socket); uvloop does that part in C. Measured with
    # benchmarks/bench.py: 12.8 instead of 13.8 ms of proxy CPU per pyspark `SELECT 1`.
    if config.event_loop == "uvloop":
        try:
            import uvloop
        except ImportError:  # e.g. a platform without wheels: the stock loop works the same
            log.warning("uvloop is not installed; using the asyncio event loop")
        else:
            return uvloop.run(_serve(config))
    return asyncio.run(_serve(config))

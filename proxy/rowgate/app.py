"""Assembles the proxy from its configuration and runs it until a signal stops it."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2_grpc

from rowgate.config import ServeConfig
from rowgate.embedded.spark import EmbeddedSparkConnect
from rowgate.health import Health
from rowgate.identity.errors import IdentityError
from rowgate.identity.resolver import IdentityResolver, build_resolver
from rowgate.observability.metrics import serve_metrics
from rowgate.pipeline.assembly import build_pipeline
from rowgate.pipeline.core import Pipeline
from rowgate.pipeline.operations.local import LocalOperations
from rowgate.pipeline.session.epoch import StateVersions
from rowgate.policy.snapshot import PolicyCache
from rowgate.policy.store import PolicyStore, open_store
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
        """The request path (pipeline/assembly.py), over the upstream and store start() opened."""
        assert self.upstream is not None and self.store is not None and self.policies is not None
        assembled = build_pipeline(self.config, self.upstream, self.store, self.policies, local_operations)
        self.versions = assembled.versions
        # kept for the admin API (proxy/rowgate/admin), added to the server in start()
        self.policy_service, self.catalog = assembled.policy_service, assembled.catalog
        self.access = assembled.access
        return assembled.pipeline

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

        add_policy_admin(self.server, self.policy_service, resolver.resolve, self.access.is_admin, self.policies, self.catalog)
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

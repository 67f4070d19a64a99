"""Liveness and readiness (proxy/rowgate/health.py) over a real gRPC health server, asked
the way orchestrators ask: with `rowgate.probe`, the module the image's HEALTHCHECK runs."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rowgate import probe
from rowgate.health import LIVENESS, READINESS, READINESS_SERVICES, Health

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


@dataclass
class Url:
    target: str = "spark.example:15002"


class FakeUpstream:
    """Answers the probe's Config call with `answers[0]` (an error to raise, or None: OK);
    a list longer than one is consumed call by call."""

    def __init__(self, *answers):
        self.url = Url()
        self.answers = list(answers) or [None]
        self.sessions: list[str] = []

    async def call(self, name, request, *, timeout=None):
        assert name == "Config" and timeout is not None
        self.sessions.append(request.session_id)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer is not None:
            raise answer


@dataclass
class FakePolicies:
    healthy: bool = True
    last_error: BaseException | None = None
    stale_since: object = None


def status(port: int, service: str) -> int:
    return probe.check(f"127.0.0.1:{port}", service, timeout=5)


async def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def serve(upstream, policies, scenario, **intervals):
    """Runs `scenario(health, port)` against a health server on a free loopback port."""

    async def main():
        health = Health(upstream, policies, **intervals)
        server = grpc.aio.server()
        await health.prepare()
        health_pb2_grpc.add_HealthServicer_to_server(health.servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            await scenario(health, port)
        finally:
            await health.stop()
            await server.stop(None)

    asyncio.run(main())


def test_nothing_is_ready_before_the_first_check_and_everything_after_a_good_one():
    async def scenario(health, port):
        for service in (LIVENESS, *READINESS_SERVICES):
            assert await asyncio.to_thread(status, port, service) == NOT_SERVING, service
        await health.start()
        for service in (LIVENESS, *READINESS_SERVICES):
            assert await asyncio.to_thread(status, port, service) == SERVING, service

    serve(FakeUpstream(), FakePolicies(), scenario)


@pytest.mark.parametrize(
    "code, words",
    [
        (grpc.StatusCode.UNAUTHENTICATED, "rejects rowgate's credentials"),
        (grpc.StatusCode.PERMISSION_DENIED, "rejects rowgate's credentials"),
        (grpc.StatusCode.UNAVAILABLE, "does not answer"),
        (grpc.StatusCode.INTERNAL, "answered INTERNAL"),  # any error: not a sign of a working server
    ],
)
def test_an_upstream_that_does_not_accept_the_proxy_is_not_ready_but_the_process_is_alive(code, words, caplog):
    upstream = FakeUpstream(rpc_error(code, "Invalid authentication token"))

    async def scenario(health, port):
        await health.start()
        assert await asyncio.to_thread(status, port, READINESS) == NOT_SERVING
        assert await asyncio.to_thread(status, port, "") == NOT_SERVING
        assert await asyncio.to_thread(status, port, "spark.connect.SparkConnectService") == NOT_SERVING
        assert await asyncio.to_thread(status, port, LIVENESS) == SERVING
        await wait_until(lambda: len(upstream.sessions) >= 4)  # several rounds, same reason

    with caplog.at_level(logging.INFO, logger="rowgate.health"):
        serve(upstream, FakePolicies(), scenario, upstream_interval=0.05, policy_interval=0.02)
    said = [r.getMessage() for r in caplog.records if "readiness" in r.getMessage()]
    assert len(said) == 1, said  # the reason is logged once per change, not once per check
    assert words in said[0] and code.name in said[0] and "spark.example:15002" in said[0]


def test_a_stale_policy_snapshot_is_not_ready_and_its_return_is_noticed_within_the_policy_interval(caplog):
    policies = FakePolicies(healthy=False, last_error=ConnectionError("connection refused"))

    async def scenario(health, port):
        await health.start()
        assert await asyncio.to_thread(status, port, READINESS) == NOT_SERVING
        assert await asyncio.to_thread(status, port, LIVENESS) == SERVING
        policies.healthy, policies.last_error = True, None
        back = time.monotonic()
        await wait_until(lambda: status(port, READINESS) == SERVING, timeout=5)
        assert time.monotonic() - back < 2.0  # the upstream's 60 s interval played no part
        policies.healthy = False
        await wait_until(lambda: status(port, READINESS) == NOT_SERVING, timeout=5)
        assert await asyncio.to_thread(status, port, LIVENESS) == SERVING

    with caplog.at_level(logging.INFO, logger="rowgate.health"):
        serve(FakeUpstream(), policies, scenario, upstream_interval=60, policy_interval=0.05)
    said = [r.getMessage() for r in caplog.records if "readiness" in r.getMessage()]
    assert len(said) == 3 and "policy store is unreachable" in said[0] and "connection refused" in said[0], said


def test_a_probe_session_spark_closed_is_replaced_at_once():
    gone = rpc_error(grpc.StatusCode.INTERNAL, "[INVALID_HANDLE.SESSION_CLOSED] The handle is invalid.")
    upstream = FakeUpstream(gone, None)

    async def scenario(health, port):
        await health.start()
        assert await asyncio.to_thread(status, port, READINESS) == SERVING
        assert len(set(upstream.sessions)) == 2

    serve(upstream, FakePolicies(), scenario, upstream_interval=60)


def test_shutdown_turns_every_service_not_serving():
    async def scenario(health, port):
        await health.start()
        await health.stop()
        for service in (LIVENESS, *READINESS_SERVICES):
            assert await asyncio.to_thread(status, port, service) == NOT_SERVING

    serve(FakeUpstream(), FakePolicies(), scenario)


def test_probe_exit_codes(capsys):
    async def scenario(health, port):
        await health.start()
        target = f"127.0.0.1:{port}"
        assert await asyncio.to_thread(probe.main, ["--service", LIVENESS, "--target", target], {}) == 0
        assert await asyncio.to_thread(probe.main, ["--service", READINESS, "--target", target], {}) == 1
        assert await asyncio.to_thread(probe.main, ["--service", "nonesuch", "--target", target], {}) == 1
        # The default target is the port rowgate listens on, dialled on loopback.
        assert await asyncio.to_thread(probe.main, ["--service", LIVENESS], {"ROWGATE_LISTEN": f"0.0.0.0:{port}"}) == 0

    serve(FakeUpstream(rpc_error(grpc.StatusCode.UNAUTHENTICATED, "bad token")), FakePolicies(), scenario)
    out = capsys.readouterr()
    assert "liveness at 127.0.0.1:" in out.out and "NOT_SERVING" in out.out and "NOT_FOUND" in out.err


def test_probe_without_a_proxy_fails():
    assert probe.main(["--target", "127.0.0.1:1", "--timeout", "0.5"], {}) == 1


@pytest.mark.parametrize(
    "listen, target",
    [
        ("0.0.0.0:15002", "127.0.0.1:15002"),
        ("[::]:7000", "127.0.0.1:7000"),
        ("10.1.2.3:15002", "10.1.2.3:15002"),
        ("[::1]:15002", "[::1]:15002"),
    ],
)
def test_probe_default_target_follows_rowgate_listen(listen, target):
    assert probe.default_target({"ROWGATE_LISTEN": listen}) == target


def self_signed(tmp_path):
    """A certificate for localhost, as an operator's --tls-cert/--tls-key."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_probe_speaks_tls_when_the_proxy_does(tmp_path):
    cert_path, key_path = self_signed(tmp_path)

    async def main():
        health = Health(FakeUpstream(), FakePolicies())
        server = grpc.aio.server()
        await health.prepare()
        health_pb2_grpc.add_HealthServicer_to_server(health.servicer, server)
        creds = grpc.ssl_server_credentials([(key_path.read_bytes(), cert_path.read_bytes())])
        port = server.add_secure_port("127.0.0.1:0", creds)
        await server.start()
        try:
            await health.start()
            env = {"ROWGATE_LISTEN": f"0.0.0.0:{port}", "ROWGATE_TLS_CERT": str(cert_path)}
            assert await asyncio.to_thread(probe.main, ["--service", READINESS], env) == 0
            # Without TLS the probe gets no answer: it must follow the proxy's setting.
            assert (
                await asyncio.to_thread(
                    probe.main, ["--service", READINESS, "--timeout", "1"], {"ROWGATE_LISTEN": f"0.0.0.0:{port}"}
                )
                == 1
            )
        finally:
            await health.stop()
            await server.stop(None)

    asyncio.run(main())

"""The proxy survives its upstream and shuts down cleanly, with a real Spark Connect server."""

from __future__ import annotations

import signal
import threading
import time

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pyspark.sql.connect.proto import base_pb2

from rowgate.embedded.spark import EmbeddedSparkConnect, free_port
from tests.conftest import execute_sql
from tests.deadlines import scaled

pytestmark = pytest.mark.spark


def config_call(target_channel):
    return target_channel.unary_unary(
        "/spark.connect.SparkConnectService/Config",
        request_serializer=base_pb2.ConfigRequest.SerializeToString,
        response_deserializer=base_pb2.ConfigResponse.FromString,
    )


def a_config_request():
    return base_pb2.ConfigRequest(
        session_id="9b0d4c47-45a1-4c36-a1a7-2a3c1f0e6d11",
        user_context=base_pb2.UserContext(user_id="u"),
        operation=base_pb2.ConfigRequest.Operation(
            get_option=base_pb2.ConfigRequest.GetOption(keys=["spark.sql.session.timeZone"])
        ),
    )


def health_status(proxy):
    with grpc.insecure_channel(proxy.target) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=scaled(5)).status


def test_upstream_that_comes_back_is_served_again_and_a_mid_stream_death_is_reported(proxy_factory, tmp_path):
    port = free_port()
    proxy = proxy_factory(upstream=f"sc://127.0.0.1:{port}")
    with grpc.insecure_channel(proxy.target) as channel:
        with pytest.raises(grpc.RpcError) as info:
            config_call(channel)(a_config_request(), timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE

    assert health_status(proxy) == health_pb2.HealthCheckResponse.NOT_SERVING

    server = EmbeddedSparkConnect(data_dir=tmp_path / "spark2", port=port, driver_memory="512m").start()
    try:
        limit = scaled(15)
        deadline = time.monotonic() + limit
        while health_status(proxy) != health_pb2.HealthCheckResponse.SERVING:
            assert time.monotonic() < deadline, f"proxy did not become ready within {limit:.0f} s of its upstream"
            time.sleep(0.3)
        while True:  # the proxy reconnects by itself; no restart, no manual step
            try:
                with grpc.insecure_channel(proxy.target) as channel:
                    config_call(channel)(a_config_request(), timeout=scaled(5))
                break
            except grpc.RpcError:
                assert time.monotonic() < deadline, f"proxy did not reconnect within {limit:.0f} s"
                time.sleep(0.3)

        with grpc.insecure_channel(proxy.target) as channel:
            stream = execute_sql(channel, "SELECT id, sha2(cast(id AS STRING), 256) FROM range(50000000)")
            received = 0
            with pytest.raises(grpc.RpcError) as info:
                for response in stream:
                    received += 1
                    if response.HasField("arrow_batch") and server.alive():
                        server.kill()
        assert received >= 1
        assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
    finally:
        server.stop()

    # The proxy itself is still up, still answers, and says what is wrong.
    with grpc.insecure_channel(proxy.target) as channel:
        with pytest.raises(grpc.RpcError) as info:
            config_call(channel)(a_config_request(), timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert proxy.proc.poll() is None


def test_sigterm_lets_running_streams_finish_then_exits_zero(proxy_factory):
    # A raw, non-reattachable ExecutePlan: the upstream keeps the stream open until the
    # result is complete, so this shows the proxy draining a stream it already relays.
    proxy = proxy_factory("--shutdown-grace-seconds", "60")
    result = {}
    # The query must still run when SIGTERM comes: give it time to reach the proxy (longer on
    # a loaded machine) and make it outlast that pause by several seconds.
    pause = scaled(2)
    seconds = int(pause) + 6

    def long_query():
        try:
            with grpc.insecure_channel(proxy.target) as channel:
                # One partition sleeping 1 s per row: `seconds` s whatever the machine's load.
                responses = list(
                    execute_sql(
                        channel,
                        f"SELECT count(*) AS n FROM range(0, {seconds}, 1, 1) "
                        "WHERE java_method('java.lang.Thread', 'sleep', CAST(1000 AS BIGINT)) IS NULL",
                        timeout=scaled(120),
                    )
                )
            result["complete"] = any(r.HasField("result_complete") for r in responses) or bool(responses)
            result["batches"] = sum(r.HasField("arrow_batch") for r in responses)
        except Exception as e:
            result["error"] = e

    worker = threading.Thread(target=long_query)
    worker.start()
    time.sleep(pause)
    assert worker.is_alive(), "the query finished before the shutdown began; make it longer"
    code = proxy.stop(signal.SIGTERM)
    worker.join(timeout=scaled(90))
    assert code == 0
    assert "error" not in result, result
    assert result["batches"] == 1
    # And it no longer accepts new calls.
    with grpc.insecure_channel(proxy.target) as channel:
        with pytest.raises(grpc.RpcError):
            config_call(channel)(a_config_request(), timeout=3)


def _self_signed(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = __import__("datetime").datetime.now(__import__("datetime").timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - __import__("datetime").timedelta(minutes=5))
        .not_valid_after(now + __import__("datetime").timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_tls_on_the_listening_side(proxy_factory, tmp_path):
    cert, key = _self_signed(tmp_path)
    proxy = proxy_factory("--tls-cert", str(cert), "--tls-key", str(key), health_tls_root=cert)
    creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    with grpc.secure_channel(f"localhost:{proxy.port}", creds) as channel:
        reply = config_call(channel)(a_config_request(), timeout=scaled(30))
    assert reply.server_side_session_id
    # A plaintext client cannot talk to a TLS listener.
    with grpc.insecure_channel(proxy.target) as channel:
        with pytest.raises(grpc.RpcError):
            config_call(channel)(a_config_request(), timeout=3)

"""Who the caller is, and that nobody can borrow another caller's Spark session.

Real pyspark clients through real proxies in front of the session's Spark Connect server.
The hijack tests give two callers the same session_id and check that everything keyed by
the session (temp views, config, cached relations, operations) stays apart.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from pyspark.errors import PySparkException
from pyspark.sql.connect.proto import base_pb2

from tests.conftest import remote_url, unique
from tests.deadlines import scaled, wait_until

pytestmark = pytest.mark.spark

AUDIENCE = "rowgate-tests"
ISSUER = "https://issuer.example.com"


def token_for(key, alg, email="ann@example.com", **claims):
    payload = {"email": email, "aud": AUDIENCE, "iss": ISSUER, "exp": int(time.time()) + 600, **claims}
    headers = {"kid": "k1"} if alg == "ES256" else None
    return jwt.encode(payload, key, algorithm=alg, headers=headers)


def run_query(sessions, url):
    spark = sessions(url)
    return spark.sql("SELECT 42 AS answer").first()["answer"]


def refused(sessions, url) -> str:
    with pytest.raises(Exception) as info:
        run_query(sessions, url)
    text = str(info.value)
    assert "UNAUTHENTICATED" in text or "Unauthenticated" in text or "unauthenticated" in text.lower(), text
    return text


@pytest.fixture(scope="module")
def hs_proxy(proxy_factory, tmp_path_factory):
    secret = tmp_path_factory.mktemp("hs") / "secret"
    secret.write_text("a-shared-secret-of-at-least-32-bytes!!")
    proxy = proxy_factory(
        "--identity", "jwt", "--jwt-secret-file", str(secret), "--jwt-audience", AUDIENCE, "--jwt-issuer", ISSUER
    )
    proxy.extra["secret"] = secret.read_text()
    return proxy


def test_hs256_token_is_accepted(hs_proxy, sessions):
    token = token_for(hs_proxy.extra["secret"], "HS256")
    assert run_query(sessions, remote_url(hs_proxy.url, token=token)) == 42


@pytest.mark.parametrize(
    "case, make, reason",
    [
        ("expired", lambda s: token_for(s, "HS256", exp=int(time.time()) - 60), "expired"),
        ("wrong audience", lambda s: token_for(s, "HS256", aud="someone-else"), "audience"),
        ("wrong signature", lambda s: token_for("another-secret-that-is-long-enough!!", "HS256"), "signature"),
        ("alg none", lambda s: jwt.encode({"email": "ann@example.com", "aud": AUDIENCE}, None, algorithm="none"), "none"),
    ],
)
def test_bad_tokens_are_unauthenticated_with_a_reason(hs_proxy, sessions, case, make, reason):
    text = refused(sessions, remote_url(hs_proxy.url, token=make(hs_proxy.extra["secret"])))
    assert reason in text.lower(), (case, text)


def test_tampered_payload_is_refused(hs_proxy, sessions):
    token = token_for(hs_proxy.extra["secret"], "HS256", email="ann@example.com")
    header, payload, signature = token.split(".")
    forged = jwt.utils.base64url_encode(
        json.dumps({**json.loads(jwt.utils.base64url_decode(payload)), "email": "admin@example.com"}).encode()
    ).decode()
    text = refused(sessions, remote_url(hs_proxy.url, token=f"{header}.{forged}.{signature}"))
    assert "signature" in text.lower()


def test_rs256_public_key_and_es256_jwks(proxy_factory, sessions, tmp_path):
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "rsa.pem"
    pem.write_bytes(
        rsa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    rs_proxy = proxy_factory("--identity", "jwt", "--jwt-public-key-file", str(pem), "--jwt-audience", AUDIENCE)
    assert run_query(sessions, remote_url(rs_proxy.url, token=token_for(rsa_key, "RS256"))) == 42
    # The same token re-signed as HS256 with the public key as secret (algorithm confusion).
    confused = jwt.encode({"email": "ann@example.com", "aud": AUDIENCE}, b"x" * 64, algorithm="HS256")
    refused(sessions, remote_url(rs_proxy.url, token=confused))

    ec_key = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(ec_key.public_key()))
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "ES256", "use": "sig"}]}))
    es_proxy = proxy_factory("--identity", "jwt", "--jwt-jwks-file", str(jwks), "--jwt-audience", AUDIENCE)
    assert run_query(sessions, remote_url(es_proxy.url, token=token_for(ec_key, "ES256"))) == 42
    other_key = ec.generate_private_key(ec.SECP256R1())
    refused(sessions, remote_url(es_proxy.url, token=token_for(other_key, "ES256")))


def test_static_token_anonymous_and_require_auth(proxy_factory, sessions, tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("- {token: svc-etl-token, principal: 'serviceAccount:etl@example.com', groups: [data@example.com]}\n")
    open_proxy = proxy_factory("--identity", "token", "--token-file", str(tokens))
    assert run_query(sessions, remote_url(open_proxy.url, token="svc-etl-token")) == 42
    assert "unknown token" in refused(sessions, remote_url(open_proxy.url, token="not-a-known-token")).lower()
    assert run_query(sessions, open_proxy.url) == 42  # no credential: anonymous

    strict = proxy_factory("--identity", "token", "--token-file", str(tokens), "--require-auth")
    assert "no credential" in refused(sessions, strict.url).lower()
    assert run_query(sessions, remote_url(strict.url, token="svc-etl-token")) == 42


def test_identity_header_is_refused_when_the_header_source_is_off(proxy_factory, sessions, tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("- {token: t1, principal: 'user:ann@example.com'}\n")
    proxy = proxy_factory("--identity", "token", "--token-file", str(tokens))
    text = refused(sessions, remote_url(proxy.url, user="user:admin@example.com"))
    assert "x-rowgate-user" in text


def test_header_source_refuses_a_non_loopback_listener_without_explicit_trust(tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rowgate.cli",
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--identity",
            "header",
            "--upstream",
            "sc://127.0.0.1:1",
            "--data-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--trust-headers-from-network" in result.stderr


# -- session hijack: same session_id, two callers ---------------------------------------


def same_session(proxy, sessions, session_id):
    alice = sessions(remote_url(proxy.url, user="user:alice@example.com", session_id=session_id))
    mallory = sessions(remote_url(proxy.url, user="user:mallory@example.com", session_id=session_id))
    return alice, mallory


def test_temp_views_and_config_stay_with_their_caller(proxy, sessions):
    alice, mallory = same_session(proxy, sessions, str(uuid.uuid4()))
    view = unique("secret_view")
    alice.range(7).createOrReplaceTempView(view)
    alice.conf.set("spark.sql.shuffle.partitions", "3")
    assert alice.table(view).count() == 7
    with pytest.raises(PySparkException) as info:
        mallory.table(view).count()
    assert "TABLE_OR_VIEW_NOT_FOUND" in str(info.value)
    assert mallory.conf.get("spark.sql.shuffle.partitions") != "3"
    assert alice.client._server_session_id != mallory.client._server_session_id


def test_cached_relations_stay_with_their_caller(proxy, sessions):
    alice, mallory = same_session(proxy, sessions, str(uuid.uuid4()))
    checkpointed = alice.range(5).localCheckpoint()
    relation_id = checkpointed._plan.plan(alice.client).cached_remote_relation.relation_id
    assert relation_id and checkpointed.count() == 5
    from pyspark.sql.connect.dataframe import DataFrame
    from pyspark.sql.connect.plan import CachedRemoteRelation

    stolen = DataFrame(CachedRemoteRelation(relation_id, mallory), mallory)
    with pytest.raises(PySparkException) as info:
        stolen.count()
    # rowgate saw alice's session make it (proxy/rowgate/pipeline/operations/checkpoint_owners.py); Spark
    # itself would answer `No DataFrame with id` for an id it keeps in another session.
    assert "checkpointed in another Spark session" in str(info.value) and relation_id in str(info.value)


def _raw(proxy, name, request_cls, response_cls, user):
    channel = grpc.insecure_channel(proxy.target)
    metadata = (("x-rowgate-user", user),)
    method = f"/spark.connect.SparkConnectService/{name}"
    if name == "ReattachExecute":
        call = channel.unary_stream(method, request_cls.SerializeToString, response_cls.FromString)
    else:
        call = channel.unary_unary(method, request_cls.SerializeToString, response_cls.FromString)
    return channel, lambda request: call(request, metadata=metadata, timeout=30)


def test_operations_cannot_be_reattached_released_or_interrupted_by_another_caller(proxy, sessions):
    session_id = str(uuid.uuid4())
    alice = sessions(remote_url(proxy.url, user="user:alice@example.com", session_id=session_id))
    tag = unique("job")
    outcome = {}

    def long_job():
        alice.addTag(tag)  # tags belong to the thread that starts the operation
        try:
            outcome["rows"] = alice.range(0, 10**13, numPartitions=2).selectExpr("sum(id % 7)").collect()
        except Exception as e:
            outcome["error"] = e

    worker = threading.Thread(target=long_job)
    worker.start()
    time.sleep(scaled(3))  # let alice's job start: there is no API to see another caller's operations
    operation_id = str(uuid.uuid4())  # whatever id: mallory cannot even learn alice's

    channel, interrupt = _raw(
        proxy, "Interrupt", base_pb2.InterruptRequest, base_pb2.InterruptResponse, "user:mallory@example.com"
    )
    with channel:
        # Mallory claims alice's user_id in the body too; the proxy overwrites it.
        response = interrupt(
            base_pb2.InterruptRequest(
                session_id=session_id,
                user_context=base_pb2.UserContext(user_id="user:alice@example.com"),
                interrupt_type=base_pb2.InterruptRequest.INTERRUPT_TYPE_ALL,
            )
        )
    assert list(response.interrupted_ids) == []

    channel, reattach = _raw(
        proxy, "ReattachExecute", base_pb2.ReattachExecuteRequest, base_pb2.ExecutePlanResponse, "user:mallory@example.com"
    )
    with channel, pytest.raises(grpc.RpcError) as info:
        list(
            reattach(
                base_pb2.ReattachExecuteRequest(
                    session_id=session_id,
                    user_context=base_pb2.UserContext(user_id="user:alice@example.com"),
                    operation_id=operation_id,
                )
            )
        )
    assert "INVALID_HANDLE" in info.value.details() or "OPERATION" in info.value.details()

    assert worker.is_alive(), "mallory's interrupt stopped alice's job"
    wait_until(lambda: alice.interruptTag(tag), "alice's own job to be interruptible by its tag", 30, interval=0.5)
    worker.join(timeout=scaled(60))
    assert "error" in outcome

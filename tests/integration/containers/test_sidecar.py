"""The pod of docker/k8s/sidecar.yaml, reproduced with containers: rowgate joins the Spark
Connect container's network namespace (`--network container:<spark>`), as the containers
of a pod share theirs, and runs with the manifest's command, environment, configuration,
secrets, security context and memory limit. The pod's published port is rowgate's; Spark
listens on the pod's loopback only, so a client reaches rowgate and nothing else, and
rowgate reaches Spark on 127.0.0.1.

Taken from the manifest as written: Spark's command, rowgate's args, env, ConfigMap and
Secret, ports and probes. Changed for the test: Spark's driver memory (1g: the machine is
shared), the JWKS (a key the test signs with instead of the Secret's empty set), and
PostgreSQL (the Service `rowgate-postgres` the ConfigMap names is a container of the
same network, trusting its clients as the ConfigMap's password-less URL needs)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import urlsplit

import jwt
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import rsa

from rowgate.embedded.spark import free_port
from tests.conftest import remote_url, unique
from tests.deadlines import wait_until
from tests.integration.containers.engine import EU_ROWS, REPO, US_ROWS, health, protect_a_table, rows_seen

pytestmark = [pytest.mark.containers, pytest.mark.timeout(3600)]

MANIFEST = REPO / "docker" / "k8s" / "sidecar.yaml"


def manifest() -> dict:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    secret = next(d for d in docs if d["kind"] == "Secret")
    service = next(d for d in docs if d["kind"] == "Service")
    return {
        "pod": pod,
        "spark": containers["spark-connect"],
        "rowgate": containers["rowgate"],
        "config_map": config_map,
        "secret": secret,
        "service": service,
    }


def mount_path(container: dict, volume: str) -> str:
    return next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == volume)


def memory_bytes(text: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    return int(text[:-2]) * units[text[-2:]]


class Pod:
    def __init__(self, docker, images, tmp: Path):
        m = manifest()
        self.docker, self.m = docker, m
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        rowgate = m["rowgate"]
        self.grpc_port = next(p["containerPort"] for p in rowgate["ports"] if p["name"] == "grpc")
        self.config = yaml.safe_load(m["config_map"]["data"]["config.yaml"])
        self.network = docker.network("pod-net")

        # The policy store the ConfigMap names, as the Service it would be.
        store = urlsplit(self.config["policy_store"])
        self.postgres = docker.name("rowgate-postgres")
        docker.run(
            "--name", self.postgres, "--network", self.network, "--network-alias", store.hostname,
            "--env", f"POSTGRES_USER={store.username}", "--env", f"POSTGRES_DB={store.path.lstrip('/')}",
            "--env", "POSTGRES_HOST_AUTH_METHOD=trust",
            images["POSTGRES_IMAGE"],
        )  # fmt: skip

        # Kubernetes would restart a rowgate that found no store yet; here the Service is up first.
        def store_up() -> bool:
            return docker.alive(self.postgres) and "accepting connections" in docker(
                "exec", self.postgres, "pg_isready", check=False
            )

        wait_until(store_up, "PostgreSQL to accept connections")

        # The pod: its network namespace is the Spark container's; what the Service exposes
        # (targetPort grpc) is published on the host's loopback.
        self.port = free_port()
        command = [c.replace("spark.driver.memory=4g", "spark.driver.memory=1g") for c in m["spark"]["command"]]
        self.spark = docker.name("spark-connect")
        docker.run(
            "--name", self.spark, "--network", self.network, "--network-alias", m["service"]["metadata"]["name"],
            "--publish", f"127.0.0.1:{self.port}:{self.grpc_port}",
            images["SPARK_IMAGE"], *command,
        )  # fmt: skip

        # The rowgate container as the manifest runs it.
        config_dir, secrets = tmp / "config", tmp / "secrets"
        config_dir.mkdir()
        secrets.mkdir()
        (config_dir / "config.yaml").write_text(m["config_map"]["data"]["config.yaml"])
        for name, value in m["secret"]["stringData"].items():
            (secrets / name).write_text(value)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        (secrets / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "pod-key", "alg": "RS256", "use": "sig"}]}))
        for path in (config_dir / "config.yaml", *secrets.iterdir()):
            path.chmod(0o644)  # a mounted Secret/ConfigMap is readable by the pod's user
        secrets.chmod(0o755)
        security = rowgate["securityContext"]
        assert security["runAsNonRoot"] and security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
        config_mount = next(m_ for m_ in rowgate["volumeMounts"] if m_["name"] == "config")
        self.rowgate = docker.name("rowgate")
        docker.run(
            "--name", self.rowgate, "--network", f"container:{self.spark}",
            "--user", str(security["runAsUser"]), "--read-only", "--security-opt", "no-new-privileges",
            "--memory", str(memory_bytes(rowgate["resources"]["limits"]["memory"])),
            "--volume", f"{config_dir / config_mount['subPath']}:{config_mount['mountPath']}:ro",
            "--volume", f"{secrets}:{mount_path(rowgate, 'identity')}:ro",
            # an emptyDir: a fresh directory every uid may write
            "--mount", f"type=tmpfs,destination={mount_path(rowgate, 'data')},tmpfs-mode=0777",
            *[arg for e in rowgate["env"] for arg in ("--env", f"{e['name']}={e['value']}")],
            images["ROWGATE_IMAGE"], *rowgate["args"],
        )  # fmt: skip

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, email: str, groups: list[str]) -> str:
        claims = {"email": email, "groups": groups, "aud": self.config["jwt_audience"], "exp": int(time.time()) + 3600}
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "pod-key"})
        return remote_url(f"sc://localhost:{self.port}", token=token)

    def probe(self, service: str) -> str:
        probe = self.m["rowgate"][{"readiness": "readinessProbe", "liveness": "livenessProbe"}[service]]["grpc"]
        assert probe["port"] == self.grpc_port
        return health(self.target, probe["service"])


@pytest.fixture(scope="module")
def started_pod(docker, images, tmp_path_factory):
    pod = Pod(docker, images, tmp_path_factory.mktemp("pod"))
    yield pod
    docker.remove(pod.rowgate, pod.spark, pod.postgres)
    docker("network", "rm", pod.network, check=False)


@pytest.fixture
def pod(docker, started_pod):
    """The pod, ready: a client would otherwise retry a dead port for minutes."""

    def ready() -> bool:
        return (
            docker.alive(started_pod.rowgate) and docker.alive(started_pod.spark) and started_pod.probe("readiness") == "SERVING"
        )

    wait_until(ready, "the sidecar's readiness probe to pass", timeout=240, interval=0.5)
    return started_pod


def test_the_pod_becomes_ready_with_rowgate_reaching_spark_on_loopback(docker, pod):
    assert pod.probe("liveness") == "SERVING"
    upstream = next(e["value"] for e in pod.m["rowgate"]["env"] if e["name"] == "ROWGATE_UPSTREAM")
    assert urlsplit(upstream).hostname == "127.0.0.1"
    assert f"ROWGATE_UPSTREAM={upstream}" in docker.inspect(pod.rowgate)["Config"]["Env"]


def test_clients_reach_rowgate_and_never_spark(docker, images, pod):
    upstream_port = urlsplit(next(e["value"] for e in pod.m["rowgate"]["env"] if e["name"] == "ROWGATE_UPSTREAM")).port
    # Only the pod's grpc port is published on the host.
    published = docker.inspect(pod.spark)["NetworkSettings"]["Ports"]
    assert {k for k, v in published.items() if v} == {f"{pod.grpc_port}/tcp"}
    # From another container of the network: the pod's grpc port answers, Spark's refuses.
    service = pod.m["service"]["metadata"]["name"]
    script = (
        "import socket, json\n"
        "def tries(port):\n"
        "    try:\n"
        f"        socket.create_connection(({service!r}, port), 5).close(); return 'open'\n"
        "    except OSError as e:\n"
        "        return type(e).__name__\n"
        f"print(json.dumps({{'rowgate': tries({pod.grpc_port}), 'spark': tries({upstream_port})}}))\n"
    )
    seen = json.loads(docker("run", "--rm", "--network", pod.network, images["ROWGATE_BASE_IMAGE"], "python3", "-c", script))
    assert seen == {"rowgate": "open", "spark": "ConnectionRefusedError"}


def test_policies_are_enforced_in_the_pod(pod, sessions):
    table = unique("sidecar")
    admin = pod.url("admin@example.com", [pod.config["admin"][0].removeprefix("group:")])
    protect_a_table(sessions, admin, table)
    assert rows_seen(sessions, pod.url("alice@example.com", ["eu@example.com"]), table) == EU_ROWS
    assert rows_seen(sessions, pod.url("bob@example.com", []), table) == US_ROWS

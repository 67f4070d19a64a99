"""The proxy image's promises (docker/Dockerfile), on a real Docker engine: it runs as the
non-root user 10001, holds only what the proxy needs, starts in front of ROWGATE_UPSTREAM
with nothing else set (policies in its data dir), and answers liveness and readiness over
gRPC health, Docker's own health check asking liveness.

The containers use the host's network here, in front of the suite's own Spark Connect
server on loopback (the compose and sidecar tests use bridge and pod networking), on
ports chosen free."""

from __future__ import annotations

import json
import tomllib
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from rowgate.embedded.spark import free_port
from tests.conftest import remote_url, unique
from tests.deadlines import wait_until
from tests.harness.callers import ADMIN
from tests.integration.containers.engine import (
    EU_ROWS,
    REPO,
    US_ROWS,
    Docker,
    health,
    protect_a_table,
    rows_seen,
)

pytestmark = [pytest.mark.containers, pytest.mark.timeout(3600)]

DATA_DIR = "/var/lib/rowgate"


def start_proxy(docker: Docker, image: str, upstream: str, what: str) -> tuple[str, str]:
    """The image as an operator runs it, the upstream its only setting (plus free ports on
    the host's loopback and an admin); returns (container, HOST:PORT)."""
    port = free_port()
    name = docker.name(what)
    docker.run(
        "--name", name, "--network", "host",
        "--env", f"ROWGATE_UPSTREAM={upstream}",
        "--env", f"ROWGATE_LISTEN=127.0.0.1:{port}",
        "--env", f"ROWGATE_METRICS_LISTEN=127.0.0.1:{free_port()}",
        "--env", f"ROWGATE_ADMIN={ADMIN}",
        image,
    )  # fmt: skip
    return name, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def proxy(docker, images, spark_server):
    name, target = start_proxy(docker, images["ROWGATE_IMAGE"], spark_server.url, "proxy")
    yield name, target
    docker.remove(name)


def test_the_proxy_runs_as_uid_10001(docker, images, proxy):
    name, _ = proxy
    assert docker.inspect(images["ROWGATE_IMAGE"])["Config"]["User"] == "10001:10001"
    status = docker("exec", name, "cat", "/proc/1/status")
    uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
    gids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Gid:"))
    assert set(uids) == {"10001"} and set(gids) == {"10001"}, status
    assert docker("exec", name, "stat", "-c", "%u:%g %a", DATA_DIR).split() == ["10001:10001", "755"]


def runtime_closure() -> dict[str, str]:
    """What `pip install .` needs on Linux, by name, at the versions constraints.txt pins."""
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep:
            pins[canonicalize_name(name)] = version
    needed: dict[str, set[str]] = {}

    def walk(req: Requirement, extras: set[str]) -> None:
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (extras or {""})):
            return
        key = canonicalize_name(req.name)
        if key in needed and set(req.extras) <= needed[key]:
            return
        needed.setdefault(key, set()).update(req.extras)
        for child in metadata.distribution(req.name).requires or []:
            walk(Requirement(child), set(req.extras))

    for text in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        walk(Requirement(text), set())
    return {name: pins[name] for name in needed}


INSPECT_IMAGE = """
import importlib.metadata as m, importlib.util, json, os, pathlib, shutil
pyspark = pathlib.Path(importlib.util.find_spec("pyspark").origin).parent
print(json.dumps({
    "distributions": {d.metadata["Name"]: d.version for d in m.distributions()},
    "pyspark": sorted(p.name for p in pyspark.iterdir()),
    "rowgate_files": sorted({f.parts[0] for f in m.distribution("rowgate").files if f.parts[0] != ".."}),
    "present": [p for p in ("/src", "/wheels", "/opt/rowgate/bin/pip", "/root/.cache/pip") if os.path.exists(p)],
    "tools": [t for t in ("gcc", "cc", "make", "pip", "pip3", "apt-get", "java") if shutil.which(t)],
}))
"""


def test_the_image_holds_only_what_the_proxy_needs(docker, images):
    image = images["ROWGATE_IMAGE"]
    seen = json.loads(
        docker("run", "--rm", "--network", "none", "--entrypoint", "/opt/rowgate/bin/python", image, "-c", INSPECT_IMAGE)
    )
    installed = {canonicalize_name(name): version for name, version in seen["distributions"].items()}
    # Exactly the runtime dependencies at their pinned versions, and rowgate: no test or dev
    # tools, no pip or setuptools left in the venv.
    assert installed == {**runtime_closure(), "rowgate": "0.1.0"}
    assert "jars" not in seen["pyspark"], "the Spark jars are not shipped in the proxy image"
    assert seen["rowgate_files"] == ["rowgate", "rowgate-0.1.0.dist-info"]  # no tests, no proto sources
    assert seen["present"] == [], "build inputs left in the image"
    # the base's package manager may stay; no compiler, no JVM, no pip on PATH
    assert set(seen["tools"]) <= {"apt-get"}, seen["tools"]
    added = docker.inspect(image)["Size"] - docker.inspect(images["ROWGATE_BASE_IMAGE"])["Size"]
    assert added < 350e6, f"the proxy adds {added / 1e6:.0f} MB to its base"


def test_it_serves_in_front_of_rowgate_upstream_with_policies_in_its_data_dir(docker, proxy, sessions):
    name, target = proxy
    docker.wait_healthy(name)  # Docker's own health check: liveness
    assert wait_until(lambda: docker.alive(name) and health(target, "readiness") == "SERVING", "readiness SERVING")
    assert health(target, "liveness") == "SERVING"
    table = unique("image")
    url = f"sc://{target.replace('127.0.0.1', 'localhost')}"
    protect_a_table(sessions, remote_url(url, user=ADMIN), table)
    assert rows_seen(sessions, remote_url(url, user="user:alice@example.com", groups="eu@example.com"), table) == EU_ROWS
    assert rows_seen(sessions, remote_url(url, user="user:bob@example.com"), table) == US_ROWS
    # the default policy store, written by uid 10001 in the image's data dir
    listing = docker("exec", name, "stat", "-c", "%n %u", f"{DATA_DIR}/policies.db")
    assert listing.split() == [f"{DATA_DIR}/policies.db", "10001"]


def test_liveness_stays_serving_while_the_upstream_is_down(docker, images):
    name, target = start_proxy(docker, images["ROWGATE_IMAGE"], f"sc://127.0.0.1:{free_port()}", "no-upstream")
    try:
        wait_until(lambda: docker.alive(name) and health(target, "liveness") == "SERVING", "liveness SERVING")
        assert health(target, "readiness") == "NOT_SERVING"
        docker.wait_healthy(name)  # the image's check is liveness: no restart for an outage
        assert health(target, "readiness") == "NOT_SERVING"
        assert "readiness NOT_SERVING" in docker.logs(name)
    finally:
        docker.remove(name)


def test_an_image_whose_data_dir_the_user_cannot_write_never_turns_healthy(docker, images, spark_server, tmp_path):
    """The check that would catch a broken image: the same image with the data dir handed
    back to root stops at once instead of serving without its policy store."""
    broken = f"rowgate-local/rowgate-broken:{docker.run_id}"
    dockerfile = f"FROM {images['ROWGATE_IMAGE']}\nUSER root\nRUN chown root:root {DATA_DIR}\nUSER 10001:10001\n"
    docker("build", "--quiet", "--tag", broken, "--file", "-", str(tmp_path), input=dockerfile)
    name, target = start_proxy(docker, broken, spark_server.url, "broken")
    try:
        wait_until(lambda: not docker.running(name) or docker.health(name) == "healthy", "the broken image to stop")
        assert docker.health(name) != "healthy"
        assert not docker.running(name)
        assert "unable to open database file" in docker.logs(name)
        assert health(target, "liveness") == "UNREACHABLE"
    finally:
        docker.remove(name)
        docker("image", "rm", "--force", broken, check=False)

"""Fixtures of the container tests (issue #26): a Docker engine that answers, and the images
they run, built here by scripts/docker-images.sh (Debian base images made with debootstrap,
the pinned Python dependencies as a wheelhouse made with `pip wheel`; both cached, so only
a first run needs the Debian mirror and the package index).

Where no Docker engine answers, or containers cannot run, the tests skip and say why;
with ROWGATE_REQUIRE_CONTAINERS=1 (what .ci/run sets once it started the engine) that is
a failure instead, so CI cannot pass by skipping them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from tests.deadlines import scaled
from tests.integration.containers.engine import REPO, Docker

REQUIRE_ENV = "ROWGATE_REQUIRE_CONTAINERS"
# scripts/docker-images.sh exits with this when the machine cannot build or run containers
# (no debootstrap, no Debian mirror, a daemon that cannot start a container).
MACHINE_CANNOT = 3


def unavailable(reason: str):
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: the container tests must run here)", pytrace=False)
    pytest.skip(f"containers cannot run here: {reason}")


@pytest.fixture(scope="session")
def docker() -> Docker:
    if shutil.which("docker") is None:
        unavailable("no docker command (apt-get install docker.io; .ci/run does)")
    engine = Docker()
    try:
        engine("info", "--format", "{{.ServerVersion}}", timeout=30)
    except Exception as e:  # any way of not answering
        unavailable(f"the Docker daemon does not answer: {e}")
    yield engine
    engine.remove_everything_of_this_run()


@pytest.fixture(scope="session")
def images(docker, tmp_path_factory, report_summary) -> dict[str, str]:
    """Image names by compose's variable names: ROWGATE_IMAGE, SPARK_IMAGE, POSTGRES_IMAGE,
    ROWGATE_BASE_IMAGE, ROWGATE_WHEELS (scripts/docker-images.sh prints them)."""
    log = tmp_path_factory.mktemp("images") / "docker-images.log"
    started = time.monotonic()
    with open(log, "w") as err:
        proc = subprocess.run(
            ["scripts/docker-images.sh"], cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True, timeout=scaled(3000)
        )
    took = time.monotonic() - started
    text = log.read_text()
    if proc.returncode == MACHINE_CANNOT:
        unavailable(text.strip().splitlines()[-1] if text.strip() else "scripts/docker-images.sh could not build")
    assert proc.returncode == 0, f"scripts/docker-images.sh failed ({proc.returncode}):\n{text[-6000:]}"
    built = dict(line.split("=", 1) for line in proc.stdout.split() if "=" in line)
    made = f"{text.count(': debootstrap ')} debootstrap runs, {text.count(': pip wheel')} wheelhouse builds"
    report_summary(f"container images ready in {took:.0f} s ({made}; the rest from cache)")
    return built

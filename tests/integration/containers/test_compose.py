"""The compose stack end to end, started with exactly the README's quick start (the block
after its `compose quick start` marker): Spark Connect, PostgreSQL and rowgate built and
brought up by compose, a pyspark client on the host connecting through the published port
with the example tokens, an admin creating policies and two callers each seeing their own
rows; Spark stopped, readiness turns NOT_SERVING and liveness stays SERVING; `down`
leaves nothing behind.

The images are the local stand-ins of scripts/docker-images.sh (the README's way to run
the stack without a registry), named through compose's variables; ports are free ones and
the project name is this run's, so a user's own stack on the machine is never touched.
Compose v2 where installed, else v1 (`docker-compose`, Debian bookworm's), with
`docker-compose` for `docker compose` in the README's lines."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from rowgate.embedded.spark import free_port
from tests.conftest import remote_url, unique
from tests.deadlines import scaled, wait_until
from tests.integration.containers.conftest import unavailable
from tests.integration.containers.engine import ENV, EU_ROWS, REPO, US_ROWS, health, protect_a_table, rows_seen

pytestmark = [pytest.mark.containers, pytest.mark.timeout(3600)]

MARK = "<!-- compose quick start"
PROJECT_LABEL = "com.docker.compose.project"


def quick_start() -> dict[str, str]:
    """The README's quick start lines: {"up": ..., "wait": ..., "down": ...}."""
    text = (REPO / "README.md").read_text()
    block = text[text.index(MARK) :].split("```", 2)[1]
    lines = [line for line in block.splitlines()[1:] if line.strip() and not line.lstrip().startswith("#")]
    steps = {
        "up": [x for x in lines if " up " in x],
        "wait": [x for x in lines if x.startswith("until ")],
        "down": [x for x in lines if x.endswith(" down")],
    }
    assert all(len(found) == 1 for found in steps.values()) and len(lines) == 3, lines
    return {step: found[0] for step, found in steps.items()}


def compose_command(docker) -> str:
    if subprocess.run([docker.command, "compose", "version"], capture_output=True).returncode == 0:
        return "docker compose"
    if shutil.which("docker-compose"):
        return "docker-compose"
    unavailable("neither `docker compose` (Compose v2) nor `docker-compose` (v1) is installed")


class Stack:
    def __init__(self, docker, images):
        self.docker = docker
        self.compose = compose_command(docker)
        self.project = docker.name("compose")
        self.port, self.metrics_port, self.spark_port = free_port(), free_port(), free_port()
        self.env = {
            **ENV,
            **images,
            "COMPOSE_PROJECT_NAME": self.project,
            "ROWGATE_PORT": str(self.port),
            "ROWGATE_METRICS_PORT": str(self.metrics_port),
            "SPARK_PORT": str(self.spark_port),
        }
        self.env.pop("SPARK_CONNECT_TOKEN", None)  # the compose file's default
        self.lines = quick_start()

    def sh(self, line: str, timeout: float, check: bool = True) -> subprocess.CompletedProcess:
        """A README line as a user's shell runs it, with this machine's compose command,
        stopped (with what it started) once the scaled deadline passes."""
        if self.compose != "docker compose":
            line = line.replace("docker compose", self.compose)
        limit = f"{scaled(timeout):.0f}"
        proc = subprocess.run(
            ["timeout", "--kill-after=10", limit, "bash", "-c", line], cwd=REPO, env=self.env, capture_output=True, text=True
        )
        if check:
            assert proc.returncode == 0, f"{line} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc

    def container(self, service: str) -> str:
        found = self.docker(
            "ps",
            "--all",
            "--quiet",
            "--filter",
            f"label={PROJECT_LABEL}={self.project}",
            "--filter",
            f"label=com.docker.compose.service={service}",
        ).split()
        assert len(found) == 1, (service, found)
        return found[0]

    def leftovers(self) -> tuple[list[str], list[str]]:
        label = f"label={PROJECT_LABEL}={self.project}"
        return (
            self.docker("ps", "--all", "--quiet", "--filter", label).split(),
            self.docker("network", "ls", "--quiet", "--filter", label).split(),
        )

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, token: str) -> str:
        return remote_url(f"sc://localhost:{self.port}", token=token)


@pytest.fixture(scope="module")
def stack(docker, images):
    stack = Stack(docker, images)
    try:
        stack.sh(stack.lines["up"], timeout=900)
        wait = stack.sh(stack.lines["wait"], timeout=300, check=False)
        assert wait.returncode == 0, (
            f"rowgate did not turn ready:\n{wait.stdout}\n{wait.stderr}\n{docker.logs(stack.container('rowgate'))}"
        )
        yield stack
    finally:
        if stack.leftovers() != ([], []):  # a test failed before `down`
            stack.sh(stack.lines["down"], timeout=300, check=False)


def tokens() -> dict[str, str]:
    return {t["principal"]: t["token"] for t in yaml.safe_load((REPO / "docker" / "tokens.example.yaml").read_text())}


def test_callers_see_their_own_rows_through_the_published_port(stack, sessions):
    assert health(stack.target, "readiness") == "SERVING"
    table = unique("compose")
    by_principal = tokens()
    protect_a_table(sessions, stack.url(by_principal["user:admin@example.com"]), table)
    assert rows_seen(sessions, stack.url(by_principal["user:alice@example.com"]), table) == EU_ROWS
    assert rows_seen(sessions, stack.url(by_principal["user:bob@example.com"]), table) == US_ROWS


def test_with_spark_stopped_readiness_is_not_serving_and_liveness_stays_serving(stack):
    rowgate = stack.container("rowgate")
    stack.sh(f"{stack.compose} -f docker/compose.yaml stop spark", timeout=120)

    def not_ready() -> bool:
        return stack.docker.alive(rowgate) and health(stack.target, "readiness") == "NOT_SERVING"

    wait_until(not_ready, "readiness NOT_SERVING with Spark stopped")
    assert health(stack.target, "liveness") == "SERVING"
    state = stack.docker.inspect(rowgate)
    assert state["State"]["Running"] and state["RestartCount"] == 0
    assert "readiness NOT_SERVING" in stack.docker.logs(rowgate)


def test_down_leaves_no_containers(stack):
    assert stack.leftovers()[0], "the stack is up before `down`"
    stack.sh(stack.lines["down"], timeout=300)
    assert stack.leftovers() == ([], [])
    assert health(stack.target, "liveness") == "UNREACHABLE"


def test_the_quick_start_is_what_the_compose_file_and_readme_say():
    """The lines the tests run name the compose file users start, and the port and tokens
    the README tells clients to use are the compose file's defaults."""
    lines = quick_start()
    assert all(" -f docker/compose.yaml " in line + " " for line in lines.values())
    compose = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())
    assert compose["services"]["rowgate"]["ports"][0] == "127.0.0.1:${ROWGATE_PORT:-15002}:15002"
    readme = (REPO / "README.md").read_text()
    assert "sc://localhost:15002/;token=<token>" in readme and "admin-token-change-me" in tokens().values()
    assert os.path.exists(REPO / "docker" / ".env")

"""The Docker engine as the container tests drive it: the `docker` command, every container
and network labelled with the test run's id so that whatever a failing test leaves behind
is removed at the end, and waits on container state with the suite's deadlines."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.deadlines import scaled, wait_until

REPO = Path(__file__).resolve().parents[3]
LABEL = "rowgate.test.run"
# The classic builder, as scripts/docker-images.sh: BuildKit's RUN steps need the bridge
# network the daemon .ci/run starts has not (--bridge=none).
ENV = {**os.environ, "DOCKER_BUILDKIT": "0"}


class DockerError(AssertionError):
    pass


@dataclass
class Docker:
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    command: str = field(default_factory=lambda: shutil.which("docker") or "docker")

    def __call__(self, *args: str, timeout: float = 120, check: bool = True, input: str | None = None) -> str:
        """`docker ARGS` (stdout); a failure raises with docker's own words."""
        proc = subprocess.run(
            [self.command, *args], capture_output=True, text=True, timeout=scaled(timeout), input=input, cwd=REPO, env=ENV
        )
        if check and proc.returncode != 0:
            raise DockerError(f"docker {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def name(self, what: str) -> str:
        """A container or network name no other run and no user's own stack uses."""
        return f"rowgate-test-{self.run_id}-{what}"

    def run(self, *args: str) -> str:
        """`docker run --detach` with this run's label; returns the container's name or id."""
        return self("run", "--detach", "--label", f"{LABEL}={self.run_id}", *args).strip()

    def network(self, what: str) -> str:
        name = self.name(what)
        self("network", "create", "--label", f"{LABEL}={self.run_id}", name)
        return name

    def inspect(self, name: str) -> dict:
        return json.loads(self("inspect", name))[0]

    def health(self, name: str) -> str:
        """The image's or compose's health check verdict: starting, healthy, unhealthy."""
        state = self.inspect(name)["State"]
        return (state.get("Health") or {}).get("Status", "")

    def running(self, name: str) -> bool:
        return bool(self.inspect(name)["State"]["Running"])

    def alive(self, name: str) -> bool:
        """True while the container runs; one that stopped fails the test with its log (for
        wait conditions, so a dead container does not wait out the deadline)."""
        state = self.inspect(name)["State"]
        if not state["Running"]:
            raise DockerError(f"{name} stopped (exit {state['ExitCode']}):\n{self.logs(name)}")
        return True

    def logs(self, name: str) -> str:
        proc = subprocess.run([self.command, "logs", name], capture_output=True, text=True, timeout=60)
        return (proc.stdout + proc.stderr)[-6000:]

    def wait_healthy(self, name: str, timeout: float = 120) -> None:
        """Until Docker's health check says healthy; a container that stops first fails at once."""

        def healthy() -> bool:
            state = self.inspect(name)["State"]
            if not state["Running"]:
                raise DockerError(f"{name} stopped (exit {state['ExitCode']}) before it was healthy:\n{self.logs(name)}")
            return (state.get("Health") or {}).get("Status") == "healthy"

        try:
            wait_until(healthy, f"{name} to be healthy", timeout=timeout, interval=0.5)
        except AssertionError as e:
            if isinstance(e, DockerError):
                raise
            raise DockerError(f"{e}; its health log: {self.inspect(name)['State'].get('Health')}\n{self.logs(name)}") from None

    def remove(self, *names: str) -> None:
        if names:
            self("rm", "--force", "--volumes", *names, check=False)

    def remove_everything_of_this_run(self) -> None:
        label = f"label={LABEL}={self.run_id}"
        containers = self("ps", "--all", "--quiet", "--filter", label, check=False).split()
        self.remove(*containers)
        networks = self("network", "ls", "--quiet", "--filter", label, check=False).split()
        if networks:
            self("network", "rm", *networks, check=False)


def health(target: str, service: str) -> str:
    """What the proxy's gRPC health service says of `service` (SERVING, NOT_SERVING), or
    UNREACHABLE when nothing answers on `target` (HOST:PORT)."""
    import grpc
    from grpc_health.v1 import health_pb2

    from rowgate.probe import check

    try:
        return health_pb2.HealthCheckResponse.ServingStatus.Name(check(target, service, timeout=3))
    except grpc.RpcError:
        return "UNREACHABLE"


EU_ROWS = [("eu", 1), ("eu", 2)]
US_ROWS = [("us", 3)]


def protect_a_table(sessions, admin_url: str, table: str) -> None:
    """As an admin: a table of three rows and two policies, the EU rows for the group
    eu@example.com (alice), the US row for bob."""
    admin = sessions(admin_url)
    admin.sql(f"CREATE TABLE {table} (region STRING, amount INT) USING parquet")
    admin.sql(f"INSERT INTO {table} VALUES ('eu', 1), ('eu', 2), ('us', 3)")
    admin.sql(f"CREATE ROW ACCESS POLICY eu ON {table} GRANT TO ('group:eu@example.com') FILTER USING (region = 'eu')")
    admin.sql(f"CREATE ROW ACCESS POLICY us ON {table} GRANT TO ('user:bob@example.com') FILTER USING (region = 'us')")


def rows_seen(sessions, url: str, table: str) -> list[tuple]:
    """The table's rows as the caller of `url` sees them, by SQL and by DataFrame (the same)."""
    session = sessions(url)
    by_sql = sorted(tuple(r) for r in session.sql(f"SELECT region, amount FROM {table}").collect())
    by_dataframe = sorted(tuple(r) for r in session.table(table).select("region", "amount").collect())
    assert by_sql == by_dataframe, (by_sql, by_dataframe)
    return by_sql

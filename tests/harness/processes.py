"""`rowgate serve` as a subprocess, exactly as an operator starts it, and its health probe.

One implementation for the integration tests (tests/conftest.py), the compatibility stands
(tests/compat/stack.py), the benchmarks and the scripts, so that a change of how the proxy
starts, reports readiness or stops is made once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent

# What `RowgateProcess.start` waits for: the health service answering at all (a proxy in
# front of an upstream that is down on purpose answers NOT_SERVING), or answering SERVING.
ANSWERS = "answers"
SERVING = "serving"


def health_status(target: str, timeout: float = 1.0, tls_root: Path | None = None) -> int | None:
    """The readiness status the proxy's health service reports (grpc.health.v1 enum), or
    None when nothing answers. Makes no Spark call of its own."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    if tls_root is not None:
        creds = grpc.ssl_channel_credentials(root_certificates=tls_root.read_bytes())
        channel = grpc.secure_channel("localhost:" + target.rsplit(":", 1)[1], creds)
    else:
        channel = grpc.insecure_channel(target)
    with channel:
        try:
            return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout).status
        except grpc.RpcError:
            return None


def health_answers(target: str, timeout: float = 1.0, tls_root: Path | None = None) -> bool:
    """The proxy is up (its health service answers, ready or not)."""
    from grpc_health.v1 import health_pb2

    status = health_status(target, timeout, tls_root)
    return status in (health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING)


def health_serving(target: str, timeout: float = 1.0, tls_root: Path | None = None) -> bool:
    """The proxy is ready: its upstream and policy store answer."""
    from grpc_health.v1 import health_pb2

    return health_status(target, timeout, tls_root) == health_pb2.HealthCheckResponse.SERVING


def this_tree(env: dict[str, str] | None) -> dict[str, str]:
    """`env` (None: this process's) with this checkout's `proxy/` on PYTHONPATH, after what
    is there: the virtualenv may hold an editable install of another checkout (a second
    worktree sharing one .venv), and the proxy under test must be this tree's."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(REPO / "proxy")]))
    return env


def stop_process(proc: subprocess.Popen, sig: int | None = None, timeout: float = 40.0) -> int:
    """Asks the process to stop (SIGTERM unless told otherwise), kills it after `timeout`."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM if sig is None else sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    return proc.returncode


@dataclass
class RowgateProcess:
    """One `rowgate serve` listening on 127.0.0.1:`port`; `args` follow `--listen`."""

    port: int
    args: list[str]
    log_path: Path
    env: dict[str, str] | None = None  # None: this process's environment
    tls_root: Path | None = None  # the CA to probe health with when the proxy serves TLS
    ready: str = ANSWERS  # ANSWERS or SERVING (see above)
    # In its own session, a Ctrl-C in a terminal reaches only the benchmark, which then
    # stops the proxy itself; tests keep it in theirs so a killed run takes it along.
    own_session: bool = False
    stop_timeout: float = 40.0
    proc: subprocess.Popen | None = None
    extra: dict = field(default_factory=dict)  # what a fixture wants to keep with it

    @property
    def url(self) -> str:
        return f"sc://localhost:{self.port}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "rowgate.cli", "serve", "--listen", self.target, *self.args]

    def start(self, timeout: float = 60.0) -> RowgateProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=REPO,
                env=this_tree(self.env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=self.own_session,
            )
        is_ready = health_serving if self.ready == SERVING else health_answers
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rowgate exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            if is_ready(self.target, tls_root=self.tls_root):
                return self
            time.sleep(0.1)
        raise RuntimeError(f"rowgate was not {self.ready} within {timeout:.0f}s; log:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def stop(self, sig: int | None = None) -> int | None:
        """Stops it (SIGTERM, or `sig`); its exit code, None when it was not running."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        return stop_process(proc, sig, self.stop_timeout)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def interrupt_on_signals() -> None:
    """A long run (benchmark, script) that SIGINT, SIGTERM or SIGHUP interrupts as a
    KeyboardInterrupt, so that it cleans up what it started."""
    # Explicitly, since a shell starting us in the background may have left SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)


def ignore_signals() -> None:
    """For the cleanup: a second Ctrl-C must not cut it short (every step in it is bounded)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)

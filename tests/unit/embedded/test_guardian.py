"""The guardian stops Spark's whole process group when the proxy's pipe closes, whatever
killed the proxy; and Spark goes when the guardian itself is killed.

A stand-in for spark-submit (a Python process that forks a worker into its own process
group, as the JVM forks Python workers) is enough to watch the signals and the groups.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rowgate.embedded.spark import GUARDIAN

# Prints the worker's pid, then waits; the worker shares its process group.
STAND_IN = (
    "import subprocess, sys, time\n"
    "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "print(worker.pid, flush=True)\n"
    "time.sleep(600)\n"
)
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(0, flush=True); time.sleep(600)"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {timeout}s"
        time.sleep(0.05)


def start_guardian(tmp_path: Path, code: str, grace: float = 5.0) -> tuple[subprocess.Popen, int, int]:
    log = tmp_path / "spark.log"
    guardian = subprocess.Popen(
        [sys.executable, str(GUARDIAN), "--log", str(log), "--grace", str(grace), "--", sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "guardian.err", "wb"),  # the child keeps its own copy
        start_new_session=True,
    )
    spark = int(guardian.stdout.readline())
    wait_until(lambda: log.exists() and log.read_text().strip() != "", 30, "the stand-in's first line")
    worker = int(log.read_text().split()[0])
    return guardian, spark, worker


@pytest.fixture
def cleanup():
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_pipe_closing_stops_the_whole_group(tmp_path, cleanup):
    """What happens when the proxy is SIGKILLed: the kernel closes its end of the pipe."""
    guardian, spark, worker = start_guardian(tmp_path, STAND_IN)
    cleanup += [guardian.pid, spark, worker]
    assert os.getpgid(spark) == spark == os.getpgid(worker) != os.getpgid(guardian.pid)
    assert alive(spark) and alive(worker)
    guardian.stdin.close()
    assert guardian.wait(timeout=30) == 0
    wait_until(lambda: not alive(spark) and not alive(worker), 10, "Spark and its worker gone")


def test_a_proxy_killed_with_sigkill_takes_spark_along(tmp_path, cleanup):
    """The same through a real parent: a middle process starts the guardian and is killed."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            f"g = subprocess.Popen([sys.executable, {str(GUARDIAN)!r}, '--log', {str(tmp_path / 'spark.log')!r}, '--',"
            f" sys.executable, '-c', {STAND_IN!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE,"
            " start_new_session=True)\n"
            "print(g.pid, g.stdout.readline().decode().strip(), flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
    )
    guardian, spark = map(int, parent.stdout.readline().split())
    log = tmp_path / "spark.log"
    wait_until(lambda: log.exists() and log.read_text().strip() != "", 30, "the stand-in's first line")
    worker = int(log.read_text().split()[0])
    cleanup += [parent.pid, guardian, spark, worker]
    parent.kill()
    parent.wait()
    wait_until(lambda: not any(alive(p) for p in (guardian, spark, worker)), 30, "guardian, Spark and worker gone")


def test_spark_dies_with_a_killed_guardian(tmp_path, cleanup):
    guardian, spark, worker = start_guardian(tmp_path, STAND_IN)
    cleanup += [guardian.pid, spark, worker]
    guardian.kill()
    guardian.wait()
    wait_until(lambda: not alive(spark), 10, "Spark gone after its guardian was killed")


def test_sigterm_is_a_clean_stop_and_stubborn_spark_is_killed_after_the_grace(tmp_path, cleanup):
    guardian, spark, _ = start_guardian(tmp_path, STUBBORN, grace=1.0)
    cleanup += [guardian.pid, spark]
    started = time.monotonic()
    guardian.terminate()
    assert guardian.wait(timeout=30) == 0
    assert not alive(spark) and time.monotonic() - started >= 1.0
    assert "did not stop within 1s; killing it" in (tmp_path / "guardian.err").read_text()


def test_the_guardian_exits_with_spark(tmp_path, cleanup):
    guardian, spark, _ = start_guardian(tmp_path, "print(0, flush=True); raise SystemExit(3)")
    cleanup += [guardian.pid]
    assert guardian.wait(timeout=30) == 3


def test_a_relative_data_dir_is_made_absolute_before_anything_runs_in_it(tmp_path, monkeypatch):
    """The guardian and Spark run with the data dir as their working directory: a relative
    `--data-dir` (say `rel`) made them look for `rel/spark/spark-connect.log` inside `rel/spark`."""
    from rowgate.embedded.spark import EmbeddedSparkConnect

    monkeypatch.chdir(tmp_path)
    spark = EmbeddedSparkConnect(data_dir=Path("rel") / "spark")
    assert spark.data_dir == tmp_path / "rel" / "spark"

"""Runs the embedded Spark server and stops it when the proxy that asked for it is gone.

    python guardian.py --log FILE [--grace SECONDS] -- spark-submit ...

The proxy may die in ways that run none of its code (SIGKILL, the OOM killer, a crash in C),
and a Spark server left behind holds the data directory (Derby allows one JVM per
metastore) and a port. A parent-death signal set on Spark itself is not enough: it fires
when the *thread* that forked exits (the proxy starts Spark from a worker thread), and not at
all across the bash scripts in front of the JVM once they fork. So the proxy starts this
small process instead, with a pipe on its stdin that nothing ever writes to. The kernel
closes the proxy's end when the proxy dies, however it dies; the guardian reads end of file
and stops Spark's whole process group (the JVM and the Python workers it forked): SIGTERM,
then SIGKILL after the grace period. SIGTERM to the guardian does the same (a normal stop).

The guardian forks Spark from its only thread and sets Spark's parent-death signal to
SIGKILL, so should the guardian itself be killed, the JVM goes too (the signal survives
`spark-submit`'s exec chain into java, which keeps the process id).

The guardian reports Spark's process id as its first line on stdout, then exits with Spark's
status when Spark exits. It uses the standard library only and is run as a file, so it
starts without importing the proxy.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

PR_SET_PDEATHSIG = 1
POLL_SECONDS = 0.5


def _say(message: str) -> None:
    print(f"rowgate guardian [{os.getpid()}]: {message}", file=sys.stderr, flush=True)


def _die_with(guardian: int) -> Callable[[], None] | None:
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):  # not Linux: stdin's end of file still covers the proxy
        return None

    def preexec() -> None:  # runs in the child between fork and exec
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != guardian:  # the guardian died before the signal was armed
            os._exit(1)

    return preexec


def stop_group(leader: subprocess.Popen, grace: float) -> None:
    """SIGTERM to the group, SIGKILL to what is left of it after `grace` seconds (the JVM's
    Python workers may outlive the JVM itself, so the group is swept either way)."""
    _signal_group(leader.pid, signal.SIGTERM)
    try:
        leader.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _say(f"Spark did not stop within {grace:.0f}s; killing it")
    _signal_group(leader.pid, signal.SIGKILL)
    leader.wait()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="guardian")
    parser.add_argument("--log", required=True, help="file for Spark's output (appended)")
    parser.add_argument("--grace", type=float, default=20.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")

    stopping: list[str] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    with open(args.log, "ab") as log:
        spark = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: one signal reaches all of it
            preexec_fn=_die_with(os.getpid()),
        )
    _say(f"started Spark as process group {spark.pid}")
    reason = None
    try:
        print(spark.pid, flush=True)
    except BrokenPipeError:
        reason = "the proxy is gone (it did not wait for Spark's process id)"
    selector = selectors.DefaultSelector()
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ)
    while reason is None:
        code = spark.poll()
        if code is not None:
            _say(f"Spark exited with {code}")
            _signal_group(spark.pid, signal.SIGKILL)  # workers it left behind
            return code if code >= 0 else 128 - code
        if stopping:
            reason = f"received {stopping[0]}"
        elif selector.select(timeout=POLL_SECONDS) and not os.read(sys.stdin.fileno(), 4096):
            reason = "the proxy is gone (its end of the pipe closed)"
    started = time.monotonic()
    _say(f"{reason}: stopping Spark")
    stop_group(spark, args.grace)
    _say(f"Spark stopped after {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

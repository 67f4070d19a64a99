"""Who owns an embedded Spark data directory, and reclaiming it from a server left behind.

A data directory belongs to one live rowgate at a time: the process that starts the embedded
server holds an exclusive lock on `embedded.lock` inside it for as long as it runs, and the
kernel drops the lock when that process dies, however it dies. Starting on a directory whose
lock is held is refused (two JVMs on one Derby metastore corrupt it, and the other proxy's
Spark must not be killed). Starting on a directory whose lock is free means every process
still working for that directory is an orphan of a dead proxy: it is found by the marker
every embedded Spark carries on its command line (`spark.rowgate.embedded.dataDir=<dir>`,
or the Derby home of servers started before the marker existed), stopped with its process
group, and Derby's lock files, which a killed JVM leaves behind, are removed. Nothing that
does not name this exact directory is touched.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger("rowgate.embedded")

MARKER_KEY = "spark.rowgate.embedded.dataDir"
LOCK_NAME = "embedded.lock"
DERBY_LOCKS = ("db.lck", "dbex.lck")


class DataDirInUse(RuntimeError):
    pass


def marker(data_dir: Path) -> str:
    return f"{MARKER_KEY}={data_dir.resolve()}"


class DataDirLock:
    """The exclusive, process-lifetime claim on a data directory (flock: released by the
    kernel when the holder dies, so a stale lock file never blocks a restart)."""

    def __init__(self, data_dir: Path):
        self.path = data_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> DataDirLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise DataDirInUse(
                f"the embedded Spark data directory {self.path.parent} is in use by another running rowgate "
                f"(pid {holder}); give each proxy its own --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def owned_processes(data_dir: Path) -> list[int]:
    """Live processes (not this one) whose command line names `data_dir` as their embedded
    Spark data directory: guardians, spark-submit scripts and JVMs. Linux's /proc only; an
    empty list elsewhere."""
    data = data_dir.resolve()
    wanted = (marker(data), f"-Dderby.system.home={data}")
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(arg.endswith(w) for arg in args for w in wanted) and _alive(int(entry)):
            found.append(int(entry))
    return sorted(found)


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent to collect it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def signal_processes(pids: list[int], sig: int) -> None:
    """`sig` to each process, and to its process group when it leads one (a Spark group
    holds the JVM's Python workers too)."""
    for pid in pids:
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_processes(pids: list[int], grace: float = 20.0) -> None:
    signal_processes(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    signal_processes([p for p in pids if _alive(p)], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


def reclaim(data_dir: Path, grace: float = 20.0) -> DataDirLock:
    """Claims `data_dir` for this process: refuses when a live rowgate holds it, otherwise
    stops what a dead one left running on it and clears Derby's stale locks."""
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = DataDirLock(data_dir).acquire()
    try:
        orphans = owned_processes(data_dir)
        if orphans:
            log.warning(
                "stopping an embedded Spark left behind by a proxy that is gone",
                extra={"data_dir": str(data_dir), "pids": orphans},
            )
            stop_processes(orphans, grace)
            left = [p for p in orphans if _alive(p)]
            if left:
                raise DataDirInUse(f"processes {left} still use {data_dir} and could not be stopped")
        for name in DERBY_LOCKS:
            stale = data_dir / "metastore_db" / name
            if stale.exists():
                stale.unlink()
                log.info("removed a stale Derby lock", extra={"path": str(stale)})
    except BaseException:
        lock.release()
        raise
    return lock

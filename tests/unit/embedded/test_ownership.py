"""A data directory belongs to one live rowgate; what a dead one left on it is reclaimed,
and nothing that names another directory is touched."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rowgate.embedded.ownership import DataDirInUse, DataDirLock, marker, owned_processes, reclaim
from tests.unit.embedded.test_guardian import alive, wait_until

SLEEPER = "import time; time.sleep(600)"


@pytest.fixture
def spawn():
    started: list[subprocess.Popen] = []

    def run(*args: str, new_session: bool = True) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", SLEEPER, *args], start_new_session=new_session)
        started.append(proc)
        return proc

    yield run
    for proc in started:
        proc.kill()
        proc.wait()


HOLD_LOCK = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from rowgate.embedded.ownership import DataDirLock\n"
    "DataDirLock(Path(sys.argv[1])).acquire()\n"
    "print('held', flush=True)\n"
    "time.sleep(600)\n"
)


def test_a_live_owner_keeps_the_directory_and_a_dead_one_does_not(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        with pytest.raises(DataDirInUse, match=rf"in use by another running rowgate \(pid {holder.pid}\)"):
            DataDirLock(tmp_path).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)  # dies without running any of its code
        holder.wait()
    DataDirLock(tmp_path).acquire().release()  # the kernel dropped the lock with its holder


def test_orphans_of_this_directory_are_stopped_and_derby_s_locks_cleared(tmp_path, spawn):
    data = tmp_path / "spark"
    data.mkdir()
    orphan_jvm = spawn("--conf", marker(data))
    orphan_worker_leader = spawn(f"-Dderby.system.home={data.resolve()}")  # a server from before the marker
    other_dir = spawn("--conf", marker(tmp_path / "spark-other"))
    parent_dir = spawn("--conf", marker(tmp_path))
    (data / "metastore_db").mkdir()
    for name in ("db.lck", "dbex.lck"):
        (data / "metastore_db" / name).write_text("stale")
    wait_until(lambda: len(owned_processes(data)) == 2, 10, "the orphans visible in /proc")
    assert owned_processes(data) == sorted([orphan_jvm.pid, orphan_worker_leader.pid])

    started = time.monotonic()
    lock = reclaim(data, grace=5)
    try:
        assert time.monotonic() - started < 5  # they obeyed SIGTERM
        assert orphan_jvm.poll() is not None and orphan_worker_leader.poll() is not None
        assert alive(other_dir.pid) and alive(parent_dir.pid)
        assert not list((data / "metastore_db").iterdir())
        assert owned_processes(data) == []
    finally:
        lock.release()


def test_a_directory_in_use_is_not_reclaimed(tmp_path, spawn):
    data = tmp_path / "spark"
    data.mkdir()
    lock = DataDirLock(data).acquire()
    try:
        served = spawn("--conf", marker(data))
        with pytest.raises(DataDirInUse):
            reclaim(data)
        assert alive(served.pid)
    finally:
        lock.release()


def test_markers_name_the_resolved_directory(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    assert marker(link) == marker(tmp_path) == f"spark.rowgate.embedded.dataDir={Path(tmp_path).resolve()}"

"""The embedded Spark server never outlives `rowgate serve`, also after SIGKILL, and a restart
on the same data directory serves again with no manual step, its tables intact.

`rowgate serve` without `--upstream` starts Spark itself. Killed with SIGKILL, the proxy runs
none of its code: its Spark must still go (it used to keep running as an orphan, holding the
Derby metastore and its port). The Spark processes are found here by the data directory on
their command line, independently of how the proxy finds them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest

from rowgate.embedded.spark import EmbeddedSparkConnect, find_java, free_port, spark_home, upstream_answers
from tests.conftest import execute_sql
from tests.deadlines import scaled, wait_until
from tests.harness.callers import ADMIN
from tests.harness.processes import REPO, RowgateProcess

pytestmark = pytest.mark.spark

SPARK_START = 300  # seconds: a JVM start-up on a loaded two-core machine
SPARK_GONE = 60  # the guardian's grace (20 s) and the JVM's shutdown, with room


def spark_processes(data_dir: Path) -> list[int]:
    """JVMs and scripts whose command line names this data directory."""
    needle = str(data_dir.resolve()).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmdline and b"java" in cmdline.split(b"\0")[0] and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def serve(data_dir: Path, log: Path) -> RowgateProcess:
    proxy = RowgateProcess(
        port=free_port(),
        args=["--data-dir", str(data_dir), "--identity", "header", "--admin", ADMIN, "--spark-driver-memory", "512m"],
        log_path=log,
        env=dict(os.environ),
    )
    return proxy.start(timeout=scaled(SPARK_START))


def sql(proxy: RowgateProcess, query: str) -> list:
    with grpc.insecure_channel(proxy.target) as channel:
        return list(execute_sql(channel, query, user=ADMIN, timeout=scaled(120)))


def wait_until_answering(proxy: RowgateProcess) -> None:
    """The first statements of a fresh server (a session, the Derby metastore) can take longer
    than the proxy's upstream deadline on a loaded machine: ask until one is answered."""
    deadline = time.monotonic() + scaled(SPARK_START)
    while True:
        try:
            sql(proxy, "SHOW TABLES")
            return
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() < deadline, e
            time.sleep(1)


def rows(responses: list) -> int:
    return sum(r.arrow_batch.row_count for r in responses if r.HasField("arrow_batch"))


def test_spark_dies_with_a_sigkilled_proxy_and_a_restart_reuses_the_data_dir(tmp_path):
    data_dir = tmp_path / "data"
    spark_dir = data_dir / "spark"
    table = f"kept_{uuid.uuid4().hex[:8]}"
    first = second = None
    try:
        first = serve(data_dir, tmp_path / "first.log")
        jvms = spark_processes(spark_dir)
        assert jvms, f"no Spark JVM found for {spark_dir}"
        wait_until_answering(first)
        sql(first, f"CREATE TABLE {table} (id INT) USING parquet")
        sql(first, f"INSERT INTO {table} VALUES (1), (2), (3)")

        first.proc.send_signal(signal.SIGKILL)  # none of the proxy's code runs
        first.proc.wait()
        wait_until(
            lambda: not spark_processes(spark_dir), "the embedded Spark gone after the proxy's SIGKILL", SPARK_GONE, interval=0.2
        )

        second = serve(data_dir, tmp_path / "second.log")
        wait_until_answering(second)
        assert rows(sql(second, f"SELECT * FROM {table}")) == 3  # the same metastore and warehouse
        second.stop()  # SIGTERM: a clean stop takes Spark along too
        wait_until(lambda: not spark_processes(spark_dir), "the embedded Spark gone after a clean stop", SPARK_GONE, interval=0.2)
    finally:
        for proxy in (first, second):
            if proxy is not None and proxy.proc is not None and proxy.proc.poll() is None:
                proxy.proc.kill()
        for pid in spark_processes(spark_dir):  # a failed run must not leave a JVM behind
            os.kill(pid, signal.SIGKILL)


def test_a_server_left_behind_on_the_data_dir_is_stopped_by_the_next_start(tmp_path):
    """A Spark server whose proxy is gone (started as rowgate did before the guardian, in a
    session of its own) holds the Derby metastore: the next start stops it, with no manual
    step, and serves from the same directory."""
    data_dir = tmp_path / "data"
    spark_dir = data_dir / "spark"
    spark_dir.mkdir(parents=True)
    port = free_port()
    orphan_server = EmbeddedSparkConnect(data_dir=spark_dir, port=port, driver_memory="512m")
    env = dict(os.environ, SPARK_HOME=str(spark_home()), PYSPARK_PYTHON=sys.executable)
    env.setdefault("JAVA_HOME", str(Path(find_java()).resolve().parent.parent))
    with open(tmp_path / "orphan.log", "wb") as out:
        orphan = subprocess.Popen(
            orphan_server.command(), cwd=spark_dir, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    proxy = None
    try:
        wait_until(lambda: upstream_answers(f"127.0.0.1:{port}"), "the orphan's Spark answering", SPARK_START, interval=0.2)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            list(execute_sql(channel, "SHOW TABLES", timeout=scaled(SPARK_START)))  # Derby booted: the metastore is held
        assert (spark_dir / "metastore_db" / "db.lck").exists()

        proxy = serve(data_dir, tmp_path / "proxy.log")
        assert orphan.poll() is not None, "the server left behind still runs"
        wait_until_answering(proxy)
        sql(proxy, "CREATE TABLE after_orphan (id INT) USING parquet")
        assert rows(sql(proxy, "SELECT * FROM after_orphan")) == 0
        assert "stopping an embedded Spark left behind" in proxy.log()
    finally:
        if proxy is not None:
            proxy.stop()
        if orphan.poll() is None:
            os.killpg(orphan.pid, signal.SIGKILL)
        orphan.wait()
        for pid in spark_processes(spark_dir):
            os.kill(pid, signal.SIGKILL)


def test_a_second_proxy_on_a_data_dir_in_use_refuses_to_start(tmp_path):
    """The live owner keeps its Spark: the newcomer is refused, nothing is killed."""
    data_dir = tmp_path / "data"
    (data_dir / "spark").mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\nfrom rowgate.embedded.ownership import DataDirLock\n"
            "DataDirLock(Path(sys.argv[1])).acquire()\nprint('held', flush=True)\ntime.sleep(600)\n",
            str(data_dir / "spark"),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline().strip() == b"held"
        done = subprocess.run(
            [sys.executable, "-m", "rowgate.cli", "serve", "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(data_dir)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0
        assert f"in use by another running rowgate (pid {holder.pid})" in done.stdout + done.stderr
        assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait()

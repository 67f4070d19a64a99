"""A local Spark Connect server started from the installed pyspark wheel.

`rowgate serve` without `--upstream` and the test suite both need a real Spark Connect
server without asking the user to install Spark: the pyspark wheel ships the Spark jars
(including spark-connect and Hive), so `spark-submit` from the package folder is enough.
The Hive catalog keeps its Derby metastore and the warehouse under one data directory, so
tables survive a restart of the server.

Spark never outlives the process that started it: it runs under a guardian
(rowgate/embedded/guardian.py) that stops it when this process is gone, however it died, and
a start on a data directory reclaims it from whatever a dead proxy left running there
(rowgate/embedded/ownership.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from rowgate.embedded.ownership import MARKER_KEY, DataDirLock, owned_processes, reclaim, signal_processes

log = logging.getLogger("rowgate.embedded")
GUARDIAN = Path(__file__).with_name("guardian.py")

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class EmbeddedSparkError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def find_java() -> str:
    """Java 17+ is what Spark 4 needs; JAVA_HOME wins over PATH, as in spark-class."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if not java:
        raise EmbeddedSparkError(
            "java was not found: install Java 17 (e.g. `apt-get install -y openjdk-17-jre-headless`) "
            "or point --upstream at a running Spark Connect server"
        )
    return java


@dataclass
class EmbeddedSparkConnect:
    """One spark-submit child process serving Spark Connect on a loopback port."""

    data_dir: Path
    port: int = 0
    driver_memory: str = "1g"
    conf: dict[str, str] = field(default_factory=dict)
    startup_timeout: float = 180.0
    stop_grace: float = 20.0
    _guardian: subprocess.Popen | None = field(default=None, init=False, repr=False)
    _proc: SparkProcess | None = field(default=None, init=False, repr=False)  # the JVM
    _lock: DataDirLock | None = field(default=None, init=False, repr=False)
    _log_file: Path | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        # Absolute from the start: the guardian and Spark run with the data dir as their
        # working directory, where a relative path would point somewhere else.
        self.data_dir = Path(self.data_dir).resolve()

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path | None:
        return self._log_file

    def spark_conf(self) -> dict[str, str]:
        data = self.data_dir.resolve()
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.memory": self.driver_memory,
            "spark.sql.catalogImplementation": "hive",
            "spark.sql.warehouse.dir": str(data / "warehouse"),
            "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={data / 'metastore_db'};create=true",
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={data}",
            "spark.ui.enabled": "false",
            # Two cores are shared by Spark, the proxy and the clients: fewer shuffle
            # partitions keep small queries from drowning in task overhead.
            "spark.sql.shuffle.partitions": "4",
            "spark.sql.adaptive.enabled": "true",
        }
        conf.update(self.conf)
        # Names the data directory on the command line of every process serving it, so a
        # later start finds what a dead proxy left behind (rowgate/embedded/ownership.py).
        conf[MARKER_KEY] = str(data)
        return conf

    def command(self) -> list[str]:
        home = spark_home()
        cmd = [str(home / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS, "--name", "rowgate-embedded"]
        for key, value in self.spark_conf().items():
            cmd += ["--conf", f"{key}={value}"]
        cmd.append("spark-internal")
        return cmd

    def start(self) -> EmbeddedSparkConnect:
        self._lock = reclaim(self.data_dir, grace=self.stop_grace)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        if not self.port:
            self.port = free_port()
        java = find_java()
        env = dict(os.environ)
        env["SPARK_HOME"] = str(spark_home())
        env.setdefault("JAVA_HOME", str(Path(java).resolve().parent.parent))
        # Python UDFs run in workers the JVM spawns: they need this interpreter (with pyspark).
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        env.pop("SPARK_REMOTE", None)
        self._log_file = self.data_dir / "spark-connect.log"
        log.info("starting embedded Spark Connect", extra={"port": self.port, "data_dir": str(self.data_dir)})
        with open(self._log_file, "ab") as out:
            # stdin is the pipe the guardian watches: nothing is ever written to it, and its
            # end of file, when this process is gone, is the guardian's signal to stop Spark.
            self._guardian = subprocess.Popen(
                [
                    sys.executable,
                    str(GUARDIAN),
                    "--log",
                    str(self._log_file),
                    "--grace",
                    str(self.stop_grace),
                    "--",
                    *self.command(),
                ],
                cwd=self.data_dir,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=out,
                start_new_session=True,
            )
        assert self._guardian.stdout is not None
        first = self._guardian.stdout.readline().strip()
        if not first.isdigit():
            raise EmbeddedSparkError(f"the Spark guardian did not start Spark; see {self._log_file}")
        self._proc = SparkProcess(int(first))
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._guardian is not None and self._guardian.poll() is not None:
                raise EmbeddedSparkError(
                    f"Spark Connect exited with code {self._guardian.returncode} during start-up; see {self._log_file}"
                )
            if upstream_answers(f"127.0.0.1:{self.port}"):
                log.info("embedded Spark Connect is ready", extra={"port": self.port})
                return
            time.sleep(0.5)
        raise EmbeddedSparkError(f"Spark Connect did not answer within {self.startup_timeout:.0f}s; see {self._log_file}")

    def alive(self) -> bool:
        return self._guardian is not None and self._guardian.poll() is None

    def stop(self, timeout: float | None = None) -> None:
        """The guardian stops Spark's process group (SIGTERM, SIGKILL after its grace)."""
        guardian, self._guardian = self._guardian, None
        try:
            if guardian is not None:
                if guardian.poll() is None:
                    guardian.terminate()
                try:
                    guardian.wait(timeout=timeout or self.stop_grace + 15)
                except subprocess.TimeoutExpired:
                    guardian.kill()  # Spark's parent-death signal takes the JVM with it
                    guardian.wait(timeout=10)
                _close(guardian)
            self._sweep(signal.SIGKILL)
        finally:
            self._proc = None
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def kill(self) -> None:
        """SIGKILL to Spark and its guardian, for fault tests: no shutdown hooks run."""
        guardian, self._guardian = self._guardian, None
        if guardian is not None:
            self._sweep(signal.SIGKILL)
            guardian.wait(timeout=30)
            _close(guardian)
        self._proc = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _sweep(self, sig: int) -> None:
        """Whatever still serves this data directory (nothing, after a clean stop)."""
        signal_processes(owned_processes(self.data_dir), sig)


class SparkProcess:
    """Spark's JVM, known by process id (it is the guardian's child, not this process's):
    leads Spark's process group, so `os.killpg(proc.pid, sig)` reaches all of Spark."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                with open(f"/proc/{self.pid}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
                if state in (b"Z", b"X"):
                    self.returncode = -1
            except (OSError, IndexError):
                self.returncode = -1
        return self.returncode


def _close(proc: subprocess.Popen) -> None:
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def upstream_answers(target: str, timeout: float = 2.0) -> bool:
    """True when a Spark Connect server at host:port answers a Config RPC.

    A TCP connect is not enough: the port opens before the session manager is ready.
    Any gRPC answer (even an error status other than UNAVAILABLE) proves it serves.
    """
    from pyspark.sql.connect.proto import base_pb2

    request = base_pb2.ConfigRequest(
        session_id="00000000-0000-4000-8000-000000000000",
        user_context=base_pb2.UserContext(user_id="rowgate-probe"),
        operation=base_pb2.ConfigRequest.Operation(get_option=base_pb2.ConfigRequest.GetOption(keys=["spark.app.name"])),
    )
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(
            "/spark.connect.SparkConnectService/Config",
            request_serializer=base_pb2.ConfigRequest.SerializeToString,
            response_deserializer=base_pb2.ConfigResponse.FromString,
        )
        try:
            call(request, timeout=timeout)
            return True
        except grpc.RpcError as err:
            return err.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

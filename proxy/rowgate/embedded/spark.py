"""A local Spark Connect server started from the installed pyspark wheel.

`rowgate serve` without `--upstream` and the test suite both need a real Spark Connect
server without asking the user to install Spark: the pyspark wheel ships the Spark jars
(including spark-connect and Hive), so `spark-submit` from the package folder is enough.
The Hive catalog keeps its Derby metastore and the warehouse under one data directory, so
tables survive a restart of the server.
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

log = logging.getLogger("rowgate.embedded")

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
    _proc: subprocess.Popen | None = field(default=None, init=False, repr=False)
    _log_file: Path | None = field(default=None, init=False, repr=False)

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
        return conf

    def command(self) -> list[str]:
        home = spark_home()
        cmd = [str(home / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS, "--name", "rowgate-embedded"]
        for key, value in self.spark_conf().items():
            cmd += ["--conf", f"{key}={value}"]
        cmd.append("spark-internal")
        return cmd

    def start(self) -> "EmbeddedSparkConnect":
        self.data_dir.mkdir(parents=True, exist_ok=True)
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
            self._proc = subprocess.Popen(
                self.command(),
                cwd=self.data_dir,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise EmbeddedSparkError(
                    f"Spark Connect exited with code {self._proc.returncode} during start-up; see {self._log_file}"
                )
            if upstream_answers(f"127.0.0.1:{self.port}"):
                log.info("embedded Spark Connect is ready", extra={"port": self.port})
                return
            time.sleep(0.5)
        raise EmbeddedSparkError(f"Spark Connect did not answer within {self.startup_timeout:.0f}s; see {self._log_file}")

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 30.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL, for fault tests: no shutdown hooks run."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=10)
        self._proc = None


def upstream_answers(target: str, timeout: float = 2.0) -> bool:
    """True when a Spark Connect server at host:port answers a Config RPC.

    A TCP connect is not enough: the port opens before the session manager is ready.
    Any gRPC answer (even an error status other than UNAVAILABLE) proves it serves.
    """
    from pyspark.sql.connect.proto import base_pb2

    request = base_pb2.ConfigRequest(
        session_id="00000000-0000-4000-8000-000000000000",
        user_context=base_pb2.UserContext(user_id="rowgate-probe"),
        operation=base_pb2.ConfigRequest.Operation(
            get_option=base_pb2.ConfigRequest.GetOption(keys=["spark.app.name"])
        ),
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

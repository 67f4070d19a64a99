"""The moving parts of one compatibility cell: client venvs, Spark servers, rowgate proxies.

Every pyspark version gets its own venv under `.rowgate/compat/venvs/` (made once, then
reused; pip's cache keeps a rebuild off the network). The version installed in rowgate's own
venv, the pinned one, is used from there instead. Spark Connect servers are started from the
wheels that ship one (4.0 and later) with the embedded server's conf (small driver memory,
few shuffle partitions: the machine has two cores), under rowgate's guardian so none outlives
the driver; proxies are `rowgate serve` processes from rowgate's venv, exactly as an operator
runs them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from importlib.metadata import version as installed_version
from pathlib import Path

from rowgate.embedded.spark import (
    CONNECT_SERVER_CLASS,
    GUARDIAN,
    EmbeddedSparkConnect,
    find_java,
    free_port,
    upstream_answers,
)
from tests.harness.processes import SERVING, RowgateProcess

REPO = Path(__file__).resolve().parents[2]
ROOT = Path(os.environ.get("ROWGATE_COMPAT_DIR", REPO / ".rowgate" / "compat"))
SCENARIO = Path(__file__).with_name("scenario.py")
ADMIN = "user:admin@compat.test"
# Proxies import rowgate from here instead of the working tree when set (its `proxy/` folder).
PROXY_SOURCE_ENV = "ROWGATE_COMPAT_PROXY_SOURCE"

# What each client line needs beyond `pyspark[connect]`: 3.5's extra leaves numpy, pandas and
# pyarrow open, and their newest releases are newer than 3.5's code.
EXTRA_REQUIREMENTS = {"3.5": ["numpy<2", "pandas<2.3", "pyarrow<20", "setuptools"]}


def pinned_version() -> str:
    """The pyspark of rowgate's own venv: the protocol the proxy is built against."""
    return installed_version("pyspark")


def key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def ships_server(version: str) -> bool:
    """3.5 wheels have no Spark Connect server jar; 4.0 and later do."""
    return key(version) >= (4, 0)


def requirements(version: str) -> list[str]:
    line = ".".join(version.split(".")[:2])
    return [f"pyspark[connect]=={version}", *EXTRA_REQUIREMENTS.get(line, [])]


def python_for(version: str, log=print) -> Path:
    """The interpreter whose pyspark is `version`, building its venv on first use."""
    if version == pinned_version():
        return Path(sys.executable)
    venv = ROOT / "venvs" / f"pyspark-{version}"
    python = venv / "bin" / "python"
    stamp = venv / ".ready"
    wanted = "\n".join(requirements(version))
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    log(f"compat: installing pyspark {version} into {venv.relative_to(REPO) if venv.is_relative_to(REPO) else venv}")
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements(version)],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"pip could not install pyspark {version}:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    stamp.write_text(wanted)
    return python


def pyspark_home(python: Path) -> Path:
    done = subprocess.run(
        [str(python), "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip())


@dataclass
class CompatServer:
    """A Spark Connect server of one version, from that version's wheel."""

    version: str
    python: Path
    data_dir: Path
    startup_timeout: float = 600.0
    port: int = 0
    guardian: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"sc://localhost:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "spark-connect.log"

    def start(self) -> CompatServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        home = pyspark_home(self.python)
        conf = EmbeddedSparkConnect(data_dir=self.data_dir, port=self.port, driver_memory="1g").spark_conf()
        command = [str(home / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS]
        command += ["--name", f"rowgate-compat-{self.version}"]
        for name, value in conf.items():
            command += ["--conf", f"{name}={value}"]
        command.append("spark-internal")
        java = find_java()
        env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
        env["SPARK_HOME"] = str(home)
        env.setdefault("JAVA_HOME", str(Path(java).resolve().parent.parent))
        # Python UDF workers run this version's pyspark, as they would beside that server.
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = str(self.python)
        with open(self.log_path, "ab") as out:
            self.guardian = subprocess.Popen(
                [sys.executable, str(GUARDIAN), "--log", str(self.log_path), "--grace", "20", "--", *command],
                cwd=self.data_dir,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=out,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.startup_timeout
        while not upstream_answers(f"127.0.0.1:{self.port}"):
            if self.guardian.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Spark Connect {self.version} did not start; see {self.log_path}")
            time.sleep(1)
        return self

    def stop(self) -> None:
        guardian, self.guardian = self.guardian, None
        if guardian is None:
            return
        if guardian.poll() is None:
            guardian.terminate()  # the guardian stops Spark's process group
        try:
            guardian.wait(timeout=60)
        except subprocess.TimeoutExpired:
            guardian.kill()
            guardian.wait(timeout=30)
        if guardian.stdin is not None:
            guardian.stdin.close()


@dataclass
class CompatProxy:
    """`rowgate serve` in front of one server; policies live in its own data directory."""

    upstream: str
    data_dir: Path
    process: RowgateProcess | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        assert self.process is not None, "start() first"
        return self.process.url

    @property
    def log_path(self) -> Path:
        return self.data_dir / "rowgate.log"

    def start(self, timeout: float = 180.0) -> CompatProxy:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = ["--upstream", self.upstream, "--data-dir", str(self.data_dir)]
        args += ["--identity", "header", "--admin", ADMIN, "--allow-python-udfs"]
        env = dict(os.environ)
        source = os.environ.get(PROXY_SOURCE_ENV)
        if source:  # a fixed copy of rowgate's source, e.g. from `git archive`, for long runs
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
        process = RowgateProcess(free_port(), args, self.log_path, env=env, ready=SERVING, stop_timeout=60)
        try:
            self.process = process.start(timeout)
        except BaseException:
            process.stop()
            raise RuntimeError(f"rowgate did not start; see {self.log_path}") from None
        return self

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.stop()


@dataclass
class Stand:
    """One server, the proxy in front of it, and the scenario's tables and policies."""

    server: CompatServer
    proxy: CompatProxy
    db: str
    workdir: Path

    @classmethod
    def start(cls, version: str, log=print) -> Stand:
        workdir = ROOT / "run" / f"server-{version}-{uuid.uuid4().hex[:8]}"
        server = CompatServer(version, python_for(version, log), workdir / "spark")
        log(f"compat: starting Spark Connect {version}")
        server.start()
        try:
            proxy = CompatProxy(server.url, workdir / "proxy").start()
        except BaseException:
            server.stop()
            raise
        stand = cls(server, proxy, f"compat_{uuid.uuid4().hex[:8]}", workdir)
        try:
            scenario(Path(sys.executable), "setup", {"proxy": proxy.url, "db": stand.db}, timeout=600)
        except BaseException:
            stand.stop()
            raise
        return stand

    def bare_proxy(self) -> CompatProxy:
        """A second proxy in front of the same server with an empty policy store: it must leak
        by design, so the scenario's oracle can be shown to catch a leak."""
        return CompatProxy(self.server.url, self.workdir / f"bare-{uuid.uuid4().hex[:6]}").start()

    def stop(self, keep: bool = False) -> None:
        self.proxy.stop()
        self.server.stop()
        if not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


def scenario(python: Path, mode: str, spec: dict, timeout: float) -> dict:
    """Runs tests/compat/scenario.py under `python`; its last output line is its JSON answer."""
    import json

    ROOT.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "PYTHONPATH")}
    done = subprocess.run(
        [str(python), str(SCENARIO), mode, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        raise RuntimeError(f"scenario {mode} exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])

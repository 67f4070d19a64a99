"""Test harness: one real Spark Connect server per test session, real proxies in front of it.

The server is started from the installed pyspark (or, with ROWGATE_TEST_UPSTREAM=sc://...,
an already running one is used, e.g. the dockerized stack). It runs with
`senderMaxStreamDuration=1s` and `senderMaxStreamSize=123`, so the server cuts almost every
result stream and pyspark reattaches all the time: every test that reads a result through
the proxy exercises ReattachExecute too.

Proxies run as `rowgate serve` subprocesses, exactly as an operator starts them, so a test
can also kill one (SIGKILL) or restart it.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

# This checkout's rowgate, even when the virtualenv's editable install points at another
# checkout (worktrees sharing one .venv); the proxies started get the same (tests/harness).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "proxy"))

from rowgate.embedded.spark import EmbeddedSparkConnect, free_port
from tests.deadlines import scaled
from tests.harness.processes import REPO, RowgateProcess

SHARED = REPO.parent / "shared"
UPSTREAM_ENV = "ROWGATE_TEST_UPSTREAM"

REATTACH_CONF = {
    "spark.connect.execute.reattachable.senderMaxStreamDuration": "1s",
    "spark.connect.execute.reattachable.senderMaxStreamSize": "123",
}


@dataclass
class SparkUnderTest:
    url: str
    server: EmbeddedSparkConnect | None
    warehouse: Path | None


@pytest.fixture(scope="session")
def spark_server(tmp_path_factory) -> SparkUnderTest:
    external = os.environ.get(UPSTREAM_ENV)
    if external:
        yield SparkUnderTest(url=external, server=None, warehouse=None)
        return
    data = tmp_path_factory.mktemp("spark")
    server = EmbeddedSparkConnect(data_dir=data, driver_memory="1g", conf=dict(REATTACH_CONF))
    server.start()
    yield SparkUnderTest(url=server.url, server=server, warehouse=data / "warehouse")
    server.stop()


@pytest.fixture(scope="session")
def proxy_factory(request, tmp_path_factory):
    """Starts `rowgate serve` processes (in front of the session's Spark server unless told
    otherwise; the server is started only when a proxy needs it)."""
    started: list[RowgateProcess] = []

    def start(
        *args: str,
        upstream: str | None = None,
        env: dict | None = None,
        port: int | None = None,
        health_tls_root: Path | None = None,
    ) -> RowgateProcess:
        workdir = tmp_path_factory.mktemp("proxy")
        full_env = dict(os.environ)
        full_env.update(env or {})
        proxy = RowgateProcess(
            port=port or free_port(),
            args=[
                "--upstream",
                upstream or request.getfixturevalue("spark_server").url,
                "--data-dir",
                str(workdir),
                *args,
            ],
            log_path=workdir / "rowgate.log",
            env=full_env,
            tls_root=health_tls_root,
        )
        proxy.extra["workdir"] = workdir
        started.append(proxy)
        return proxy.start()

    yield start
    for proxy in started:
        proxy.stop()


@pytest.fixture(scope="session")
def proxy(proxy_factory) -> RowgateProcess:
    """The shared proxy: header identity, one admin, default settings."""
    return proxy_factory("--identity", "header", "--admin", "user:admin@example.com")


def execute_sql(channel, query: str, *, user: str | None = None, timeout: float = 120):
    """A raw ExecutePlan stream of one SQL statement in a fresh session.

    pyspark retries UNAVAILABLE for minutes and hides trailers; tests that need the proxy's
    own answer, its trailers, or a proxy that may die mid-way use this instead.
    """
    from pyspark.sql.connect.proto import base_pb2, relations_pb2

    request = base_pb2.ExecutePlanRequest(
        session_id=str(uuid.uuid4()),
        user_context=base_pb2.UserContext(user_id="ignored"),
        plan=base_pb2.Plan(root=relations_pb2.Relation(sql=relations_pb2.SQL(query=query))),
    )
    metadata = (("x-rowgate-user", user),) if user else ()
    return channel.unary_stream(
        "/spark.connect.SparkConnectService/ExecutePlan",
        request_serializer=base_pb2.ExecutePlanRequest.SerializeToString,
        response_deserializer=base_pb2.ExecutePlanResponse.FromString,
    )(request, metadata=metadata, timeout=timeout)


def remote_url(base: str, user: str | None = None, groups: str | None = None, **params: str) -> str:
    url = base + "/"
    if user:
        url += f";x-rowgate-user={user}"
    if groups:
        url += f";x-rowgate-groups={groups}"
    for key, value in params.items():
        url += f";{key}={value}"
    return url


@pytest.fixture
def sessions():
    """Creates fresh pyspark Connect sessions and stops them after the test."""
    from pyspark.sql import SparkSession

    made = []

    def make(url: str):
        session = SparkSession.builder.remote(url).create()
        made.append(session)
        return session

    yield make
    for session in made:
        try:
            session.stop()
        except Exception:
            pass
        # pyspark 4.1: a stopped session's finalizer closes the client, which shuts down the
        # process-wide ReleaseExecute pool; run by the garbage collector inside another
        # session's submit() it deadlocks that client (seen directly against Spark too).
        session.client.close = lambda: None


@pytest.fixture
def direct(spark_server, sessions):
    return sessions(spark_server.url)


@pytest.fixture
def proxied(proxy, sessions):
    return sessions(proxy.url)


def unique(prefix: str = "t") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def pytest_report_header(config):
    java = shutil.which("java") or "not found"
    return [f"rowgate tests: java={java}, upstream={os.environ.get(UPSTREAM_ENV) or 'embedded (started by the suite)'}"]


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item):
    """Stretch each test's pytest-timeout (the ini's `timeout`) by the machine's load when the
    test starts, like every other deadline of the suite (tests/deadlines.py): a loaded machine
    makes a correct test slow, and only a hung one should hit the timeout. A test's own
    `timeout` marker and an explicit `--timeout` are left as given."""
    base = item.config.getini("timeout")
    explicit = item.config.getoption("timeout", default=None)
    if base and explicit is None and item.get_closest_marker("timeout") is None:
        item.add_marker(pytest.mark.timeout(scaled(float(base))))
    yield

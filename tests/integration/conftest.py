"""Fixtures shared by the integration modules (on top of tests/conftest.py).

`module_sessions` is the module-scoped twin of the `sessions` fixture: modules that set up
tables and policies once, or that ask many questions as the same caller, keep one pyspark
session per caller instead of paying a session start-up per test (the machine has two cores).
"""

from __future__ import annotations

import gc

import pytest

from tests.harness.answers import grpc_status  # noqa: F401 (imported from here by many tests)


def _session_factory():
    from pyspark.sql import SparkSession

    made = []

    def make(url: str):
        session = SparkSession.builder.remote(url).create()
        made.append(session)
        return session

    def stop_all():
        for session in made:
            try:
                session.stop()
            except Exception:
                pass
            # Stopped: its finalizer must not shut the shared release pool down later, at a
            # moment another session is submitting to it (see collect_dead_sessions).
            session.client.close = lambda: None
        made.clear()
        gc.collect()

    return make, stop_all


@pytest.fixture(autouse=True)
def collect_dead_sessions():
    """Collects garbage after each test, once the test's sessions are stopped.

    pyspark 4.1's `SparkSession.__del__` closes the client, which shuts down the process-wide
    ReleaseExecute thread pool (`ExecutePlanResponseReattachableIterator.shutdown()`). When the
    garbage collector runs that finalizer inside `submit()` on the same pool (every reattachable
    result stream submits ReleaseExecute calls), the non-reentrant pool lock deadlocks the
    client: the test hangs until Spark abandons the operation (INVALID_HANDLE.OPERATION_ABANDONED).
    It happens against Spark directly as well; collecting here, between tests, keeps dead
    sessions from being finalized in the middle of a later request.
    """
    yield
    gc.collect()


@pytest.fixture(scope="module")
def module_sessions():
    """Creates pyspark Connect sessions that live until the end of the module."""
    make, stop_all = _session_factory()
    yield make
    stop_all()


_SUMMARY = pytest.StashKey[list]()


@pytest.fixture(scope="session")
def report_summary(request):
    """`report_summary(text)`: printed at the end of the run, under "rowgate summary"."""
    lines = request.config.stash.setdefault(_SUMMARY, [])
    return lines.append


def pytest_terminal_summary(terminalreporter, config):
    lines = config.stash.get(_SUMMARY, [])
    if lines:
        terminalreporter.section("rowgate summary")
        for text in lines:
            for line in text.splitlines():
                terminalreporter.write_line(line)

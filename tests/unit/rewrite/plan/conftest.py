"""Fixtures for the plan rewriter's unit tests: a fake context and an offline pyspark client.

Plans are built by hand with the protobuf classes, or with pyspark's own plan builder
through a session that never connects: building a plan (`df._plan.plan(client)`) needs no
server, only calls that ask for a schema or execute do (none are used here).
"""

from __future__ import annotations

import atexit

import pytest

from tests.unit.rewrite.fakes import shop


@pytest.fixture
def ctx():
    """orders protected (alice: region EU or own rows), lineitem unprotected, a lookup table."""
    return shop()


@pytest.fixture(scope="session")
def offline():
    from pyspark.sql.connect.session import SparkSession

    session = SparkSession(connection="sc://localhost:1")  # not registered as the default session
    client = session._client
    atexit.unregister(client._cleanup_ml_cache)  # it would try to reach the server at exit
    yield session
    client.close()

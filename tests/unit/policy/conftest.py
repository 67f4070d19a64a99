import glob
import os
import subprocess
import uuid

import pytest

PG_DSN = os.environ.get("ROWGATE_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_up() -> str | None:
    import psycopg

    try:
        psycopg.connect(PG_DSN, connect_timeout=2).close()
        return None
    except Exception as e:
        return str(e).strip()


@pytest.fixture(scope="session")
def pg_dsn():
    """The test PostgreSQL, started once if it is installed but down; skipped if unreachable."""
    problem = _pg_up()
    if problem is not None:
        versions = [os.path.basename(p) for p in glob.glob("/etc/postgresql/*")]
        if versions:
            subprocess.run(
                ["pg_ctlcluster", "--skip-systemctl-redirect", versions[0], "main", "start"],
                capture_output=True,
                timeout=30,
            )
            problem = _pg_up()
    if problem is not None:
        print(f"\nskipping PostgreSQL tests: {PG_DSN} unreachable: {problem}")
        pytest.skip(f"PostgreSQL at {PG_DSN} unreachable: {problem}")
    return PG_DSN


@pytest.fixture
def pg_schema(pg_dsn):
    """A schema of its own per test, dropped afterwards, so runs never see each other's policies."""
    import psycopg
    from psycopg import sql

    schema = f"rowgate_test_{uuid.uuid4().hex[:12]}"
    yield schema
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def open_one(request, tmp_path):
    """A factory for store objects sharing one backend location (one file / one schema);
    store contract tests run once per backend through it."""
    opened = []
    if request.param == "sqlite":
        from rowgate.policy.store.sqlite import SqlitePolicyStore

        def make():
            opened.append(SqlitePolicyStore(tmp_path / "policies.db"))
            return opened[-1]
    else:
        from rowgate.policy.store.postgres import PostgresPolicyStore

        dsn = request.getfixturevalue("pg_dsn")
        schema = request.getfixturevalue("pg_schema")

        def make():
            opened.append(PostgresPolicyStore(dsn, schema=schema, channel=schema))
            return opened[-1]

    make.backend = request.param
    yield make
    for s in opened:
        s.close()

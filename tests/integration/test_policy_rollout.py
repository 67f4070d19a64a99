"""Rolling out a policy (issue 25) through real pyspark, real proxies and the suite's Spark
Connect server: impact preview, history and rollback.

- a preview's counts are what each principal reads: `rows_now` before the change and
  `rows_after` once it is made, both compared with real reads through the proxy as that
  principal (SQL and DataFrame), for a policy file, a single CREATE, REPLACE and DROP, and a
  rollback; a preview changes nothing, neither the store nor Spark;
- non-admins get PERMISSION_DENIED from the CLI, the admin API and SQL;
- the history records every door (SQL, admin API, apply, rollback, a protected table's
  RENAME and DROP) with the right author;
- a rollback restores exactly the earlier policies, on SQLite and on PostgreSQL.

The proxies here have stores of their own (`--data-dir` per proxy; PostgreSQL in a schema of
its own, dropped afterwards), so versions and `--prune` see only this module's policies.

    orders (id, region, owner)                 allowed (who, region): lookup table
      1 EU   ann     5 US   eve                   bob   -> US
      2 EU   bob     6 EU   carol                 carol -> EU
      3 APAC ann     7 US   bob                   ann   -> APAC
      4 APAC carol   8 APAC bob
    items (id, owner): 10 ann, 11 bob, 12 carol
"""

from __future__ import annotations

import json
import uuid

import grpc
import pytest

from rowgate import cli
from rowgate.admin.client import AdminClient, AdminError, policy_proto, rollback_request
from rowgate.admin.policy_files import PolicySpec, parse_table
from rowgate.admin.v1 import policy_admin_pb2 as pb
from tests.conftest import remote_url, unique
from tests.harness.callers import ADMIN
from tests.integration.conftest import grpc_status

pytestmark = pytest.mark.spark

DANA = "user:dana@example.com"  # an admin through her group
ADMIN_GROUP = "group:admins@example.com"
PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"

# name -> (principal, groups)
PRINCIPALS = {
    "ann": ("user:ann@example.com", ()),
    "bob": ("user:bob@example.com", ("group:eu@example.com",)),
    "carol": ("user:carol@example.com", ("group:apac@example.com", "group:eu@example.com")),
    "eve": ("user:eve@other.org", ()),
}
LOOKUP = "region IN (SELECT region FROM allowed WHERE who = SESSION_USER())"


def serve(proxy_factory, *args):
    return proxy_factory("--identity", "header", "--admin", ADMIN, "--admin", ADMIN_GROUP, *args)


@pytest.fixture(scope="module")
def lite(proxy_factory):
    """A proxy with a SQLite store of its own."""
    return serve(proxy_factory)


@pytest.fixture(scope="module")
def pg_schema():
    psycopg = pytest.importorskip("psycopg")
    try:
        psycopg.connect(PG_DSN, connect_timeout=3).close()
    except psycopg.OperationalError as e:
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432 is not reachable: {e}")
    schema = f"rowgate_rollout_{uuid.uuid4().hex[:10]}"
    yield schema
    from psycopg import sql

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(scope="module")
def pg(proxy_factory, pg_schema):
    """A proxy with a PostgreSQL store in a schema of its own."""
    return serve(proxy_factory, "--policy-store", f"{PG_DSN}?schema={pg_schema}")


@pytest.fixture(scope="module")
def db(lite, module_sessions):
    name = unique("rollout")
    spark = module_sessions(remote_url(lite.url, user=ADMIN))
    spark.sql(f"CREATE DATABASE {name}")
    spark.sql(f"CREATE TABLE {name}.orders (id INT, region STRING, owner STRING) USING parquet")
    spark.sql(
        f"INSERT INTO {name}.orders VALUES (1, 'EU', 'ann@example.com'), (2, 'EU', 'bob@example.com'),"
        " (3, 'APAC', 'ann@example.com'), (4, 'APAC', 'carol@example.com'), (5, 'US', 'eve@other.org'),"
        " (6, 'EU', 'carol@example.com'), (7, 'US', 'bob@example.com'), (8, 'APAC', 'bob@example.com')"
    )
    spark.sql(f"CREATE TABLE {name}.allowed (who STRING, region STRING) USING parquet")
    spark.sql(
        f"INSERT INTO {name}.allowed VALUES ('bob@example.com', 'US'), ('carol@example.com', 'EU'), ('ann@example.com', 'APAC')"
    )
    spark.sql(f"CREATE TABLE {name}.items (id INT, owner STRING) USING parquet")
    spark.sql(f"INSERT INTO {name}.items VALUES (10, 'ann@example.com'), (11, 'bob@example.com'), (12, 'carol@example.com')")
    return name


# -- helpers -----------------------------------------------------------------------------------


def rowgate(proxy, *args: str, user: str = ADMIN, groups: str | None = None) -> int:
    who = ["--user", user] + (["--groups", groups] if groups else [])
    return cli.main(["policies", "--target", proxy.target, *who, *args])


def admin_client(proxy, user: str = ADMIN, groups=()) -> AdminClient:
    return AdminClient(proxy.target, user=user, groups=list(groups), timeout=300)


def principal_args(*names: str) -> list[str]:
    out = []
    for name in names:
        principal, groups = PRINCIPALS[name]
        out += ["--principal", principal + (f";groups={','.join(groups)}" if groups else "")]
    return out


def session_of(module_sessions, proxy, name: str):
    principal, groups = PRINCIPALS[name]
    bare = ",".join(g.removeprefix("group:") for g in groups) or None
    return module_sessions(remote_url(proxy.url, user=principal, groups=bare))


def reads(module_sessions, proxy, db: str, tables=("orders", "items")) -> dict[tuple[str, str], int]:
    """(table, principal) -> rows that principal reads now through the proxy: by SQL, and the
    same number by the DataFrame API."""
    seen = {}
    for name, (principal, _) in PRINCIPALS.items():
        spark = session_of(module_sessions, proxy, name)
        for table in tables:
            by_sql = spark.sql(f"SELECT count(*) AS n FROM {db}.{table}").first().n
            by_frame = spark.table(f"{db}.{table}").count()
            assert by_sql == by_frame, (name, table)
            seen[(f"spark_catalog.{db}.{table}", principal)] = by_sql
    return seen


def spec(db: str, table: str, name: str, grantees, filter_sql: str) -> PolicySpec:
    return PolicySpec(parse_table(f"{db}.{table}"), name, tuple(grantees), filter_sql)


def reset(proxy, db: str, *specs: PolicySpec) -> int:
    """Make the proxy's store hold exactly `specs`; returns the version."""
    with admin_client(proxy) as client:
        return client.apply_policies(specs, prune=True).version


def policies_now(proxy) -> list[tuple]:
    with admin_client(proxy) as client:
        return [
            (p.table_schema, p.table_name, p.policy_name, tuple(p.grantees), p.filter_predicate, p.creation_time.ToDatetime())
            for p in client.list_policies()
        ]


def version_now(proxy) -> int:
    with admin_client(proxy) as client:
        return client.list_history().version


def spark_state(direct, db: str) -> tuple:
    """What Spark holds, read directly: the database's tables and their rows."""
    tables = sorted(r.tableName for r in direct.sql(f"SHOW TABLES IN {db}").collect())
    rows = {t: sorted(tuple(r) for r in direct.table(f"{db}.{t}").collect()) for t in tables}
    return tables, rows


def preview_json(proxy, capsys, *args: str) -> list[dict]:
    capsys.readouterr()
    assert rowgate(proxy, *args, "--json") == 0, capsys.readouterr().err
    rows = json.loads(capsys.readouterr().out)
    for row in rows:
        assert set(row) == {"table", "principal", "rows_now", "rows_after"}
    changes = [abs(r["rows_after"] - r["rows_now"]) for r in rows]
    assert changes == sorted(changes, reverse=True), "sorted by largest change"
    return rows


def as_counts(rows: list[dict]) -> tuple[dict, dict]:
    now = {(r["table"], r["principal"]): r["rows_now"] for r in rows}
    after = {(r["table"], r["principal"]): r["rows_after"] for r in rows}
    return now, after


def restricted(seen: dict, tables) -> dict:
    return {k: v for k, v in seen.items() if k[0] in tables}


BASE = ("mine", ["domain:example.com"], "owner = SESSION_USER()")


# -- impact preview --------------------------------------------------------------------------


def test_a_file_preview_counts_what_each_principal_then_reads(lite, db, module_sessions, direct, tmp_path, capsys):
    reset(lite, db, spec(db, "orders", *BASE))
    before = reads(module_sessions, lite, db)
    policies, version, spark_before = policies_now(lite), version_now(lite), spark_state(direct, db)

    rollout = tmp_path / "rollout.yaml"
    rollout.write_text(
        f"- table: {db}.orders\n  name: mine\n  grantees: [domain:example.com]\n  filter: owner = SESSION_USER()\n"
        f"- table: {db}.orders\n  name: lookup\n  grantees: [group:eu@example.com]\n  filter: {LOOKUP}\n"
        f"- table: {db}.orders\n  name: apac\n  grantees: [group:apac@example.com]\n  filter: region = 'APAC'\n"
        f"- table: {db}.items\n  name: own_items\n  grantees: [domain:example.com]\n  filter: owner = SESSION_USER()\n"
    )
    principals = tmp_path / "principals.yaml"
    principals.write_text(
        "- principal: user:carol@example.com\n  groups: [group:apac@example.com, group:eu@example.com]\n"
        "- principal: eve@other.org\n"
    )
    rows = preview_json(
        lite, capsys, "apply", "--file", str(rollout), "--dry-run", "--impact", *principal_args("ann", "bob"),
        "--principals-file", str(principals),
    )  # fmt: skip
    assert len(rows) == 8  # 2 tables x 4 principals
    now, after = as_counts(rows)
    assert now == before

    # the preview changed nothing: not the store, not Spark
    assert policies_now(lite) == policies and version_now(lite) == version
    assert spark_state(direct, db) == spark_before
    assert reads(module_sessions, lite, db) == before

    # the text form: the same rows, largest change first
    assert rowgate(lite, "apply", "--file", str(rollout), "--dry-run", "--impact", *principal_args(*PRINCIPALS)) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"would create spark_catalog.{db}.orders apac" in out and f"would create spark_catalog.{db}.items own_items" in out
    header = next(i for i, line in enumerate(out) if line.startswith("TABLE"))
    assert out[header].split() == ["TABLE", "PRINCIPAL", "GROUPS", "ROWS", "NOW", "ROWS", "AFTER", "CHANGE"]
    biggest = max(rows, key=lambda r: abs(r["rows_after"] - r["rows_now"]))
    first = out[header + 1].split()
    assert int(first[-1]) == biggest["rows_after"] - biggest["rows_now"] != 0

    assert rowgate(lite, "apply", "--file", str(rollout)) == 0
    assert reads(module_sessions, lite, db) == after
    # the change mattered: the lookup and APAC grants widened bob's and carol's orders, ann lost items
    assert after != before


def test_single_create_replace_and_drop_previews(lite, db, module_sessions, capsys):
    reset(lite, db, spec(db, "orders", *BASE))
    orders = f"{db}.orders"
    principals = [PRINCIPALS[name] for name in PRINCIPALS]
    before = reads(module_sessions, lite, db, tables=("orders",))

    # CREATE through the admin API
    eu = pb.CreatePolicyRequest(policy=policy_proto(orders, "eu", ["group:eu@example.com"], "region = 'EU'"))
    with admin_client(lite) as client:
        preview = client.preview_impact(principals, create=eu)
        assert [c.action for c in preview.changes] == ["create"]
        now = {(r.table, r.principal): r.rows_now for r in preview.rows}
        after = {(r.table, r.principal): r.rows_after for r in preview.rows}
        assert now == before and {r.table for r in preview.rows} == {f"spark_catalog.{orders}"}
        assert {r.principal: list(r.groups) for r in preview.rows}["user:bob@example.com"] == ["eu@example.com"]
        # refused exactly where the change itself would be refused
        with pytest.raises(AdminError) as info:
            client.preview_impact(principals, create=pb.CreatePolicyRequest(policy=policy_proto(orders, "MINE", [], "TRUE")))
        assert info.value.code == grpc.StatusCode.ALREADY_EXISTS
        with pytest.raises(AdminError) as info:
            client.preview_impact(
                principals, create=pb.CreatePolicyRequest(policy=policy_proto(orders, "x", [], "no_such_column"))
            )
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(AdminError) as info:
            client.preview_impact([], create=eu)
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT and "principal" in info.value.message
        client.create_policy(orders, "eu", ["group:eu@example.com"], "region = 'EU'")
    assert reads(module_sessions, lite, db, tables=("orders",)) == after

    # OR REPLACE through the CLI, with a lookup table
    rows = preview_json(
        lite, capsys, "create", "--table", orders, "--name", "eu", "--grant", "group:eu@example.com", "--filter", LOOKUP,
        "--replace", "--dry-run", "--impact", *principal_args(*PRINCIPALS),
    )  # fmt: skip
    now, after = as_counts(rows)
    assert now == reads(module_sessions, lite, db, tables=("orders",))
    assert (
        rowgate(
            lite, "create", "--table", orders, "--name", "eu", "--grant", "group:eu@example.com", "--filter", LOOKUP, "--replace"
        )
        == 0
    )
    assert reads(module_sessions, lite, db, tables=("orders",)) == after

    # DROP previewed through the CLI, made in SQL
    rows = preview_json(
        lite, capsys, "drop", "--table", orders, "--name", "mine", "--dry-run", "--impact", *principal_args(*PRINCIPALS)
    )
    now, after = as_counts(rows)
    assert now == reads(module_sessions, lite, db, tables=("orders",))
    module_sessions(remote_url(lite.url, user=ADMIN)).sql(f"DROP ROW ACCESS POLICY mine ON {orders}")
    assert reads(module_sessions, lite, db, tables=("orders",)) == after
    # dropping the last policy leaves the table unprotected: everyone reads all 8 rows
    rows = preview_json(
        lite, capsys, "drop", "--table", orders, "--name", "eu", "--dry-run", "--impact", *principal_args(*PRINCIPALS)
    )
    assert {r["rows_after"] for r in rows} == {8}

    # a CLI preview without principals, or without --dry-run, is a usage error and changes nothing
    version = version_now(lite)
    assert rowgate(lite, "drop", "--table", orders, "--name", "eu", "--dry-run", "--impact") == 1
    assert "--impact needs the principals" in capsys.readouterr().err
    assert rowgate(lite, "drop", "--table", orders, "--name", "eu", "--impact", *principal_args("ann")) == 1
    assert "add --dry-run" in capsys.readouterr().err
    assert version_now(lite) == version


# -- who may ---------------------------------------------------------------------------------


def test_non_admins_are_refused_everywhere(lite, db, module_sessions, tmp_path, capsys):
    reset(lite, db, spec(db, "orders", *BASE))
    version = version_now(lite)
    rollout = tmp_path / "r.yaml"
    rollout.write_text(f"- table: {db}.orders\n  name: x\n  filter: 'TRUE'\n")
    bob = "user:bob@example.com"
    for args, rpc in [
        (["history"], "ListHistory"),
        (["rollback", "--to", "0"], "Rollback"),
        (["rollback", "--to", "0", "--dry-run", "--impact", *principal_args("ann")], "PreviewImpact"),
        (["apply", "--file", str(rollout), "--dry-run", "--impact", *principal_args("ann")], "PreviewImpact"),
        (["apply", "--file", str(rollout)], "ApplyPolicies"),
        (["drop", "--table", f"{db}.orders", "--name", "mine", "--dry-run", "--impact", *principal_args("ann")], "PreviewImpact"),
    ]:
        assert rowgate(lite, *args, user=bob, groups="eu@example.com") == 1
        err = capsys.readouterr().err
        assert f"PERMISSION_DENIED: rowgate.v1.PolicyAdmin/{rpc} is reserved for rowgate admins; {bob} is not one" in err, args

    with admin_client(lite, user=bob) as client:
        calls = {
            "ListHistory": lambda: client.list_history(),
            "Rollback": lambda: client.rollback(0),
            "ApplyPolicies": lambda: client.apply_policies([], prune=True, dry_run=True),
            "PreviewImpact": lambda: client.preview_impact([PRINCIPALS["ann"]], rollback=rollback_request(0)),
        }
        for rpc, call in calls.items():
            with pytest.raises(AdminError) as info:
                call()
            assert info.value.code == grpc.StatusCode.PERMISSION_DENIED, rpc

    spark = session_of(module_sessions, lite, "bob")
    for statement in ("SHOW ROW ACCESS POLICY HISTORY", f"SHOW ROW ACCESS POLICY HISTORY ON {db}.orders"):
        with pytest.raises(Exception) as info:
            spark.sql(statement).collect()
        assert grpc_status(info.value) == "PERMISSION_DENIED"
        assert "SHOW ROW ACCESS POLICY HISTORY is reserved for rowgate admins" in str(info.value)
    assert version_now(lite) == version


# -- history -----------------------------------------------------------------------------------


def test_history_records_every_door_with_its_author(lite, db, module_sessions, tmp_path, capsys):
    v0 = reset(lite, db, spec(db, "orders", *BASE))
    admin_sql = module_sessions(remote_url(lite.url, user=ADMIN))
    dana_sql = module_sessions(remote_url(lite.url, user=DANA, groups="admins@example.com"))
    moved_from, moved_to = unique("old"), unique("new")

    # SQL, by admin
    admin_sql.sql(
        f"CREATE ROW ACCESS POLICY own_items ON {db}.items GRANT TO ('domain:example.com') FILTER USING (owner = SESSION_USER())"
    )
    # admin API, by dana (an admin through her group)
    with admin_client(lite, user=DANA, groups=["admins@example.com"]) as client:
        client.create_policy(f"{db}.orders", "eu", ["group:eu@example.com"], "region = 'EU'")
    v_api = version_now(lite)
    # apply, by admin
    rollout = tmp_path / "r.yaml"
    rollout.write_text(f"- table: {db}.orders\n  name: apac\n  grantees: [group:apac@example.com]\n  filter: region = 'APAC'\n")
    assert rowgate(lite, "apply", "--file", str(rollout)) == 0
    # rollback, by dana: undoes the apply
    assert rowgate(lite, "rollback", "--to", str(v_api), user=DANA, groups="admins@example.com") == 0
    # a protected table renamed by dana, then dropped by admin, through the proxy
    admin_sql.sql(f"CREATE TABLE {db}.{moved_from} (id INT) USING parquet")
    admin_sql.sql(f"CREATE ROW ACCESS POLICY small ON {db}.{moved_from} FILTER USING (id < 5)")
    v_before_rename = version_now(lite)
    dana_sql.sql(f"ALTER TABLE {db}.{moved_from} RENAME TO {db}.{moved_to}")
    admin_sql.sql(f"DROP TABLE {db}.{moved_to}")
    capsys.readouterr()

    with admin_client(lite) as client:
        reply = client.list_history(after_version=v0)
    entries = list(reversed(reply.entries))  # oldest first
    assert [e.version for e in reply.entries] == sorted((e.version for e in reply.entries), reverse=True)
    doors = [(e.via, e.author, e.action, e.table.rsplit(".", 1)[1], e.policy_name) for e in entries]
    assert doors == [
        ("sql", ADMIN, "create", "items", "own_items"),
        ("admin_api", DANA, "create", "orders", "eu"),
        ("apply", ADMIN, "create", "orders", "apac"),
        ("rollback", DANA, "drop", "orders", "apac"),
        ("sql", ADMIN, "create", moved_from, "small"),
        ("table_rename", DANA, "create", moved_to, "small"),  # copied before Spark renames
        ("table_rename", DANA, "drop", moved_from, "small"),  # moved once it did
        ("table_drop", ADMIN, "drop", moved_to, "small"),
    ]
    assert entries[3].detail == f"to version {v_api}"
    assert entries[3].before.filter_predicate == "region = 'APAC'" and not entries[3].HasField("after")
    assert entries[0].after.filter_predicate == "owner = SESSION_USER()" and not entries[0].HasField("before")
    assert len({e.version for e in entries}) == 8 and reply.version == entries[-1].version

    # the CLI's JSON and table, and the SQL statement, show the same history
    assert rowgate(lite, "history", "--table", f"{db}.{moved_to}", "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(e["via"], e["author"], e["action"]) for e in shown] == [
        ("table_drop", ADMIN, "drop"),
        ("table_rename", DANA, "create"),
    ]
    assert shown[0]["before"] == {"grantees": ["allAuthenticatedUsers"], "filter": "id < 5"} and shown[0]["after"] is None
    assert rowgate(lite, "history", "--after-version", str(v0)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["VERSION", "TIME", "AUTHOR", "VIA", "ACTION"] and len(lines) == 9
    rows = admin_sql.sql(f"SHOW ROW ACCESS POLICY HISTORY ON {db}.{moved_from}").collect()
    assert rows[0].asDict().keys() == {
        "version", "change_time", "author", "via", "action", "table_catalog", "table_schema", "table_name",
        "policy_name", "grantees_before", "filter_before", "grantees_after", "filter_after", "detail",
    }  # fmt: skip
    assert [(r.via, r.author, r.action, r.filter_before, r.filter_after) for r in rows] == [
        ("table_rename", DANA, "drop", "id < 5", None),
        ("sql", ADMIN, "create", None, "id < 5"),
    ]
    assert rows[1].detail == "CREATE ROW ACCESS POLICY" and rows[0].table_name == moved_from

    # the renamed-away table is gone: rolling everything back to before the rename is refused
    # (its policies cannot be restored on a table that does not exist), and nothing changes
    version = version_now(lite)
    assert rowgate(lite, "rollback", "--to", str(v_before_rename)) == 1
    assert (
        f"FAILED_PRECONDITION: cannot restore the policies of version {v_before_rename} on spark_catalog.{db}.{moved_from}"
        in (capsys.readouterr().err)
    )
    assert version_now(lite) == version
    # ... while one table's rollback that does not touch it is fine
    assert rowgate(lite, "rollback", "--to", str(v0), "--table", f"{db}.items") == 0
    assert f"dropped spark_catalog.{db}.items own_items" in capsys.readouterr().out


# -- rollback --------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def store_proxy(request):
    return request.getfixturevalue("lite" if request.param == "sqlite" else "pg")


def test_rollback_restores_exactly_the_earlier_policies(store_proxy, db, module_sessions, tmp_path, capsys):
    proxy = store_proxy
    v_a = reset(
        proxy, db,
        spec(db, "orders", *BASE),
        spec(db, "orders", "apac", ["group:apac@example.com"], "region = 'APAC'"),
        spec(db, "items", "own_items", ["user:ann@example.com", "user:bob@example.com"], "owner = SESSION_USER()"),
    )  # fmt: skip
    state_a, reads_a = policies_now(proxy), reads(module_sessions, proxy, db)

    # a day of changes, through several doors
    admin_sql = module_sessions(remote_url(proxy.url, user=ADMIN))
    admin_sql.sql(
        f"CREATE OR REPLACE ROW ACCESS POLICY apac ON {db}.orders GRANT TO ('group:eu@example.com') FILTER USING ({LOOKUP})"
    )
    with admin_client(proxy) as client:
        client.drop_policy(f"{db}.orders", "mine")
        client.create_policy(f"{db}.items", "everyone", [], "TRUE")
        client.apply_policies([spec(db, "items", "everyone", ["allUsers"], "id > 10")])
    reads_b = reads(module_sessions, proxy, db)
    assert reads_b != reads_a
    version_b, state_b = version_now(proxy), policies_now(proxy)

    # the rollback previewed: now is what they read, after is what they read at v_a; nothing changes
    rows = preview_json(proxy, capsys, "rollback", "--to", str(v_a), "--dry-run", "--impact", *principal_args(*PRINCIPALS))
    now, after = as_counts(rows)
    assert now == reads_b and after == reads_a
    assert version_now(proxy) == version_b and policies_now(proxy) == state_b
    assert rowgate(proxy, "rollback", "--to", str(v_a), "--dry-run") == 0
    assert (
        capsys.readouterr().out.splitlines()[-1]
        == f"dry run: restoring the policies of version {v_a} would make 1 created, 1 replaced, 1 dropped"
    )
    assert version_now(proxy) == version_b

    assert rowgate(proxy, "rollback", "--to", str(v_a)) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"restored the policies of version {v_a}: 1 created, 1 replaced, 1 dropped (now version {version_b + 1})"
    )
    assert policies_now(proxy) == state_a  # names, grantees, filters and creation times
    assert reads(module_sessions, proxy, db) == reads_a
    with admin_client(proxy) as client:
        last = [e for e in client.list_history().entries if e.version == version_b + 1]
    assert {(e.via, e.author, e.detail) for e in last} == {("rollback", ADMIN, f"to version {v_a}")} and len(last) == 3
    assert rowgate(proxy, "rollback", "--to", str(v_a)) == 0  # already there: no new version
    assert "nothing changed" in capsys.readouterr().out and version_now(proxy) == version_b + 1

    # one table only: items goes back, orders keeps its change
    v_c = version_now(proxy)
    with admin_client(proxy) as client:
        client.drop_policy(f"{db}.items", "own_items")
        client.create_policy(f"{db}.orders", "us", ["allAuthenticatedUsers"], "region = 'US'")
    assert rowgate(proxy, "rollback", "--to", str(v_c), "--table", f"{db}.items") == 0
    names = [(t, n) for _, t, n, *_ in policies_now(proxy)]
    assert ("items", "own_items") in names and ("orders", "us") in names
    assert [x for x in policies_now(proxy) if x[1] == "items"] == [x for x in state_a if x[1] == "items"]

    # versions the history does not hold are refused
    assert rowgate(proxy, "rollback", "--to", str(version_now(proxy) + 5)) == 1
    assert "FAILED_PRECONDITION" in capsys.readouterr().err

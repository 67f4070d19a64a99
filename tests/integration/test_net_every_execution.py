"""The net on every execution (issue 21, item 1), through real pyspark, real proxies and Spark.

Two replicas A and B share one policy store and carry the worst reading mistake the
rewriter could make (tests/integration/net_faults/sitecustomize.py): a plan whose text
mentions `unread` is forwarded exactly as sent, reported as reading nothing protected.
Between such a plan and the protected rows stands only Spark's second opinion, so each test
here holds only when the net runs on every execution and a remembered verdict is reused
only under the state Spark will run it with: the session's settings (the SQL path, variable
substitution), its temp views by definition, catalog changes made through another replica,
and state changed between the check and the run.

    <db>.unread_t     (id, region)   protected: ann sees region = 'eu'   rows 1 eu, 2 us, 3 eu
    <own>.unread_t    (id, region)   not protected                       row 100 own
    <db>.unread_v     a view over <own>.unread_t (redefined by a test)

A is started with the pause fault (ROWGATE_TEST_PAUSE_DIR) off; C, a third proxy of its own
store, pauses after the check of a marked plan, for the test of a plan Spark cannot analyse.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rowgate.embedded.spark import free_port
from tests.conftest import remote_url, unique
from tests.deadlines import wait_until
from tests.harness.answers import id_set, refusal
from tests.harness.callers import ADMIN, ANN
from tests.harness.worlds import Policy, Table, View, protected_world, values

pytestmark = pytest.mark.spark

MARKER = "unread"
ROWS = {1: "eu", 2: "us", 3: "eu"}
FAULTS = str(Path(__file__).parent / "net_faults")


@dataclass
class World:
    db: str
    own: str
    a: object
    b: object
    metrics_port: int
    make: object
    store: str
    sessions: dict = field(default_factory=dict)

    def t(self, name: str) -> str:
        return f"{self.db}.{name}"

    def spark(self, who: str, proxy: str = "a", session_id: str | None = None):
        key = (who, proxy, session_id)
        if key not in self.sessions:
            url = (self.a if proxy == "a" else self.b).url
            params = {"session_id": session_id} if session_id else {}
            self.sessions[key] = self.make(remote_url(url, user=who, **params))
        return self.sessions[key]


def _env(**more: str) -> dict[str, str]:
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (FAULTS, os.environ.get("PYTHONPATH", "")) if p),
        "ROWGATE_TEST_UNREAD_MARKER": MARKER,
    }
    env.update(more)
    return env


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, tmp_path_factory, spark_server) -> World:
    logging.getLogger("pyspark").setLevel(logging.CRITICAL)
    store = f"sqlite:///{tmp_path_factory.mktemp('net') / 'policies.db'}"
    metrics_port = free_port()
    common = ("--identity", "header", "--admin", ADMIN, "--policy-store", store)
    a = proxy_factory(*common, "--metrics-listen", f"127.0.0.1:{metrics_port}", env=_env())
    b = proxy_factory(*common, env=_env())
    pw = protected_world(
        a,
        module_sessions,
        Table("unread_t", "id INT, region STRING", rows=[values(ROWS.items())]),
        Table("unread_t", "id INT, region STRING", rows=[values([(100, "own")])], database="own"),
        View("unread_v", "SELECT id, region FROM {own}.unread_t"),
        Policy("eu", "unread_t", "region = 'eu'", grantees=[ANN]),
        # a protected table without the marker: its reads go through the rewriter
        Table("probe", select="SELECT CAST(id AS INT) AS id FROM range(1, 3)"),
        Policy("p", "probe", "id = 1", grantees=[ANN]),
        database="net",
        databases={"own": "net_own"},
        spark_url=spark_server.url,
    )
    w = World(db=pw.db, own=pw.names["own"], a=a, b=b, metrics_port=metrics_port, make=module_sessions, store=store)
    w.sessions[(ADMIN, "a", None)] = pw.admin
    for proxy in ("a", "b"):  # a policy reaches the other replica within a second, not at once
        spark = w.spark(ANN, proxy)
        wait_until(lambda s=spark: id_set(s.table(w.t("probe"))) == {1}, f"replica {proxy} enforcing the policies")
    yield w
    pw.close()


def _counts(w: World) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{w.metrics_port}/metrics", timeout=10).read().decode()
    return {m[0]: float(m[1]) for m in re.findall(r'^rowgate_second_opinion_total\{outcome="(\w+)"\} (\S+)$', text, re.M)}


def remembered(w: World, action) -> object:
    """Runs `action` (a read through A) and asserts A answered it from a remembered verdict."""
    before = _counts(w)
    out = action()
    after = _counts(w)
    assert after.get("hit", 0) > before.get("hit", 0), "the verdict was not remembered: the test would prove nothing"
    assert after.get("miss", 0) == before.get("miss", 0)
    return out


def _second_opinion_refusal(status, text, table: str, path_hides_builtins: bool = False) -> None:
    """The second opinion refused instead of reusing a verdict. With the SQL path pointed at a
    database without `system.builtin`, Spark cannot resolve the builtin of the policy's
    barrier (`SPARK_PARTITION_ID()`), so the refusal may also be "cannot tell what Spark would
    read" (INVALID_ARGUMENT): still Spark's own analysis refusing, never a remembered verdict."""
    if path_hides_builtins and status == "INVALID_ARGUMENT":
        assert "second opinion cannot tell what Spark would read" in text and table in text, text
        return
    assert status == "PERMISSION_DENIED", text
    assert "second opinion" in text and table in text, text


# -- 1. Settings: the SQL path ---------------------------------------------------------------


def _own_path(w: World, spark) -> None:
    spark.sql("SELECT 1 AS warm").collect()  # the session's position is learned before the path hides builtins
    try:
        spark.conf.set("spark.sql.path.enabled", "true")
        spark.conf.set("spark.sql.defaultPath", f"spark_catalog.{w.own}")
    except Exception as e:
        if "ROWGATE" not in str(e):
            raise
        pytest.skip("the settings allow list refuses the SQL path here; the USE tests bind the same way")


def test_sql_path_moved_by_a_config_call_makes_spark_analyse_again(world):
    """The issue's example: `SELECT id FROM unread_t` resolves along the SQL PATH; checked with
    the path at the caller's own database and remembered, it must be checked again once a
    Config call points the path at the protected database. As an admin, who may set more
    than the settings allow list lets others: the binding must hold on its own."""
    spark = world.spark(ADMIN, session_id=str(uuid.uuid4()))
    _own_path(world, spark)
    text = "SELECT id FROM unread_t"
    assert id_set(spark.sql(text)) == {100}
    assert remembered(world, lambda: id_set(spark.sql(text))) == {100}
    spark.conf.set("spark.sql.defaultPath", f"spark_catalog.{world.db}")
    status, message = refusal(lambda: spark.sql(text).collect())
    _second_opinion_refusal(status, message, world.t("unread_t"), path_hides_builtins=True)


def test_sql_path_moved_through_another_replica_makes_spark_analyse_again(world):
    """The same session on two replicas (two clients, one session id): a `SET` of the path
    relayed by B must make A analyse again."""
    session_id = str(uuid.uuid4())
    on_a = world.spark(ADMIN, "a", session_id)
    on_b = world.spark(ADMIN, "b", session_id)
    _own_path(world, on_a)
    text = "SELECT id FROM unread_t WHERE id > 0"
    assert id_set(on_a.sql(text)) == {100}
    assert remembered(world, lambda: id_set(on_a.sql(text))) == {100}
    on_b.sql(f"SET spark.sql.defaultPath = spark_catalog.{world.db}").collect()
    status, message = refusal(lambda: on_a.sql(text).collect())
    if "TABLE_OR_VIEW_NOT_FOUND" in message:
        # B, seeing the session for the first time, asserted the forced settings
        # (spark.sql.path.enabled=false, pipeline/statements/guard_config.py) before relaying the SET:
        # the path is off again and Spark finds no `unread_t` at all. No verdict was reused.
        assert "`system`.`builtin`" in message, message
        return
    _second_opinion_refusal(status, message, world.t("unread_t"), path_hides_builtins=True)


def test_a_verdict_of_one_session_is_not_reused_by_another_with_other_settings(world):
    """Two sessions of one caller, same position and temp views, different SQL paths: the
    verdict one session earned says nothing about the other."""
    first = world.spark(ADMIN, session_id=str(uuid.uuid4()))
    second = world.spark(ADMIN, session_id=str(uuid.uuid4()))
    _own_path(world, first)
    second.sql("SELECT 1 AS warm").collect()
    second.conf.set("spark.sql.path.enabled", "true")
    second.conf.set("spark.sql.defaultPath", f"spark_catalog.{world.db}")
    text = "SELECT id FROM unread_t WHERE id < 1000"
    assert id_set(first.sql(text)) == {100}
    assert remembered(world, lambda: id_set(first.sql(text))) == {100}
    status, message = refusal(lambda: second.sql(text).collect())
    _second_opinion_refusal(status, message, world.t("unread_t"), path_hides_builtins=True)


def test_current_database_moved_through_another_replica_makes_spark_analyse_again(world):
    """One-part names resolve in the current database too: `USE` relayed by B (the same
    session on another replica) must make A analyse again. `USE` is open to every caller."""
    session_id = str(uuid.uuid4())
    on_a = world.spark(ANN, "a", session_id)
    on_b = world.spark(ANN, "b", session_id)
    on_a.sql(f"USE {world.own}").collect()
    text = "SELECT id FROM unread_t WHERE id <> 0"
    assert id_set(on_a.sql(text)) == {100}
    assert remembered(world, lambda: id_set(on_a.sql(text))) == {100}
    on_b.sql(f"USE {world.db}").collect()
    status, message = refusal(lambda: on_a.sql(text).collect())
    _second_opinion_refusal(status, message, world.t("unread_t"))


def test_current_database_moved_by_a_catalog_call_on_another_connection(world):
    session_id = str(uuid.uuid4())
    on_a = world.spark(ANN, "a", session_id)
    on_b = world.spark(ANN, "b", session_id)
    on_a.catalog.setCurrentDatabase(world.own)
    text = "SELECT id FROM unread_t WHERE id <> 1"
    assert id_set(on_a.sql(text)) == {100}
    assert remembered(world, lambda: id_set(on_a.sql(text))) == {100}
    on_b.catalog.setCurrentDatabase(world.db)
    status, message = refusal(lambda: on_a.sql(text).collect())
    _second_opinion_refusal(status, message, world.t("unread_t"))


# -- 2. Settings: a substituted value ----------------------------------------------------------


def test_a_substituted_value_changed_by_a_config_call_makes_spark_analyse_again(world):
    """The issue's example: a text checked once under a harmless substituted value must be
    checked again after a Config call changes the value (an admin may turn substitution on)."""
    spark = world.spark(ADMIN, session_id=str(uuid.uuid4()))
    spark.conf.set("spark.sql.variable.substitute", "true")
    spark.conf.set("rgvar", "1")
    text = "SELECT '${rgvar}' AS id, 'unread' AS marker"
    assert [r.id for r in spark.sql(text).collect()] == ["1"]
    assert [r.id for r in remembered(world, lambda: spark.sql(text).collect())] == ["1"]
    spark.conf.set("rgvar", f"1' AS id, id AS n FROM {world.t('unread_t')} --")
    status, message = refusal(lambda: spark.sql(text).collect())
    assert status is not None and status != "OK", message  # refused by rowgate, never the rows
    assert "ROWGATE" in message, message


def test_reset_before_any_policy_then_a_config_call(proxy_factory, sessions, tmp_path_factory, world):
    """The issue's example as it happened: a session resets every setting before the first
    policy exists (the forced `spark.sql.variable.substitute=false` is gone), a policy is
    created, a text is checked under a harmless value, a Config call changes the value."""
    store = f"sqlite:///{tmp_path_factory.mktemp('net_reset') / 'policies.db'}"
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN, "--policy-store", store, env=_env())
    ann = sessions(remote_url(proxy.url, user=ANN))
    admin = sessions(remote_url(proxy.url, user=ADMIN))
    # The settings allow list (proxy/rowgate/policy/settings_allow_list.py) refuses a
    # non-admin's RESET of every setting whether or not policies exist: the example cannot
    # start, and the rest shows the forced setting held.
    status, message = refusal(lambda: ann.sql("RESET").collect())
    assert status == "PERMISSION_DENIED" and "RESET" in message, message
    admin.sql(f"CREATE ROW ACCESS POLICY eu ON {world.t('unread_t')} GRANT TO ('{ANN}') FILTER USING (region = 'eu')").collect()
    admin.sql(f"CREATE ROW ACCESS POLICY p ON {world.t('probe')} GRANT TO ('{ANN}') FILTER USING (id = 1)").collect()
    wait_until(lambda: id_set(ann.table(world.t("probe"))) == {1}, "the policies in force")
    # Nor may a non-admin set `rgvar` (not on the allow list): the text stays literal.
    status, message = refusal(lambda: ann.conf.set("rgvar", f"1' AS id, id AS n FROM {world.t('unread_t')} --"))
    assert status == "PERMISSION_DENIED" and "rgvar" in message, message
    assert ann.conf.get("spark.sql.variable.substitute") == "false"
    text = "SELECT '${rgvar}' AS id, 'unread' AS marker"
    try:
        rows = ann.sql(text).collect()
    except Exception as e:
        assert "ROWGATE" in str(e), str(e)
    else:
        assert [r.id for r in rows] == ["${rgvar}"], "the protected table was read unfiltered"


# -- 3. Temp views by definition, catalog changes through another replica -----------------------


def test_temp_view_redefined_through_another_connection_makes_spark_analyse_again(world):
    session_id = str(uuid.uuid4())
    on_a = world.spark(ANN, "a", session_id)
    on_b = world.spark(ANN, "b", session_id)
    on_a.sql(f"CREATE OR REPLACE TEMPORARY VIEW unread_tv AS SELECT id FROM {world.own}.unread_t").collect()
    text = "SELECT id FROM unread_tv"
    assert id_set(on_a.sql(text)) == {100}
    assert remembered(world, lambda: id_set(on_a.sql(text))) == {100}
    on_b.sql(f"CREATE OR REPLACE TEMPORARY VIEW unread_tv AS SELECT id FROM {world.t('unread_t')}").collect()
    status, message = refusal(lambda: on_a.sql(text).collect())
    _second_opinion_refusal(status, message, world.t("unread_t"))


def test_view_redefined_through_another_replica_makes_spark_analyse_again(world):
    """A persistent view changed by another session on another replica: the shared catalog's
    version moved, so A analyses again."""
    view = world.t(unique("unread_v"))
    admin_b = world.spark(ADMIN, "b")
    admin_b.sql(f"CREATE VIEW {view} AS SELECT id, region FROM {world.own}.unread_t").collect()
    ann = world.spark(ANN)
    text = f"SELECT id FROM {view}"
    assert id_set(ann.sql(text)) == {100}
    assert remembered(world, lambda: id_set(ann.sql(text))) == {100}
    admin_b.sql(f"CREATE OR REPLACE VIEW {view} AS SELECT id, region FROM {world.t('unread_t')}").collect()
    status, message = refusal(lambda: ann.sql(text).collect())
    _second_opinion_refusal(status, message, world.t("unread_t"))


# -- 4. No exemption for catalog relations ------------------------------------------------------


def _catalog_frame(spark, node):
    from pyspark.sql.connect.dataframe import DataFrame

    return DataFrame(node, session=spark)


@pytest.mark.parametrize("who", [ANN, ADMIN])
def test_a_read_only_catalog_call_in_a_plan_is_analysed_with_it(world, who):
    """`spark.catalog.currentDatabase()` cross-joined with a read: Spark runs the catalog call
    while it analyses (harmless), and the plan is checked like any other."""
    from pyspark.sql.connect import plan

    spark = world.spark(who)
    frame = _catalog_frame(spark, plan.CurrentDatabase()).crossJoin(spark.table(world.t("unread_t")))
    status, message = refusal(frame.collect)
    _second_opinion_refusal(status, message, world.t("unread_t"))
    assert spark.catalog.currentDatabase()  # alone, the catalog calls work as ever
    assert world.t("unread_t").split(".")[1] in {t.name for t in spark.catalog.listTables(world.db)}


@pytest.mark.parametrize("who", [ANN, ADMIN])
def test_a_catalog_call_that_changes_state_is_accepted_only_alone(world, who):
    from pyspark.sql.connect import plan

    spark = world.spark(who, session_id=str(uuid.uuid4()))
    assert spark.catalog.currentDatabase() == "default"
    mixed = _catalog_frame(spark, plan.SetCurrentDatabase(world.own)).crossJoin(spark.range(1))
    status, message = refusal(mixed.collect)
    assert status == "INVALID_ARGUMENT" and "set_current_database" in message, message
    status, message = refusal(lambda: _catalog_frame(spark, plan.SetCurrentDatabase(world.own)).schema)
    assert status == "INVALID_ARGUMENT" and "set_current_database" in message, message
    assert spark.catalog.currentDatabase() == "default"  # Spark never planned it
    spark.catalog.setCurrentDatabase(world.own)  # alone: forwarded, and the position moves
    assert spark.catalog.currentDatabase() == world.own
    assert id_set(spark.sql("SELECT id FROM unread_t")) == {100}


# -- 5. A plan Spark cannot analyse is not forwarded ---------------------------------------------


@pytest.fixture(scope="module")
def paused(proxy_factory, tmp_path_factory, world):
    """A replica of the world's store that pauses after the check of a marked plan."""
    pause = tmp_path_factory.mktemp("pause")
    common = ("--identity", "header", "--admin", ADMIN, "--policy-store", world.store)
    proxy = proxy_factory(*common, env=_env(ROWGATE_TEST_PAUSE_DIR=str(pause)))
    return proxy, pause


def test_a_plan_spark_cannot_analyse_is_answered_with_spark_error_not_run(world, paused, sessions):
    """Checked while `late` does not exist, the plan is not forwarded on the argument that it
    fails the same way when it runs: between the check and the run, a view of that name over
    the protected table appears (another session, another replica)."""
    proxy, pause = paused
    ann = sessions(remote_url(proxy.url, user=ANN))
    wait_until(lambda: id_set(ann.table(world.t("probe"))) == {1}, "the paused replica enforcing the policies")
    late = world.t(unique("unread_late"))
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["rows"] = id_set(ann.sql(f"SELECT id FROM {late}"))
        except Exception as e:
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_until(lambda: (pause / "checked").exists(), "the check of the plan")
    world.spark(ADMIN, "b").sql(f"CREATE VIEW {late} AS SELECT id FROM {world.t('unread_t')}").collect()
    (pause / "go").touch()
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert "rows" not in outcome, f"the plan ran after the state changed: {outcome['rows']}"
    assert "TABLE_OR_VIEW_NOT_FOUND" in str(outcome["error"]), outcome["error"]

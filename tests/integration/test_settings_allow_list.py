"""Settings by allow list (issue 21 item 3), through real pyspark, real proxies and Spark.

A non-admin may change only the settings on the allow list
(proxy/rowgate/policy/settings_allow_list.py), through the Config RPC and SQL alike, before
and after the first policy exists; the settings rowgate forces hold for every session, after
any `RESET` too.

    <db>.prot   (id, region)   rows 1 eu, 2 us, 3 eu; protected through `guarded` only:
                               ann and the admin see region = 'eu'

`bare` is a proxy whose policy store never holds a policy; `guarded` has the policy.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

import pytest
from pyspark.sql import SparkSession

from tests.conftest import remote_url
from tests.deadlines import wait_until
from tests.harness.answers import id_set
from tests.harness.callers import ADMIN, ANN
from tests.harness.worlds import Policy, Table, protected_world, values
from tests.integration.conftest import grpc_status

pytestmark = pytest.mark.spark

REFUSED_KEYS = ["spark.sql.path.enabled", "spark.sql.defaultPath", "some.unknown.key"]


@dataclass
class World:
    db: str
    bare: object
    guarded: object
    make: object

    def t(self, name: str = "prot") -> str:
        return f"{self.db}.{name}"

    def spark(self, who: str, proxy: str, **params: str):
        url = (self.bare if proxy == "bare" else self.guarded).url
        return self.make(remote_url(url, user=who, session_id=str(uuid.uuid4()), **params))


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, tmp_path_factory, spark_server) -> World:
    logging.getLogger("pyspark").setLevel(logging.CRITICAL)
    common = ("--identity", "header", "--admin", ADMIN)
    bare = proxy_factory(*common, "--policy-store", f"sqlite:///{tmp_path_factory.mktemp('bare') / 'p.db'}")
    guarded = proxy_factory(*common, "--policy-store", f"sqlite:///{tmp_path_factory.mktemp('guarded') / 'p.db'}")
    pw = protected_world(
        guarded,
        module_sessions,
        Table("prot", "id INT, region STRING", rows=[values([(1, "eu"), (2, "us"), (3, "eu")])]),
        Policy("eu", "prot", "region = 'eu'", grantees=[ANN, ADMIN]),
        database="settings",
        spark_url=spark_server.url,
    )
    w = World(db=pw.db, bare=bare, guarded=guarded, make=module_sessions)
    ann = w.make(remote_url(guarded.url, user=ANN))
    wait_until(lambda: id_set(ann.table(w.t())) == {1, 3}, "the policy in force")
    yield w
    pw.close()


def refused(action, *words: str, status: tuple[str, ...] = ("PERMISSION_DENIED",)) -> str:
    try:
        got = action()
    except Exception as e:
        text = str(e)
        assert grpc_status(e) in status, text[:800]
        for word in words:
            assert word.lower() in text.lower(), f"{word!r} not in: {text[:800]}"
        return text
    pytest.fail(f"not refused; got {got!r}")


def forced(spark) -> dict[str, str | None]:
    keys = ("spark.sql.variable.substitute", "spark.sql.legacy.storeAnalyzedPlanForView", "spark.sql.path.enabled")
    return {k: spark.conf.get(k) for k in keys}


FORCED = {
    "spark.sql.variable.substitute": "false",
    "spark.sql.legacy.storeAnalyzedPlanForView": "true",
    "spark.sql.path.enabled": "false",
}


# -- what a non-admin may not change: refused, before and after a policy exists -----------------


@pytest.mark.parametrize("proxy", ["bare", "guarded"])
@pytest.mark.parametrize("key", REFUSED_KEYS)
def test_a_non_admin_cannot_change_a_setting_off_the_allow_list(world, proxy, key):
    spark = world.spark(ANN, proxy)
    before = spark.conf.get(key, None)
    value = "true" if key.endswith("enabled") else f"spark_catalog.{world.db}"
    refused(lambda: spark.conf.set(key, value), key, "setting of")
    refused(lambda: spark.conf.unset(key), key, "unsetting of")
    refused(lambda: spark.sql(f"SET {key}={value}").collect(), key)
    refused(lambda: spark.sql(f"SET `{key}` = {value}").collect(), key)
    refused(lambda: spark.sql(f"RESET {key}").collect(), key, "resetting of")
    assert spark.conf.get(key, None) == before
    if key == "spark.sql.path.enabled":
        refused(lambda: spark.conf.set(key, "true"), "SQL path")  # the message says why
        assert before == "false"  # forced


@pytest.mark.parametrize("proxy", ["bare", "guarded"])
def test_a_non_admins_reset_of_every_setting_is_refused_and_the_forced_settings_hold(world, proxy):
    spark = world.spark(ANN, proxy)
    assert forced(spark) == FORCED
    refused(lambda: spark.sql("RESET").collect(), "RESET", "RESET <key>")
    refused(lambda: spark.sql("RESET ;").collect(), "RESET")
    refused(lambda: spark.sql("SET spark.sql.variable.substitute=true").collect(), "spark.sql.variable.substitute")
    refused(lambda: spark.sql("SET COLLATION UTF8_LCASE").collect(), "collation")
    # a statement the proxy cannot read may hold a SET: refused before any policy too
    # (while a policy exists the rewriter refuses it first, as a statement it cannot analyse)
    unread = ("PERMISSION_DENIED", "INVALID_ARGUMENT") if proxy == "guarded" else ("PERMISSION_DENIED",)
    refused(lambda: spark.sql("EXECUTE IMMEDIATE 'SET spark.sql.path.enabled=true'").collect(), status=unread)
    refused(lambda: spark.sql("EXECUTE IMMEDIATE 'RESET'").collect(), status=unread)
    assert forced(spark) == FORCED


def test_a_builder_config_off_the_list_is_not_applied_and_the_session_starts(world):
    """`SparkSession.builder.config(...)` sends a silent Config set (Spark ignores what it
    cannot apply): the proxy drops the pairs a non-admin may not change, keeps the rest."""
    url = remote_url(world.guarded.url, user=ANN, session_id=str(uuid.uuid4()))
    builder = SparkSession.builder.remote(url).appName("settings-test")
    builder = builder.config("spark.sql.path.enabled", "true").config("spark.sql.defaultPath", world.db)
    spark = builder.config("spark.sql.shuffle.partitions", "5").config("spark.sql.variable.substitute", "true").create()
    try:
        assert spark.conf.get("spark.sql.shuffle.partitions") == "5"
        assert forced(spark) == FORCED
        assert spark.conf.get("spark.sql.defaultPath") != world.db
        assert id_set(spark.table(world.t())) == {1, 3}
    finally:
        spark.stop()


# -- what a non-admin may change -----------------------------------------------------------------


@pytest.mark.parametrize("proxy", ["bare", "guarded"])
def test_a_non_admin_changes_ordinary_settings(world, proxy):
    spark = world.spark(ANN, proxy)
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    assert spark.conf.get("spark.sql.session.timeZone") == "Asia/Tokyo"
    assert spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch") == "1000"
    spark.sql("SET spark.sql.shuffle.partitions=6").collect()
    spark.sql("SET TIME ZONE 'UTC'").collect()
    assert spark.conf.get("spark.sql.shuffle.partitions") == "6"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    spark.sql("RESET spark.sql.shuffle.partitions").collect()
    spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert spark.conf.get("spark.sql.shuffle.partitions") != "6"
    # reading stays open, whatever the key
    assert spark.sql("SET spark.sql.path.enabled").collect()[0][1] == "false"
    assert spark.conf.get("spark.sql.variable.substitute") == "false"
    if proxy == "guarded":
        assert id_set(spark.table(world.t())) == {1, 3}


def test_the_settings_pysparks_own_suites_change_behave_as_directly(world):
    """`spark.sql.crossJoin.enabled` and `spark.sql.transposeMaxValues` fail the caller's own
    query or not; pyspark's DataFrame suite sets both (scripts/pyspark_suites.py). Off the
    list, the set itself was refused."""
    from pyspark.errors import AnalysisException

    spark = world.spark(ANN, "guarded")
    left, right = spark.range(1).toDF("a"), spark.range(1).toDF("b")
    spark.conf.set("spark.sql.crossJoin.enabled", "false")
    with pytest.raises(AnalysisException):
        left.join(right, how="inner").collect()
    spark.conf.set("spark.sql.crossJoin.enabled", "true")
    assert [tuple(r) for r in left.join(right, how="inner").collect()] == [(0, 0)]
    spark.conf.set("spark.sql.transposeMaxValues", "0")
    with pytest.raises(AnalysisException, match="TRANSPOSE_EXCEED_ROW_LIMIT"):
        spark.createDataFrame([("x", "y")], ["a", "b"]).transpose().collect()
    spark.conf.unset("spark.sql.transposeMaxValues")
    spark.conf.unset("spark.sql.crossJoin.enabled")


# -- forced settings hold after any RESET ---------------------------------------------------------


def test_forced_settings_are_asserted_again_after_an_admins_reset(world):
    """Admins may reset (before any policy: a RESET of all; by name: always); the forced
    settings are back before the session's next request."""
    admin = world.spark(ADMIN, "bare")
    admin.sql("RESET").collect()
    assert forced(admin) == FORCED
    admin.sql("RESET spark.sql.variable.substitute").collect()
    assert forced(admin) == FORCED
    admin.conf.unset("spark.sql.path.enabled")
    assert forced(admin) == FORCED
    guarded = world.spark(ADMIN, "guarded")
    guarded.sql("RESET spark.sql.variable.substitute").collect()
    assert forced(guarded) == FORCED


def literal_or_refused(spark, text: str) -> None:
    """`text` (holding `${a}`) gives its literal text, or the rewriter refuses `${` (it does
    while policies are in force); never a substituted read."""
    try:
        rows = [r.id for r in spark.sql(text).collect()]
    except Exception as e:
        assert "ROWGATE" in str(e) and "substitution" in str(e), str(e)
    else:
        assert rows == ["${a}"], f"substituted: {rows}"


def test_reset_before_any_policy_then_a_substituted_read(proxy_factory, module_sessions, world, tmp_path_factory):
    """The issue's example: before any policy exists a session runs `RESET` (dropping the
    forced substitution off), later sets `a` and runs `SELECT '${a}'`: the text must stay
    literal, never substituted. A non-admin's RESET and setting of `a` are refused outright;
    an admin's RESET is followed by the forced settings before the next request."""
    store = f"sqlite:///{tmp_path_factory.mktemp('reset_first') / 'p.db'}"
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN, "--policy-store", store)
    ann = module_sessions(remote_url(proxy.url, user=ANN, session_id=str(uuid.uuid4())))
    admin = module_sessions(remote_url(proxy.url, user=ADMIN, session_id=str(uuid.uuid4())))
    text = "SELECT '${a}' AS id"
    refused(lambda: ann.sql("RESET").collect(), "RESET")
    refused(lambda: ann.conf.set("a", "1"), "setting of a")
    assert [r.id for r in ann.sql(text).collect()] == ["${a}"]
    admin.sql("RESET").collect()  # before any policy: an admin may
    admin.conf.set("a", f"1' AS id FROM {world.t()} WHERE region = 'us' --")
    assert [r.id for r in admin.sql(text).collect()] == ["${a}"], "substitution is on again after RESET"
    admin.sql(f"CREATE ROW ACCESS POLICY eu ON {world.t()} GRANT TO ('{ANN}', '{ADMIN}') FILTER USING (region = 'eu')").collect()
    wait_until(lambda: id_set(ann.table(world.t())) == {1, 3}, "the policy in force")
    literal_or_refused(ann, text)
    literal_or_refused(admin, text)
    assert forced(admin) == forced(ann) == FORCED

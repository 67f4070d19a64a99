"""Policy predicates mean the same for every caller (issue 21 item 5), and a TABLESAMPLE of a
protected table never counts hidden rows (review F4): real pyspark, real proxy, real Spark.

    <db>.by_hour (id, ts, region)  1: 2024-01-01 23:30 UTC, 2: 2024-01-01 08:00 UTC
        policy `hour(ts) < 12` (depends on the time zone): ann sees 2; in Asia/Tokyo row 1's
        hour is 8, so a caller who changes the zone would see 1 too.
    <db>.by_code (id, code)       1: 2, 2: 1
        policy `id = '1.5'` (depends on ANSI mode): under ANSI an error, without it the
        string is cast to INT 1 and row 1 shows.
    <db>.plain (id, ts, region)   the rows of by_hour; policy `region = 'eu'` (independent)
    <db>.by_escape (id, name)     1: x\\y, 2: x\\\\y (one and two backslashes); policy
        `name = 'x\\\\y'`: Spark's default reads one backslash (row 1); with
        spark.sql.parser.escapedStringLiterals it would read two (row 2)
    <db>.ordered (id, region)     0..9 us (hidden), then 10..19 eu (one file, in this order)
    <db>.allowed_only (id, region) 10..19 eu: the allowed rows alone, unprotected
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

import pytest

from tests.conftest import remote_url
from tests.deadlines import wait_until
from tests.harness.answers import id_set
from tests.harness.callers import ADMIN, ANN
from tests.harness.worlds import Policy, Table, protected_world, values
from tests.integration.conftest import grpc_status

pytestmark = pytest.mark.spark

TZ = "spark.sql.session.timeZone"
ANSI = "spark.sql.ansi.enabled"
NANOS = "spark.sql.timestampNanosTypes.enabled"
ESCAPED = "spark.sql.parser.escapedStringLiterals"
BS = "\\"  # one backslash in the SQL text


@dataclass
class World:
    db: str
    url: str
    make: object
    unchecked_url: str = ""  # the same store behind a proxy without the second opinion

    def t(self, name: str) -> str:
        return f"{self.db}.{name}"

    def spark(self, who: str = ANN):
        return self.make(remote_url(self.url, user=who, session_id=str(uuid.uuid4())))


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, tmp_path_factory, spark_server) -> World:
    logging.getLogger("pyspark").setLevel(logging.CRITICAL)
    store = ("--identity", "header", "--admin", ADMIN, "--policy-store", f"sqlite:///{tmp_path_factory.mktemp('sem') / 'p.db'}")
    proxy = proxy_factory(*store)
    unchecked = proxy_factory(*store, "--no-second-opinion")
    grant = [ANN, ADMIN]
    rows = "VALUES (1, TIMESTAMP_LTZ '2024-01-01 23:30:00+00:00', 'eu'), (2, TIMESTAMP_LTZ '2024-01-01 08:00:00+00:00', 'us')"
    pw = protected_world(
        proxy,
        module_sessions,
        Table("by_hour", "id INT, ts TIMESTAMP, region STRING", rows=[rows]),
        Table("plain", "id INT, ts TIMESTAMP, region STRING", rows=[rows]),
        Table("by_code", "id INT, code INT", rows=[values([(1, 2), (2, 1)])]),
        Table("ordered", "id INT, region STRING", rows=["SELECT /*+ COALESCE(1) */ id, IF(id >= 10, 'eu', 'us') FROM range(20)"]),
        Table("allowed_only", "id INT, region STRING", rows=["SELECT /*+ COALESCE(1) */ id, 'eu' FROM range(10, 20)"]),
        Table("by_escape", "id INT, name STRING", rows=[f"VALUES (1, 'x{BS * 2}y'), (2, 'x{BS * 4}y')"]),
        Policy("e", "by_escape", f"name = 'x{BS * 2}y'", grantees=grant),
        Policy("h", "by_hour", "hour(ts) < 12", grantees=grant),
        Policy("c", "by_code", "id = '1.5' OR code = 1", grantees=grant),
        Policy("p", "plain", "region = 'eu'", grantees=grant),
        Policy("o", "ordered", "region = 'eu'", grantees=grant),
        database="semantics",
        spark_url=spark_server.url,
    )
    w = World(db=pw.db, url=proxy.url, make=module_sessions, unchecked_url=unchecked.url)
    ann = w.spark()
    wait_until(lambda: id_set(ann.table(w.t("plain"))) == {1}, "the policies in force")
    yield w
    pw.close()


def outcome(action):
    """The ids read, or the refusal's (status, text)."""
    try:
        return action()
    except Exception as e:
        return grpc_status(e), str(e)


def other_zone(current: str) -> str:
    return "Asia/Tokyo" if current != "Asia/Tokyo" else "UTC"


@pytest.mark.parametrize("who", [ANN, ADMIN])
def test_changing_the_time_zone_cannot_widen_a_zone_dependent_policy(world, who):
    spark = world.spark(who)
    default = spark.conf.get(TZ)
    expected = id_set(spark.table(world.t("by_hour")))  # under the server's zone
    spark.conf.set(TZ, "Asia/Tokyo" if default != "Asia/Tokyo" else "America/Los_Angeles")
    for read in (
        lambda: id_set(spark.table(world.t("by_hour"))),
        lambda: id_set(spark.sql(f"SELECT id FROM {world.t('by_hour')}")),
        lambda: id_set(spark.sql(f"SELECT * FROM {world.t('plain')} p JOIN {world.t('by_hour')} h USING (id)")),
    ):
        got = outcome(read)
        assert isinstance(got, tuple), f"read under another zone: {got}, under the server's: {expected}"
        status, text = got
        assert status == "FAILED_PRECONDITION" and TZ in text and "by_hour" in text and "hour()" in text, text[:600]
    spark.sql(f"SET TIME ZONE '{spark.conf.get(TZ)}'").collect()  # SQL route: the same
    assert isinstance(outcome(lambda: id_set(spark.sql(f"SELECT id FROM {world.t('by_hour')}"))), tuple)
    spark.conf.unset(TZ)
    assert id_set(spark.table(world.t("by_hour"))) == expected


def test_changing_ansi_mode_cannot_widen_an_ansi_dependent_policy(world):
    spark = world.spark()
    default = spark.conf.get(ANSI)
    expected = outcome(lambda: id_set(spark.table(world.t("by_code"))))
    spark.sql(f"SET {ANSI} = {'false' if default.lower() == 'true' else 'true'}").collect()
    got = outcome(lambda: id_set(spark.table(world.t("by_code"))))
    assert isinstance(got, tuple), f"read under the other ANSI mode: {got}, under the server's: {expected}"
    assert got[0] == "FAILED_PRECONDITION" and "row access policy c of" in got[1] and ANSI in got[1], got[1][:600]
    spark.sql(f"RESET {ANSI}").collect()
    assert outcome(lambda: id_set(spark.table(world.t("by_code")))) == expected


def test_a_setting_independent_policy_leaves_both_settings_to_the_caller(world):
    spark = world.spark()
    spark.conf.set(TZ, other_zone(spark.conf.get(TZ)))
    spark.sql(f"SET {ANSI} = {'false' if spark.conf.get(ANSI).lower() == 'true' else 'true'}").collect()
    assert id_set(spark.table(world.t("plain"))) == {1}
    assert id_set(spark.sql(f"SELECT id FROM {world.t('plain')} WHERE region = 'eu'")) == {1}


def test_nanosecond_timestamps_cannot_change_a_timestamp_dependent_policy(world):
    """Allowed to non-admins (Spark's own date-time examples set it), bound like the time zone."""
    spark = world.spark()
    expected = id_set(spark.table(world.t("by_hour")))
    spark.conf.set(NANOS, "true")
    got = outcome(lambda: id_set(spark.sql(f"SELECT id FROM {world.t('by_hour')}")))
    assert isinstance(got, tuple), f"read with nanosecond timestamps: {got}, under the server's value: {expected}"
    assert got[0] == "FAILED_PRECONDITION" and NANOS in got[1] and "policy h of" in got[1], got[1][:600]
    assert id_set(spark.table(world.t("plain"))) == {1}  # a setting-independent policy: free
    spark.conf.unset(NANOS)
    assert id_set(spark.table(world.t("by_hour"))) == expected


@pytest.mark.parametrize("checked", [True, False], ids=["second_opinion", "no_second_opinion"])
def test_escaped_string_literals_cannot_change_a_policys_string(world, checked):
    """With backslashes kept, Spark would read the policy's `'x\\\\y'` as two backslashes and
    show row 2 instead of row 1: the read runs only under the server's value, while the
    caller's own literals keep the setting's meaning."""
    spark = world.make(remote_url(world.url if checked else world.unchecked_url, user=ANN, session_id=str(uuid.uuid4())))
    assert id_set(spark.table(world.t("by_escape"))) == {1}
    spark.sql(f"SET {ESCAPED}=true").collect()
    assert spark.sql(f"SELECT 'a{BS}d' AS v").first().v == f"a{BS}d"  # the caller's own literal, as written
    for read in (
        lambda: id_set(spark.table(world.t("by_escape"))),
        lambda: id_set(spark.sql(f"SELECT id FROM {world.t('by_escape')}")),
    ):
        got = outcome(read)
        assert isinstance(got, tuple), f"read with backslashes kept: {got}"
        assert got[0] == "FAILED_PRECONDITION" and ESCAPED in got[1], got[1][:600]
    spark.sql(f"RESET {ESCAPED}").collect()
    assert id_set(spark.table(world.t("by_escape"))) == {1}


def _forged_rows_sample(world, n: int) -> str:
    """The proxy's own text for a read of `ordered`, with `(n ROWS)` put below the filter."""
    from rowgate.identity.caller import Caller
    from rowgate.policy.model import RowAccessPolicy, TableName
    from rowgate.rewrite.sql.protect import row_filter
    from rowgate.rewrite.sql.wrap import canonical, inner_select

    name = TableName("spark_catalog", world.db, "ordered")
    policy = RowAccessPolicy(name, "o", (ANN, ADMIN), "region = 'eu'", None, None)  # type: ignore[arg-type]
    _, text = canonical(inner_select(name, row_filter(Caller(ANN), name, (policy,))))
    table = f"{name.sql()} WHERE TRUE"
    assert table in text, text
    return f"SELECT count(*) AS n FROM ({text.replace(table, f'{name.sql()} TABLESAMPLE ({n} ROWS) WHERE TRUE')}) AS o"


def _spark(world, second_opinion: bool):
    url = world.url if second_opinion else world.unchecked_url
    spark = world.make(remote_url(url, user=ANN, session_id=str(uuid.uuid4())))
    wait_until(lambda: id_set(spark.table(world.t("ordered"))) == set(range(10, 20)), "the policy in force")
    return spark


@pytest.mark.parametrize("second_opinion", [True, False])
def test_a_rows_sample_of_a_protected_table_cannot_count_hidden_rows(world, second_opinion):
    """Ten hidden rows come first in the file: a LIMIT on the unfiltered scan would count 0
    allowed rows among the first n <= 10. Whatever text the caller sends, the count is
    min(n, 10), by the rewrite alone (the second opinion would refuse the forged text)."""
    spark = _spark(world, second_opinion)
    for n in (1, 5, 15):
        plain = spark.sql(f"SELECT count(*) AS n FROM {world.t('ordered')} TABLESAMPLE ({n} ROWS)").collect()[0].n
        forged = spark.sql(_forged_rows_sample(world, n)).collect()[0].n
        assert plain == forged == min(n, 10), (n, plain, forged)


@pytest.mark.parametrize("second_opinion", [True, False])
def test_a_seeded_sample_of_a_protected_table_is_the_sample_of_its_allowed_rows(world, second_opinion):
    """`TABLESAMPLE (p PERCENT) REPEATABLE (s)` of the protected table keeps exactly the rows
    Spark's own sample keeps of a table holding the allowed rows alone, in the same order:
    the hidden rows before them change nothing, so the caller learns nothing of them."""
    spark = _spark(world, second_opinion)
    for seed in range(6):
        for sample in ("50 PERCENT", "BUCKET 1 OUT OF 3"):
            tail = f"TABLESAMPLE ({sample}) REPEATABLE ({seed})"
            got = id_set(spark.sql(f"SELECT id FROM {world.t('ordered')} {tail}"))
            alone = id_set(spark.sql(f"SELECT id FROM {world.t('allowed_only')} {tail}"))
            assert got == alone, (seed, sample, sorted(got), sorted(alone))
    unseeded = id_set(spark.sql(f"SELECT id FROM {world.t('ordered')} TABLESAMPLE (50 PERCENT)"))
    assert unseeded <= set(range(10, 20))


def test_a_temp_view_of_a_zone_dependent_table_is_read_under_the_servers_zone_only(world):
    """A temp view keeps Spark's analysed plan, whose `current_date()` is still computed in
    the reading session's zone: its reads are checked like the table's."""
    spark = world.spark()
    spark.table(world.t("by_hour")).createOrReplaceTempView("hours")
    expected = id_set(spark.table("hours"))
    spark.conf.set(TZ, other_zone(spark.conf.get(TZ)))
    got = outcome(lambda: id_set(spark.sql("SELECT id FROM hours")))
    assert isinstance(got, tuple) and got[0] == "FAILED_PRECONDITION" and "by_hour" in got[1], (got, expected)
    spark.conf.unset(TZ)
    assert id_set(spark.sql("SELECT id FROM hours")) == expected

"""The second opinion from Spark, through real pyspark, real proxies and a real Spark server.

Two proxies share one policy store and carry the same simulated rewrite mistake
(tests/integration/missed_filter/sitecustomize.py: every plan naming the table `forgotten`
is forwarded unfiltered, as if the parser had seen no protected table). `checked` runs with
the second opinion (the default), `unchecked` with `--no-second-opinion`. The unchecked proxy
shows the mistake is real (every row leaks); the checked one refuses it, and still serves
every ordinary filtered read. Admins go through the same check.

    orders    (id, region)   eu_team: ann  region = 'eu'
                             lookup:  ann  region IN (SELECT region FROM ent WHERE email = SESSION_USER())
    ent       (email, region) admins_only: admin TRUE
    forgotten (id, region)   eu_team: ann  region = 'eu'   <- the proxy "forgets" this filter
    plain     (id, label)    no policy
    v_orders  view: SELECT id, region FROM orders WHERE id < 4
"""

from __future__ import annotations

import os
import re
import statistics
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from rowgate.embedded.spark import free_port
from tests.conftest import remote_url
from tests.deadlines import wait_until
from tests.harness.answers import id_set, refusal
from tests.harness.callers import ADMIN, ANN
from tests.harness.worlds import Policy, Table, View, protected_world, values

pytestmark = pytest.mark.spark

MISSED = "forgotten"
ROWS = {1: "eu", 2: "us", 3: "apac", 4: "eu"}
ANN_ORDERS = {1, 2, 4}  # eu, plus us through her entitlement
ANN_FORGOTTEN = {1, 4}


@dataclass
class World:
    db: str
    checked: object
    unchecked: object
    metrics_port: int
    sessions: dict

    def t(self, name: str) -> str:
        return f"{self.db}.{name}"

    def spark(self, who: str, proxy: str = "checked"):
        key = (who, proxy)
        if key not in self.sessions:
            url = (self.checked if proxy == "checked" else self.unchecked).url
            self.sessions[key] = self._make(remote_url(url, user=who))
        return self.sessions[key]


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, tmp_path_factory, spark_server) -> World:
    store = f"sqlite:///{tmp_path_factory.mktemp('second_opinion') / 'policies.db'}"
    fault = str(Path(__file__).parent / "missed_filter")
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (fault, os.environ.get("PYTHONPATH", "")) if p),
        "ROWGATE_TEST_MISSED_TABLE": MISSED,
    }
    metrics_port = free_port()
    common = ("--identity", "header", "--admin", ADMIN, "--policy-store", store)
    checked = proxy_factory(*common, "--metrics-listen", f"127.0.0.1:{metrics_port}", env=env)
    unchecked = proxy_factory(*common, "--no-second-opinion", env=env)
    pw = protected_world(
        checked,
        module_sessions,
        Table("orders", "id INT, region STRING", rows=[values(ROWS.items())]),
        Table(MISSED, "id INT, region STRING", rows=[values(ROWS.items())]),
        Table("ent", "email STRING, region STRING", rows=[values([("ann@example.com", "us")])]),
        Table("plain", "id INT, label STRING", rows=[values([(1, "a"), (2, "b"), (3, "c"), (4, "d")])]),
        View("v_orders", "SELECT id, region FROM {db}.orders WHERE id < 4"),
        Policy("eu_team", "orders", "region = 'eu'", grantees=[ANN]),
        Policy("lookup", "orders", "region IN (SELECT region FROM {db}.ent WHERE email = SESSION_USER())", grantees=[ANN]),
        Policy("admins_only", "ent", "TRUE", grantees=[ADMIN]),
        Policy("eu_team", MISSED, "region = 'eu'", grantees=[ANN]),
        database="so",
        spark_url=spark_server.url,
    )
    w = World(db=pw.db, checked=checked, unchecked=unchecked, metrics_port=metrics_port, sessions={(ADMIN, "checked"): pw.admin})
    w._make = module_sessions
    yield w
    pw.close()


def eventually_filtered(w: World, who: str = ANN) -> None:
    """The unchecked proxy polls the shared store: wait until it knows the policies."""
    spark = w.spark(who, "unchecked")
    wait_until(
        lambda: id_set(spark.sql(f"SELECT id FROM {w.t('orders')}")) == ANN_ORDERS,
        "the unchecked proxy to see the policies",
        60,
        interval=0.2,
    )


MISSED_READS = {
    "sql": lambda w, s: s.sql(f"SELECT id FROM {w.t(MISSED)}"),
    "join": lambda w, s: s.sql(f"SELECT f.id FROM {w.t(MISSED)} f JOIN {w.t('plain')} p ON f.id = p.id"),
    "cte": lambda w, s: s.sql(f"WITH c AS (SELECT * FROM {w.t(MISSED)}) SELECT id FROM c"),
    "subquery": lambda w, s: s.sql(f"SELECT id FROM {w.t('plain')} WHERE id IN (SELECT id FROM {w.t(MISSED)})"),
    "dataframe": lambda w, s: s.table(w.t(MISSED)).select("id"),
}


@pytest.mark.parametrize("route", sorted(MISSED_READS))
def test_without_the_second_opinion_the_simulated_mistake_leaks(world, route):
    """The fault is real: the unchecked proxy gives ann every row of `forgotten`."""
    eventually_filtered(world)
    spark = world.spark(ANN, "unchecked")
    assert id_set(MISSED_READS[route](world, spark)) == set(ROWS)


@pytest.mark.parametrize("who", [ANN, ADMIN])
@pytest.mark.parametrize("route", sorted(MISSED_READS))
def test_the_second_opinion_refuses_the_read_the_proxy_missed(world, route, who):
    status, text = refusal(lambda: MISSED_READS[route](world, world.spark(who)).collect())
    assert status == "PERMISSION_DENIED", text
    assert "second opinion" in text and f"{world.db}.{MISSED}" in text, text


FILTERED_READS = {
    "sql": (lambda w, s: s.sql(f"SELECT id FROM {w.t('orders')}"), ANN_ORDERS),
    "join": (lambda w, s: s.sql(f"SELECT o.id FROM {w.t('orders')} o JOIN {w.t('plain')} p ON o.id = p.id"), ANN_ORDERS),
    "view": (lambda w, s: s.sql(f"SELECT id FROM {w.t('v_orders')}"), {1, 2}),
    "cte": (
        lambda w, s: s.sql(f"WITH c AS (SELECT * FROM {w.t('orders')}) SELECT id FROM c WHERE id IN (SELECT id FROM c)"),
        ANN_ORDERS,
    ),
    "subquery": (lambda w, s: s.sql(f"SELECT id FROM {w.t('plain')} WHERE id IN (SELECT id FROM {w.t('orders')})"), ANN_ORDERS),
    "dataframe": (lambda w, s: s.table(w.t("orders")).where("id > 0").select("id"), ANN_ORDERS),
    "dataframe-join": (lambda w, s: s.table(w.t("orders")).join(s.table(w.t("plain")), "id").select("id"), ANN_ORDERS),
}


@pytest.mark.parametrize("route", sorted(FILTERED_READS))
def test_filtered_reads_pass_the_second_opinion(world, route):
    build, expected = FILTERED_READS[route]
    assert id_set(build(world, world.spark(ANN))) == expected
    assert id_set(build(world, world.spark(ADMIN))) == set()  # the admin holds no grant on orders


def _second_opinion_counts(world: World) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{world.metrics_port}/metrics", timeout=10).read().decode()
    return {m[0]: float(m[1]) for m in re.findall(r'^rowgate_second_opinion_total\{outcome="(\w+)"\} (\S+)$', text, re.M)}


def test_a_verdict_is_remembered_and_its_cost_measured(world, report_summary):
    """First-seen texts pay Spark's analyses; a repeated text is answered from the memo.

    Latency of `spark.sql(text).collect()` through the proxy with and without the second
    opinion, for texts seen for the first time and for the same texts again.
    """
    eventually_filtered(world)
    rounds = 12
    timings: dict[tuple[str, str], list[float]] = {}
    for proxy in ("checked", "unchecked"):
        spark = world.spark(ANN, proxy)
        texts = [f"SELECT id FROM {world.t('orders')} WHERE id <> {1000 + i} AND '{proxy}' <> ''" for i in range(rounds)]
        for phase in ("first", "repeated"):
            for text in texts:
                started = time.perf_counter()
                assert id_set(spark.sql(text)) == ANN_ORDERS
                timings.setdefault((proxy, phase), []).append(time.perf_counter() - started)
    before = _second_opinion_counts(world)
    spark = world.spark(ANN)
    text = f"SELECT id FROM {world.t('orders')} WHERE id <> 1000 AND 'checked' <> ''"
    assert id_set(spark.sql(text)) == ANN_ORDERS
    after = _second_opinion_counts(world)
    assert after.get("hit", 0) - before.get("hit", 0) == 2  # the command and the relation it echoes
    assert after.get("miss", 0) == before.get("miss", 0)
    ms = {k: statistics.median(v) * 1000 for k, v in timings.items()}
    report_summary(
        "second opinion (median ms of spark.sql(text).collect(), {} texts): first-seen {:.0f} with / {:.0f} without, "
        "repeated {:.0f} with / {:.0f} without".format(
            rounds, ms["checked", "first"], ms["unchecked", "first"], ms["checked", "repeated"], ms["unchecked", "repeated"]
        )
    )

"""What the state checks cost upstream, counted on the wire (issue 23, item 2).

A counting relay (tests/integration/counting_upstream.py) sits between rowgate and the suite's
Spark server, and between a direct pyspark session and the same server. Each test runs a
typical query (SQL with a new literal each time, and a DataFrame read) once to warm up, then
counts what one more run sends upstream: through the proxy, at most ONE state read per plan
request (proxy/rowgate/pipeline/session/epoch.py), and none of the caller's session record
while this replica relayed every change of the session. A change of the same session through
another replica (a second proxy on the same relay) is still seen.

    <db>.orders (id, d)   protected: ann sees d >= 2
    <db>.t      (id)      protected: ann sees nothing
    <own>.t     (id)      not protected: row 100
"""

from __future__ import annotations

import logging
import re
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field

import pytest

from rowgate.embedded.spark import free_port
from tests.conftest import remote_url, unique
from tests.deadlines import wait_until
from tests.harness.answers import id_set as ids
from tests.harness.callers import ADMIN, ANN
from tests.harness.worlds import Policy, Table, protected_world
from tests.integration.counting_upstream import CountingUpstream

pytestmark = pytest.mark.spark


@dataclass
class World:
    db: str
    own: str
    relay: CountingUpstream
    a: object
    b: object
    metrics_port: int
    make: object
    sessions: dict = field(default_factory=dict)

    def t(self, name: str) -> str:
        return f"{self.db}.{name}"

    def spark(self, who: str, proxy: str = "a", session_id: str | None = None):
        key = (who, proxy, session_id)
        if key not in self.sessions:
            base = {"a": self.a.url, "b": self.b.url, "direct": self.relay.url}[proxy]
            params = {"session_id": session_id} if session_id else {}
            self.sessions[key] = self.make(remote_url(base, user=who, **params))
        return self.sessions[key]


@pytest.fixture(scope="module")
def relay(spark_server):
    """Set up before (so closed after) the module's pyspark sessions: a session stopped after
    its relay went away retries its ReleaseSession for minutes."""
    relay = CountingUpstream(spark_server.url.removeprefix("sc://").split("/")[0])
    yield relay
    relay.close()


@pytest.fixture(scope="module")
def world(relay, proxy_factory, module_sessions, tmp_path_factory, report_summary, spark_server):
    logging.getLogger("pyspark").setLevel(logging.CRITICAL)
    store = f"sqlite:///{tmp_path_factory.mktemp('cost') / 'policies.db'}"
    metrics_port = free_port()
    common = ("--identity", "header", "--admin", ADMIN, "--policy-store", store)
    a = proxy_factory(*common, "--metrics-listen", f"127.0.0.1:{metrics_port}", upstream=relay.url)
    b = proxy_factory(*common, upstream=relay.url)
    pw = protected_world(
        a,
        module_sessions,
        Table("orders", select="SELECT CAST(id AS INT) AS id, CAST(id % 5 AS INT) AS d FROM range(20)"),
        Policy("late", "orders", "d >= 2", grantees=[ANN]),
        Table("t", select="SELECT CAST(id AS INT) AS id FROM range(1, 3)"),
        Policy("none", "t", "TRUE", grantees=[ADMIN]),
        Table("t", select="SELECT 100 AS id", database="own"),
        database="cost",
        databases={"own": "cost_own"},
        spark_url=spark_server.url,
    )
    w = World(db=pw.db, own=pw.names["own"], relay=relay, a=a, b=b, metrics_port=metrics_port, make=module_sessions)
    w.sessions[(ADMIN, "a", None)] = pw.admin
    for proxy in ("a", "b"):  # a policy reaches the other replica within a second, not at once
        spark = w.spark(ANN, proxy)
        wait_until(lambda s=spark: ids(s.table(w.t("t"))) == set(), f"replica {proxy} enforcing the policies")
    yield w
    pw.close()
    for line in _measured:
        report_summary(line)


_measured: list[str] = []


def state_reads(c: Counter) -> int:
    return sum(v for k, v in c.items() if k.startswith("Config:state-read"))


def plan_requests(c: Counter) -> int:
    return c.get("ExecutePlan", 0) + c.get("AnalyzePlan", 0)


def metric(w: World, name: str) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{w.metrics_port}/metrics", timeout=10).read().decode()
    return {m[0]: float(m[1]) for m in re.findall(rf'^{name}\{{\w+="(\w+)"\}} (\S+)$', text, re.M)}


def measure(w: World, label: str, query) -> tuple[Counter, Counter]:
    """(through the proxy, direct): what one warm run of `query(spark, i)` sends upstream."""
    proxied, direct = w.spark(ANN, "a", str(uuid.uuid4())), w.spark(ANN, "direct", str(uuid.uuid4()))
    for i in range(2):  # warm: the session's first contact and the plan's first analysis
        query(proxied, i)
        query(direct, i)
    through = w.relay.delta(lambda: query(proxied, 7))
    plain = w.relay.delta(lambda: query(direct, 7))
    line = (
        f"{label}: through rowgate {sum(through.values())} upstream calls ({state_reads(through)} state reads, "
        f"{plan_requests(through)} plan RPCs) vs direct {sum(plain.values())}: {dict(sorted(through.items()))}; direct {dict(sorted(plain.items()))}"
    )
    _measured.append(line)
    print(line, flush=True)
    return through, plain


def sql_query(w: World):
    return lambda spark, i: spark.sql(f"SELECT * FROM {w.t('orders')} WHERE d = {i % 5}").collect()


def dataframe_query(w: World):
    from pyspark.sql.functions import col, lit

    return lambda spark, i: spark.table(w.t("orders")).filter(col("d") == lit(i % 5)).collect()


@pytest.mark.parametrize("kind", ["sql", "dataframe"])
def test_a_query_costs_at_most_one_state_read_per_plan_request(world, kind):
    query = sql_query(world) if kind == "sql" else dataframe_query(world)
    through, _ = measure(world, kind, query)
    assert plan_requests(through) >= 1
    assert state_reads(through) <= plan_requests(through), dict(through)
    # the caller's session record is not asked while this replica relayed all its changes
    assert through.get("Config:state-read:session", 0) == 0, dict(through)


def test_the_proxy_counts_its_state_reads(world):
    spark = world.spark(ANN, "a", str(uuid.uuid4()))
    query = sql_query(world)
    query(spark, 0)
    before = metric(world, "rowgate_state_reads_total")
    query(spark, 1)
    after = metric(world, "rowgate_state_reads_total")
    assert after.get("shared", 0) > before.get("shared", 0), after
    assert after.get("session", 0) == before.get("session", 0), after


def test_a_use_through_another_replica_is_seen(world):
    """The same session on two replicas: after B relays a `USE`, A resolves one-part names in
    the new database (it asked the session's record again), never from its old memory."""
    session_id = str(uuid.uuid4())
    on_a, on_b = world.spark(ANN, "a", session_id), world.spark(ANN, "b", session_id)
    on_a.sql(f"USE {world.own}").collect()
    assert ids(on_a.sql("SELECT id FROM t")) == {100}
    assert world.relay.delta(lambda: ids(on_a.sql("SELECT id FROM t"))).get("Config:state-read:session", 0) == 0
    on_b.sql(f"USE {world.db}").collect()
    seen = world.relay.delta(lambda: ids(on_a.sql("SELECT id FROM t")))
    assert seen.get("Config:state-read:session", 0) >= 1, dict(seen)
    assert ids(on_a.sql("SELECT id FROM t")) == set()  # <db>.t, which ann sees none of


def test_a_temp_view_made_through_another_replica_is_seen(world):
    session_id = str(uuid.uuid4())
    on_a, on_b = world.spark(ANN, "a", session_id), world.spark(ANN, "b", session_id)
    name = unique("v")
    on_a.sql(f"USE {world.own}").collect()
    assert ids(on_a.sql("SELECT id FROM t")) == {100}
    on_b.sql(f"CREATE TEMPORARY VIEW {name} AS SELECT 5 AS id").collect()
    assert ids(on_a.sql(f"SELECT id FROM {name}")) == {5}


def test_a_change_through_another_connection_of_this_replica_is_seen(world):
    """Two clients of one session on the same replica: every change passes this replica, so
    its memory follows without asking the session's record."""
    session_id = str(uuid.uuid4())
    first, second = world.spark(ANN, "a", session_id), world.make(remote_url(world.a.url, user=ANN, session_id=session_id))
    first.sql(f"USE {world.own}").collect()
    assert ids(first.sql("SELECT id FROM t")) == {100}
    second.sql(f"USE {world.db}").collect()
    assert ids(first.sql("SELECT id FROM t")) == set()

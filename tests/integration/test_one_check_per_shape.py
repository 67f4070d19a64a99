"""One second opinion per plan shape, through real pyspark, a real proxy and a real Spark server.

A dashboard's query with a new value each time is analysed by Spark once
(proxy/rowgate/pipeline/enforce/second_opinion.py, proxy/rowgate/rewrite/plan/literal_shape.py);
a literal that changes what Spark resolves or reads never shares a verdict. The proxy carries
the simulated rewrite mistake of tests/integration/missed_filter (every plan naming
`forgotten` is forwarded unfiltered), so a verdict wrongly shared shows as a leak.

    orders    (id, region)   eu_team: ann  region = 'eu'
                             lookup:  ann  region IN (SELECT region FROM ent WHERE email = SESSION_USER())
    ent       (email, region) admins_only: admin TRUE
    forgotten (id, region)   eu_team: ann  region = 'eu'   <- the proxy "forgets" this filter
    plain     (id, label)    no policy
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rowgate.embedded.spark import free_port
from tests.conftest import remote_url, unique
from tests.harness.answers import id_set, refusal
from tests.harness.callers import ADMIN, ANN
from tests.harness.worlds import Policy, Table, protected_world, values

pytestmark = pytest.mark.spark

MISSED = "forgotten"
ROWS = {1: "eu", 2: "us", 3: "apac", 4: "eu"}
ANN_ORDERS = {1, 2, 4}


@dataclass
class World:
    db: str
    proxy: object
    metrics_port: int
    rewrites: Path
    make: object
    sessions: dict = field(default_factory=dict)

    def t(self, name: str) -> str:
        return f"{self.db}.{name}"

    def spark(self, who: str):
        if who not in self.sessions:
            self.sessions[who] = self.make(remote_url(self.proxy.url, user=who))
        return self.sessions[who]


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, tmp_path_factory, spark_server) -> World:
    work = tmp_path_factory.mktemp("shapes")
    fault = str(Path(__file__).parent / "missed_filter")
    rewrites = work / "rewrites.jsonl"
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (fault, os.environ.get("PYTHONPATH", "")) if p),
        "ROWGATE_TEST_MISSED_TABLE": MISSED,
        "ROWGATE_TEST_REWRITES_TO": str(rewrites),
    }
    metrics_port = free_port()
    proxy = proxy_factory(
        "--identity", "header", "--admin", ADMIN, "--policy-store", f"sqlite:///{work / 'policies.db'}",
        "--metrics-listen", f"127.0.0.1:{metrics_port}", env=env,
    )  # fmt: skip

    def letters_only(prefix: str) -> str:
        # Letters only: a digit in the database name (which the lookup policy's text holds) must
        # not make the numbers of these tests look like the policy's own values.
        return prefix + "".join(chr(ord("g") + int(c, 16)) for c in unique("")[1:])

    pw = protected_world(
        proxy,
        module_sessions,
        Table("orders", "id INT, region STRING", rows=[values(ROWS.items())]),
        Table(MISSED, "id INT, region STRING", rows=[values(ROWS.items())]),
        Table("ent", "email STRING, region STRING", rows=[values([("ann@example.com", "us")])]),
        Table("plain", "id INT, region STRING", rows=[values(ROWS.items())]),
        Policy("eu_team", "orders", "region = 'eu'", grantees=[ANN]),
        Policy("lookup", "orders", "region IN (SELECT region FROM {db}.ent WHERE email = SESSION_USER())", grantees=[ANN]),
        Policy("admins_only", "ent", "TRUE", grantees=[ADMIN]),
        Policy("eu_team", MISSED, "region = 'eu'", grantees=[ANN]),
        database="shape_",
        unique_name=letters_only,
        spark_url=spark_server.url,
    )
    w = World(db=pw.db, proxy=proxy, metrics_port=metrics_port, rewrites=rewrites, make=module_sessions)
    w.sessions[ADMIN] = pw.admin
    yield w
    pw.close()


def counts(w: World) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{w.metrics_port}/metrics", timeout=10).read().decode()
    return {m[0]: float(m[1]) for m in re.findall(r'^rowgate_second_opinion_total\{outcome="(\w+)"\} (\S+)$', text, re.M)}


def delta(w: World, action) -> dict[str, float]:
    """What `action` added to the second opinion's outcomes (miss = Spark analysed)."""
    before = counts(w)
    action()
    after = counts(w)
    return {k: after.get(k, 0) - before.get(k, 0) for k in ("hit", "shape_hit", "miss")}


# -- reuse -------------------------------------------------------------------------------


def test_a_dashboard_query_with_a_new_value_each_time_is_analysed_once(world):
    spark = world.spark(ANN)
    text = "SELECT id FROM {} WHERE id <> {} AND region <> '{}' LIMIT {}"
    assert id_set(spark.sql(text.format(world.t("orders"), 100, "x100", 10))) == ANN_ORDERS
    for i in range(101, 104):
        got = {}
        d = delta(world, lambda i=i: got.update(rows=id_set(spark.sql(text.format(world.t("orders"), i, f"x{i}", 10 + i)))))
        assert got["rows"] == ANN_ORDERS
        assert d == {"hit": 0, "shape_hit": 2, "miss": 0}, d  # the command and the relation it echoes


def test_a_dataframe_filter_with_a_new_value_each_time_is_analysed_once(world):
    from pyspark.sql.functions import col

    spark = world.spark(ANN)
    orders = spark.table(world.t("orders"))
    assert id_set(orders.filter((col("id") < 100) & (col("region") != "x0"))) == ANN_ORDERS
    for i in range(1, 4):
        got = {}
        d = delta(world, lambda i=i: got.update(rows=id_set(orders.filter((col("id") < 100 + i) & (col("region") != f"x{i}")))))
        assert got["rows"] == ANN_ORDERS
        assert d == {"hit": 0, "shape_hit": 1, "miss": 0}, d


def test_a_value_of_another_type_is_analysed_again(world):
    spark = world.spark(ANN)
    assert id_set(spark.sql(f"SELECT id FROM {world.t('orders')} WHERE id > 0 AND id < 50")) == ANN_ORDERS
    d = delta(world, lambda: id_set(spark.sql(f"SELECT id FROM {world.t('orders')} WHERE id > 0 AND id < 5000000000")))
    assert d["miss"] == 1 and d["shape_hit"] == 0, d  # int vs bigint
    d = delta(world, lambda: id_set(spark.sql(f"SELECT id FROM {world.t('orders')} WHERE id > 0 AND id < 50.5")))
    assert d["miss"] == 1 and d["shape_hit"] == 0, d  # decimal(3,1)


# -- literals that change what Spark resolves: never shared --------------------------------


def test_a_table_named_by_identifier_never_shares_a_verdict(world):
    """Both texts mention `forgotten`, so the simulated mistake forwards both as sent: the
    one naming `plain` is harmless and its shape remembered, the one naming `forgotten` in
    the same place would read every row if it shared that verdict."""
    spark = world.spark(ANN)
    text = "SELECT id FROM IDENTIFIER('{}') WHERE id > {} AND '" + MISSED + "' <> ''"
    assert id_set(spark.sql(text.format(world.t("plain"), 0))) == set(ROWS)
    d = delta(world, lambda: id_set(spark.sql(text.format(world.t("plain"), 1))))
    assert d["shape_hit"] == 2 and d["miss"] == 0, d  # the shape is remembered
    status, message = refusal(lambda: spark.sql(text.format(world.t(MISSED), 0)).collect())
    assert status == "PERMISSION_DENIED" and "second opinion" in message, message


def test_a_table_named_by_a_parameter_never_shares_a_verdict(world):
    spark = world.spark(ANN)
    text = "SELECT id FROM IDENTIFIER(:t) WHERE id > 0"
    assert id_set(spark.sql(text, args={"t": world.t("plain")})) == set(ROWS)
    status, message = refusal(lambda: spark.sql(text, args={"t": world.t(MISSED)}).collect())
    assert status == "PERMISSION_DENIED" and "second opinion" in message, message


def test_ordinals_never_share_a_verdict(world):
    spark = world.spark(ANN)
    orders = world.t("orders")
    assert len(spark.sql(f"SELECT id, region FROM {orders} WHERE id > 0 ORDER BY 1").collect()) == 3
    d = delta(world, lambda: spark.sql(f"SELECT id, region FROM {orders} WHERE id > 1 ORDER BY 2").collect())
    assert d["miss"] == 1 and d["shape_hit"] == 0, d
    spark.sql(f"SELECT region, count(*) AS n FROM {orders} WHERE id > 0 GROUP BY 1").collect()
    d = delta(
        world, lambda: refusal(lambda: spark.sql(f"SELECT region, count(*) AS n FROM {orders} WHERE id > 1 GROUP BY 2").collect())
    )
    assert d["shape_hit"] == 0, d  # Spark's own analysis refuses it (an aggregate in GROUP BY)


def test_table_valued_function_arguments_never_share_a_verdict(world):
    spark = world.spark(ANN)
    orders = world.t("orders")
    spark.sql(f"SELECT r.id FROM range(3) r JOIN {orders} o ON o.id = r.id WHERE r.id > 0").collect()
    d = delta(world, lambda: spark.sql(f"SELECT r.id FROM range(5) r JOIN {orders} o ON o.id = r.id WHERE r.id > 1").collect())
    assert d["miss"] == 1 and d["shape_hit"] == 0, d


def test_a_look_alike_filter_with_other_values_never_shares_the_filtered_reads_verdict(world):
    """The text the proxy sent Spark for a filtered read, with the policy's value and the
    caller's email swapped for others and sent back: the proxy's (simulated) mistake
    forwards it as it is. Sharing the filtered read's verdict would let ann read `apac`."""
    spark = world.spark(ANN)
    world.rewrites.write_text("")
    client = f"SELECT id FROM {world.t('orders')} WHERE id > 0"
    assert id_set(spark.sql(client)) == ANN_ORDERS
    sent = json.loads(world.rewrites.read_text().splitlines()[0])
    assert "'eu'" in sent and "'ann@example.com'" in sent, sent
    look_alike = sent.replace("'eu'", "'apac'").replace("'ann@example.com'", f"'{MISSED}'")
    status, message = refusal(lambda: spark.sql(look_alike).collect())
    assert status == "PERMISSION_DENIED" and "second opinion" in message, message


def test_the_reuse_is_bound_to_the_caller(world):
    text = "SELECT id FROM {} WHERE id <> {}"
    assert id_set(world.spark(ANN).sql(text.format(world.t("orders"), 1000))) == ANN_ORDERS
    d = delta(world, lambda: id_set(world.spark(ADMIN).sql(text.format(world.t("orders"), 1001))))
    assert d["shape_hit"] == 0 and d["miss"] == 1, d

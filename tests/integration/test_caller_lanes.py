"""One caller cannot stall others (issue 21 item 9), through a real proxy and Spark.

A caller's expensive inputs queue behind that caller's own work (pipeline/enforce/caller_lanes.py):
mallory sends ten statements of ~160 KB each at once (each costs the proxy seconds of
parsing); while the proxy works on them, ann's query is answered before all but the few of
mallory's that were under way. In a pool every caller shares, ann's check waited for a
worker until the pool's first six were done together (the test fails then: checked by
running the checks on `asyncio.to_thread` again).

The SQL text one request may have the proxy read is bounded (`--max-sql-kib`,
rewrite/sql/text_budget.py): past it the request is refused naming the flag, under it the
same statement runs.

    <db>.prot (id, region)   rows 1 eu, 2 us; ann and mallory see region = 'eu'
"""

from __future__ import annotations

import threading
import urllib.request
import uuid

import grpc
import pytest

from rowgate.embedded.spark import free_port
from tests.conftest import execute_sql
from tests.deadlines import scaled, wait_until
from tests.harness.callers import ADMIN, ANN, MALLORY
from tests.harness.worlds import Policy, Table, protected_world, values
from tests.integration.conftest import grpc_status

pytestmark = pytest.mark.spark

HEAVY = 10  # more than the default executor's workers on this machine (cpu_count + 4)
# Of mallory's statements, those already under way when ann's query arrives (the lane's
# width, 2) and one or two started after them may end first on a loaded machine; in a
# shared pool ann's check waited for a worker until the six first-comers had ended together.
AT_MOST_BEFORE_ANN = 4


def costly_text(terms: int) -> str:
    """A statement that costs the proxy seconds to read (sqlglot parses ~50k terms a second)
    and Spark nothing: the proxy answers it itself, by rows or by a refusal."""
    return "SELECT " + " + ".join("1" for _ in range(terms)) + " AS c"


def in_list_query(table: str, values: int) -> str:
    """A valid query whose text costs the proxy time in proportion to `values`."""
    return f"SELECT count(*) AS n FROM {table} WHERE id IN (" + ", ".join(str(i) for i in range(values)) + ")"


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, tmp_path_factory, spark_server):
    metrics_port = free_port()
    store = f"sqlite:///{tmp_path_factory.mktemp('lanes') / 'p.db'}"
    proxy = proxy_factory(
        "--identity", "header", "--admin", ADMIN, "--metrics-listen", f"127.0.0.1:{metrics_port}", "--policy-store", store
    )
    w = protected_world(
        proxy,
        module_sessions,
        Table("prot", "id INT, region STRING", rows=[values([(1, "eu"), (2, "us")])]),
        Policy("eu", "prot", "region = 'eu'", grantees=[ANN, MALLORY]),
        database="lanes",
        spark_url=spark_server.url,
    )
    yield proxy, w.table("prot"), metrics_port, store
    w.close()


def rows(channel, query: str, user: str) -> list:
    return [r for r in execute_sql(channel, query, user=user, timeout=scaled(600)) if r.HasField("arrow_batch")]


def test_a_callers_heavy_statements_queue_behind_its_own_work_not_others(world):
    proxy, table, metrics_port, _ = world
    heavy = costly_text(40_000)  # ~160 KB
    assert 100_000 < len(heavy) < 1024 * 1024
    done: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    with grpc.insecure_channel(proxy.target, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:

        def mallory() -> None:
            try:
                rows(channel, heavy, MALLORY)
            except grpc.RpcError as e:  # refused as too deep to render: done all the same
                if grpc_status(e) != "INVALID_ARGUMENT":
                    errors.append(e)
            except BaseException as e:
                errors.append(e)
            with lock:
                done.append("mallory")

        threads = [threading.Thread(target=mallory, daemon=True) for _ in range(HEAVY)]
        for t in threads:
            t.start()
        # The proxy is working on mallory's texts, and more of them are queued.
        wait_until(lambda: metric(metrics_port, "rowgate_checks_running") >= 1, "mallory's checks under way", timeout=120)
        assert not done, "a heavy statement finished before the proxy was seen working: the texts are too cheap"
        got = rows(channel, f"SELECT id FROM {table}", ANN)
        with lock:
            finished_before_ann = list(done)
        assert got, "ann's query returned nothing"
        assert len(finished_before_ann) <= AT_MOST_BEFORE_ANN, (
            f"ann's query waited for {len(finished_before_ann)} of mallory's statements: a caller's heavy work stalled another"
        )
        for t in threads:
            t.join(scaled(600))
    assert not errors, errors[0]
    assert done == ["mallory"] * HEAVY


def test_sql_text_over_the_bound_is_refused_naming_it(proxy_factory, world):
    _, table, _, store = world
    small = proxy_factory("--identity", "header", "--admin", ADMIN, "--max-sql-kib", "64", "--policy-store", store)
    over = in_list_query(table, 12_000)  # ~75 KB
    under = in_list_query(table, 8_000)  # ~50 KB
    assert len(under) < 64 * 1024 < len(over)
    with grpc.insecure_channel(small.target) as channel:
        wait_until(lambda: _runs(channel, f"SELECT id FROM {table}"), "the policy known to the new proxy")
        with pytest.raises(grpc.RpcError) as refused:
            rows(channel, over, ANN)
        assert grpc_status(refused.value) == "INVALID_ARGUMENT"
        assert "--max-sql-kib 64" in refused.value.details()
        assert rows(channel, under, ANN), "a text under the bound runs"
        # The bound is per request, not per caller: the next request of the same caller runs.
        assert rows(channel, f"SELECT id FROM {table} /* {uuid.uuid4()} */", ANN)


def _runs(channel, query: str) -> bool:
    try:
        return bool(rows(channel, query, ANN))
    except grpc.RpcError:
        return False

"""Any replica serves any request of a session (issue 16, item 4).

Two `rowgate serve` processes share one policy store (a sqlite file) and the suite's Spark
Connect server (which cuts result streams, so pyspark reattaches all the time). A small TCP
balancer in the test hands each new client connection to the next replica, and the test
cuts connections between steps, so that one pyspark session's requests land on the replica
the test names: no sticky sessions. The flows: SQL and DataFrame reads, `USE`, temp views
created on one replica and read on the other, a result stream cut mid-way that reattaches
on the other replica, and policy changes between a temp view's (or checkpoint's) creation
and its use, which must be refused on every replica, never served with the old filter
(proxy/rowgate/pipeline/session/recall.py).

alice sees the rows `id = 1` of the protected tables (until a test moves her policy).
"""

from __future__ import annotations

import logging
import socket
import threading
import uuid

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.embedded.spark import free_port
from tests.conftest import remote_url, unique
from tests.deadlines import scaled, wait_until
from tests.harness.answers import ids
from tests.harness.callers import ADMIN, ALICE
from tests.harness.worlds import protected_world
from tests.integration.conftest import grpc_status

pytestmark = pytest.mark.spark


class Balancer:
    """Each accepted connection goes to the next target in turn; `cut` closes them all."""

    def __init__(self, targets: list[int]):
        self.targets = targets
        self.next = 0
        self.routed: list[int] = []  # the target index of every connection, in order
        self.cut_after_bytes: int | None = None  # one-shot: cut mid-stream after this many bytes
        self.mid_stream_cuts = 0
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", free_port()))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                index = self.next
                self.next = (index + 1) % len(self.targets)
                self.routed.append(index)
            try:
                upstream = socket.create_connection(("127.0.0.1", self.targets[index]))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, to_client: bool) -> None:
        sent = 0
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                sent += len(data)
                if to_client and self.cut_after_bytes is not None and sent > self.cut_after_bytes:
                    self.cut_after_bytes = None
                    self.mid_stream_cuts += 1
                    break
        except OSError:
            pass
        self._close(source, sink)

    def _close(self, *socks: socket.socket) -> None:
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def on(self, index: int) -> None:
        """The session's next request opens a new connection, to replica `index`."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
            self.next = index
        for pair in pairs:
            self._close(*pair)

    def close(self) -> None:
        self.listener.close()
        self.on(0)


def refusal(action) -> Exception:
    try:
        action()
    except Exception as e:
        return e
    pytest.fail("expected the request to be refused")


def activate(spark):
    """pyspark binds a checkpoint's DataFrame to the *active* session (see README, Limitations)."""
    from pyspark.sql.connect.session import SparkSession

    SparkSession._active_session.session = spark
    return spark


@pytest.fixture(scope="module")
def replicas(proxy_factory, tmp_path_factory):
    """Two replicas sharing a store, without the second opinion: it would refuse a stale temp
    view or checkpoint too (as a read outside the current row filter), so without it each
    defence tested here is the only one between the caller and the old rows."""
    store = f"sqlite:///{tmp_path_factory.mktemp('store') / 'policies.db'}"
    args = ("--identity", "header", "--admin", ADMIN, "--policy-store", store, "--no-second-opinion")
    a = proxy_factory(*args)
    b = proxy_factory(*args)
    balancer = Balancer([a.port, b.port])
    yield a, b, balancer
    balancer.close()


@pytest.fixture(scope="module")
def world(replicas, module_sessions, spark_server):
    logging.getLogger("pyspark").setLevel(logging.CRITICAL)
    a, b, _ = replicas
    pw = protected_world(a, module_sessions, database="rep", databases={"other": "rep_other"}, spark_url=spark_server.url)
    yield {"admin": pw.admin, "db": pw.db, "other": pw.names["other"], "a": a, "b": b}
    pw.close()


def protected(world, name: str | None = None, rows: int = 2) -> str:
    """A table (id) with rows 1..rows and one policy granting alice `id = 1`, enforced by both
    replicas (a policy reaches the other replica within a second, not at once)."""
    table = f"{world['db']}.{name or unique('prot')}"
    admin = world["admin"]
    admin.sql(f"CREATE TABLE {table} USING parquet AS SELECT CAST(id AS INT) AS id FROM range(1, {rows + 1})")
    admin.sql(f"CREATE ROW ACCESS POLICY p ON {table} GRANT TO ('{ALICE}') FILTER USING (id = 1)").collect()
    _enforced_by_both(world, table, [1])
    return table


def _enforced_by_both(world, table: str, rows: list[int]) -> None:
    for proxy in (world["a"], world["b"]):
        spark = _plain_session(proxy)
        try:
            wait_until(lambda spark=spark: ids(spark.table(table)) == rows, f"{proxy.url} enforcing the policy")
        finally:
            spark.stop()


def move_alices_policy(world, table: str, *, to: int) -> None:
    """Alice's policy on `table` now grants `id = to`; waits until both replicas enforce it."""
    admin = world["admin"]
    admin.sql(f"DROP ROW ACCESS POLICY p ON {table}").collect()
    admin.sql(f"CREATE ROW ACCESS POLICY p ON {table} GRANT TO ('{ALICE}') FILTER USING (id = {to})").collect()
    _enforced_by_both(world, table, [to])


def _plain_session(proxy):
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(remote_url(proxy.url, user=ALICE)).create()


@pytest.fixture
def alice(replicas, sessions):
    """alice's pyspark session through the balancer, and the balancer."""
    _, _, balancer = replicas
    balancer.on(0)
    return sessions(remote_url(balancer.url, user=ALICE)), balancer


def test_sql_dataframe_and_use_on_alternating_replicas(world, alice):
    spark, balancer = alice
    table = protected(world)
    short = table.split(".")[1]
    plain = f"{world['other']}.{short}"  # the same short name in another database, unprotected
    world["admin"].sql(f"CREATE TABLE {plain} USING parquet AS SELECT 100 AS id")
    start = len(balancer.routed)
    assert ids(spark.sql(f"SELECT id FROM {table}")) == [1]
    balancer.on(1)
    assert ids(spark.table(table)) == [1]
    assert spark.table(table).count() == 1
    balancer.on(0)
    spark.sql(f"USE {world['db']}").collect()
    balancer.on(1)  # B served the session before the USE: on a new connection it asks Spark again
    assert ids(spark.sql(f"SELECT id FROM {short}")) == [1]
    assert spark.catalog.currentDatabase() == world["db"]
    spark.sql(f"USE {world['other']}").collect()
    balancer.on(0)  # A resolved names in the first database before; the session moved on B
    assert ids(spark.sql(f"SELECT id FROM {short}")) == [100]
    assert ids(spark.table(short)) == [100]
    assert set(balancer.routed[start:]) == {0, 1}


def test_temp_view_created_on_one_replica_is_read_on_the_other(world, alice):
    spark, balancer = alice
    table = protected(world)
    view = unique("v")
    spark.sql(f"CREATE TEMPORARY VIEW {view} AS SELECT id FROM {table}").collect()
    spark.table(table).where("id > 0").createOrReplaceTempView(view + "_df")
    balancer.on(1)
    assert ids(spark.sql(f"SELECT * FROM {view}")) == [1]
    assert ids(spark.table(view + "_df")) == [1]
    balancer.on(0)
    spark.sql(f"DROP VIEW {view}").collect()
    balancer.on(1)
    gone = refusal(lambda: spark.sql(f"SELECT * FROM {view}").collect())  # a name nothing explains now
    assert grpc_status(gone) == "INVALID_ARGUMENT" and view in str(gone), gone


def test_a_result_stream_cut_mid_way_reattaches_on_the_other_replica(world, alice):
    spark, balancer = alice
    table = protected(world, rows=3000)
    world["admin"].sql(f"DROP ROW ACCESS POLICY p ON {table}").collect()
    world["admin"].sql(f"CREATE ROW ACCESS POLICY p ON {table} GRANT TO ('{ALICE}') FILTER USING (id % 2 = 0)").collect()
    wait_until(lambda: ids(spark.table(table).where("id <= 6")) == [2, 4, 6], "the new policy on A")
    # Cut while the rows stream, not while `spark.sql` answers with its echo: a replica that
    # did not start the operation withholds a filtered query's echo, which pyspark needs to
    # build the DataFrame (README, Limitations).
    df = spark.sql(f"SELECT id FROM {table}")
    start = len(balancer.routed)
    balancer.cut_after_bytes = 2000
    rows = df.collect()
    assert sorted(r[0] for r in rows) == list(range(2, 3001, 2))
    assert balancer.mid_stream_cuts == 1 and 1 in balancer.routed[start:]


def test_temp_view_from_before_a_policy_change_is_refused_on_every_replica(world, alice):
    spark, balancer = alice
    table = protected(world)
    view = unique("stale")
    spark.sql(f"CREATE TEMPORARY VIEW {view} AS SELECT id FROM {table}").collect()
    assert ids(spark.table(view)) == [1]
    move_alices_policy(world, table, to=2)
    for replica in (1, 0):
        balancer.on(replica)
        error = refusal(lambda: spark.sql(f"SELECT * FROM {view}").collect())
        assert grpc_status(error) == "FAILED_PRECONDITION", error
        assert "created before the row access policies" in str(error)
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {view} AS SELECT id FROM {table}").collect()
    balancer.on(1)
    assert ids(spark.table(view)) == [2]


def test_checkpoint_from_before_a_policy_change_is_refused_on_the_other_replica(world, alice):
    spark, balancer = alice
    table = protected(world)
    activate(spark)
    checkpointed = spark.table(table).localCheckpoint()
    assert ids(checkpointed) == [1]
    move_alices_policy(world, table, to=2)
    balancer.on(1)
    error = refusal(lambda: checkpointed.collect())
    assert grpc_status(error) == "FAILED_PRECONDITION", error
    assert "checkpointed" in str(error)


def test_temp_view_no_record_explains_is_refused(world, replicas, spark_server, sessions):
    """A temp view made in the session without rowgate (here: straight at Spark under the
    same ids) has no record of the policies it was made under."""
    _, _, balancer = replicas
    balancer.on(1)
    table = protected(world)
    session_id = str(uuid.uuid4())
    spark = sessions(remote_url(balancer.url, user=ALICE, session_id=session_id))
    assert ids(spark.table(table)) == [1]
    direct = sessions(remote_url(spark_server.url, user_id=ALICE, session_id=session_id))
    view = unique("unrecorded")
    direct.sql(f"CREATE TEMPORARY VIEW {view} AS SELECT id FROM {table}").collect()
    balancer.on(0)
    error = refusal(lambda: spark.sql(f"SELECT * FROM {view}").collect())
    assert grpc_status(error) == "FAILED_PRECONDITION", error
    assert "cannot tell under which row access policies" in str(error)


@pytest.mark.parametrize("user", [ALICE, ADMIN])
def test_nobody_writes_the_sessions_record(world, replicas, sessions, user):
    a, _, _ = replicas
    spark = sessions(remote_url(a.url, user=user))
    key = "rowgate.session.tempview.v"
    forged = '{"v": 1, "t": []}'
    for action in (
        lambda: spark.conf.set(key, forged),
        lambda: spark.conf.unset("rowgate.session.checkpoint.x"),
        lambda: spark.sql(f"SET {key}={forged}").collect(),
        lambda: spark.sql("RESET rowgate.session.checkpoint.x").collect(),
    ):
        error = refusal(action)
        assert grpc_status(error) == "PERMISSION_DENIED", error
        assert "reserved for rowgate itself" in str(error)


def test_global_temp_view_is_served_where_rowgate_knows_when_it_was_made(world, alice, sessions):
    """A global temp view is shared by every session, but its creation time is known only to
    the replica that made it: the other refuses it while policies exist (fail closed)."""
    spark, balancer = alice
    protected(world)  # policies exist
    view = unique("g")
    spark.range(3).createOrReplaceGlobalTempView(view)
    assert ids(spark.table(f"global_temp.{view}")) == [0, 1, 2]
    balancer.on(1)
    error = refusal(lambda: spark.table(f"global_temp.{view}").collect())
    assert grpc_status(error) == "FAILED_PRECONDITION", error
    assert "cannot tell under which row access policies" in str(error)
    missing = refusal(lambda: spark.table(f"global_temp.{unique('nope')}").collect())
    assert "TABLE_OR_VIEW_NOT_FOUND" in str(missing)


def test_a_spark_sql_answer_continued_on_the_other_replica_is_refused_clearly(world, replicas):
    """A filtered `spark.sql` query answers first with its echo, which the replica that started
    it replaces by the client's own text. Continued on the other replica (a reattach from the
    stream's start, as after a cut before the first answer), the echo is rowgate's rewrite,
    policy included: that replica must neither relay it nor hand pyspark an empty relation
    (which failed only at collect, with Spark's RELTYPE_NOT_SET), but refuse clearly."""
    a, b, _ = replicas
    table = protected(world)
    metadata = (("x-rowgate-user", ALICE),)
    session_id, operation_id = str(uuid.uuid4()), str(uuid.uuid4())
    context = base_pb2.UserContext(user_id=ALICE)
    start = base_pb2.ExecutePlanRequest(session_id=session_id, operation_id=operation_id, user_context=context)
    start.plan.command.sql_command.input.sql.query = f"SELECT id FROM {table}"
    start.request_options.add().reattach_options.reattachable = True
    again = base_pb2.ReattachExecuteRequest(session_id=session_id, operation_id=operation_id, user_context=context)

    def stream(replica, method, request):
        with grpc.insecure_channel(replica.target) as channel:
            call = channel.unary_stream(
                f"/spark.connect.SparkConnectService/{method}",
                type(request).SerializeToString,
                base_pb2.ExecutePlanResponse.FromString,
            )
            return list(call(request, metadata=metadata, timeout=scaled(60)))

    started = stream(a, "ExecutePlan", start)
    echo = next(r for r in started if r.HasField("sql_command_result")).sql_command_result.relation
    assert echo.sql.query == f"SELECT id FROM {table}"  # the client's text, where it started
    with pytest.raises(grpc.RpcError) as refused:
        stream(b, "ReattachExecute", again)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, refused.value
    assert "run the spark.sql call again" in refused.value.details()
    assert "id = 1" not in refused.value.details() and "id = 1" not in str(refused.value.trailing_metadata())
    continued = stream(a, "ReattachExecute", again)  # where it started, the same answer again
    assert [r.sql_command_result.relation for r in continued if r.HasField("sql_command_result")] == [echo]

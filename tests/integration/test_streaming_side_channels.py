"""What is said about a running streaming query says nothing about hidden rows.

A streaming query's plan is filtered when it starts, but its progress, plan, failure and
listener events come later, on calls that carry no plan. Spark counts a source's rows
(`numInputRows` and the rates) at the scan, below the policy filter, and its `explain()` and
exception messages print the plan with the policy predicate
(proxy/rowgate/responses/streaming_redaction.py). rowgate learns which queries read
protected data from Spark's answer when they start, per session, and treats queries it did
not see start as protected (proxy/rowgate/pipeline/operations/streaming_queries.py).

Each test fails when its defence is removed (the steps of StreamingQueries taken out of the
pipeline; the rule server_side_listeners taken out of RULES).
"""

from __future__ import annotations

import pytest
from pyspark.sql.streaming import StreamingQueryListener

from tests.conftest import remote_url, unique
from tests.deadlines import wait_until
from tests.harness.callers import ADMIN, READER
from tests.harness.worlds import Policy, Table, protected_world, values
from tests.integration.conftest import grpc_status

pytestmark = pytest.mark.spark

SECRET = "zz-team-nobody-may-name"
VISIBLE = [(1, "reader", 10), (2, "reader", 20)]
HIDDEN = [(100 + i, SECRET, 500 + i) for i in range(23)]
WITHHELD = -1


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, spark_server):
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)
    w = protected_world(
        proxy,
        module_sessions,
        Table("stream_src", "id INT, owner STRING, amount INT", rows=[values(VISIBLE + HIDDEN)]),
        Policy("mine", "stream_src", f"owner = 'reader' OR owner = '{SECRET}x'"),
        Table("stream_open", "id INT", rows=[values([(1,), (2,), (3,)])]),
        spark_url=spark_server.url,
    )
    yield proxy, w.caller(READER), w.admin, w.table("stream_src"), w.table("stream_open")
    w.close()


def started(df, name=None):
    """A memory-sink query over `df`, run until it processed what is there."""
    query = df.writeStream.format("memory").queryName(name or unique("sink")).start()
    query.processAllAvailable()
    return query


def numbers(progress) -> list:
    """Every count and rate of a progress that Spark takes at a source."""
    found = [progress.numInputRows, progress.inputRowsPerSecond, progress.processedRowsPerSecond]
    for source in progress.sources:
        found += [source.numInputRows, source.inputRowsPerSecond, source.processedRowsPerSecond]
    return found


def test_progress_of_a_filtered_stream_withholds_what_the_source_counted(world):
    _, reader, _, table, _ = world
    name = unique("sink")
    query = started(reader.readStream.table(table), name)
    try:
        assert sorted(r.id for r in reader.sql(f"SELECT id FROM {name}").collect()) == [1, 2]
        for progress in [query.lastProgress, *query.recentProgress]:
            assert set(numbers(progress)) == {WITHHELD}, progress.json
            assert progress.sink.numOutputRows in (0, len(VISIBLE))  # counted after the filter: kept
            assert all(source.metrics == {} for source in progress.sources)
        assert query.lastProgress.sink.numOutputRows == len(VISIBLE)
        assert query.status["message"]  # the status stays
    finally:
        query.stop()


def test_an_unfiltered_stream_keeps_sparks_progress(world):
    _, reader, _, _, open_table = world
    query = started(reader.readStream.table(open_table))
    try:
        assert query.lastProgress.numInputRows == 3
    finally:
        query.stop()


@pytest.mark.parametrize("who", ["reader", "admin"])
def test_explain_of_a_filtered_stream_does_not_print_the_policy(world, who, capsys):
    _, reader, admin, table, _ = world
    session = reader if who == "reader" else admin
    query = started(session.readStream.table(table))
    try:
        capsys.readouterr()
        query.explain(True)
        printed = capsys.readouterr().out
        assert SECRET not in printed and "a row filter applies" in printed, printed
        progress = query.lastProgress
        assert set(numbers(progress)) == {WITHHELD}, progress.json  # for admins too
    finally:
        query.stop()


def test_a_failed_filtered_stream_does_not_quote_the_policy(world):
    _, reader, _, table, _ = world
    query = (
        reader.readStream.table(table)
        .selectExpr("raise_error(concat('boom ', CAST(amount AS STRING))) AS x")
        .writeStream.format("memory")
        .queryName(unique("fails"))
        .start()
    )
    with pytest.raises(Exception) as raised:
        query.awaitTermination()
    assert SECRET not in str(raised.value), str(raised.value)[:2000]
    # errors of filtered operations are relayed by allow list (policy/error_allow_list.py):
    # the class stays, the message (raise_error's text, computed from rows) does not
    assert "[STREAM_FAILED]" in str(raised.value), str(raised.value)[:2000]
    # query.exception() is known only by its text: by allow list, its classes and SQLSTATE
    # only (responses/error_redaction.withheld_message), not raise_error's text
    failure = query.exception()
    assert failure is not None and "STREAM_FAILED" in str(failure) and "rowgate withheld" in str(failure), str(failure)
    assert "boom" not in str(failure) and SECRET not in str(failure) and "JVM stacktrace" not in str(failure)


class Collected(StreamingQueryListener):
    """Keeps every event the listener bus delivers (pyspark calls it from its handler thread)."""

    def __init__(self):
        self.events: list = []

    def _add(self, event):
        self.events.append(event)  # list.append is atomic; tests poll a copy

    def onQueryStarted(self, event):
        self._add(("started", event))

    def onQueryProgress(self, event):
        self._add(("progress", event.progress))

    def onQueryIdle(self, event):
        pass

    def onQueryTerminated(self, event):
        self._add(("terminated", event))


def test_listener_events_of_a_filtered_stream_are_redacted(world, module_sessions):
    proxy, _, _, table, _ = world
    reader = module_sessions(remote_url(proxy.url, user=READER))  # its own listener bus
    listener = Collected()
    reader.streams.addListener(listener)
    try:
        query = started(reader.readStream.table(table))
        progress = wait_until(
            lambda: [p for kind, p in listener.events if kind == "progress" and str(p.id) == query.id], "a progress event"
        )
        for event in progress:
            assert set(numbers(event)) == {WITHHELD}, event.json
        failing = (
            reader.readStream.table(table)
            .selectExpr("raise_error('boom') AS x")
            .writeStream.format("memory")
            .queryName(unique("fails"))
            .start()
        )
        ended = wait_until(
            lambda: [e for kind, e in listener.events if kind == "terminated" and str(e.id) == failing.id],
            "the failed query's terminated event",
        )
        assert ended[0].exception and "rowgate withheld" in ended[0].exception, ended[0].exception
        assert "boom" not in ended[0].exception and SECRET not in ended[0].exception
        query.stop()
    finally:
        reader.streams.removeListener(listener)


def test_a_stream_over_a_temp_view_of_protected_data_is_redacted(world):
    _, reader, _, table, _ = world
    view = unique("stream_view")
    reader.readStream.table(table).createOrReplaceTempView(view)
    query = started(reader.sql(f"SELECT * FROM {view}"))
    try:
        assert set(numbers(query.lastProgress)) == {WITHHELD}, query.lastProgress.json
    finally:
        query.stop()


def test_a_query_the_proxy_did_not_see_start_is_treated_as_protected(world, proxy_factory, module_sessions, capsys):
    """Another replica (or the same one after a restart) is asked about a query it never saw
    start: while tables are protected it withholds what it cannot vouch for."""
    from pyspark.sql.connect.streaming.query import StreamingQuery

    proxy, _, _, table, open_table = world
    reader = module_sessions(remote_url(proxy.url, user=READER))
    other = proxy_factory("--identity", "header", "--admin", ADMIN, "--policy-store", _store_of(proxy))
    query = started(reader.readStream.table(open_table))  # over an open table, but unknown there
    try:
        assert query.lastProgress.numInputRows == 3  # the proxy that saw it start vouches for it
        same_session = module_sessions(remote_url(other.url, user=READER, session_id=reader.client._session_id))
        elsewhere = StreamingQuery(same_session, query.id, query.runId)
        assert set(numbers(elsewhere.lastProgress)) == {WITHHELD}, elsewhere.lastProgress.json
        capsys.readouterr()
        elsewhere.explain()
        assert "did not see this streaming query start" in capsys.readouterr().out
        assert elsewhere.isActive  # status, stop and awaitTermination still work
    finally:
        query.stop()


def _store_of(proxy) -> str:
    """The policy store of `proxy`, shared by a second replica (SQLite in its data dir)."""
    return "sqlite:///" + str(proxy.extra["workdir"] / "policies.db")


def test_a_jvm_listener_inside_the_server_is_refused(world):
    from pyspark.sql.connect.proto import commands_pb2

    _, reader, _, _, _ = world
    command = commands_pb2.Command()
    command.streaming_query_manager_command.add_listener.listener_payload = b"\xac\xed\x00\x05not-a-listener"
    command.streaming_query_manager_command.add_listener.id = unique("listener")
    with pytest.raises(Exception) as raised:
        reader.client.execute_command(command)
    assert grpc_status(raised.value) == "PERMISSION_DENIED", str(raised.value)[:600]
    assert "JVM streaming query listener" in str(raised.value)


# -- streams that started before a policy change (proxy/rowgate/pipeline/operations/stale_streams.py) ---


def test_a_stream_started_before_its_table_was_protected_is_stopped_when_it_is(world):
    """Its plan was rewritten without a filter (the table had no policy): left running, it
    would copy every new row into a sink the reader reads. Checked: without the StaleStreams
    step the query stays active and the wait fails."""
    _, reader, admin, _, _ = world
    table, name = unique("stream_late"), unique("sink")
    admin.sql(f"CREATE TABLE {table} (id INT, owner STRING, amount INT) USING parquet")
    admin.sql(f"INSERT INTO {table} VALUES (1, 'reader', 10)")
    query = started(reader.readStream.table(table), name)
    try:
        assert query.isActive
        admin.sql(
            f"CREATE ROW ACCESS POLICY late ON {table} GRANT TO ('allAuthenticatedUsers') FILTER USING (owner = 'reader')"
        ).collect()
        wait_until(lambda: not query.isActive, "rowgate to stop the stream that started before the policy")
        admin.sql(f"CREATE ROW ACCESS POLICY w ON {table} GRANT TO ('{ADMIN}') FILTER USING (TRUE)").collect()
        admin.sql(f"INSERT INTO {table} VALUES (100, '{SECRET}', 500)")
        assert sorted(r.id for r in reader.sql(f"SELECT id FROM {name}").collect()) == [1]
        again = started(reader.readStream.table(table), unique("sink"))  # restarted: under the policy
        try:
            assert again.isActive and again.lastProgress.sink.numOutputRows == 1
        finally:
            again.stop()
    finally:
        if query.isActive:
            query.stop()


def test_a_stream_is_stopped_when_the_policy_it_started_under_changes(world):
    _, reader, admin, _, _ = world
    table = unique("stream_moved")
    admin.sql(f"CREATE TABLE {table} (id INT, owner STRING, amount INT) USING parquet")
    admin.sql(f"INSERT INTO {table} VALUES (1, 'reader', 10), (2, 'other', 20)")
    admin.sql(f"CREATE ROW ACCESS POLICY p ON {table} GRANT TO ('allAuthenticatedUsers') FILTER USING (TRUE)").collect()
    query = started(reader.readStream.table(table))
    untouched = started(reader.readStream.table(world[4]))  # reads another table: keeps running
    try:
        admin.sql(
            f"CREATE OR REPLACE ROW ACCESS POLICY p ON {table} GRANT TO ('allAuthenticatedUsers') FILTER USING (owner = 'reader')"
        ).collect()
        wait_until(lambda: not query.isActive, "rowgate to stop the stream that started under the old policy")
        assert untouched.isActive
    finally:
        for q in (query, untouched):
            if q.isActive:
                q.stop()

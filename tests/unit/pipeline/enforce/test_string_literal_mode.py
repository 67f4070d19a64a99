"""`spark.sql.parser.escapedStringLiterals` is allowed, bound to what rowgate read: Spark is
asked only when a text holds a string literal with a backslash whose value rowgate read or
wrote, and then the request runs only under the server's value."""

import asyncio
from collections import Counter
from types import SimpleNamespace

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce import string_literal_mode as mode
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.session.registry import SessionState
from rowgate.rewrite.sql.escaped_strings import UNREADABLE

KEY = mode.KEY.lower()
LIKE = "SELECT '%SystemDrive%\\Users\\John' like '\\%SystemDrive\\%\\\\Users%'"


class Versions:
    def __init__(self, mine: str):
        self.mine, self.asked = mine, 0

    async def settings(self, call, state, keys):
        assert keys == (mode.KEY,)
        self.asked += 1
        return {KEY: self.mine}, {KEY: "false"}


def plan_of(*texts: str) -> base_pb2.Plan:
    plan = base_pb2.Plan()
    plan.root.sql.query = texts[0]
    for text in texts[1:]:  # DataFrame expression strings over it
        plan.root.filter.condition.expression_string.expression = text
    return plan


def run(client: list[str], sent: list[str], mine: str, findings: Findings | None = None) -> int:
    versions = Versions(mine)
    call = SimpleNamespace(session_id="s")
    plans = [plan_of(*sent)]
    asyncio.run(mode.check(versions, call, SessionState(), client, plans, findings or Findings()))  # type: ignore[arg-type]
    return versions.asked


def test_texts_without_backslash_literals_ask_nothing():
    assert run(["SELECT 'a' FROM t -- \\"], ["SELECT 'a' FROM t"], "true") == 0  # a backslash in a comment
    assert run(["SELECT 'plain' FROM t"], ["SELECT 'plain' FROM `spark_catalog`.db.t"], "true") == 0


def test_the_clients_own_literals_forwarded_as_written_run_under_either_value():
    assert run([LIKE], [LIKE + " FROM `spark_catalog`.db.t"], "true") == 0
    assert run([LIKE], [LIKE], "false") == 0


@pytest.mark.parametrize(
    "client, sent, findings",
    [
        # a policy filter rowgate inserted holds a backslash
        (["SELECT * FROM t"], ["SELECT * FROM (SELECT * FROM t WHERE name = 'x\\\\y') AS t"], None),
        # rowgate rendered the caller's name (a quote) with a backslash
        (["SELECT current_user()"], ["SELECT 'o\\'brien@example.com' AS `current_user()`"], None),
        # a canonical rendering dropped the client's backslash
        (["SELECT '\\d' /* x /* y */ */"], ["SELECT 'd'"], None),
        # a path rowgate judged by its value
        (
            ["CREATE TABLE x USING parquet LOCATION '/data/a\\b'"],
            ["CREATE TABLE x USING parquet LOCATION '/data/a\\b'"],
            Findings(locations={"/data/ab"}),
        ),
        # a name rowgate resolved by its value
        (["SELECT * FROM IDENTIFIER('`a\\b`')"], ["SELECT * FROM IDENTIFIER('`a\\b`')"], None),
    ],
)
def test_a_literal_rowgate_read_or_wrote_runs_only_under_the_servers_value(client, sent, findings):
    assert run(client, sent, "false", findings) == 1
    with pytest.raises(Refusal) as info:
        run(client, sent, "true", findings)
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION and mode.KEY in info.value.message


def test_an_expression_string_counts_like_sql_text():
    with pytest.raises(Refusal):
        run(["SELECT * FROM t"], ["SELECT * FROM t", "name = 'x\\\\y'"], "TRUE")


def test_a_text_that_does_not_tokenise_is_never_read_as_free_of_backslash_literals():
    assert mode.escaped(["SELECT 'unterminated \\"]) == Counter(UNREADABLE)


def test_a_double_quoted_string_rendered_with_a_backslash_is_asked_about():
    assert run(['SELECT "it\'s" FROM t'], ["SELECT 'it\\'s' FROM `spark_catalog`.db.t"], "false") == 1

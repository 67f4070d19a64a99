"""The pipeline's check of reads filtered by setting-dependent policies: Spark is asked only
for such reads, and a session whose time zone or ANSI mode differs from the server's is
refused naming the setting and the policy."""

import asyncio
from datetime import datetime
from types import SimpleNamespace

import grpc
import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.catalog.model import RelationInfo, RelationKind
from rowgate.identity.caller import Caller
from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.findings import Findings
from rowgate.pipeline.enforce.predicate_settings import PredicateSettings
from rowgate.pipeline.session.registry import SessionState
from rowgate.policy.model import RowAccessPolicy, TableName
from rowgate.policy.snapshot import PolicySnapshot

T = TableName("spark_catalog", "db", "events")
TZ, ANSI = "spark.sql.session.timeZone", "spark.sql.ansi.enabled"
NANOS = "spark.sql.timestampNanosTypes.enabled"
DEFAULTS = {TZ.lower(): "Etc/UTC", ANSI.lower(): "true", NANOS.lower(): "false"}


class Catalog:
    async def lookup_many(self, names):
        info = RelationInfo(T, RelationKind.TABLE, ("ts", "region"), column_types=("timestamp", "string"))
        return {n: info if n == T else None for n in names}


class Versions:
    def __init__(self, mine):
        self.mine, self.asked = mine, 0

    async def settings(self, call, state, keys):
        self.asked += 1
        return dict(DEFAULTS, **self.mine), dict(DEFAULTS)


def run(filter_sql: str, mine: dict, method: str = "ExecutePlan"):
    policy = RowAccessPolicy(T, "p", ("allAuthenticatedUsers",), filter_sql, datetime.min, datetime.min)
    snapshot = PolicySnapshot.build(1, [policy])
    findings = Findings(tables_read={T}, policies_applied={f"{T}:p"})
    versions = Versions(mine)
    call = SimpleNamespace(
        method=SimpleNamespace(name=method), session_id="s", caller=Caller("user:ann@example.com"),
        request=base_pb2.ExecutePlanRequest(),
    )  # fmt: skip
    check = PredicateSettings(Catalog(), versions)  # type: ignore[arg-type]
    asyncio.run(check.check(call, SessionState(), snapshot, findings))  # type: ignore[arg-type]
    return versions.asked


def test_an_independent_policy_asks_spark_nothing():
    assert run("region = 'eu'", {TZ.lower(): "Asia/Tokyo"}) == 0


def test_a_dependent_policy_under_the_servers_values_runs():
    assert run("hour(ts) < 12", {}) == 1
    assert run("hour(ts) < 12", {ANSI.lower(): "TRUE"}) == 1  # booleans compare case-insensitively


def test_a_key_the_server_does_not_know_is_the_same_when_nobody_set_it():
    """Spark 4.0 knows no nanosecond timestamps: both sessions answer the option unset ("")."""

    class Old(Versions):
        async def settings(self, call, state, keys):
            self.asked += 1
            assert NANOS in keys
            unknown = {TZ.lower(): "Etc/UTC", ANSI.lower(): "true", NANOS.lower(): ""}
            return dict(unknown, **self.mine), unknown

    policy = RowAccessPolicy(T, "p", ("allAuthenticatedUsers",), "hour(ts) < 12", datetime.min, datetime.min)
    call = SimpleNamespace(method=SimpleNamespace(name="ExecutePlan"), session_id="s", caller=Caller("user:a@example.com"))
    findings = Findings(tables_read={T}, policies_applied={f"{T}:p"})
    for mine, refused in (({}, False), ({NANOS.lower(): "true"}, True)):
        check = PredicateSettings(Catalog(), Old(mine))  # type: ignore[arg-type]
        try:
            asyncio.run(check.check(call, SessionState(), PolicySnapshot.build(1, [policy]), findings))  # type: ignore[arg-type]
        except Refusal as e:
            assert refused and NANOS in e.message
        else:
            assert not refused


@pytest.mark.parametrize("key, value", [(TZ, "Asia/Tokyo"), (TZ, "UTC"), (ANSI, "false"), (NANOS, "true")])
def test_a_dependent_policy_under_another_value_is_refused(key, value):
    with pytest.raises(Refusal) as info:
        run("hour(ts) < 12", {key.lower(): value})
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert key in info.value.message and f"policy p of {T}" in info.value.message and "hour()" in info.value.message


def test_analysis_is_not_checked():
    assert run("hour(ts) < 12", {TZ.lower(): "Asia/Tokyo"}, method="AnalyzePlan") == 0

"""The pipeline checks its steps' declarations when it is built, and runs a step only for
the RPCs it names."""

from __future__ import annotations

import asyncio

import pytest
from pyspark.sql.connect.proto import base_pb2

from rowgate.identity.caller import Caller
from rowgate.pipeline.compressed_plans import PLAN_RPCS
from rowgate.pipeline.core import EVERY_RPC, Call, Pipeline, PipelineOrderError, step
from rowgate.upstream.methods import METHODS


async def nothing(call: Call) -> None:
    return None


def test_a_fact_read_before_any_step_writes_it_fails_at_construction():
    with pytest.raises(PipelineOrderError, match=r"reads \['compressed_plans'\] for AnalyzePlan"):
        Pipeline([step(nothing, PLAN_RPCS, reads=["compressed_plans"]), step(nothing, PLAN_RPCS, writes=["compressed_plans"])])
    Pipeline([step(nothing, PLAN_RPCS, writes=["compressed_plans"]), step(nothing, PLAN_RPCS, reads=["compressed_plans"])])


def test_a_fact_written_only_for_other_rpcs_does_not_count():
    with pytest.raises(PipelineOrderError, match="for ReattachExecute"):
        Pipeline(
            [
                step(nothing, ["ExecutePlan"], writes=["tables"]),
                step(nothing, ["ExecutePlan", "ReattachExecute"], reads=["tables"]),
            ]
        )


def test_unknown_rpcs_and_facts_fail_at_construction():
    with pytest.raises(PipelineOrderError, match="RPCs Spark Connect does not have"):
        Pipeline([step(nothing, ["ExecutePlans"])])
    with pytest.raises(PipelineOrderError, match="facts `Facts` does not have"):
        Pipeline([step(nothing, EVERY_RPC, writes=["row_filter"])])


def test_a_step_runs_only_for_the_rpcs_it_names():
    seen: list[str] = []

    async def record(call: Call) -> None:
        seen.append(call.method.name)

    pipeline = Pipeline([step(record, ["Config"])])
    for name in ("Config", "ExecutePlan"):
        request = METHODS[name].request_type()
        asyncio.run(pipeline.run(Call(method=METHODS[name], caller=Caller(principal="user:a@x"), request=request, upstream=None)))
    assert seen == ["Config"]


def test_the_app_pipeline_is_in_order(tmp_path):
    """The steps pipeline/assembly.py lists, as app.py wires them, pass the check."""
    from rowgate.app import RowgateApp
    from rowgate.config import ServeConfig
    from rowgate.pipeline.operations.local import LocalOperations
    from rowgate.policy.snapshot import PolicyCache
    from rowgate.policy.store import open_store
    from rowgate.upstream.channel import Upstream
    from rowgate.upstream.url import parse_upstream_url

    app = RowgateApp(ServeConfig(data_dir=str(tmp_path)))
    app.upstream = Upstream(parse_upstream_url("sc://127.0.0.1:1"), max_message_bytes=1 << 20)
    app.store = open_store(f"sqlite:///{tmp_path / 'policies.db'}")
    app.policies = PolicyCache(app.store)
    pipeline = app.build_pipeline(LocalOperations())
    assert {"ExecutePlan", "AnalyzePlan", "ReattachExecute", "ReleaseExecute", "Config"} <= {
        rpc for s in pipeline.steps for rpc in s.rpcs
    }


def test_only_plan_rpcs_carry_plans():
    """Opening and closing compressed plans is declared for PLAN_RPCS: no other request type
    has a Plan field at any depth."""
    plan = base_pb2.Plan.DESCRIPTOR.full_name

    def carries(descriptor, seen) -> bool:
        if descriptor.full_name in seen:
            return False
        seen.add(descriptor.full_name)
        return any(
            f.message_type is not None and (f.message_type.full_name == plan or carries(f.message_type, seen))
            for f in descriptor.fields
        )

    assert {name for name, m in METHODS.items() if carries(m.request_type.DESCRIPTOR, set())} == PLAN_RPCS

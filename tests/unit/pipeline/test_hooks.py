"""Hooks are declared like facts: a step names the hooks it adds, listeners run in pipeline
order, and the pipeline refuses to be built when two steps claim a hook only one may hold."""

from __future__ import annotations

import asyncio

import pytest

from rowgate.identity.caller import Caller
from rowgate.pipeline.core import HOOKS, Call, Pipeline, PipelineOrderError, step
from rowgate.upstream.methods import METHODS


def a_call(name: str = "ExecutePlan") -> Call:
    return Call(method=METHODS[name], caller=Caller(principal="user:a@x"), request=METHODS[name].request_type(), upstream=None)


def adding(hook: str, listener):
    async def add(call: Call) -> None:
        call.add_hook(hook, listener)

    return add


def run(pipeline: Pipeline, call: Call) -> Call:
    asyncio.run(pipeline.run(call))
    return call


def test_a_call_without_listeners_has_no_hooks():
    call = a_call()
    assert (call.first_response, call.upstream_error, call.response_hook) == (None, None, None)


def test_listeners_run_in_pipeline_order():
    heard: list[str] = []
    pipeline = Pipeline(
        [
            step(adding("first_response", lambda raw: heard.append("one")), ["ExecutePlan"], hooks=["first_response"]),
            step(adding("response", lambda raw: raw + b"-a"), ["ExecutePlan"], hooks=["response"]),
            step(adding("first_response", lambda raw: heard.append("two")), ["ExecutePlan"], hooks=["first_response"]),
            step(adding("response", lambda raw: raw + b"-b"), ["ExecutePlan"], hooks=["response"]),
            step(adding("upstream_error", heard.append), ["ExecutePlan"], hooks=["upstream_error"]),
        ]
    )
    call = run(pipeline, a_call())
    call.first_response(b"")
    call.upstream_error("gone")
    assert heard == ["one", "two", "gone"]
    assert call.response_hook(b"spark") == b"spark-a-b"  # each transform given the previous one's bytes


def test_the_response_as_sent_comes_first_and_observers_see_sparks_bytes():
    seen: list[bytes] = []
    pipeline = Pipeline(
        [
            step(adding("upstream_response", seen.append), ["ExecutePlan"], hooks=["upstream_response"]),
            step(adding("response", lambda raw: raw + b"-redacted"), ["ExecutePlan"], hooks=["response"]),
            step(adding("response_as_sent", lambda raw: raw.upper()), ["ExecutePlan"], hooks=["response_as_sent"]),
        ]
    )
    call = run(pipeline, a_call())
    assert call.response_hook(b"spark") == b"SPARK-redacted"
    assert seen == [b"spark"]


def test_two_steps_claiming_a_sole_hook_for_one_rpc_fail_at_construction():
    assert HOOKS["response_as_sent"].sole
    echo = adding("response_as_sent", lambda raw: raw)
    with pytest.raises(PipelineOrderError, match="both add response_as_sent for ExecutePlan; only one may"):
        Pipeline(
            [
                step(echo, ["ExecutePlan"], hooks=["response_as_sent"]),
                step(echo, ["ExecutePlan", "ReattachExecute"], hooks=["response_as_sent"]),
            ]
        )
    # for different RPCs, each has its own
    Pipeline(
        [step(echo, ["ExecutePlan"], hooks=["response_as_sent"]), step(echo, ["ReattachExecute"], hooks=["response_as_sent"])]
    )


def test_hooks_with_many_listeners_may_be_claimed_by_many_steps():
    for name, hook in HOOKS.items():
        if not hook.sole:
            Pipeline([step(adding(name, print), ["ExecutePlan"], hooks=[name]) for _ in range(3)])


def test_an_unknown_hook_fails_at_construction():
    with pytest.raises(PipelineOrderError, match="hooks `HOOKS` does not have"):
        Pipeline([step(adding("response", print), ["ExecutePlan"], hooks=["response_hook"])])


def test_a_step_adding_a_hook_it_did_not_declare_fails_the_call():
    pipeline = Pipeline([step(adding("response", lambda raw: raw), ["ExecutePlan"], hooks=["first_response"])])
    call = a_call()
    with pytest.raises(PipelineOrderError, match="adds hook 'response' it does not declare"):
        run(pipeline, call)
    assert call.response_hook is None and call.running is None


def test_the_hooks_the_code_adds_are_the_ones_the_app_pipeline_declares(tmp_path):
    """Every hook named in an `add_hook` call of the pipeline's code is declared by some step
    of pipeline/assembly.py, and every declared hook is added somewhere."""
    import re
    from pathlib import Path

    import rowgate.pipeline
    from rowgate.app import RowgateApp
    from rowgate.config import ServeConfig
    from rowgate.pipeline.operations.local import LocalOperations
    from rowgate.policy.snapshot import PolicyCache
    from rowgate.policy.store import open_store
    from rowgate.upstream.channel import Upstream
    from rowgate.upstream.url import parse_upstream_url

    root = Path(rowgate.pipeline.__file__).parent
    added = {name for path in root.rglob("*.py") for name in re.findall(r'add_hook\(\s*"(\w+)"', path.read_text())}
    app = RowgateApp(ServeConfig(data_dir=str(tmp_path)))
    app.upstream = Upstream(parse_upstream_url("sc://127.0.0.1:1"), max_message_bytes=1 << 20)
    app.store = open_store(f"sqlite:///{tmp_path / 'policies.db'}")
    app.policies = PolicyCache(app.store)
    declared = {hook for s in app.build_pipeline(LocalOperations()).steps for hook in s.hooks}
    assert added == declared == set(HOOKS)

"""Checkpoint owners: learned from Spark's checkpoint answers only; a request of another
session naming one is refused readably; the owner's own requests and unknown ids pass."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from pyspark.sql.connect.proto import base_pb2, relations_pb2

from rowgate.pipeline.core import Facts, Refusal
from rowgate.pipeline.operations.checkpoint_owners import CheckpointOwners
from tests.unit.pipeline.fake_call import FakeCall

RELATION = "2c18134d-0c4a-4072-999e-482077efffe0"


def request(*, session="s1", user="user:ann@x", op="op1", checkpoint=False, relation=None):
    req = base_pb2.ExecutePlanRequest(session_id=session, operation_id=op, user_context=base_pb2.UserContext(user_id=user))
    if checkpoint:
        req.plan.command.checkpoint_command.relation.range.end = 3
    elif relation:
        req.plan.root.project.input.cached_remote_relation.relation_id = relation
    else:
        req.plan.root.range.end = 3
    return req


def call(req, method="ExecutePlan"):
    return FakeCall(
        method=SimpleNamespace(name=method),
        request=req,
        raw_request=req.SerializeToString(),
        facts=Facts(),
        user_id=req.user_context.user_id,
        session_id=req.session_id,
    )


def answered(relation_id=RELATION) -> bytes:
    result = base_pb2.CheckpointCommandResult(relation=relations_pb2.CachedRemoteRelation(relation_id=relation_id))
    return base_pb2.ExecutePlanResponse(checkpoint_command_result=result).SerializeToString()


def run(owners, c):
    check, learn = owners.steps()
    if c.method.name in check.rpcs:
        asyncio.run(check.run(c))
    if c.method.name in learn.rpcs:
        asyncio.run(learn.run(c))
    return c


def checkpointed(owners, **who):
    c = run(owners, call(request(checkpoint=True, **who)))
    assert c.response_hook(answered()) == answered()  # relayed as it came
    return c


def test_the_owner_is_learned_from_sparks_answer_only():
    owners = CheckpointOwners()
    c = run(owners, call(request(checkpoint=True)))
    assert owners.owner(RELATION) is None
    c.response_hook(answered())
    assert owners.owner(RELATION) == ("user:ann@x", "s1")


@pytest.mark.parametrize("who", [{"user": "user:bob@x"}, {"session": "s2"}])
def test_another_session_naming_it_is_refused_readably(who):
    owners = CheckpointOwners()
    checkpointed(owners)
    with pytest.raises(Refusal) as info:
        run(owners, call(request(relation=RELATION, **who)))
    assert info.value.reason == "foreign_checkpoint" and "another Spark session" in info.value.message


def test_the_owner_and_unknown_ids_pass():
    owners = CheckpointOwners()
    checkpointed(owners)
    run(owners, call(request(relation=RELATION)))
    run(owners, call(request(relation="11111111-2222-3333-4444-555555555555", user="user:bob@x")))


def test_an_id_only_quoted_in_a_literal_is_not_a_use():
    owners = CheckpointOwners()
    checkpointed(owners)
    req = request(user="user:bob@x")
    req.plan.root.ClearField("range")
    req.plan.root.sql.query = f"SELECT '{RELATION}' AS x"
    run(owners, call(req))


def test_a_checkpoint_answered_on_a_reattach_is_learned():
    owners = CheckpointOwners()
    run(owners, call(request(checkpoint=True)))
    reattach = base_pb2.ReattachExecuteRequest(
        session_id="s1", operation_id="op1", user_context=base_pb2.UserContext(user_id="user:ann@x")
    )
    c = run(owners, call(reattach, "ReattachExecute"))
    c.response_hook(answered())
    assert owners.owner(RELATION) == ("user:ann@x", "s1")

"""Checkpoints in a process with several sessions.

pyspark 4.1 binds the DataFrame that `checkpoint()`/`localCheckpoint()` returns to the
process's active session, not to the session that checkpointed; used there, Spark answers
`[INTERNAL_ERROR] No DataFrame with id ...`. rowgate learns which session owns each
checkpoint from Spark's answer and refuses such a foreign use with PERMISSION_DENIED saying
what happened (proxy/rowgate/pipeline/operations/checkpoint_owners.py); the one-session flow is as
before, filtered.
"""

from __future__ import annotations

import pytest

from tests.conftest import remote_url
from tests.harness.callers import ADMIN, active
from tests.harness.worlds import Policy, Table, protected_world, values
from tests.integration.conftest import grpc_status

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, spark_server):
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)
    w = protected_world(
        proxy,
        module_sessions,
        Table("ckpt", "id INT, owner STRING", rows=[values([(1, "alice@example.com"), (2, "bob@example.com")])]),
        Policy("own", "ckpt", "owner = SESSION_USER()"),
        spark_url=spark_server.url,
    )
    yield proxy, w.table("ckpt")
    w.close()


def test_a_checkpoint_in_the_active_session_works_filtered(world, sessions):
    proxy, table = world
    alice = sessions(remote_url(proxy.url, user="user:alice@example.com"))
    with active(alice):
        for checkpointed in (alice.table(table).localCheckpoint(), alice.table(table).localCheckpoint(eager=False)):
            assert [r.id for r in checkpointed.collect()] == [1]
            assert [r.id for r in checkpointed.where("id > 0").collect()] == [1]


@pytest.mark.parametrize("whose", ["another caller", "the same caller"])
def test_a_checkpoint_bound_to_another_session_is_refused_readably(world, sessions, whose):
    proxy, table = world
    alice = sessions(remote_url(proxy.url, user="user:alice@example.com"))
    other_user = "user:bob@example.com" if whose == "another caller" else "user:alice@example.com"
    other = sessions(remote_url(proxy.url, user=other_user))
    with active(other):
        checkpointed = alice.table(table).localCheckpoint()
        assert checkpointed._session is other  # pyspark's doing, not rowgate's
        with pytest.raises(Exception) as raised:
            checkpointed.collect()
    text = str(raised.value)
    assert grpc_status(raised.value) == "PERMISSION_DENIED", text[:600]
    assert "checkpointed in another Spark session" in text and "INTERNAL_ERROR" not in text
    assert raised.value.getCondition() == "ROWGATE_PERMISSION_DENIED"

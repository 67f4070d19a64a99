"""The forced settings (proxy/rowgate/pipeline/statements/guard_config.py) as a change of the
session's state version (proxy/rowgate/pipeline/session/epoch.py)."""

from __future__ import annotations

import pytest

from rowgate.pipeline.session.epoch import VERSION_KEY, StateVersions
from rowgate.pipeline.session.registry import SessionRegistry
from rowgate.pipeline.statements.guard_config import ConfigGuard
from rowgate.policy.access_control import AccessControl
from tests.unit.pipeline.session.test_session_epoch import SESSION, ConfUpstream, _call, _settle, run


@pytest.mark.parametrize("admin", [True, False])
def test_forcing_an_admins_session_moves_its_version_for_every_replica(admin):
    """An admin set a forced key to another value; replica A, new to the session, forces it
    back. Spark now analyses under other settings: the session's version moves, and replica
    B, settled under the old version, asks the session's record again and sees the move.
    A non-admin's session cannot hold other values, so its forcing moves nothing."""
    upstream = ConfUpstream()
    upstream.confs[SESSION] = {"spark.sql.path.enabled": "true"}
    sessions_a, sessions_b = SessionRegistry(), SessionRegistry()
    a = StateVersions(upstream, sessions_a, clock=lambda: 1000.0)
    b = StateVersions(upstream, sessions_b, clock=lambda: 1000.0)
    state_b = sessions_b.get(SESSION)
    _settle(b, state_b)
    before = upstream.confs[SESSION][VERSION_KEY]
    guard = ConfigGuard(sessions_a, AccessControl.deciding(lambda caller: admin), versions=a)
    run(guard.prepare_session(_call(upstream=upstream)))
    assert upstream.confs[SESSION]["spark.sql.path.enabled"] == "false"
    assert sessions_a.get(SESSION).prepared
    assert not [k for k in upstream.confs[SESSION] if k.startswith("rowgate.state.changing.")]
    seen_by_b = run(b.read(_call(), state_b)).session
    assert (seen_by_b != before) is admin

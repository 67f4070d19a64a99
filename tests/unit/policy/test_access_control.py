"""The access-control object answers as the data in policy/ does (issue 24, item 4)."""

from __future__ import annotations

import pytest

from rowgate.identity.caller import Caller
from rowgate.identity.members import MemberError
from rowgate.policy import kinds, settings_allow_list
from rowgate.policy.access_control import AccessControl


def test_admins_are_the_configured_members_and_anonymous_callers_never_are():
    access = AccessControl.of(["group:admins@example.com", "user:root@example.com"])
    assert access.is_admin(Caller("user:root@example.com"))
    assert access.is_admin(Caller("user:ann@example.com", groups=frozenset({"admins@example.com"})))
    assert not access.is_admin(Caller("user:ann@example.com"))
    assert not access.is_admin(Caller("anonymous", authenticated=False))


def test_public_members_cannot_be_admins():
    with pytest.raises(MemberError):
        AccessControl.of(["allUsers"])


def test_a_deciding_function_replaces_the_list():
    access = AccessControl.deciding(lambda caller: caller.principal == "user:bob@example.com")
    assert access.is_admin(Caller("user:bob@example.com"))
    assert not access.is_admin(Caller("user:ann@example.com"))


@pytest.mark.parametrize("kind", sorted(kinds.SPECS) + ["relation:never_heard_of"])
def test_kind_refusals_are_the_kinds_table(kind):
    assert AccessControl.kind_refusal(kind, admin=False) == kinds.refusal_of(kind)
    assert AccessControl.kind_refusal(kind, admin=True) == kinds.refused_for_admins(kind)


@pytest.mark.parametrize(
    "key", ["spark.sql.ansi.enabled", " SPARK.SQL.SESSION.TIMEZONE ", "spark.sql.catalog.x", "rowgate.views"]
)
def test_setting_refusals_are_the_allow_list(key):
    refusal = AccessControl.setting_refusal(key)
    if settings_allow_list.allowed(key) is None:
        assert refusal == settings_allow_list.refusal_reason(key)
    else:
        assert refusal is None
    assert AccessControl().unlisted_settings([key, key]) == ([] if refusal is None else [key])

from __future__ import annotations

import pytest

from rowgate.identity.caller import Caller
from rowgate.identity.errors import IdentityError
from rowgate.identity.header_source import HeaderSource


@pytest.mark.parametrize(
    "headers, principal, groups",
    [
        ({"x-rowgate-user": "user:alice@example.com"}, "user:alice@example.com", set()),
        ({"x-rowgate-user": "user:Alice@EXAMPLE.com"}, "user:Alice@example.com", set()),
        ({"x-rowgate-user": "serviceAccount:etl@proj.example.com"}, "serviceAccount:etl@proj.example.com", set()),
        (
            {"x-rowgate-user": "user:alice@example.com", "x-rowgate-groups": "eng@example.com,group:ops@EXAMPLE.com"},
            "user:alice@example.com",
            {"eng@example.com", "ops@example.com"},
        ),
        (
            {"x-rowgate-user": "user:alice@example.com", "x-rowgate-groups": " eng@example.com ,  ops@example.com ,"},
            "user:alice@example.com",
            {"eng@example.com", "ops@example.com"},
        ),
        ({"x-rowgate-user": "user:alice@example.com", "x-rowgate-groups": ""}, "user:alice@example.com", set()),
    ],
)
def test_resolves(headers, principal, groups):
    assert HeaderSource().resolve(headers) == Caller(principal, frozenset(groups))


def test_absent_headers():
    assert HeaderSource().resolve({"authorization": "Bearer x"}) is None


def test_groups_without_user():
    with pytest.raises(IdentityError, match="^header: x-rowgate-groups sent without x-rowgate-user$"):
        HeaderSource().resolve({"x-rowgate-groups": "eng@example.com"})


@pytest.mark.parametrize(
    "user, message",
    [
        ("", "empty"),
        ("alice@example.com", "has no kind"),
        ("User:alice@example.com", "unknown member kind"),
        ("group:eng@example.com", "must be a user: or serviceAccount:"),
        ("domain:example.com", "must be a user: or serviceAccount:"),
        ("allUsers", "must be a user: or serviceAccount:"),
        ("allAuthenticatedUsers", "must be a user: or serviceAccount:"),
        ("user:alice", "exactly one '@'"),
        ("user:alice@example.com,user:root@example.com", "comma"),
        ("user:alice@example.com ", "whitespace"),
    ],
)
def test_bad_user(user, message):
    with pytest.raises(IdentityError) as info:
        HeaderSource().resolve({"x-rowgate-user": user})
    assert str(info.value).startswith("header: bad x-rowgate-user header: ")
    assert message in str(info.value)


@pytest.mark.parametrize(
    "groups, message",
    [
        ("eng", "exactly one '@'"),
        ("user:eng@example.com", "must be a group: member"),
        ("eng@example.com;ops@example.com", "exactly one '@'"),
        ("eng;x@example.com", "invalid local part"),
        ("eng@example.com,domain:example.com", "must be a group: member"),
        ("eng @example.com", "whitespace"),
    ],
)
def test_bad_groups(groups, message):
    with pytest.raises(IdentityError) as info:
        HeaderSource().resolve({"x-rowgate-user": "user:alice@example.com", "x-rowgate-groups": groups})
    assert str(info.value).startswith("header: bad x-rowgate-groups header: ")
    assert message in str(info.value)


@pytest.mark.parametrize("name", ["x-rowgate-user", "x-rowgate-groups"])
def test_too_long(name):
    headers = {"x-rowgate-user": "user:alice@example.com", name: "a" * 9000}
    with pytest.raises(IdentityError, match=f"^header: the {name} header is too long"):
        HeaderSource().resolve(headers)


@pytest.mark.parametrize("name", ["x-rowgate-user", "x-rowgate-groups"])
@pytest.mark.parametrize("bad", ["\n", "\x00", "\x7f", "\u00e9"])
def test_control_characters(name, bad):
    headers = {"x-rowgate-user": "user:alice@example.com", name: f"eng{bad}@example.com"}
    with pytest.raises(IdentityError, match="control or non-ASCII"):
        HeaderSource().resolve(headers)

from __future__ import annotations

import pytest

from rowgate.identity.caller import ANONYMOUS, Caller
from rowgate.identity.members import (
    Member,
    MemberError,
    grantee_matches,
    is_admin,
    parse_group,
    parse_member,
    parse_principal,
    validate_admin_member,
)

# --- grammar ---------------------------------------------------------------------------

VALID = [
    ("user:alice@example.com", "user", "alice@example.com"),
    ("serviceAccount:etl@proj.iam.gserviceaccount.com", "serviceAccount", "etl@proj.iam.gserviceaccount.com"),
    ("group:eng@example.com", "group", "eng@example.com"),
    ("domain:example.com", "domain", "example.com"),
    ("allUsers", "allUsers", ""),
    ("allAuthenticatedUsers", "allAuthenticatedUsers", ""),
    ("user:A@EXAMPLE.COM", "user", "A@EXAMPLE.COM"),
    ("user:first.last@sub.example.co.uk", "user", "first.last@sub.example.co.uk"),
    ("user:a+tag@example.com", "user", "a+tag@example.com"),
    ("user:o'brien@example.com", "user", "o'brien@example.com"),
    ("user:x_y-z@a-b.example.com", "user", "x_y-z@a-b.example.com"),
    ("user:1@1.example.com", "user", "1@1.example.com"),
    ("domain:xn--bcher-kva.example", "domain", "xn--bcher-kva.example"),
    ("domain:EXAMPLE.com", "domain", "EXAMPLE.com"),
    ("user:" + "a" * 64 + "@example.com", "user", "a" * 64 + "@example.com"),
    ("domain:" + "a" * 63 + ".com", "domain", "a" * 63 + ".com"),
]


@pytest.mark.parametrize("text, kind, value", VALID)
def test_parse_valid(text, kind, value):
    member = parse_member(text)
    assert (member.kind, member.value) == (kind, value)
    assert str(member) == text


LONG_DOMAIN = ".".join(["a" * 63] * 4) + ".com"  # 259 characters

INVALID = [
    ("", "empty"),
    ("User:alice@example.com", "unknown member kind 'User'"),
    ("USER:alice@example.com", "unknown member kind 'USER'"),
    ("users:alice@example.com", "unknown member kind 'users'"),
    ("ServiceAccount:etl@example.com", "unknown member kind 'ServiceAccount'"),
    ("Group:eng@example.com", "unknown member kind 'Group'"),
    ("Domain:example.com", "unknown member kind 'Domain'"),
    ("deleted:user:alice@example.com", "unknown member kind 'deleted'"),
    ("principalSet://iam.googleapis.com/x", "unknown member kind 'principalSet'"),
    ("allusers", "has no kind"),
    ("AllUsers", "has no kind"),
    ("allauthenticatedusers", "has no kind"),
    ("allUsers:", "takes no value"),
    ("allUsers:x", "takes no value"),
    ("allAuthenticatedUsers:alice@example.com", "takes no value"),
    ("alice@example.com", "write e.g. 'user:alice@example.com'"),
    (":alice@example.com", "unknown member kind ''"),
    ("user:", "email is empty"),
    ("group:", "email is empty"),
    ("serviceAccount:", "email is empty"),
    ("domain:", "domain is empty"),
    ("user:alice", "exactly one '@'"),
    ("user:a@b@example.com", "exactly one '@'"),
    ("user:alice@@example.com", "exactly one '@'"),
    ("user:@example.com", "empty local part"),
    ("user:alice@", "domain is empty"),
    ("user:alice@example", "at least two labels"),
    ("user:alice@localhost", "at least two labels"),
    ("user:alice@.example.com", "invalid label ''"),
    ("user:alice@example..com", "invalid label ''"),
    ("user:alice@example.com.", "invalid label ''"),
    ("user:alice@-example.com", "invalid label '-example'"),
    ("user:alice@example-.com", "invalid label 'example-'"),
    ("user:alice@exa_mple.com", "invalid label 'exa_mple'"),
    ("user:alice@*.example.com", "invalid label '*'"),
    ("user:alice@[127.0.0.1]", "invalid label"),
    ("user:alice@1.2.3.4", "looks like an IP address"),
    ("user:alice@example.com:8080", "invalid label 'com:8080'"),
    ("user:.alice@example.com", "invalid local part"),
    ("user:alice.@example.com", "invalid local part"),
    ("user:al..ice@example.com", "invalid local part"),
    ('user:"alice"@example.com', "invalid local part"),
    ("user:alice(x)@example.com", "invalid local part"),
    ("user:a\\b@example.com", "invalid local part"),
    ("user:" + "a" * 65 + "@example.com", "local part longer than 64"),
    ("user:a@" + "b" * 64 + ".com", "invalid label"),
    ("domain:" + LONG_DOMAIN, "longer than 253"),
    ("domain:alice@example.com", "contains '@'"),
    ("domain:*.example.com", "invalid label '*'"),
    ("domain:example", "at least two labels"),
    ("user: alice@example.com", "whitespace"),
    (" user:alice@example.com", "whitespace"),
    ("user:alice@example.com ", "whitespace"),
    ("user:alice\u00a0@example.com", "whitespace"),  # no-break space
    ("user:alice@example.com\n", "control character"),
    ("user:alice@example.com\r", "control character"),
    ("user:ali\x00ce@example.com", "control character"),
    ("user:alice\t@example.com", "control character"),
    ("user:alice@example.com\x7f", "control character"),
    ("user:alice\x85@example.com", "control character"),  # C1 next-line
    ("user:alice@example.com,user:bob@example.com", "comma"),
    ("user:\u00e1lice@example.com", "non-ASCII"),
    ("user:alice@ex\u0430mple.com", "non-ASCII"),  # Cyrillic a
    ("user:alice@b\u00fccher.example", "punycode"),
    ("user:alice@\u212aorp.com", "non-ASCII"),  # Kelvin sign lower()s to k
    ("user:alice\u200b@example.com", "non-ASCII"),  # zero-width space
    ("domain:ex\u0430mple.com", "non-ASCII"),
    ("user:\uff41lice@example.com", "non-ASCII"),  # fullwidth a
]


@pytest.mark.parametrize("text, message", INVALID)
def test_parse_invalid(text, message):
    with pytest.raises(MemberError) as info:
        parse_member(text)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_too_long_member_is_not_echoed():
    text = "user:" + "a" * 400 + "@example.com"
    with pytest.raises(MemberError) as info:
        parse_member(text)
    assert "longer than 320" in str(info.value)
    assert "aaaa" not in str(info.value)


def test_control_characters_are_not_echoed():
    with pytest.raises(MemberError) as info:
        parse_member("user:alice@example.com\x1b[2J")
    assert "\x1b" not in str(info.value)


@pytest.mark.parametrize("value", [None, 3, b"user:alice@example.com"])
def test_parse_rejects_non_strings(value):
    with pytest.raises(MemberError, match="must be a string"):
        parse_member(value)


@pytest.mark.parametrize(
    "kind, value",
    [("bogus", ""), ("user", "no-at"), ("domain", ""), ("allUsers", "x"), ("group", "a@b")],
)
def test_member_constructor_validates(kind, value):
    with pytest.raises(MemberError):
        Member(kind, value)


@pytest.mark.parametrize(
    "text, canonical",
    [
        ("user:Alice@Example.COM", "user:Alice@example.com"),
        ("serviceAccount:ETL@Proj.Example.com", "serviceAccount:ETL@proj.example.com"),
        ("group:Eng@EXAMPLE.com", "group:Eng@example.com"),
        ("domain:EXAMPLE.com", "domain:example.com"),
        ("allUsers", "allUsers"),
        ("allAuthenticatedUsers", "allAuthenticatedUsers"),
        ("user:alice@example.com", "user:alice@example.com"),
    ],
)
def test_canonical_lowers_only_the_domain(text, canonical):
    assert parse_member(text).canonical() == canonical


@pytest.mark.parametrize(
    "text, kwargs, expected",
    [
        ("alice@Example.com", {}, "user:alice@example.com"),
        ("user:alice@example.com", {}, "user:alice@example.com"),
        ("serviceAccount:etl@example.com", {}, "serviceAccount:etl@example.com"),
        ("etl@example.com", {"default_kind": "serviceAccount"}, "serviceAccount:etl@example.com"),
        ("user:alice@example.com", {"default_kind": None}, "user:alice@example.com"),
    ],
)
def test_parse_principal(text, kwargs, expected):
    assert parse_principal(text, **kwargs).canonical() == expected


@pytest.mark.parametrize(
    "text, kwargs, message",
    [
        ("group:eng@example.com", {}, "must be a user: or serviceAccount:"),
        ("domain:example.com", {}, "must be a user: or serviceAccount:"),
        ("allUsers", {"default_kind": None}, "must be a user: or serviceAccount:"),
        ("allAuthenticatedUsers", {}, "exactly one '@'"),
        ("alice@example.com", {"default_kind": None}, "has no kind"),
        ("alice", {}, "exactly one '@'"),
        ("", {}, "empty"),
        ("al ice@example.com", {}, "whitespace"),
    ],
)
def test_parse_principal_invalid(text, kwargs, message):
    with pytest.raises(MemberError) as info:
        parse_principal(text, **kwargs)
    assert message in str(info.value)


def test_parse_principal_rejects_group_default_kind():
    with pytest.raises(ValueError):
        parse_principal("a@example.com", default_kind="group")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("eng@Example.COM", "eng@example.com"),
        ("group:Eng@EXAMPLE.com", "Eng@example.com"),
    ],
)
def test_parse_group(text, expected):
    assert parse_group(text) == expected


@pytest.mark.parametrize(
    "text", ["user:eng@example.com", "domain:example.com", "eng", "", "eng@example", "Group:eng@example.com", "allUsers"]
)
def test_parse_group_invalid(text):
    with pytest.raises(MemberError):
        parse_group(text)


# --- matching ----------------------------------------------------------------------------

ALICE = Caller("user:alice@example.com", groups=frozenset({"eng@example.com", "Ops@Example.COM"}))
MIXED = Caller("user:Alice@EXAMPLE.com")
SA = Caller("serviceAccount:etl@proj.example.com")
UNAUTH_NAMED = Caller("user:alice@example.com", groups=frozenset({"eng@example.com"}), authenticated=False)
SUB = Caller("user:bob@sub.example.com")
LOOKALIKE = Caller("user:eve@example.com.evil.org")
GLUED = Caller("user:eve@evilexample.com")
PREFIXED_GROUPS = Caller("user:x@y.com", groups=frozenset({"group:eng@example.com"}))
JUNK_GROUPS = Caller("user:x@y.com", groups=frozenset({"not an email", "/eng", "eng@example.com"}))
LOOKALIKE_GROUP = Caller("user:x@y.com", groups=frozenset({"eng@example.com.evil.org", "eng@sub.example.com"}))
GROUP_PRINCIPAL = Caller("group:eng@example.com")
KELVIN = Caller("user:alice@\u212aorp.com")
TRAILING_DOT = Caller("user:alice@example.com.")
GROUP_ONLY_MEMBER = Caller("user:x@y.com", groups=frozenset({"eng@example.com"}))

MATCHES = [
    # public members
    ("allUsers", ALICE, True),
    ("allUsers", ANONYMOUS, True),
    ("allUsers", UNAUTH_NAMED, True),
    ("allAuthenticatedUsers", ALICE, True),
    ("allAuthenticatedUsers", SA, True),
    ("allAuthenticatedUsers", ANONYMOUS, False),
    ("allAuthenticatedUsers", UNAUTH_NAMED, False),
    # users: local part case-sensitive, domain not
    ("user:alice@example.com", ALICE, True),
    ("user:alice@EXAMPLE.COM", ALICE, True),
    ("user:Alice@example.com", ALICE, False),
    ("user:ALICE@example.com", ALICE, False),
    ("user:alice@example.com", MIXED, False),
    ("user:Alice@example.com", MIXED, True),
    ("user:alice@example.com", UNAUTH_NAMED, False),
    ("user:alice@example.org", ALICE, False),
    ("user:alice@example.com.evil.org", ALICE, False),
    ("user:alice@ex\u0430mple.com", ALICE, False),
    ("user:anonymous", ANONYMOUS, False),
    ("user:eng@example.com", GROUP_ONLY_MEMBER, False),
    # kinds must agree
    ("serviceAccount:alice@example.com", ALICE, False),
    ("user:etl@proj.example.com", SA, False),
    ("serviceAccount:etl@proj.example.com", SA, True),
    ("serviceAccount:etl@PROJ.Example.com", SA, True),
    ("serviceAccount:ETL@proj.example.com", SA, False),
    # domains: exact host, case-insensitive, no subdomains or lookalikes
    ("domain:example.com", ALICE, True),
    ("domain:EXAMPLE.COM", ALICE, True),
    ("domain:example.com", MIXED, True),
    ("domain:proj.example.com", SA, True),
    ("domain:example.com", SA, False),
    ("domain:example.com", SUB, False),
    ("domain:sub.example.com", ALICE, False),
    ("domain:example.com", LOOKALIKE, False),
    ("domain:evil.org", LOOKALIKE, False),
    ("domain:example.com", GLUED, False),
    ("domain:example.co", ALICE, False),
    ("domain:com", ALICE, False),
    ("domain:example.com", UNAUTH_NAMED, False),
    ("domain:example.com", ANONYMOUS, False),
    ("domain:example.com", GROUP_PRINCIPAL, False),
    ("domain:korp.com", KELVIN, False),
    ("domain:example.com", TRAILING_DOT, False),
    # groups: membership, compared like emails
    ("group:eng@example.com", ALICE, True),
    ("group:eng@EXAMPLE.com", ALICE, True),
    ("group:Eng@example.com", ALICE, False),
    ("group:Ops@example.com", ALICE, True),
    ("group:ops@example.com", ALICE, False),
    ("group:eng@example.com", PREFIXED_GROUPS, True),
    ("group:eng@example.com", JUNK_GROUPS, True),
    ("group:eng@example.com", LOOKALIKE_GROUP, False),
    ("group:eng@example.com", GROUP_PRINCIPAL, False),
    ("group:eng@example.com", Caller("user:eng@example.com"), False),
    ("group:eng@example.com", UNAUTH_NAMED, False),
    ("group:eng@example.com", ANONYMOUS, False),
    ("group:eng@example.com", SA, False),
    # grantees that do not parse match nobody
    ("User:alice@example.com", ALICE, False),
    ("user:alice@example.com ", ALICE, False),
    ("", ALICE, False),
    ("allusers", ANONYMOUS, False),
    ("alice@example.com", ALICE, False),
    ("domain:", ALICE, False),
]


@pytest.mark.parametrize("grantee, caller, expected", MATCHES)
def test_grantee_matches(grantee, caller, expected):
    assert grantee_matches(grantee, caller) is expected


def _parsed(grantee: str) -> Member | None:
    try:
        return parse_member(grantee)
    except MemberError:
        return None


@pytest.mark.parametrize("grantee, caller, expected", [m for m in MATCHES if _parsed(m[0]) is not None])
def test_member_objects_match_like_strings(grantee, caller, expected):
    assert grantee_matches(parse_member(grantee), caller) is expected


# --- admins ------------------------------------------------------------------------------

ROOT = Caller("user:root@example.com", groups=frozenset({"admins@example.com"}))


@pytest.mark.parametrize(
    "admins, caller, expected",
    [
        (["user:root@example.com"], ROOT, True),
        (["user:root@EXAMPLE.com"], ROOT, True),
        (["user:Root@example.com"], ROOT, False),
        (["user:root@example.com"], ALICE, False),
        (["serviceAccount:root@example.com"], ROOT, False),
        (["group:admins@example.com"], ROOT, True),
        (["group:admins@example.com"], ALICE, False),
        (["domain:example.com"], ALICE, True),
        (["domain:example.com"], SUB, False),
        (["allUsers"], ALICE, False),
        (["allAuthenticatedUsers"], ALICE, False),
        (["allUsers", "allAuthenticatedUsers"], ANONYMOUS, False),
        ([], ROOT, False),
        (["user:alice@example.com"], UNAUTH_NAMED, False),
        (["group:eng@example.com"], UNAUTH_NAMED, False),
        (["nonsense", "User:root@example.com", "user:root@example.com"], ROOT, True),
        ([parse_member("user:root@example.com")], ROOT, True),
        ([Member("allUsers")], ROOT, False),
        (iter(["user:root@example.com"]), ROOT, True),
    ],
)
def test_is_admin(admins, caller, expected):
    assert is_admin(caller, admins) is expected


@pytest.mark.parametrize(
    "text", ["user:root@example.com", "serviceAccount:ops@example.com", "group:admins@example.com", "domain:example.com"]
)
def test_validate_admin_member_accepts(text):
    assert str(validate_admin_member(text)) == text


@pytest.mark.parametrize(
    "text, message",
    [
        ("allUsers", "cannot be an admin"),
        ("allAuthenticatedUsers", "cannot be an admin"),
        ("User:root@example.com", "unknown member kind"),
        ("root@example.com", "has no kind"),
        ("", "empty"),
    ],
)
def test_validate_admin_member_rejects(text, message):
    with pytest.raises(MemberError) as info:
        validate_admin_member(text)
    assert message in str(info.value)

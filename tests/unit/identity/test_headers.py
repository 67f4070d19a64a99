from __future__ import annotations

import pytest

from rowgate.identity.errors import IdentityError
from rowgate.identity.headers import (
    CONSUMED_HEADERS,
    MAX_HEADER_LENGTH,
    bearer_token,
    header_value,
    looks_like_jwt,
    normalize_metadata,
)


def test_consumed_headers():
    assert CONSUMED_HEADERS == frozenset({"authorization", "x-rowgate-user", "x-rowgate-groups"})


def test_normalize_lowercases_mapping_keys():
    assert normalize_metadata({"Authorization": "Bearer x", "X-Other": "1"}) == {
        "authorization": "Bearer x",
        "x-other": "1",
    }


def test_normalize_accepts_grpc_pairs_and_drops_binary():
    pairs = [("x-rowgate-user", "user:a@example.com"), ("trace-bin", b"\x00\x01"), ("odd", b"bytes")]
    assert normalize_metadata(pairs) == {"x-rowgate-user": "user:a@example.com"}


@pytest.mark.parametrize("name", sorted(CONSUMED_HEADERS))
def test_normalize_refuses_repeated_identity_headers(name):
    with pytest.raises(IdentityError, match="more than once"):
        normalize_metadata([(name, "a"), (name.upper(), "b")])


def test_normalize_refuses_identity_header_repeated_in_mapping_by_case():
    with pytest.raises(IdentityError, match="more than once"):
        normalize_metadata({"Authorization": "Bearer a", "authorization": "Bearer b"})


def test_normalize_keeps_first_of_other_repeated_headers():
    assert normalize_metadata([("x-trace", "1"), ("X-Trace", "2")]) == {"x-trace": "1"}


def test_header_value_absent():
    assert header_value({}, "x-rowgate-user", source="s") is None


def test_header_value_at_the_limit_is_accepted():
    value = "a" * MAX_HEADER_LENGTH
    assert header_value({"h": value}, "h", source="s") == value


def test_header_value_over_the_limit():
    with pytest.raises(IdentityError) as info:
        header_value({"h": "a" * (MAX_HEADER_LENGTH + 1)}, "h", source="s")
    assert str(info.value) == "s: the h header is too long (over 8192 characters)"


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x00b", "a\tb", "a\x7fb", "a\x1bb", "caf\u00e9", "a\u2028b"])
def test_header_value_control_or_non_ascii(value):
    with pytest.raises(IdentityError, match="control or non-ASCII"):
        header_value({"h": value}, "h", source="s")


@pytest.mark.parametrize(
    "value, token",
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BEARER abc", "abc"),
        ("Bearer   abc", "abc"),
        (" Bearer abc ", "abc"),
        ("Bearer a.b.c", "a.b.c"),
        ("Basic dXNlcjpwYXNz", None),
        ("Token abc", None),
        ("", None),
        ("abc", None),
    ],
)
def test_bearer_token(value, token):
    assert bearer_token({"authorization": value}, source="s") == token


def test_bearer_token_absent():
    assert bearer_token({"x-other": "Bearer abc"}, source="s") is None


@pytest.mark.parametrize("value", ["Bearer", "Bearer ", "Bearer    ", "Bearer a b"])
def test_malformed_bearer(value):
    with pytest.raises(IdentityError, match="^s: malformed bearer credential"):
        bearer_token({"authorization": value}, source="s")


@pytest.mark.parametrize(
    "token, shaped",
    [
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", True),
        ("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.", True),  # alg none: empty signature
        ("a.b.c", True),
        ("a-_.b_-.c-_", True),
        ("YQ==.Yg==.Yw==", True),
        ("opaque-token-123", False),
        ("a.b", False),
        ("a.b.c.d", False),
        ("a.b.c.d.e", False),  # JWE is not claimed
        (".b.c", False),
        ("a..c", False),
        ("a.b+c.d", False),
        ("a/b.c.d", False),
        ("a.b.c~", False),
    ],
)
def test_looks_like_jwt(token, shaped):
    assert looks_like_jwt(token) is shaped

from __future__ import annotations

import json

import jwt
import pytest

from rowgate.identity.caller import ANONYMOUS, Caller
from rowgate.identity.errors import IdentityConfigError, IdentityError
from rowgate.identity.header_source import HeaderSource
from rowgate.identity.jwt_source import JwtSource
from rowgate.identity.resolver import CONSUMED_HEADERS, IdentityResolver, build_resolver
from rowgate.identity.token_source import StaticTokenSource
from tests.unit.identity.tokens import SECRET, bearer, public_jwk, public_pem

JWT_ALICE = jwt.encode({"email": "alice@example.com"}, SECRET, algorithm="HS256")
JWT_FORGED = jwt.encode({"email": "root@example.com"}, "x" * 32, algorithm="HS256")
OPAQUE_BOB = "tok-bob-0123456789"
HEADER_CAROL = {"x-rowgate-user": "user:carol@example.com"}

ALICE = Caller("user:alice@example.com")
BOB = Caller("user:bob@example.com")
CAROL = Caller("user:carol@example.com")


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text(f"- token: {OPAQUE_BOB}\n  principal: bob@example.com\n")
    return path


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "jwt.secret"
    path.write_text(SECRET + "\n")
    return path


@pytest.fixture
def sources(token_file):
    return {"jwt": JwtSource(secret=SECRET), "token": StaticTokenSource(token_file), "header": HeaderSource()}


def resolver(sources, order: str, require_auth: bool = False) -> IdentityResolver:
    return IdentityResolver([sources[n] for n in order.split(",")], require_auth=require_auth)


def test_consumed_headers():
    assert CONSUMED_HEADERS == frozenset({"authorization", "x-rowgate-user", "x-rowgate-groups"})


@pytest.mark.parametrize("order", ["jwt,token", "token,jwt"])
def test_bearer_tokens_go_to_the_source_that_claims_them(sources, order):
    r = resolver(sources, order)
    assert r.resolve(bearer(JWT_ALICE)) == ALICE
    assert r.resolve(bearer(OPAQUE_BOB)) == BOB


@pytest.mark.parametrize("order", ["jwt,token", "token,jwt"])
def test_bad_jwt_is_not_tried_as_a_static_token(sources, order):
    with pytest.raises(IdentityError, match="^jwt: bad signature$"):
        resolver(sources, order).resolve(bearer(JWT_FORGED))


@pytest.mark.parametrize("order", ["jwt,token", "token,jwt"])
def test_unknown_opaque_token_is_not_tried_as_a_jwt(sources, order):
    with pytest.raises(IdentityError, match="^token: unknown token$"):
        resolver(sources, order).resolve(bearer("tok-unknown"))


def test_first_source_wins(sources):
    metadata = {**bearer(JWT_ALICE), **HEADER_CAROL}
    assert resolver(sources, "jwt,header").resolve(metadata) == ALICE
    assert resolver(sources, "header,jwt").resolve(metadata) == CAROL


def test_later_source_is_asked_when_earlier_finds_nothing(sources):
    assert resolver(sources, "jwt,token,header").resolve(HEADER_CAROL) == CAROL


@pytest.mark.parametrize(
    "order, metadata, message",
    [
        ("jwt,header", {**bearer(JWT_FORGED), **HEADER_CAROL}, "jwt: bad signature"),
        ("token,header", {**bearer("tok-unknown"), **HEADER_CAROL}, "token: unknown token"),
        ("header,jwt", {**bearer(JWT_ALICE), "x-rowgate-user": "alice@example.com"}, "header: bad x-rowgate-user"),
        ("header,jwt", {**bearer(JWT_ALICE), "x-rowgate-groups": "g@example.com"}, "header: x-rowgate-groups sent"),
        ("jwt,header", {"authorization": "Bearer ", **HEADER_CAROL}, "jwt: malformed bearer credential"),
    ],
)
def test_bad_credential_never_falls_through(sources, order, metadata, message):
    with pytest.raises(IdentityError) as info:
        resolver(sources, order).resolve(metadata)
    assert str(info.value).startswith(message)


def test_no_credential_is_anonymous(sources):
    assert resolver(sources, "jwt,token,header").resolve({"x-trace": "1"}) is ANONYMOUS


def test_no_sources_is_anonymous():
    assert IdentityResolver([]).resolve({}) is ANONYMOUS


def test_require_auth(sources):
    r = resolver(sources, "jwt,header", require_auth=True)
    with pytest.raises(IdentityError) as info:
        r.resolve({})
    assert str(info.value) == "no credential: this proxy requires authentication (enabled sources: jwt, header)"
    assert r.resolve(bearer(JWT_ALICE)) == ALICE


@pytest.mark.parametrize(
    "order, metadata, unclaimed",
    [
        ("jwt,token", {"authorization": "Basic dXNlcjpwdw=="}, "authorization"),
        ("jwt", bearer(OPAQUE_BOB), "authorization"),
        ("token", bearer(JWT_ALICE), "authorization"),
        ("jwt", HEADER_CAROL, "x-rowgate-user"),
        ("jwt,token", {"x-rowgate-groups": "g@example.com"}, "x-rowgate-groups"),
        ("header", bearer(JWT_ALICE), "authorization"),
    ],
)
def test_unclaimed_credentials_are_refused(sources, order, metadata, unclaimed):
    with pytest.raises(IdentityError) as info:
        resolver(sources, order).resolve(metadata)
    message = str(info.value)
    assert message.startswith(f"{unclaimed} sent, but no enabled identity source ({order.replace(',', ', ')})")
    assert "dXNlcjpwdw" not in message and OPAQUE_BOB not in message


def test_unclaimed_credentials_are_refused_without_any_source():
    with pytest.raises(IdentityError, match=r"no enabled identity source \(none\)"):
        IdentityResolver([]).resolve(HEADER_CAROL)


def test_accepts_grpc_metadata_pairs(sources):
    pairs = (("Authorization", f"Bearer {JWT_ALICE}"), ("grpc-trace-bin", b"\x00"), ("user-agent", "x"))
    assert resolver(sources, "jwt").resolve(pairs) == ALICE


def test_repeated_identity_header_is_refused(sources):
    pairs = [("x-rowgate-user", "user:carol@example.com"), ("x-rowgate-user", "user:root@example.com")]
    with pytest.raises(IdentityError, match="more than once"):
        resolver(sources, "header").resolve(pairs)


def test_resolver_configuration_errors(sources):
    with pytest.raises(IdentityConfigError, match="repeat"):
        IdentityResolver([sources["header"], HeaderSource()])
    with pytest.raises(IdentityConfigError, match="no identity source is enabled"):
        IdentityResolver([], require_auth=True)


# --- build_resolver ----------------------------------------------------------------------


def names(r: IdentityResolver) -> list[str]:
    return [s.name for s in r.sources]


@pytest.mark.parametrize(
    "identity, expected",
    [
        ("header", ["header"]),
        ("jwt,token,header", ["jwt", "token", "header"]),
        ("header, JWT", ["header", "jwt"]),
        (["token", "jwt"], ["token", "jwt"]),
        (["jwt,header"], ["jwt", "header"]),
        ([], []),
        ("", []),
        ("none", []),
    ],
)
def test_build_resolver_keeps_the_operator_order(token_file, secret_file, identity, expected):
    options = {}
    if "jwt" in expected:
        options["jwt_secret_file"] = secret_file
    if "token" in expected:
        options["token_file"] = token_file
    assert names(build_resolver(identity, **options)) == expected


def test_build_resolver_end_to_end(tmp_path, token_file, rsa_key):
    key_file = tmp_path / "idp.pem"
    key_file.write_bytes(public_pem(rsa_key))
    r = build_resolver(
        "jwt,token,header",
        jwt_public_key_file=key_file,
        jwt_issuer="https://idp.example.com",
        jwt_audience="rowgate",
        jwt_principal_claim="upn",
        jwt_groups_claim="roles",
        token_file=token_file,
        require_auth=True,
    )
    claims = {"upn": "alice@example.com", "roles": "eng@example.com", "iss": "https://idp.example.com", "aud": "rowgate"}
    token = jwt.encode(claims, rsa_key, algorithm="RS256")
    assert r.resolve(bearer(token)) == Caller("user:alice@example.com", frozenset({"eng@example.com"}))
    assert r.resolve(bearer(OPAQUE_BOB)) == BOB
    assert r.resolve(HEADER_CAROL) == CAROL
    with pytest.raises(IdentityError, match="no credential"):
        r.resolve({})


def test_build_resolver_with_secret_file(secret_file):
    r = build_resolver("jwt", jwt_secret_file=secret_file, jwt_leeway=5)
    assert r.resolve(bearer(JWT_ALICE)) == ALICE


def test_build_resolver_with_jwks(tmp_path, rsa_key):
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [public_jwk(rsa_key, kid="k1")]}))
    r = build_resolver(["jwt"], jwt_jwks_file=jwks, jwt_principal_kind="serviceAccount")
    token = jwt.encode({"sub": "etl@proj.example.com"}, rsa_key, algorithm="RS256", headers={"kid": "k1"})
    assert r.resolve(bearer(token)) == Caller("serviceAccount:etl@proj.example.com")


@pytest.mark.parametrize(
    "identity, options, message",
    [
        ("jwt,oidc", {"jwt_secret_file": "s"}, "unknown identity source(s) oidc; choose from jwt, token, header"),
        ("headers", {}, "unknown identity source(s) headers"),
        ("header,header", {}, "repeat"),
        ("jwt", {}, "exactly one of"),
        ("jwt", {"jwt_public_key_file": "/nonexistent/idp.pem", "jwt_jwks_file": "x.json"}, "jwt public key"),
        ("header", {"jwt_secret_file": "s"}, "jwt options were given"),
        ("header", {"jwt_audience": "rowgate"}, "jwt options were given"),
        ("token", {}, "needs a token file"),
        ("header", {"token_file": "tokens.yaml"}, "token file was given"),
        ("jwt", {"jwt_public_key_file": "/nonexistent/idp.pem"}, "jwt public key file /nonexistent/idp.pem"),
        ("jwt", {"jwt_secret_file": "/nonexistent/s"}, "jwt secret file /nonexistent/s: No such file"),
        ("token", {"token_file": "/nonexistent/tokens.yaml"}, "token file /nonexistent/tokens.yaml"),
        ("", {"require_auth": True}, "no identity source is enabled"),
    ],
)
def test_build_resolver_configuration_errors(identity, options, message):
    with pytest.raises(IdentityConfigError) as info:
        build_resolver(identity, **options)
    assert message in str(info.value)

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
import os
import time

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

from rowgate.identity.caller import Caller
from rowgate.identity.errors import IdentityConfigError, IdentityError
from rowgate.identity.jwt_source import JwtSource
from tests.unit.identity.tokens import SECRET, b64url, bearer, public_jwk, public_pem

CLAIMS = {"email": "alice@example.com"}


def hs_source(**options) -> JwtSource:
    return JwtSource(secret=SECRET, **options)


def hs_token(claims=CLAIMS, *, secret=SECRET, alg="HS256", headers=None) -> str:
    return jwt.encode(claims, secret, algorithm=alg, headers=headers)


def rejection(source: JwtSource, token: str) -> str:
    """The rejection message, checked never to echo the token or its parts."""
    with pytest.raises(IdentityError) as info:
        source.resolve(bearer(token))
    message = str(info.value)
    assert message.startswith("jwt: ")
    for part in token.split("."):
        if len(part) > 8:
            assert part not in message
    return message.removeprefix("jwt: ")


def write_jwks(path, *jwks) -> str:
    path.write_text(json.dumps({"keys": list(jwks)}))
    return str(path)


# --- accepted tokens, one per key type ----------------------------------------------------


def test_hs256():
    assert hs_source().resolve(bearer(hs_token())) == Caller("user:alice@example.com")


def test_hs512_needs_a_64_byte_secret():
    secret = "k" * 64
    assert JwtSource(secret=secret).resolve(bearer(hs_token(secret=secret, alg="HS512"))) is not None
    assert rejection(hs_source(), hs_token(alg="HS512", secret=SECRET + SECRET)) == (
        "unsupported algorithm HS512 for the configured HMAC secret key"
    )


@pytest.mark.parametrize("alg", ["RS256", "RS512", "PS256"])
def test_rsa_public_key(rsa_key, alg):
    source = JwtSource(public_key=public_pem(rsa_key))
    token = jwt.encode(CLAIMS, rsa_key, algorithm=alg)
    assert source.resolve(bearer(token)) == Caller("user:alice@example.com")


def test_rsa_public_key_as_text(rsa_key):
    source = JwtSource(public_key=public_pem(rsa_key).decode())
    assert source.resolve(bearer(jwt.encode(CLAIMS, rsa_key, algorithm="RS256"))) is not None


def test_ec_public_key(ec_key):
    source = JwtSource(public_key=public_pem(ec_key))
    assert source.resolve(bearer(jwt.encode(CLAIMS, ec_key, algorithm="ES256"))) == Caller("user:alice@example.com")


def test_ec_p384_public_key(ec384_key):
    source = JwtSource(public_key=public_pem(ec384_key))
    assert source.resolve(bearer(jwt.encode(CLAIMS, ec384_key, algorithm="ES384"))) is not None
    header, payload, signature = jwt.encode(CLAIMS, ec384_key, algorithm="ES384").split(".")
    message = rejection(source, f"{b64url({'alg': 'ES256'})}.{payload}.{signature}")
    assert message == "unsupported algorithm ES256 for the configured EC secp384r1 key"


def test_certificate_pem(rsa_key):
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "idp")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(rsa_key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(rsa_key, hashes.SHA256())
    )
    source = JwtSource(public_key=cert.public_bytes(serialization.Encoding.PEM))
    assert source.resolve(bearer(jwt.encode(CLAIMS, rsa_key, algorithm="RS256"))) is not None


def test_jwks_picks_key_by_kid(tmp_path, rsa_key, ec_key):
    path = write_jwks(tmp_path / "jwks.json", public_jwk(rsa_key, kid="r1"), public_jwk(ec_key, kid="e1"))
    source = JwtSource(jwks_file=path)
    rs = jwt.encode(CLAIMS, rsa_key, algorithm="RS256", headers={"kid": "r1"})
    es = jwt.encode({"email": "bob@example.com"}, ec_key, algorithm="ES256", headers={"kid": "e1"})
    assert source.resolve(bearer(rs)).principal == "user:alice@example.com"
    assert source.resolve(bearer(es)).principal == "user:bob@example.com"
    # naming another key's kid does not make that key accept this token's algorithm
    swapped = jwt.encode(CLAIMS, rsa_key, algorithm="RS256", headers={"kid": "e1"})
    assert rejection(source, swapped) == "unsupported algorithm RS256 for the configured EC secp256r1 key"


def test_jwks_single_key_needs_no_kid(tmp_path, rsa_key):
    source = JwtSource(jwks_file=write_jwks(tmp_path / "jwks.json", public_jwk(rsa_key, kid="r1")))
    assert source.resolve(bearer(jwt.encode(CLAIMS, rsa_key, algorithm="RS256"))) is not None


def test_jwks_unknown_kid(tmp_path, rsa_key, other_rsa_key):
    source = JwtSource(jwks_file=write_jwks(tmp_path / "jwks.json", public_jwk(rsa_key, kid="r1")))
    token = jwt.encode(CLAIMS, other_rsa_key, algorithm="RS256", headers={"kid": "r2"})
    assert rejection(source, token) == "unknown key id (kid)"


def test_jwks_several_keys_and_no_kid(tmp_path, rsa_key, ec_key):
    path = write_jwks(tmp_path / "jwks.json", public_jwk(rsa_key, kid="r1"), public_jwk(ec_key, kid="e1"))
    token = jwt.encode(CLAIMS, rsa_key, algorithm="RS256")
    assert rejection(JwtSource(jwks_file=path), token) == "token has no kid and the JWKS holds several keys"


def test_jwks_alg_pins_the_algorithm(tmp_path, rsa_key):
    source = JwtSource(jwks_file=write_jwks(tmp_path / "jwks.json", public_jwk(rsa_key, kid="r1", alg="RS256")))
    token = jwt.encode(CLAIMS, rsa_key, algorithm="PS256", headers={"kid": "r1"})
    assert rejection(source, token) == "unsupported algorithm PS256 for the configured RSA key"


def test_jwks_skips_non_signing_keys(tmp_path, rsa_key, caplog):
    okp = {"kty": "OKP", "crv": "Ed25519", "x": b64url(ed25519.Ed25519PrivateKey.generate().public_key().public_bytes_raw())}
    enc = public_jwk(rsa_key, kid="enc", use="enc")
    path = write_jwks(tmp_path / "jwks.json", okp, enc, public_jwk(rsa_key, kid="r1"))
    with caplog.at_level(logging.WARNING, logger="rowgate.identity"):
        source = JwtSource(jwks_file=path, audience="rowgate")
    assert sum("skipped" in r.getMessage() for r in caplog.records) == 2
    token = jwt.encode({**CLAIMS, "aud": "rowgate"}, rsa_key, algorithm="RS256", headers={"kid": "enc"})
    assert rejection(source, token) == "unknown key id (kid)"


def test_jwks_rotation_is_picked_up(tmp_path, rsa_key, other_rsa_key):
    now = [0.0]
    path = tmp_path / "jwks.json"
    write_jwks(path, public_jwk(rsa_key, kid="old"))
    source = JwtSource(jwks_file=path, clock=lambda: now[0])
    new_token = jwt.encode(CLAIMS, other_rsa_key, algorithm="RS256", headers={"kid": "new"})
    assert rejection(source, new_token) == "unknown key id (kid)"
    write_jwks(path, public_jwk(other_rsa_key, kid="new"))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    now[0] = 1.5
    assert source.resolve(bearer(new_token)) is not None


# --- claims ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "claims, options, principal",
    [
        ({"email": "Alice@EXAMPLE.com"}, {}, "user:Alice@example.com"),
        ({"sub": "bob@example.com"}, {}, "user:bob@example.com"),
        ({"email": "alice@example.com", "sub": "1234567890"}, {}, "user:alice@example.com"),
        ({"email": "alice@example.com", "email_verified": True}, {}, "user:alice@example.com"),
        ({"upn": "carol@example.com", "sub": "x"}, {"principal_claim": "upn"}, "user:carol@example.com"),
        ({"sub": "dave@example.com"}, {"principal_claim": "upn"}, "user:dave@example.com"),
        ({"email": "serviceAccount:etl@proj.example.com"}, {}, "serviceAccount:etl@proj.example.com"),
        ({"email": "user:alice@example.com"}, {}, "user:alice@example.com"),
        ({"sub": "etl@proj.example.com"}, {"principal_kind": "serviceAccount"}, "serviceAccount:etl@proj.example.com"),
    ],
)
def test_principal_claims(claims, options, principal):
    assert hs_source(**options).resolve(bearer(hs_token(claims))).principal == principal


@pytest.mark.parametrize(
    "claims, message",
    [
        ({}, "token has neither a email nor a sub claim"),
        ({"name": "Alice"}, "token has neither a email nor a sub claim"),
        ({"sub": "1234567890"}, "the sub claim is not a usable principal: email '1234567890' must contain exactly one '@'"),
        ({"email": ["alice@example.com"]}, "the email claim is not a string"),
        ({"email": "group:eng@example.com"}, "must be a user: or serviceAccount: member"),
        ({"email": "domain:example.com"}, "must be a user: or serviceAccount: member"),
        ({"email": "allUsers"}, "exactly one '@'"),
        ({"email": "User:alice@example.com"}, "unknown member kind 'User'"),
        ({"email": "alice@example.com\n"}, "control character"),
        ({"email": "alice@ex\u0430mple.com"}, "non-ASCII"),
        ({"email": "alice@example.com", "email_verified": False}, "email_verified is false"),
        ({"email": "alice@example.com", "email_verified": "false"}, "email_verified is false"),
    ],
)
def test_bad_principal_claims(claims, message):
    assert message in rejection(hs_source(), hs_token(claims))


@pytest.mark.parametrize(
    "groups, expected",
    [
        (["eng@example.com", "ops@EXAMPLE.com"], {"eng@example.com", "ops@example.com"}),
        ("eng@example.com, ops@example.com", {"eng@example.com", "ops@example.com"}),
        ("eng@example.com", {"eng@example.com"}),
        ("", set()),
        ([], set()),
        (["group:eng@example.com"], {"eng@example.com"}),
        (["eng@example.com", "/keycloak/path", "6f1c-azure-object-id", "user:x@example.com"], {"eng@example.com"}),
        (None, set()),
    ],
)
def test_groups_claim(groups, expected):
    claims = {**CLAIMS, "groups": groups} if groups is not None else CLAIMS
    assert hs_source().resolve(bearer(hs_token(claims))).groups == frozenset(expected)


def test_custom_groups_claim():
    token = hs_token({**CLAIMS, "roles": ["eng@example.com"], "groups": ["ignored@example.com"]})
    assert hs_source(groups_claim="roles").resolve(bearer(token)).groups == {"eng@example.com"}


@pytest.mark.parametrize("groups", [3, {"eng@example.com": True}, ["eng@example.com", 4], [["eng@example.com"]]])
def test_groups_claim_of_wrong_type(groups):
    message = rejection(hs_source(), hs_token({**CLAIMS, "groups": groups}))
    assert message == "the groups claim must be a list of strings or a comma-separated string"


# --- time, audience, issuer --------------------------------------------------------------


def test_expired():
    assert rejection(hs_source(), hs_token({**CLAIMS, "exp": int(time.time()) - 60})) == "token expired"


def test_expired_within_leeway():
    token = hs_token({**CLAIMS, "exp": int(time.time()) - 30})
    assert hs_source(leeway=120).resolve(bearer(token)) is not None


def test_not_expired():
    assert hs_source().resolve(bearer(hs_token({**CLAIMS, "exp": int(time.time()) + 60}))) is not None


def test_nbf_in_future():
    assert rejection(hs_source(), hs_token({**CLAIMS, "nbf": int(time.time()) + 600})) == "token not yet valid"


def test_iat_in_future():
    assert rejection(hs_source(), hs_token({**CLAIMS, "iat": int(time.time()) + 600})) == "token not yet valid"


def test_non_numeric_exp():
    assert rejection(hs_source(), hs_token({**CLAIMS, "exp": "tomorrow"})) == "malformed token"


@pytest.mark.parametrize(
    "aud, configured, message",
    [
        ("other", "rowgate", "wrong audience"),
        (["other", "another"], "rowgate", "wrong audience"),
        (None, "rowgate", "token has no aud claim"),
        ("other", ["rowgate", "rowgate-dev"], "wrong audience"),
    ],
)
def test_wrong_audience(aud, configured, message):
    claims = {**CLAIMS, "aud": aud} if aud is not None else CLAIMS
    assert rejection(hs_source(audience=configured), hs_token(claims)) == message


@pytest.mark.parametrize(
    "aud, configured",
    [("rowgate", "rowgate"), (["other", "rowgate"], "rowgate"), ("rowgate-dev", ["rowgate", "rowgate-dev"]), ("x", None)],
)
def test_right_audience(aud, configured):
    assert hs_source(audience=configured).resolve(bearer(hs_token({**CLAIMS, "aud": aud}))) is not None


def test_missing_audience_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="rowgate.identity"):
        hs_source()
    assert "no audience configured" in caplog.text


@pytest.mark.parametrize(
    "iss, message", [("https://evil.example.com", "wrong issuer"), (None, "token has no iss claim"), (7, "wrong issuer")]
)
def test_wrong_issuer(iss, message):
    claims = {**CLAIMS, "iss": iss} if iss is not None else CLAIMS
    token = _hs256_with_key_bytes(SECRET.encode(), claims)
    assert rejection(hs_source(issuer="https://idp.example.com"), token) == message


def test_right_issuer():
    source = hs_source(issuer="https://idp.example.com")
    assert source.resolve(bearer(hs_token({**CLAIMS, "iss": "https://idp.example.com"}))) is not None


def test_issuer_not_checked_when_unconfigured():
    assert hs_source().resolve(bearer(hs_token({**CLAIMS, "iss": "anyone"}))) is not None


# --- forged and broken tokens ------------------------------------------------------------


def test_wrong_secret():
    assert rejection(hs_source(), hs_token(secret="x" * 32)) == "bad signature"


def test_wrong_rsa_key(rsa_key, other_rsa_key):
    token = jwt.encode(CLAIMS, other_rsa_key, algorithm="RS256")
    assert rejection(JwtSource(public_key=public_pem(rsa_key)), token) == "bad signature"


def test_wrong_ec_key(ec_key):
    token = jwt.encode(CLAIMS, ec.generate_private_key(ec.SECP256R1()), algorithm="ES256")
    assert rejection(JwtSource(public_key=public_pem(ec_key)), token) == "bad signature"


@pytest.mark.parametrize("kind", ["hs", "rs"])
def test_tampered_payload(kind, rsa_key):
    if kind == "hs":
        source, token = hs_source(), hs_token()
    else:
        source, token = JwtSource(public_key=public_pem(rsa_key)), jwt.encode(CLAIMS, rsa_key, algorithm="RS256")
    header, _, signature = token.split(".")
    forged = f"{header}.{b64url({'email': 'root@example.com'})}.{signature}"
    assert rejection(source, forged) == "bad signature"


def test_tampered_header_alg():
    token = hs_token()
    _, payload, signature = token.split(".")
    forged = f"{b64url({'alg': 'HS384', 'typ': 'JWT'})}.{payload}.{signature}"
    assert rejection(hs_source(), forged) == "unsupported algorithm HS384 for the configured HMAC secret key"


def test_stripped_signature():
    header, payload, _ = hs_token().split(".")
    assert rejection(hs_source(), f"{header}.{payload}.") == "bad signature"


@pytest.mark.parametrize("alg", ["none", "None", "NONE", "nOnE"])
@pytest.mark.parametrize("signature", ["", "c2ln"])
def test_alg_none(alg, signature):
    token = f"{b64url({'alg': alg, 'typ': 'JWT'})}.{b64url(CLAIMS)}.{signature}"
    assert rejection(hs_source(), token) == "unsupported algorithm none"


def test_alg_none_against_public_key(rsa_key):
    token = f"{b64url({'alg': 'none'})}.{b64url(CLAIMS)}."
    assert rejection(JwtSource(public_key=public_pem(rsa_key)), token) == "unsupported algorithm none"


def _hs256_with_key_bytes(key: bytes, claims=CLAIMS) -> str:
    """Signed by hand, for tokens PyJWT refuses to mint."""
    signing_input = f"{b64url({'alg': 'HS256', 'typ': 'JWT'})}.{b64url(claims)}"
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def test_hs_rs_confusion_with_pem(rsa_key):
    """An HS256 token whose HMAC key is the RSA public key's PEM must not verify."""
    pem = public_pem(rsa_key)
    message = rejection(JwtSource(public_key=pem), _hs256_with_key_bytes(pem))
    assert message == "unsupported algorithm HS256 for the configured RSA key"


def test_hs_rs_confusion_with_jwks(tmp_path, rsa_key):
    jwk = public_jwk(rsa_key, kid="r1")
    source = JwtSource(jwks_file=write_jwks(tmp_path / "jwks.json", jwk))
    forged = _hs256_with_key_bytes(json.dumps(jwk).encode())
    assert rejection(source, forged) == "unsupported algorithm HS256 for the configured RSA key"


def test_hs_ec_confusion(ec_key):
    pem = public_pem(ec_key)
    message = rejection(JwtSource(public_key=pem), _hs256_with_key_bytes(pem))
    assert message == "unsupported algorithm HS256 for the configured EC secp256r1 key"


def test_asymmetric_token_against_secret(rsa_key):
    token = jwt.encode(CLAIMS, rsa_key, algorithm="RS256")
    assert rejection(hs_source(), token) == "unsupported algorithm RS256 for the configured HMAC secret key"


def test_es_token_against_rsa_key(rsa_key, ec_key):
    token = jwt.encode(CLAIMS, ec_key, algorithm="ES256")
    assert rejection(JwtSource(public_key=public_pem(rsa_key)), token) == (
        "unsupported algorithm ES256 for the configured RSA key"
    )


def test_unprintable_alg_is_not_echoed():
    token = f"{b64url({'alg': 'HS256<script>'})}.{b64url(CLAIMS)}.c2ln"
    assert rejection(hs_source(), token) == "unsupported algorithm (unprintable) for the configured HMAC secret key"


@pytest.mark.parametrize(
    "token",
    [
        "aaaa.bbbb.cccc",
        f"{b64url(b'not json')}.{b64url(CLAIMS)}.c2ln",
        f"{b64url(b'[1, 2]')}.{b64url(CLAIMS)}.c2ln",
        f"{b64url({'alg': 'HS256', 'kid': 7})}.{b64url(CLAIMS)}.c2ln",
        f"{b64url({'alg': 'HS256', 'crit': ['exp']})}.{b64url(CLAIMS)}.c2ln",
    ],
)
def test_malformed(token):
    assert rejection(hs_source(), token).startswith(("malformed token", "invalid token"))


@pytest.mark.parametrize("header", [{"typ": "JWT"}, {"alg": ""}, {"alg": 256}])
def test_missing_alg(header):
    assert rejection(hs_source(), f"{b64url(header)}.{b64url(CLAIMS)}.c2ln") == "malformed token (no alg)"


@pytest.mark.parametrize("payload", [b"not json", b"[1, 2]", b'"alice@example.com"'])
def test_signed_payload_that_is_not_a_claims_object(payload):
    token = jwt.api_jws.encode(payload, SECRET, algorithm="HS256")
    assert rejection(hs_source(), token) == "malformed token"


# --- what the source claims --------------------------------------------------------------


@pytest.mark.parametrize(
    "metadata",
    [{}, {"authorization": "Bearer opaque-token"}, {"authorization": "Basic dXNlcjpwdw=="}, {"x-rowgate-user": "user:a@b.com"}],
)
def test_not_claimed(metadata):
    assert hs_source().resolve(metadata) is None


def test_empty_bearer_is_rejected():
    with pytest.raises(IdentityError, match="^jwt: malformed bearer credential"):
        hs_source().resolve({"authorization": "Bearer "})


def test_oversized_authorization_is_rejected():
    with pytest.raises(IdentityError, match="too long"):
        hs_source().resolve(bearer(hs_token({**CLAIMS, "pad": "x" * 9000})))


# --- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "exactly one of"),
        ({"secret": SECRET, "public_key": b"x"}, "exactly one of"),
        ({"secret": "short"}, "at least 32 bytes"),
        ({"secret": b""}, "shared secret is unusable"),
        ({"public_key": b"not a pem"}, "not a readable PEM"),
        ({"secret": SECRET, "principal_kind": "group"}, "principal kind"),
        ({"secret": SECRET, "leeway": -1}, "leeway"),
        ({"secret": SECRET, "principal_claim": ""}, "must not be empty"),
    ],
)
def test_bad_configuration(options, message):
    with pytest.raises(IdentityConfigError, match=message):
        JwtSource(**options)


def test_public_key_as_secret_is_refused(rsa_key):
    with pytest.raises(IdentityConfigError, match="shared secret is unusable"):
        JwtSource(secret=public_pem(rsa_key))


def test_private_key_pem_is_refused(rsa_key):
    pem = rsa_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    with pytest.raises(IdentityConfigError, match="private key"):
        JwtSource(public_key=pem)


def test_short_rsa_key_is_refused():
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(IdentityConfigError, match="1024-bit RSA key"):
        JwtSource(public_key=public_pem(weak))


def test_unsupported_curve_is_refused():
    with pytest.raises(IdentityConfigError, match="curve secp256k1"):
        JwtSource(public_key=public_pem(ec.generate_private_key(ec.SECP256K1())))


def test_ed25519_key_is_refused():
    with pytest.raises(IdentityConfigError, match="not an RSA or EC key"):
        JwtSource(public_key=public_pem(ed25519.Ed25519PrivateKey.generate()))


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "not valid JSON"),
        ("[]", '"keys" list'),
        ('{"keys": {}}', '"keys" list'),
        ('{"keys": []}', "no usable RSA or EC signing key"),
        ('{"keys": [3]}', "key 1 is not a JSON object"),
        ('{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}', "symmetric (oct) key"),
        ('{"keys": [{"kty": "RSA", "n": "AQAB"}]}', "key 1 is not a valid RSA key"),
        ('{"keys": [{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}]}', "key 1 is not a valid EC key"),
    ],
)
def test_bad_jwks_at_start(tmp_path, content, message):
    path = tmp_path / "jwks.json"
    path.write_text(content)
    with pytest.raises(IdentityConfigError) as info:
        JwtSource(jwks_file=path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_jwks_missing_at_start(tmp_path):
    with pytest.raises(IdentityConfigError, match="JWKS file .*missing.json"):
        JwtSource(jwks_file=tmp_path / "missing.json")


def test_jwks_key_problems(tmp_path, rsa_key, ec_key):
    cases = [
        ([public_jwk(rsa_key, kid="a"), public_jwk(ec_key, kid="a")], "repeats kid 'a'"),
        ([public_jwk(rsa_key, kid="a"), public_jwk(ec_key)], "every key needs a kid"),
        ([public_jwk(rsa_key, kid=5)], "kid that is not a string"),
        ([public_jwk(rsa_key, kid="a", alg="HS256")], "alg 'HS256' does not fit a RSA key"),
        ([public_jwk(ec_key, kid="a", alg="ES384")], "alg 'ES384' does not fit"),
        ([jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key, as_dict=True)], "private key material"),
    ]
    for jwks, message in cases:
        with pytest.raises(IdentityConfigError) as info:
            JwtSource(jwks_file=write_jwks(tmp_path / "jwks.json", *jwks))
        assert message in str(info.value), message

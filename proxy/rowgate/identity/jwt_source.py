"""Callers from verified JWT bearer tokens (`authorization: Bearer <jwt>`).

The accepted algorithms come from the configured key, never from the token: a shared
secret allows only HS*, an RSA key only RS*/PS*, an EC key only the ES* of its curve. That
closes the classic confusion attacks (an `HS256` token "signed" with the RSA public key as
the HMAC secret, or `alg: none`) before PyJWT is even asked.

The JWT source claims every bearer token shaped like a JWT (three base64url parts) and
then either accepts it or raises; it never lets a bad JWT fall through to another source.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, HMACAlgorithm, RSAAlgorithm

from rowgate.identity.caller import Caller
from rowgate.identity.errors import IdentityConfigError, IdentityError
from rowgate.identity.headers import bearer_token, looks_like_jwt
from rowgate.identity.members import PRINCIPAL_KINDS, MemberError, parse_group, parse_principal
from rowgate.identity.watched_file import WatchedFile

log = logging.getLogger("rowgate.identity")

# RFC 7518 3.2: an HMAC key must be at least as long as the hash output.
_HMAC_MIN_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
_RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
_EC_ALGORITHMS = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
_MIN_RSA_BITS = 2048
_PRINTABLE_ALG = re.compile(r"[A-Za-z0-9+_-]{1,20}")

# PyJWT's verdicts in the words a client gets back; subclasses before their bases.
_REASONS: tuple[tuple[type[Exception], str], ...] = (
    (jwt.ExpiredSignatureError, "token expired"),
    (jwt.ImmatureSignatureError, "token not yet valid"),
    (jwt.InvalidAudienceError, "wrong audience"),
    (jwt.InvalidIssuerError, "wrong issuer"),
    (jwt.InvalidSignatureError, "bad signature"),
    (jwt.InvalidAlgorithmError, "unsupported algorithm"),
    (jwt.DecodeError, "malformed token"),
)


@dataclass(frozen=True)
class _Key:
    material: bytes | rsa.RSAPublicKey | ec.EllipticCurvePublicKey
    algorithms: tuple[str, ...]
    kind: str  # for messages: "HMAC secret", "RSA", "EC secp256r1"


class JwtSource:
    """Verifies bearer JWTs against one configured key (secret or PEM) or a JWKS file.

    The principal is `principal_claim` (default `email`), or `sub` when that claim is
    absent; a bare value becomes `principal_kind:<value>`. Groups come from
    `groups_claim` as a list or a comma-separated string.
    """

    name = "jwt"

    def __init__(
        self,
        *,
        secret: str | bytes | None = None,
        public_key: str | bytes | None = None,
        jwks_file: str | os.PathLike[str] | None = None,
        issuer: str | None = None,
        audience: str | Sequence[str] | None = None,
        leeway: float = 0.0,
        principal_claim: str = "email",
        groups_claim: str = "groups",
        principal_kind: str = "user",
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if sum(k is not None for k in (secret, public_key, jwks_file)) != 1:
            raise IdentityConfigError("jwt: configure exactly one of a shared secret, a public key or a JWKS file")
        if principal_kind not in PRINCIPAL_KINDS:
            raise IdentityConfigError("jwt: principal kind must be user or serviceAccount")
        if leeway < 0:
            raise IdentityConfigError("jwt: leeway must not be negative")
        if not principal_claim or not groups_claim:
            raise IdentityConfigError("jwt: principal and groups claim names must not be empty")
        self._key: _Key | None = None
        self._jwks: WatchedFile[dict[str | None, _Key]] | None = None
        try:
            if secret is not None:
                self._key = _secret_key(secret.encode("utf-8") if isinstance(secret, str) else secret)
            elif public_key is not None:
                self._key = _pem_key(public_key.encode("ascii") if isinstance(public_key, str) else public_key)
        except ValueError as exc:
            raise IdentityConfigError(f"jwt: {exc}") from None
        if jwks_file is not None:
            self._jwks = WatchedFile(jwks_file, parse_jwks, what="JWKS file", interval=interval, clock=clock)
        self._issuer = issuer
        self._audience = audience
        self._leeway = leeway
        self._principal_claim = principal_claim
        self._groups_claim = groups_claim
        self._principal_kind = principal_kind
        if audience is None:
            log.warning("jwt: no audience configured; tokens this key signed for any audience are accepted")

    def resolve(self, metadata: Mapping[str, str]) -> Caller | None:
        token = bearer_token(metadata, source=self.name)
        if token is None or not looks_like_jwt(token):
            return None
        return self._caller(self._verify(token))

    def _verify(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise self._reject("malformed token") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or not alg:
            raise self._reject("malformed token (no alg)")
        if alg.lower() == "none":
            raise self._reject("unsupported algorithm none")
        key = self._key_for(header.get("kid"))
        if alg not in key.algorithms:
            shown = alg if _PRINTABLE_ALG.fullmatch(alg) else "(unprintable)"
            raise self._reject(f"unsupported algorithm {shown} for the configured {key.kind} key")
        try:
            return jwt.decode(
                token,
                key.material,
                algorithms=list(key.algorithms),
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._leeway,
                # An unconfigured audience means "do not check", not "reject tokens that have one".
                options={"verify_aud": self._audience is not None},
            )
        except jwt.MissingRequiredClaimError as exc:
            raise self._reject(f"token has no {exc.claim} claim") from None
        except jwt.PyJWTError as exc:
            reason = next((r for cls, r in _REASONS if isinstance(exc, cls)), f"invalid token ({type(exc).__name__})")
            raise self._reject(reason) from None

    def _key_for(self, kid: str | None) -> _Key:
        if self._key is not None:
            return self._key  # a single configured key: kid is only a hint
        assert self._jwks is not None  # one of the two is configured (checked in __init__)
        keys = self._jwks.value
        if kid is not None:
            key = keys.get(kid)
            if key is None:
                raise self._reject("unknown key id (kid)")
            return key
        if len(keys) == 1:
            return next(iter(keys.values()))
        raise self._reject("token has no kid and the JWKS holds several keys")

    def _caller(self, claims: dict[str, Any]) -> Caller:
        claim = self._principal_claim if self._principal_claim in claims else "sub"
        value = claims.get(claim)
        if value is None:
            raise self._reject(f"token has neither a {self._principal_claim} nor a sub claim")
        if not isinstance(value, str):
            raise self._reject(f"the {claim} claim is not a string")
        if claim == "email" and claims.get("email_verified") in (False, "false"):
            # OIDC providers let users type unverified addresses; authorising on one would
            # let anybody claim anybody's email.
            raise self._reject("email_verified is false")
        try:
            member = parse_principal(value, default_kind=self._principal_kind)
        except MemberError as exc:
            raise self._reject(f"the {claim} claim is not a usable principal: {exc}") from None
        return Caller(principal=member.canonical(), groups=self._groups(claims))

    def _groups(self, claims: dict[str, Any]) -> frozenset[str]:
        raw = claims.get(self._groups_claim)
        if raw is None:
            return frozenset()
        if isinstance(raw, str):
            items = raw.split(",")
        elif isinstance(raw, list) and all(isinstance(g, str) for g in raw):
            items = raw
        else:
            raise self._reject(f"the {self._groups_claim} claim must be a list of strings or a comma-separated string")
        groups = set()
        for item in filter(None, (i.strip() for i in items)):
            try:
                groups.add(parse_group(item))
            except MemberError:
                # IdPs also emit group names that are not emails (Keycloak paths, Azure
                # object ids). No grantee can name them, so dropping them grants nothing.
                log.debug("jwt: ignoring a group that is not an email")
        return frozenset(groups)

    def _reject(self, reason: str) -> IdentityError:
        return IdentityError(reason, source=self.name)


def parse_jwks(data: bytes) -> dict[str | None, _Key]:
    """kid -> key for every usable signing key of a JWKS (RFC 7517) document.

    Keys of types this source cannot verify with (OKP, or `use: enc`) are skipped so an
    IdP's mixed key set still works; symmetric (`oct`) keys are refused outright, because
    a JWKS is meant to be public and a shared secret in it is a leak, not a key.
    """
    try:
        document = json.loads(data)
    except ValueError:
        raise ValueError("not valid JSON") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError('a JWKS must be a JSON object with a "keys" list')
    keys: dict[str | None, _Key] = {}
    for number, jwk in enumerate(entries, start=1):
        if not isinstance(jwk, dict):
            raise ValueError(f"key {number} is not a JSON object")
        kty, kid = jwk.get("kty"), jwk.get("kid")
        if kty == "oct":
            raise ValueError(f"key {number} is a symmetric (oct) key; use a shared secret instead")
        if kty not in ("RSA", "EC") or jwk.get("use", "sig") != "sig":
            log.warning("JWKS key %d (kty %r) is not an RSA or EC signing key; skipped", number, kty)
            continue
        if kid is not None and not isinstance(kid, str):
            raise ValueError(f"key {number} has a kid that is not a string")
        if kid in keys:
            raise ValueError(f"key {number} repeats kid {kid!r}")
        try:
            material = (RSAAlgorithm if kty == "RSA" else ECAlgorithm).from_jwk(jwk)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError) as exc:
            detail = str(exc) if isinstance(exc, jwt.PyJWTError) else type(exc).__name__
            raise ValueError(f"key {number} is not a valid {kty} key ({detail})") from None
        if hasattr(material, "private_bytes"):
            raise ValueError(f"key {number} contains private key material; publish only public keys")
        key = _asymmetric_key(material, f"key {number}")
        alg = jwk.get("alg")
        if alg is not None:
            if alg not in key.algorithms:
                raise ValueError(f"key {number}: alg {alg!r} does not fit a {key.kind} key")
            key = _Key(key.material, (alg,), key.kind)
        keys[kid] = key
    if not keys:
        raise ValueError("the JWKS holds no usable RSA or EC signing key")
    if len(keys) > 1 and None in keys:
        raise ValueError("every key needs a kid when the JWKS holds several")
    return keys


def _secret_key(secret: bytes) -> _Key:
    try:
        HMACAlgorithm(HMACAlgorithm.SHA256).prepare_key(secret)  # refuses PEM/SSH text, which is never a secret
    except jwt.InvalidKeyError as exc:
        raise ValueError(f"the shared secret is unusable: {exc}") from None
    algorithms = tuple(alg for alg, size in _HMAC_MIN_BYTES.items() if len(secret) >= size)
    if not algorithms:
        raise ValueError(f"the shared secret must be at least {_HMAC_MIN_BYTES['HS256']} bytes (RFC 7518 3.2)")
    return _Key(secret, algorithms, "HMAC secret")


def _pem_key(pem: bytes) -> _Key:
    if b"PRIVATE KEY" in pem:
        raise ValueError("the key file holds a private key; configure the public key")
    try:
        if b"BEGIN CERTIFICATE" in pem:
            material: object = x509.load_pem_x509_certificate(pem).public_key()
        else:
            material = serialization.load_pem_public_key(pem)
    except ValueError:
        raise ValueError("the public key is not a readable PEM public key or certificate") from None
    return _asymmetric_key(material, "the public key")


def _asymmetric_key(material: object, what: str) -> _Key:
    if isinstance(material, rsa.RSAPublicKey):
        if material.key_size < _MIN_RSA_BITS:
            raise ValueError(f"{what} is a {material.key_size}-bit RSA key; at least {_MIN_RSA_BITS} bits are required")
        return _Key(material, _RSA_ALGORITHMS, "RSA")
    if isinstance(material, ec.EllipticCurvePublicKey):
        alg = _EC_ALGORITHMS.get(material.curve.name)
        if alg is None:
            raise ValueError(f"{what} uses curve {material.curve.name}; P-256, P-384 and P-521 are supported")
        return _Key(material, (alg,), f"EC {material.curve.name}")
    raise ValueError(f"{what} is not an RSA or EC key")

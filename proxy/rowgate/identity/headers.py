"""Reading credential headers out of gRPC metadata without trusting their shape.

Every source reads its headers through `header_value`, so the size and character limits
hold no matter which sources an operator enables. The bearer helpers also fix the one rule
that keeps the JWT and static-token sources from competing for the same credential: a
bearer token shaped like a JWT belongs to the JWT source, anything else to the token source.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from rowgate.identity.errors import IdentityError

MAX_HEADER_LENGTH = 8 * 1024

AUTHORIZATION = "authorization"
USER_HEADER = "x-rowgate-user"
GROUPS_HEADER = "x-rowgate-groups"

# Headers that carry identity: the transport strips them so an upstream never sees a
# credential meant for the proxy (and never acts on a spoofed one).
CONSUMED_HEADERS = frozenset({AUTHORIZATION, USER_HEADER, GROUPS_HEADER})

# Compact JWS: header.payload.signature, base64url. The signature may be empty so that an
# `alg: none` token is still claimed (and refused) by the JWT source rather than being
# reported as an unknown static token.
_JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]+={0,2}\.[A-Za-z0-9_-]+={0,2}\.[A-Za-z0-9_-]*={0,2}")


def normalize_metadata(metadata: Mapping[str, str] | Iterable[tuple[str, str | bytes]]) -> dict[str, str]:
    """Lower-cased name -> value, accepting a mapping or gRPC's `invocation_metadata()` pairs.

    A repeated identity header is refused rather than resolved: which copy a dict keeps is
    an accident of ordering, and a mesh that appends its `x-rowgate-user` after the
    client's would otherwise let the client choose who it is.
    """
    pairs = metadata.items() if isinstance(metadata, Mapping) else metadata
    headers: dict[str, str] = {}
    for name, value in pairs:
        name = name.lower()
        if name.endswith("-bin") or not isinstance(value, str):
            continue
        if name in headers:
            if name in CONSUMED_HEADERS:
                raise IdentityError(f"the {name} header appears more than once")
            continue
        headers[name] = value
    return headers


def header_value(metadata: Mapping[str, str], name: str, *, source: str) -> str | None:
    """The header's value, or None when absent; raises when present but unfit to parse."""
    value = metadata.get(name)
    if value is None:
        return None
    if len(value) > MAX_HEADER_LENGTH:
        raise IdentityError(f"the {name} header is too long (over {MAX_HEADER_LENGTH} characters)", source=source)
    if any(not " " <= ch <= "~" for ch in value):
        raise IdentityError(f"the {name} header contains control or non-ASCII characters", source=source)
    return value


def bearer_token(metadata: Mapping[str, str], *, source: str) -> str | None:
    """The token of `authorization: Bearer <token>`; None when there is no bearer credential.

    Other schemes (`Basic ...`) return None: no source here understands them, and the
    resolver refuses a request whose credential no source claimed.
    """
    value = header_value(metadata, AUTHORIZATION, source=source)
    if value is None:
        return None
    scheme, _, token = value.strip(" ").partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip(" ")
    if not token or " " in token:
        raise IdentityError("malformed bearer credential in the authorization header", source=source)
    return token


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts: the JWT source's claim on a bearer token."""
    return _JWT_SHAPE.fullmatch(token) is not None

"""Turning a request's metadata into a `Caller`, by the sources the operator enabled.

Rules (row-access-semantics.md, "Who the caller is"):
- sources are asked in the operator's order; the first that returns a caller wins;
- a source that raises stops the search: a bad credential never falls through to a weaker
  source (nor to anonymous);
- a credential header that no enabled source claimed is refused too, for the same reason:
  a client sending `authorization: Basic ...`, or `x-rowgate-user` to a proxy without the
  header source, must learn it was not believed instead of silently becoming anonymous;
- no credential at all is the anonymous caller, or UNAUTHENTICATED when the operator
  requires authentication.

Bearer tokens: the jwt source claims tokens shaped like a JWT, the token source every other
bearer token. The claims are disjoint, so "jwt,token" and "token,jwt" behave the same.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from rowgate.identity.caller import ANONYMOUS, Caller
from rowgate.identity.errors import IdentityConfigError, IdentityError
from rowgate.identity.header_source import HeaderSource
from rowgate.identity.headers import CONSUMED_HEADERS, normalize_metadata
from rowgate.identity.jwt_source import JwtSource
from rowgate.identity.token_source import StaticTokenSource

__all__ = ["CONSUMED_HEADERS", "IdentityResolver", "IdentitySource", "SOURCE_NAMES", "build_resolver"]

SOURCE_NAMES = ("jwt", "token", "header")


class IdentitySource(Protocol):
    name: str

    def resolve(self, metadata: Mapping[str, str]) -> Caller | None:
        """The caller if this source's credential is present and good; None if absent;
        raises `IdentityError` if present and bad."""


class IdentityResolver:
    """Asks each source in order; see the module docstring for the rules."""

    def __init__(self, sources: Sequence[IdentitySource], require_auth: bool = False) -> None:
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise IdentityConfigError(f"identity sources repeat: {', '.join(names)}")
        if require_auth and not sources:
            raise IdentityConfigError("authentication is required but no identity source is enabled")
        self.sources = tuple(sources)
        self.require_auth = require_auth
        self._enabled = ", ".join(names) or "none"

    def resolve(self, metadata: Mapping[str, str] | Iterable[tuple[str, str]]) -> Caller:
        """The request's caller; raises `IdentityError` (-> UNAUTHENTICATED) when it has none it may use."""
        headers = normalize_metadata(metadata)
        for source in self.sources:
            caller = source.resolve(headers)
            if caller is not None:
                return caller
        unclaimed = sorted(CONSUMED_HEADERS.intersection(headers))
        if unclaimed:
            raise IdentityError(f"{', '.join(unclaimed)} sent, but no enabled identity source ({self._enabled}) accepts it")
        if self.require_auth:
            raise IdentityError(f"no credential: this proxy requires authentication (enabled sources: {self._enabled})")
        return ANONYMOUS


def build_resolver(
    identity: str | Iterable[str],
    *,
    jwt_secret_file: str | os.PathLike[str] | None = None,
    jwt_public_key_file: str | os.PathLike[str] | None = None,
    jwt_jwks_file: str | os.PathLike[str] | None = None,
    jwt_issuer: str | None = None,
    jwt_audience: str | Sequence[str] | None = None,
    jwt_leeway: float = 0.0,
    jwt_principal_claim: str = "email",
    jwt_groups_claim: str = "groups",
    jwt_principal_kind: str = "user",
    token_file: str | os.PathLike[str] | None = None,
    require_auth: bool = False,
) -> IdentityResolver:
    """The resolver for `--identity jwt,token,header` and its options.

    Options for a source that is not enabled are refused rather than ignored: an operator
    who passes `--jwt-jwks-file` but forgets `--identity jwt` would otherwise run a proxy
    that believes nobody's token. `none` names no source, as in `--identity none`.
    """
    items = [identity] if isinstance(identity, str) else identity
    parts = (part.strip().lower() for item in items for part in item.split(","))
    names = [name for name in parts if name and name != "none"]
    unknown = sorted(set(names) - set(SOURCE_NAMES))
    if unknown:
        raise IdentityConfigError(f"unknown identity source(s) {', '.join(unknown)}; choose from {', '.join(SOURCE_NAMES)}")
    jwt_options = (jwt_secret_file, jwt_public_key_file, jwt_jwks_file, jwt_issuer, jwt_audience)
    if "jwt" not in names and any(o is not None for o in jwt_options):
        raise IdentityConfigError("jwt options were given but the jwt identity source is not enabled")
    if "token" not in names and token_file is not None:
        raise IdentityConfigError("a token file was given but the token identity source is not enabled")

    sources: list[IdentitySource] = []
    for name in names:
        if name == "jwt":
            secret = _read(jwt_secret_file, "jwt secret file")
            sources.append(
                JwtSource(
                    # A trailing newline is an editor's, not part of the secret.
                    secret=secret.rstrip(b"\r\n") if secret is not None else None,
                    public_key=_read(jwt_public_key_file, "jwt public key file"),
                    jwks_file=jwt_jwks_file,
                    issuer=jwt_issuer,
                    audience=jwt_audience,
                    leeway=jwt_leeway,
                    principal_claim=jwt_principal_claim,
                    groups_claim=jwt_groups_claim,
                    principal_kind=jwt_principal_kind,
                )
            )
        elif name == "token":
            if token_file is None:
                raise IdentityConfigError("the token identity source needs a token file")
            sources.append(StaticTokenSource(token_file))
        else:
            sources.append(HeaderSource())
    return IdentityResolver(sources, require_auth=require_auth)


def _read(path: str | os.PathLike[str] | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise IdentityConfigError(f"{what} {path}: {exc.strerror}") from None

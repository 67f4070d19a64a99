"""Static bearer tokens from a file: the simplest way to give scripts and services an identity.

File format (YAML, or JSON when the name ends in `.json`), a list of entries:

    - token: 3f9c...            # what the client sends as `authorization: Bearer <token>`
      principal: etl@example.com   # a bare email means user:, or write serviceAccount:...
      groups: [analysts@example.com, group:eu@example.com]

Tokens are kept only as SHA-256 digests and looked up by digest, so the lookup time says
nothing about how much of a guessed token was right (no per-character comparison ever
touches the secret) and the long-lived table does not hold the tokens themselves.

The token source claims every bearer token that is *not* shaped like a JWT; JWT-shaped
tokens belong to the JWT source, so the two never compete whatever their order. A
JWT-shaped entry in the file could therefore never be used and is refused at load time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping

import yaml

from rowgate.identity.caller import Caller
from rowgate.identity.errors import IdentityError
from rowgate.identity.headers import bearer_token, looks_like_jwt
from rowgate.identity.members import MemberError, parse_group, parse_principal
from rowgate.identity.watched_file import WatchedFile

# RFC 6750 b64token: what can travel after "Bearer " unquoted.
_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
_ENTRY_KEYS = frozenset({"token", "principal", "groups"})

_Table = dict[bytes, Caller]


class StaticTokenSource:
    """Bearer token -> caller, from an operator-maintained file that is re-read when it changes."""

    name = "token"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        as_json = str(path).endswith(".json")
        self._file: WatchedFile[_Table] = WatchedFile(
            path, lambda data: parse_token_file(data, as_json=as_json), what="token file", interval=interval, clock=clock
        )

    def resolve(self, metadata: Mapping[str, str]) -> Caller | None:
        token = bearer_token(metadata, source=self.name)
        if token is None or looks_like_jwt(token):
            return None
        caller = self._file.value.get(_digest(token))
        if caller is None:
            raise IdentityError("unknown token", source=self.name)
        return caller


def parse_token_file(data: bytes, *, as_json: bool = False) -> _Table:
    """Validate every entry; any problem rejects the whole file (a half-applied token
    list would silently drop callers). Messages name the entry, never the token."""
    # Parser messages quote the offending text, which may be a token: report the line only.
    try:
        text = data.decode("utf-8")
        entries = json.loads(text) if as_json else yaml.safe_load(text)
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON (line {exc.lineno})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ValueError(f"not valid YAML (line {mark.line + 1})" if mark else "not valid YAML") from None
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise ValueError("the file must hold a list of {token, principal, groups} entries")
    table: _Table = {}
    for number, entry in enumerate(entries, start=1):
        digest, caller = _parse_entry(entry, f"entry {number}")
        if digest in table:
            raise ValueError(f"entry {number}: token repeats an earlier entry's token")
        table[digest] = caller
    return table


def _parse_entry(entry: object, where: str) -> tuple[bytes, Caller]:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: must be a mapping with token, principal and groups")
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    token = entry.get("token")
    if not isinstance(token, str):
        raise ValueError(f"{where}: token must be a string (quote it in YAML)")
    if not _TOKEN.fullmatch(token):
        raise ValueError(f"{where}: token must be non-empty and use only A-Z a-z 0-9 - . _ ~ + / =")
    if looks_like_jwt(token):
        raise ValueError(f"{where}: token is shaped like a JWT (three dot-separated parts) and would go to the jwt source")
    principal = entry.get("principal")
    if not isinstance(principal, str):
        raise ValueError(f"{where}: principal must be a string")
    groups = entry.get("groups", [])
    if groups is None:
        groups = []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise ValueError(f"{where}: groups must be a list of emails")
    try:
        member = parse_principal(principal)
        group_set = frozenset(parse_group(g) for g in groups)
    except MemberError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return _digest(token), Caller(principal=member.canonical(), groups=group_set)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()

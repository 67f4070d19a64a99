"""IAM member grammar and the one rule for "does this grantee cover this caller".

Policies name people the way BigQuery does (`user:alice@example.com`, `domain:example.com`,
...), and the same strings come back from identity sources as callers. Both sides go through
this module so that a grantee that parses here is exactly a grantee that can match.

The grammar is deliberately narrower than RFC 5322: emails and domains are ASCII only.
Comparing un-normalised Unicode (NFC vs NFD, `str.lower()` folding the Kelvin sign onto `k`)
would let two spellings of "the same" address match or miss unpredictably; internationalised
domains can still be written in punycode (`xn--...`), as IAM itself requires.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from rowgate.identity.caller import Caller

MAX_MEMBER_LENGTH = 320
MAX_LOCAL_PART_LENGTH = 64  # RFC 5321 4.5.3.1.1
MAX_DOMAIN_LENGTH = 253

EMAIL_KINDS = frozenset({"user", "serviceAccount", "group"})
PRINCIPAL_KINDS = frozenset({"user", "serviceAccount"})  # kinds a caller can be
PUBLIC_KINDS = frozenset({"allAuthenticatedUsers", "allUsers"})  # kinds without a value
KINDS = EMAIL_KINDS | PUBLIC_KINDS | {"domain"}

# RFC 5322 dot-atom: atext runs separated by single dots.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LOCAL_PART = re.compile(rf"{_ATEXT}(?:\.{_ATEXT})*")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_KIND_LIST = ", ".join(sorted(KINDS, key=str.lower))


class MemberError(ValueError):
    """A member string is not in the grammar; the message says which part is wrong."""


@dataclass(frozen=True)
class Member:
    """One IAM member. Construction validates, so every `Member` in the program is well-formed.

    >>> parse_member("user:Alice@Example.COM").canonical()
    'user:Alice@example.com'
    """

    kind: str
    value: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise MemberError(f"unknown member kind {self.kind!r} (kinds are case-sensitive: {_KIND_LIST})")
        if self.kind in PUBLIC_KINDS:
            if self.value:
                raise MemberError(f"{self.kind!r} takes no value")
        elif self.kind == "domain":
            check_domain(self.value)
        else:
            check_email(self.value)

    def canonical(self) -> str:
        """The member with its domain lower-cased: the form to store and to compare.

        Only the domain is folded because DNS is case-insensitive while the local part of an
        address belongs to the mail server, which may treat `Alice` and `alice` as different.
        """
        if self.kind in PUBLIC_KINDS:
            return self.kind
        value = self.value.lower() if self.kind == "domain" else canonical_email(self.value)
        return f"{self.kind}:{value}"

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}" if self.value else self.kind


def parse_member(text: str) -> Member:
    """Parse `kind:value` (or a bare `allUsers` / `allAuthenticatedUsers`) strictly.

    >>> parse_member("domain:example.com")
    Member(kind='domain', value='example.com')
    """
    _check_characters(text, "member")
    kind, sep, value = text.partition(":")
    if sep and kind in PUBLIC_KINDS:
        raise MemberError(f"{kind!r} takes no value")  # even "allUsers:" is not "allUsers"
    if not sep and kind not in PUBLIC_KINDS:
        if "@" in text:
            raise MemberError(f"member {text!r} has no kind; write e.g. 'user:{text}'")
        raise MemberError(f"member {text!r} has no kind (kinds are case-sensitive: {_KIND_LIST})")
    return Member(kind, value)


def parse_principal(text: str, *, default_kind: str | None = "user") -> Member:
    """A caller's own member: `user:`/`serviceAccount:`, or a bare email taken as `default_kind`
    (None: a kind is required).

    Identity providers usually assert a bare email; only a principal kind can be a caller,
    because "the caller is a group" would make every group grant match everyone in it.
    """
    if default_kind is not None and default_kind not in PRINCIPAL_KINDS:
        raise ValueError(f"default_kind must be one of {sorted(PRINCIPAL_KINDS)}")
    if ":" in text or default_kind is None:
        member = parse_member(text)
    else:
        _check_characters(text, "principal")
        member = Member(default_kind, text)
    if member.kind not in PRINCIPAL_KINDS:
        raise MemberError(f"principal {str(member)!r} must be a user: or serviceAccount: member")
    return member


def parse_group(text: str) -> str:
    """A group the caller belongs to, as `group:<email>` or a bare email; returns the canonical email."""
    if ":" in text:
        member = parse_member(text)
        if member.kind != "group":
            raise MemberError(f"group {text!r} must be a group: member or a bare email")
        return canonical_email(member.value)
    _check_characters(text, "group")
    check_email(text)
    return canonical_email(text)


def check_email(email: str) -> None:
    """Raise `MemberError` unless `email` is `local@domain` with a dot-atom local part."""
    if not email:
        raise MemberError("email is empty")
    if email.count("@") != 1:
        raise MemberError(f"email {email!r} must contain exactly one '@'")
    local, _, domain = email.partition("@")
    if not local:
        raise MemberError(f"email {email!r} has an empty local part")
    if len(local) > MAX_LOCAL_PART_LENGTH:
        raise MemberError(f"email {email!r} has a local part longer than {MAX_LOCAL_PART_LENGTH} characters")
    if not _LOCAL_PART.fullmatch(local):
        raise MemberError(f"email {email!r} has an invalid local part {local!r}")
    check_domain(domain)


def check_domain(domain: str) -> None:
    """Raise `MemberError` unless `domain` is a dotted DNS host name (no trailing dot, no IP)."""
    if not domain:
        raise MemberError("domain is empty")
    if "@" in domain:
        raise MemberError(f"domain {domain!r} contains '@'; an email is a user:, serviceAccount: or group: member")
    if len(domain) > MAX_DOMAIN_LENGTH:
        raise MemberError(f"domain is longer than {MAX_DOMAIN_LENGTH} characters")
    labels = domain.split(".")
    if len(labels) < 2:
        raise MemberError(f"domain {domain!r} needs at least two labels, e.g. 'example.com'")
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise MemberError(f"domain {domain!r} has an invalid label {label!r}")
    if labels[-1].isdigit():
        raise MemberError(f"domain {domain!r} looks like an IP address; use a host name")


def canonical_email(email: str) -> str:
    """`Local@Example.COM` -> `Local@example.com`: the comparison key for emails."""
    local, _, domain = email.rpartition("@")
    return f"{local}@{domain.lower()}"


def grantee_matches(grantee: str | Member, caller: Caller) -> bool:
    """Whether a policy grantee covers the caller, by the rules of row-access-semantics.md.

    A grantee string that does not parse matches nobody: policies are validated when they
    are written, so an unparsable one is stale data, and denying is the closed failure.

    >>> from rowgate.identity.caller import Caller
    >>> grantee_matches("domain:example.com", Caller("user:bob@EXAMPLE.com"))
    True
    """
    member = grantee if isinstance(grantee, Member) else _member_or_none(grantee)
    if member is None:
        return False
    if member.kind == "allUsers":
        return True
    if not caller.authenticated:
        return False
    if member.kind == "allAuthenticatedUsers":
        return True
    if member.kind == "group":
        return canonical_email(member.value) in _canonical_groups(caller.groups)
    principal = _member_or_none(caller.principal)
    if principal is None or principal.kind not in PRINCIPAL_KINDS:
        return False
    if member.kind == "domain":
        return principal.value.rpartition("@")[2].lower() == member.value.lower()
    return member.kind == principal.kind and canonical_email(member.value) == canonical_email(principal.value)


@dataclass(frozen=True)
class GranteeSet:
    """A policy's grantees, parsed once and indexed, so matching a caller costs a few set
    look-ups however many grantees the policy has (a policy may name a hundred).

    `covers(caller)` is exactly `any(grantee_matches(g, caller) for g in grantees)`.

    >>> from rowgate.identity.caller import Caller
    >>> GranteeSet.of(("user:ann@example.com", "domain:Example.ORG")).covers(Caller("user:bob@example.org"))
    True
    >>> GranteeSet.of(("group:eng@example.com", "bogus")).covers(Caller("user:bob@example.org"))
    False
    """

    everyone: bool = False  # allUsers
    authenticated: bool = False  # allAuthenticatedUsers
    principals: frozenset[tuple[str, str]] = frozenset()  # (kind, canonical email)
    groups: frozenset[str] = frozenset()  # canonical group emails
    domains: frozenset[str] = frozenset()  # lower-cased

    @classmethod
    def of(cls, grantees: Iterable[str]) -> GranteeSet:
        everyone = authenticated = False
        principals, groups, domains = set(), set(), set()
        for text in grantees:
            try:
                member = parse_member(text)
            except MemberError:
                continue  # unparsable stale data matches nobody
            if member.kind == "allUsers":
                everyone = True
            elif member.kind == "allAuthenticatedUsers":
                authenticated = True
            elif member.kind == "group":
                groups.add(canonical_email(member.value))
            elif member.kind == "domain":
                domains.add(member.value.lower())
            else:
                principals.add((member.kind, canonical_email(member.value)))
        return cls(everyone, authenticated, frozenset(principals), frozenset(groups), frozenset(domains))

    def covers(self, caller: Caller) -> bool:
        if self.everyone:
            return True
        if not caller.authenticated:
            return False
        if self.authenticated:
            return True
        if self.groups and not self.groups.isdisjoint(_canonical_groups(caller.groups)):
            return True
        if not (self.principals or self.domains):
            return False
        principal = _member_or_none(caller.principal)
        if principal is None or principal.kind not in PRINCIPAL_KINDS:
            return False
        if principal.value.rpartition("@")[2].lower() in self.domains:
            return True
        return (principal.kind, canonical_email(principal.value)) in self.principals


def validate_admin_member(text: str) -> Member:
    """Parse an operator-configured admin; public members are refused, not just ignored,
    because `--admin allUsers` would hand policy management to the whole network."""
    member = parse_member(text)
    if member.kind in PUBLIC_KINDS:
        raise MemberError(f"{member.kind!r} cannot be an admin; name users, service accounts, groups or domains")
    return member


def is_admin(caller: Caller, admins: Iterable[str | Member]) -> bool:
    """Whether any admin member covers the caller. Anonymous callers are never admins, and
    public members are skipped here too in case a list bypassed `validate_admin_member`."""
    if not caller.authenticated:
        return False
    for admin in admins:
        member = admin if isinstance(admin, Member) else _member_or_none(admin)
        if member is not None and member.kind not in PUBLIC_KINDS and grantee_matches(member, caller):
            return True
    return False


def _check_characters(text: str, what: str) -> None:
    # Checked before anything echoes `text` into a message, so messages stay printable.
    if not isinstance(text, str):
        raise MemberError(f"{what} must be a string, not {type(text).__name__}")
    if not text:
        raise MemberError(f"{what} is empty")
    if len(text) > MAX_MEMBER_LENGTH:
        raise MemberError(f"{what} is longer than {MAX_MEMBER_LENGTH} characters")
    for ch in text:
        if ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F:
            raise MemberError(f"{what} contains a control character")
        if ch.isspace():
            raise MemberError(f"{what} {text!r} contains whitespace")
        if ch == ",":
            raise MemberError(f"{what} {text!r} contains a comma")
        if not ch.isascii():
            raise MemberError(
                f"{what} {text!r} contains a non-ASCII character; write internationalised domains in punycode (xn--)"
            )


@lru_cache(maxsize=4096)
def _member_or_none(text: str) -> Member | None:
    # Cached: the same grantees and principals are compared on every request.
    try:
        return parse_member(text)
    except MemberError:
        return None


@lru_cache(maxsize=4096)
def _canonical_groups(groups: frozenset[str]) -> frozenset[str]:
    keys = set()
    for group in groups:
        try:
            keys.add(parse_group(group))
        except MemberError:
            continue  # a group that is not an email can never be named by a grantee
    return frozenset(keys)

"""The two ways identity can fail, kept apart because they reach different people.

`IdentityError` is the caller's problem (a bad or missing credential) and becomes gRPC
UNAUTHENTICATED; `IdentityConfigError` is the operator's problem and stops the proxy from
starting, so a typo in a flag never turns into a proxy that quietly lets everyone in as
anonymous.
"""

from __future__ import annotations


class IdentityError(Exception):
    """A request's credential was presented and rejected, or required and missing.

    The message names the source that decided (so operators can tell a JWT problem from a
    token-file problem) and never contains the credential itself, because messages end up
    in client-visible statuses and in logs.
    """

    def __init__(self, reason: str, *, source: str | None = None) -> None:
        super().__init__(f"{source}: {reason}" if source else reason)
        self.reason = reason
        self.source = source


class IdentityConfigError(Exception):
    """The operator's identity configuration cannot work; raised at start-up only."""

"""Who is calling: the one value every later step of the pipeline decides on.

A `Caller` is resolved once per request from gRPC metadata (see `resolver.py`) and never
from the request body: Spark Connect's `user_context.user_id` is typed by the client and
authenticates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Caller:
    """An authenticated (or anonymous) principal in IAM-member form.

    `principal` is a member such as ``user:alice@example.com`` or
    ``serviceAccount:etl@proj.example.com``; `groups` holds bare group emails (no
    ``group:`` prefix) exactly as the identity source asserted them.
    """

    principal: str
    groups: frozenset[str] = field(default_factory=frozenset)
    authenticated: bool = True

    @property
    def email(self) -> str:
        """The part after the member kind; what `SESSION_USER()` returns for this caller."""
        _, _, rest = self.principal.partition(":")
        return rest or self.principal


ANONYMOUS = Caller(principal="user:anonymous", groups=frozenset(), authenticated=False)

"""Identity asserted by a trusted hop in plain headers (`x-rowgate-user`, `x-rowgate-groups`).

Anyone who can reach the port can send these headers, so this source is only sound when
the proxy is reachable solely through a hop that sets them and strips the client's own
copies (a sidecar behind a mesh). The proxy cannot check that; the operator opts in.
"""

from __future__ import annotations

from collections.abc import Mapping

from rowgate.identity.caller import Caller
from rowgate.identity.errors import IdentityError
from rowgate.identity.headers import GROUPS_HEADER, USER_HEADER, header_value
from rowgate.identity.members import MemberError, parse_group, parse_principal


class HeaderSource:
    """`x-rowgate-user: user:alice@example.com`, `x-rowgate-groups: eng@example.com, group:eu@example.com`."""

    name = "header"

    def resolve(self, metadata: Mapping[str, str]) -> Caller | None:
        user = header_value(metadata, USER_HEADER, source=self.name)
        groups = header_value(metadata, GROUPS_HEADER, source=self.name)
        if user is None:
            if groups is not None:
                # Groups alone would be an identity-less grant; more likely a broken hop.
                raise IdentityError(f"{GROUPS_HEADER} sent without {USER_HEADER}", source=self.name)
            return None
        try:
            # A kind is required: the hop is trusted to say exactly who, not to be guessed at.
            member = parse_principal(user, default_kind=None)
        except MemberError as exc:
            raise IdentityError(f"bad {USER_HEADER} header: {exc}", source=self.name) from None
        try:
            group_set = frozenset(parse_group(g.strip()) for g in (groups or "").split(",") if g.strip())
        except MemberError as exc:
            raise IdentityError(f"bad {GROUPS_HEADER} header: {exc}", source=self.name) from None
        return Caller(principal=member.canonical(), groups=group_set)

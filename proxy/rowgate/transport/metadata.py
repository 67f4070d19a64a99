"""Which client metadata the proxy reads, and which it passes on.

Credentials are consumed here and never forwarded: the upstream authenticates the proxy
(with the operator's token), not the client. Everything else a client sent (for example
`x-foo` from `sc://host/;x-foo=bar`) reaches the upstream unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable

# Headers holding credentials or identity assertions; consumed by the proxy.
CONSUMED_PREFIXES = ("x-rowgate-",)
CONSUMED_HEADERS = frozenset({"authorization"})
# Set by gRPC itself or by the HTTP/2 layer; forwarding them would confuse the channel.
TRANSPORT_HEADERS = frozenset({"user-agent", "te", "content-type", "host"})


def _consumed(key: str) -> bool:
    return key in CONSUMED_HEADERS or key.startswith(CONSUMED_PREFIXES)


def forwardable_metadata(
    metadata: Iterable[tuple[str, str | bytes]] | None, extra: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str | bytes], ...]:
    kept = tuple(
        (k, v)
        for k, v in (metadata or ())
        if not _consumed(k.lower()) and k.lower() not in TRANSPORT_HEADERS and not k.startswith((":", "grpc-"))
    )
    return kept + extra

"""Parsing of Spark Connect URLs (`sc://host:port/;token=...;use_ssl=true;x-key=value`).

The proxy reads the same URL format pyspark clients use, so an operator can copy the URL
they already have. Unknown parameters become gRPC metadata on every upstream call, exactly
as pyspark's own channel builder does.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

RESERVED = {"token", "use_ssl", "user_id", "user_agent", "session_id", "grpc_max_message_size"}


class UpstreamUrlError(ValueError):
    pass


@dataclass(frozen=True)
class UpstreamUrl:
    host: str
    port: int
    use_ssl: bool = False
    token: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def target(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def redacted(self) -> str:
        params = ";token=***" if self.token else ""
        params += ";use_ssl=true" if self.use_ssl else ""
        return f"sc://{self.target}/{params}"


def parse_upstream_url(url: str) -> UpstreamUrl:
    if not url.startswith("sc://"):
        raise UpstreamUrlError(f"upstream URL must start with sc://, got {url!r}")
    rest = url[len("sc://") :]
    netloc, _, params_part = rest.partition("/")
    if ";" in netloc:  # sc://host:port;token=x (no slash) is accepted by pyspark too
        netloc, _, more = netloc.partition(";")
        params_part = ";" + more + params_part
    parsed = urllib.parse.urlsplit("//" + netloc)
    if not parsed.hostname:
        raise UpstreamUrlError(f"upstream URL has no host: {url!r}")
    try:
        port = parsed.port or 15002
    except ValueError as e:
        raise UpstreamUrlError(f"upstream URL has a bad port: {url!r}") from e
    token = None
    use_ssl = False
    headers: list[tuple[str, str]] = []
    for item in filter(None, params_part.split(";")):
        key, sep, value = item.partition("=")
        if not sep:
            raise UpstreamUrlError(f"upstream URL parameter {key!r} has no value")
        value = urllib.parse.unquote(value)
        if key == "token":
            token = value
        elif key == "use_ssl":
            use_ssl = value.lower() == "true"
        elif key in RESERVED:
            continue
        else:
            headers.append((key.lower(), value))
    return UpstreamUrl(host=parsed.hostname, port=port, use_ssl=use_ssl, token=token, headers=tuple(headers))

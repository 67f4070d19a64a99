"""Where policies live. `open_store` picks the backend from a URL so deployment is configuration."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rowgate.policy.store.base import PolicyExists, PolicyNotFound, PolicyStore, PolicyStoreError

__all__ = ["PolicyExists", "PolicyNotFound", "PolicyStore", "PolicyStoreError", "open_store"]


def open_store(url: str) -> PolicyStore:
    """`sqlite:///abs/path.db`, `sqlite:relative/path.db`, `postgresql://...` or `postgres://...`.

    A PostgreSQL URL may name the schema the store keeps its tables in with `schema=NAME`
    among its query parameters (default `rowgate`), so several deployments (or test runs)
    can share one database; the parameter is rowgate's and not passed to libpq.

    Backends are imported on demand so a SQLite deployment never needs a PostgreSQL driver.
    """
    scheme, sep, rest = url.partition(":")
    scheme = scheme.lower()
    if sep and scheme == "sqlite":
        if rest.startswith("///"):
            path = rest[2:]  # sqlite:///abs/path.db -> /abs/path.db
        elif rest.startswith("//"):
            raise ValueError(f"policy store URL {url!r}: use sqlite:///absolute/path.db or sqlite:relative/path.db")
        else:
            path = rest
        if not path or path == "/":
            raise ValueError(f"policy store URL {url!r} names no database file")
        from rowgate.policy.store.sqlite import SqlitePolicyStore

        return SqlitePolicyStore(path)
    if sep and scheme in ("postgresql", "postgres"):
        from rowgate.policy.store.postgres import PostgresPolicyStore

        dsn, schema = split_schema(url)
        return PostgresPolicyStore(dsn, schema=schema) if schema else PostgresPolicyStore(dsn)
    raise ValueError(f"unsupported policy store URL {url!r}: expected sqlite:///path.db, postgresql://... or postgres://...")


def split_schema(url: str) -> tuple[str, str | None]:
    """The URL without rowgate's `schema=` query parameter, and that parameter.

    >>> split_schema("postgresql://u@h/db?schema=team_a&sslmode=require")
    ('postgresql://u@h/db?sslmode=require', 'team_a')
    >>> split_schema("postgresql://u@h/db")
    ('postgresql://u@h/db', None)
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    if not schemas:
        return url, None
    if len(schemas) > 1 or not schemas[0]:
        raise ValueError(f"policy store URL: give schema= once, with a name (got {schemas})")
    kept = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=kept)), schemas[0]

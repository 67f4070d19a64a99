"""Where policies live. `open_store` picks the backend from a URL so deployment is configuration."""

from __future__ import annotations

from rowgate.policy.store.base import PolicyExists, PolicyNotFound, PolicyStore, PolicyStoreError

__all__ = ["PolicyExists", "PolicyNotFound", "PolicyStore", "PolicyStoreError", "open_store"]


def open_store(url: str) -> PolicyStore:
    """`sqlite:///abs/path.db`, `sqlite:relative/path.db`, `postgresql://...` or `postgres://...`.

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

        return PostgresPolicyStore(url)
    raise ValueError(f"unsupported policy store URL {url!r}: expected sqlite:///path.db, postgresql://... or postgres://...")

"""May a non-admin read, write or name this path while tables are protected?

Reading files by path reads them unfiltered, whatever they hold: a protected table's files,
the proxy's policy store, Spark's logs (which print pushed filters) or spill files. So the
answer is an allow list: a path passes only when it lies under a prefix the operator
allowed (`--allow-path`), and never when it reaches one of the `Forbidden` locations, even
under an allowed prefix. Paths are compared as Hadoop reads them
(proxy/rowgate/policy/file_locations.py): schemes case-insensitively, `.` and repeated
slashes collapsed, a glob counts as everything it could expand to.

>>> rules = PathAllowList(["/data/landing"])
>>> rules.refusal("/data/landing/2024/*.csv", [])
>>> rules.refusal("/data/landing-other/x.csv", [])
'it is not under a prefix the operator allowed with --allow-path'
>>> rules.refusal("file:/data/landing/.rowgate/policies.db", [Forbidden("/data/landing/.rowgate", "the proxy's data directory")])
"it reaches the proxy's data directory (/data/landing/.rowgate), which is never readable by path"
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

from rowgate.policy.file_locations import GLOB_CHARS, glob_names, may_reach, normalised

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_FILE_SCHEME = re.compile(r"^file:", re.IGNORECASE)
# `..` as a path segment or a brace alternative (Hadoop expands `{a,..}` before normalising).
_DOT_DOT = re.compile(r"(^|[/{,])\.\.([/},]|$)")

NOT_ALLOWED = "it is not under a prefix the operator allowed with --allow-path"


@dataclass(frozen=True)
class Forbidden:
    """A location no path may reach. With `children`, only its entries whose names start
    with one of them are forbidden (Spark's `blockmgr-*` and `spark-*` under a shared /tmp),
    and a path reaching the location itself or above it."""

    location: str
    reason: str
    children: tuple[str, ...] = ()


def is_absolute(path: str) -> bool:
    """An absolute local path or a URI with a scheme; anything else Spark resolves against
    its own working directory, which the proxy cannot know."""
    text = path.strip()
    if _FILE_SCHEME.match(text):
        text = _FILE_SCHEME.sub("", text)
        return text.startswith("/") and not text.startswith("//") or text.startswith("///")
    return text.startswith("/") or bool(_SCHEME.match(text))


def _fixed_dir(path: str) -> str:
    """The directory a path names, or for a glob the deepest directory fixed before it."""
    glob_at = min((i for i, c in enumerate(path) if c in GLOB_CHARS), default=None)
    if glob_at is None:
        return normalised(path)
    head = path[:glob_at]
    fixed = normalised(head) if head.strip() else "/"
    return fixed if head.endswith("/") else (posixpath.dirname(fixed) or "/")


def _within(path: str, prefix: str) -> bool:
    inside = _fixed_dir(path)
    base = normalised(prefix)
    return inside == base or inside.startswith(base.rstrip("/") + "/")


class PathAllowList:
    """The operator's allowed prefixes (absolute paths or URIs)."""

    def __init__(self, prefixes: Iterable[str] = ()):
        cleaned = []
        for prefix in prefixes:
            if not is_absolute(prefix) or _DOT_DOT.search(prefix) or any(c in prefix for c in GLOB_CHARS):
                raise ValueError(f"--allow-path wants an absolute path or URI without globs or '..', got {prefix!r}")
            cleaned.append(prefix.strip())
        self.prefixes = tuple(cleaned)

    def refusal(self, path: str, forbidden: Iterable[Forbidden]) -> str | None:
        """Why `path` may not be used; None when it may."""
        if not path.strip():
            return "it is empty"
        if not is_absolute(path):
            return "it is relative (Spark would resolve it against its own working directory)"
        if _DOT_DOT.search(path):
            return "it contains '..'"
        if not any(_within(path, prefix) for prefix in self.prefixes):
            return NOT_ALLOWED
        return forbidden_reason(path, forbidden)


def forbidden_reason(path: str, forbidden: Iterable[Forbidden]) -> str | None:
    """Why `path` reaches a forbidden location; for a glob, the reason names the first
    location the glob itself matches (not merely one under its fixed directory).

    >>> places = [Forbidden("/w/db/accounts", "the files of db.accounts"), Forbidden("/w/db/orders", "the files of db.orders")]
    >>> forbidden_reason("/w/db/ord*", places)
    'it reaches the files of db.orders (/w/db/orders), which is never readable by path'
    """
    reached = [
        place
        for place in forbidden
        if may_reach(path, place.location) and not (place.children and _only_other_children(path, place))
    ]
    if not reached:
        return None
    place = next((p for p in reached if glob_names(path, p.location)), reached[0])
    return f"it reaches {place.reason} ({place.location}), which is never readable by path"


def _only_other_children(path: str, place: Forbidden) -> bool:
    """Under a location of which only some children are forbidden: is `path` in another child?"""
    inside = _fixed_dir(path)
    base = normalised(place.location).rstrip("/")
    if not inside.startswith(base + "/"):
        return False  # the location itself or above it: could list the forbidden children
    child = inside[len(base) + 1 :].split("/", 1)[0]
    return not any(child.startswith(prefix) for prefix in place.children)

"""Could reading a path read the files of a table's location?

Hadoop resolves a path before it reads: schemes compare case-insensitively, `.`, `..` and
repeated slashes collapse, and a glob expands to whatever matches. A caller who names a
protected table's directory in any of those spellings reads its files unfiltered, so the
comparison here is done the way Hadoop would read the path, erring towards "yes".

>>> may_reach("file:///warehouse/sales.db/orders/part-0.parquet", "/warehouse/sales.db/orders")
True
>>> may_reach("/warehouse/sales.db/../sales.db/ORDERS2", "/warehouse/sales.db/orders")
False
>>> may_reach("/warehouse/*/orders", "/warehouse/sales.db/orders")
True

`may_reach` errs towards "yes" for a glob (everything under its fixed directory); to say
*which* location a refused glob reaches, `glob_names` matches the glob as Hadoop expands it:

>>> glob_names("/warehouse/sales.db/ord*", "/warehouse/sales.db/orders")
True
>>> glob_names("/warehouse/sales.db/ord*", "/warehouse/sales.db/accounts")
False
"""

from __future__ import annotations

import posixpath
import re

GLOB_CHARS = "*?[{\\"


_FILE_SCHEME = re.compile(r"^file:(//)?", re.IGNORECASE)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def normalised(path: str) -> str:
    """Hadoop reads schemes case-insensitively (`FILE:/x` is `file:/x`), so the comparison
    does too: local paths lose their scheme, other schemes are lower-cased."""
    p = _FILE_SCHEME.sub("", path.strip())
    scheme = _SCHEME.match(p)
    if scheme:
        p = scheme.group(1).lower() + p[len(scheme.group(1)) :]
        return p.rstrip("/")
    p = posixpath.normpath("/" + p.lstrip("/")) if p.startswith("/") else posixpath.normpath(p)
    return p.rstrip("/") or "/"


def may_reach(path: str, location: str) -> bool:
    """Could reading `path` read files of `location`? Compared after Hadoop-like
    normalisation (`..`, `.`, repeated slashes); a glob counts as reaching every location
    that starts like the glob's fixed prefix, since Hadoop would expand it."""
    loc_n = normalised(location)
    bare = _FILE_SCHEME.sub("", path.strip())
    if not bare.startswith("/") and ":" not in bare.split("/", 1)[0]:
        # Relative to the server's working directory, which the proxy cannot know: it
        # may be any location it could be a suffix of, and `..` or a glob could be anything.
        if ".." in bare.split("/") or any(c in bare for c in GLOB_CHARS):
            return True
        segments = posixpath.normpath(bare).strip("/").split("/")
        return any(("/" + "/".join(segments[:k]) + "/") in (loc_n + "/") for k in range(1, len(segments) + 1))
    glob_at = min((i for i, c in enumerate(path) if c in GLOB_CHARS), default=None)
    if glob_at is not None:
        fixed = normalised(path[:glob_at]) if path[:glob_at].strip() else "/"
        fixed_dir = fixed if path[:glob_at].endswith("/") else posixpath.dirname(fixed)
        return loc_n == fixed_dir or loc_n.startswith(fixed_dir.rstrip("/") + "/") or fixed_dir.startswith(loc_n + "/")
    path_n = normalised(path)
    return path_n == loc_n or path_n.startswith(loc_n + "/") or loc_n.startswith(path_n + "/")


def _expand_braces(glob: str) -> list[str]:
    """Hadoop expands `{a,b}` before matching (its alternatives may hold slashes); nested
    braces expand from the outside in. Escaped characters are left alone."""
    depth, start = 0, -1
    i = 0
    while i < len(glob):
        c = glob[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}" and depth:
            depth -= 1
            if depth == 0:
                inner, parts, level, begin = glob[start + 1 : i], [], 0, 0
                for j, ch in enumerate(inner):
                    level += ch == "{"
                    level -= ch == "}"
                    if ch == "," and level == 0:
                        parts.append(inner[begin:j])
                        begin = j + 1
                parts.append(inner[begin:])
                head, tail = glob[:start], glob[i + 1 :]
                return [x for part in parts for x in _expand_braces(head + part + tail)][:256]
        i += 1
    return [glob]


def _segment_regex(segment: str) -> re.Pattern[str]:
    """One path segment of a Hadoop glob as a regex: `*`, `?`, `[...]` (`^` negates), `\\`."""
    out, i = [], 0
    while i < len(segment):
        c = segment[i]
        if c == "\\" and i + 1 < len(segment):
            out.append(re.escape(segment[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = segment.find("]", i + 2)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = segment[i + 1 : end]
                body = "^" + body[1:] if body.startswith(("^", "!")) else body
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    try:
        return re.compile("".join(out))
    except re.error:
        return re.compile(".*")  # a class Python cannot read: count it as matching


def glob_names(path: str, location: str) -> bool:
    """Does the glob `path`, expanded as Hadoop would, name `location`, a directory above it,
    or files under it? Used to name the location a refused glob reaches, not to decide."""
    loc = normalised(location).strip("/").split("/")
    for alternative in _expand_braces(path):
        parts = normalised(alternative).strip("/").split("/")
        if all(_segment_regex(g).fullmatch(seg) for g, seg in zip(parts, loc)):
            return True
    return False

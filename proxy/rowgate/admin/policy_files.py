"""Row access policies as a YAML file, for `rowgate policies export` and `apply`.

The file is a list of policies, each ``{table, name, grantees, filter}``::

    - table: spark_catalog.sales.orders
      name: emea_rows
      grantees:
        - group:emea@example.com
      filter: region = 'EMEA'

An export is deterministic so that it diffs well in git: policies sorted by table, then
name; grantees in canonical spelling, sorted; the keys always in the order above; long
filters never folded, multi-line filters as literal blocks. Timestamps are not part of it
(they would make every export differ).

Reading is strict, because `apply --prune` drops whatever the file does not name: unknown
or repeated keys, a missing table/name/filter, a grantee outside the member grammar, the
same policy twice, and an empty document are errors that name the file, line and policy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import yaml

from rowgate.catalog.describe import DescribeError, split_multipart
from rowgate.identity.members import MemberError, parse_member
from rowgate.policy.model import TableName

DEFAULT_CATALOG = "spark_catalog"
DEFAULT_SCHEMA = "default"
KEYS = ("table", "name", "grantees", "filter")
DEFAULT_GRANTEES = ("allAuthenticatedUsers",)
HEADER = (
    "# Row access policies, as written by `rowgate policies export`.\n"
    "# Make the proxy match this file with: rowgate policies apply --file <file> [--prune]\n"
)

_PLAIN_PART = re.compile(r"[a-z0-9_]+")


class TableNameError(ValueError):
    """A table name that is not 1-3 identifier parts."""


class PolicyFileError(ValueError):
    """The policy file cannot be used; the message names the file, line and policy."""


def parse_table(text: str, default_catalog: str = DEFAULT_CATALOG, default_schema: str = DEFAULT_SCHEMA) -> TableName:
    """``cat.db.t``, ``db.t`` or ``t`` (parts may be backtick-quoted) -> a fully qualified name.

    >>> str(parse_table("Sales.Orders"))
    'spark_catalog.sales.orders'
    >>> parse_table("`my.cat`.db.t").catalog
    'my.cat'
    """
    if not isinstance(text, str) or not text.strip():
        raise TableNameError("a table name is required (catalog.schema.table, schema.table or table)")
    try:
        parts = split_multipart(text.strip())
    except DescribeError as e:
        raise TableNameError(str(e)) from None
    if len(parts) > 3:
        raise TableNameError(f"table name {text!r} has {len(parts)} parts; at most 3 (catalog.schema.table)")
    if any(not p.strip() for p in parts):
        raise TableNameError(f"table name {text!r} has an empty part")
    while len(parts) < 3:
        parts.insert(0, default_schema if len(parts) == 1 else default_catalog)
    return TableName(*parts)


def format_table(table: TableName) -> str:
    """The shortest unambiguous text for a table: parts quoted only when they need it."""
    return ".".join(
        p if _PLAIN_PART.fullmatch(p) else "`" + p.replace("`", "``") + "`" for p in (table.catalog, table.schema, table.table)
    )


def canonical_grantees(grantees: Iterable[str]) -> tuple[str, ...]:
    """Canonical spelling (domains lower-cased), duplicates removed, sorted: the set a policy grants.

    Raises `MemberError` for a grantee outside the member grammar.
    """
    return tuple(sorted({parse_member(g.strip()).canonical() for g in grantees}))


@dataclass(frozen=True)
class PolicySpec:
    """A policy as a file (or `apply`) sees it: what it protects and grants, not when it was made."""

    table: TableName
    name: str
    grantees: tuple[str, ...]
    filter: str

    @property
    def key(self) -> tuple[TableName, str]:
        """Policy names compare case-insensitively per table, as in the store."""
        return (self.table, self.name.lower())

    @property
    def label(self) -> str:
        return f"{format_table(self.table)} {self.name}"

    def normalized(self) -> PolicySpec:
        return PolicySpec(self.table, self.name, canonical_grantees(self.grantees) or DEFAULT_GRANTEES, self.filter.strip())

    def same_as(self, other: PolicySpec) -> bool:
        """Whether storing `other` over `self` would change anything an export shows."""
        a, b = self.normalized(), other.normalized()
        return a.key == b.key and a.name == b.name and a.grantees == b.grantees and a.filter == b.filter


def sort_specs(specs: Iterable[PolicySpec]) -> list[PolicySpec]:
    return sorted(specs, key=lambda s: (s.table, s.name.lower(), s.name))


# -- writing ---------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # List items indented under their key (`grantees:\n    - ...`), as people write YAML.
        return super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _represent_str)


def dump_policies(specs: Iterable[PolicySpec]) -> str:
    """The YAML text of `specs`, deterministic for a given set of policies."""
    items = []
    for spec in sort_specs(s.normalized() for s in specs):
        items.append(
            {"table": format_table(spec.table), "name": spec.name, "grantees": list(spec.grantees), "filter": spec.filter}
        )
    body = yaml.dump(items, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1 << 20)
    return HEADER + body


# -- reading ---------------------------------------------------------------------------


class _LineDict(dict):
    line: int = 0


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses repeated keys and remembers where each mapping starts."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                continue  # SafeLoader's own error for unhashable keys follows
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"found the key {key!r} twice", key_node.start_mark
                )
            seen[key] = True
        mapping = _LineDict(super().construct_mapping(node, deep=deep))
        mapping.line = node.start_mark.line + 1
        return mapping


def _construct_map(loader: _Loader, node: yaml.Node) -> dict:
    if not isinstance(node, yaml.MappingNode):  # the map tag on a scalar or sequence
        raise yaml.constructor.ConstructorError(None, None, "expected a mapping", node.start_mark)
    return loader.construct_mapping(node, deep=True)


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)


def _quote_hint(key: str, value: object) -> str:
    if isinstance(value, bool):
        return f"; YAML read it as the boolean {str(value).lower()}: quote it, e.g. {key}: '{'TRUE' if value else 'FALSE'}'"
    if isinstance(value, (int, float)):
        return f"; quote it, e.g. {key}: '{value}'"
    return ""


def load_policies(text: str, source: str = "<policies>") -> list[PolicySpec]:
    """Parse and validate a policy file; raises `PolicyFileError` naming what is wrong and where."""
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = e.problem or str(e)
        context = ""
        if e.context:
            started = f" at line {e.context_mark.line + 1}" if e.context_mark and e.context_mark is not mark else ""
            context = f" ({e.context}{started})"
        raise PolicyFileError(f"{where}: not valid YAML: {problem}{context}") from None
    except yaml.YAMLError as e:
        raise PolicyFileError(f"{source}: not valid YAML: {e}") from None
    if data is None:
        raise PolicyFileError(
            f"{source}: the file has no policies; write [] to mean 'no policies' (apply --prune then drops all)"
        )
    if not isinstance(data, list):
        raise PolicyFileError(f"{source}: expected a list of policies (- table: ... name: ... filter: ...), got a {_kind(data)}")
    specs: list[PolicySpec] = []
    first_seen: dict[tuple[TableName, str], tuple[int, int]] = {}
    for index, item in enumerate(data, start=1):
        line = getattr(item, "line", 0)
        spec = _spec(item, index, line, source)
        if spec.key in first_seen:
            other, other_line = first_seen[spec.key]
            raise PolicyFileError(
                f"{_where(source, line)}: policy #{index} ({spec.label}) repeats policy #{other} (line {other_line});"
                " policy names are unique per table, case-insensitively"
            )
        first_seen[spec.key] = (index, line)
        specs.append(spec)
    return specs


def _where(source: str, line: int) -> str:
    return f"{source}:{line}" if line else source


def _kind(value: object) -> str:
    return {
        dict: "mapping",
        _LineDict: "mapping",
        list: "list",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
    }.get(type(value), type(value).__name__)


def _spec(item: object, index: int, line: int, source: str) -> PolicySpec:
    def fail(message: str, label: str = "") -> PolicyFileError:
        what = f"policy #{index}" + (f" ({label})" if label else "")
        return PolicyFileError(f"{_where(source, line)}: {what}: {message}")

    if not isinstance(item, dict):
        raise fail(f"expected a mapping with keys {', '.join(KEYS)}, got a {_kind(item)}")
    unknown = [k for k in item if k not in KEYS]
    if unknown:
        raise fail(f"unknown key {unknown[0]!r}; the keys are {', '.join(KEYS)}")
    for key in ("table", "name"):
        if item.get(key) is None:
            raise fail(f"{key} is missing")

    raw_table, name, filter_sql = item["table"], item["name"], item.get("filter")
    if not isinstance(raw_table, str):
        raise fail(f"table must be a string, got a {_kind(raw_table)}")
    try:
        table = parse_table(raw_table)
    except (TableNameError, ValueError) as e:
        raise fail(f"table: {e}")
    if not isinstance(name, str):
        raise fail(f"name must be a string, got a {_kind(name)}{_quote_hint('name', name)}", format_table(table))
    try:
        check_policy_name(name)
    except ValueError as e:
        raise fail(str(e), format_table(table))
    label = f"{format_table(table)} {name}"
    if filter_sql is None:
        raise fail("filter is missing; use 'TRUE' for the full-access grant", label)
    if not isinstance(filter_sql, str):
        raise fail(f"filter must be a string, got a {_kind(filter_sql)}{_quote_hint('filter', filter_sql)}", label)
    if not filter_sql.strip():
        raise fail("filter is empty; use 'TRUE' for the full-access grant", label)

    grantees = item.get("grantees", None)
    if "grantees" not in item:
        grantees = list(DEFAULT_GRANTEES)
    elif isinstance(grantees, str):
        raise fail(f"grantees must be a list of members, e.g. grantees: [{grantees!r}]", label)
    elif not isinstance(grantees, list) or not grantees:
        raise fail("grantees must be a non-empty list of members; leave it out to grant allAuthenticatedUsers", label)
    for grantee in grantees:
        if not isinstance(grantee, str):
            raise fail(f"grantee {grantee!r} is not a string", label)
        try:
            parse_member(grantee.strip())
        except MemberError as e:
            raise fail(f"grantee {grantee!r} is not a member: {e}", label)
    return PolicySpec(table, name, canonical_grantees(grantees), filter_sql.strip())


def check_policy_name(name: str) -> None:
    """A policy name the SQL statements can also name (backtick-quoted if need be)."""
    if not name:
        raise ValueError("name is empty")
    if name != name.strip():
        raise ValueError(f"name {name!r} has leading or trailing whitespace")
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in name):
        raise ValueError("name contains a control character")
    if len(name) > 256:
        raise ValueError("name is longer than 256 characters")


# -- applying --------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One step of `apply`: create, replace, drop, or leave a policy alone."""

    action: str  # "create" | "replace" | "drop" | "unchanged"
    spec: PolicySpec


def plan_apply(desired: Iterable[PolicySpec], current: Iterable[PolicySpec], *, prune: bool = False) -> list[Change]:
    """What makes the store match `desired`: new policies created, changed ones replaced,
    and with `prune` the ones the file does not name dropped.

    Creates and replaces come first, drops last: dropping the last policy of a table leaves
    it unprotected, so a table must never pass through that state on its way to new policies.
    """
    have = {s.key: s for s in current}
    changes: list[Change] = []
    wanted = set()
    for spec in sort_specs(desired):
        wanted.add(spec.key)
        existing = have.get(spec.key)
        if existing is None:
            changes.append(Change("create", spec))
        elif existing.same_as(spec):
            changes.append(Change("unchanged", spec))
        else:
            changes.append(Change("replace", spec))
    if prune:
        for spec in sort_specs(have.values()):
            if spec.key not in wanted:
                changes.append(Change("drop", spec))
    return changes

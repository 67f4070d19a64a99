"""Spark's analyzed plan, read from its explain text, and where protected tables are read in it.

Spark Connect has no structured form of an analyzed plan; `AnalyzePlan` explain (mode
EXTENDED) prints it as an indented tree, one node a line:

    Project [id#20]
    +- SubqueryAlias t
       +- Project [id#20, region#21]
          +- Filter (true AND (region#21 = eu))
             +- SubqueryAlias spark_catalog.d1.t
                +- Relation spark_catalog.d1.t[id#20,region#21] parquet

A child is printed below its parent one level deeper (`+- ` for the last child, `:- ` for
the others, `:  ` and three spaces continue the levels above); the plans of subquery
expressions and a command's query are "inner children", printed two levels deeper.

**Text a caller controls can hold line breaks.** Spark prints string literals, column and
alias names as they are, so `SELECT 'x\\n+- Filter ...'` adds lines that look like nodes.
The lines of the tree are therefore told apart from such text by asking Spark twice: once
for the plan and once for the same plan under one more `SubqueryAlias` (`WRAPPER_ALIAS`).
Every node line of the second answer is the first answer's line moved right by one level;
a line break inside a node's text moves nothing, because Spark indents only the first line
of a node. `genuine_lines` keeps exactly the lines that moved; expression ids and other
numbers may differ between the two analyses and are compared as equal.

The verdict (`unfiltered_reads`) needs, for every read of a protected table T (the
analyzer's `SubqueryAlias <catalog>.<db>.<table>` above T's relation, and every relation
leaf naming T), the nearest ancestors to be the policy `Filter` the proxy placed for this
caller, optionally with `Sample` nodes in between (TABLESAMPLE is placed inside the
filter). The query of a view definition is not a read (it is stored, and checked where the
view is read). "The filter the proxy placed" is compared as text: the `Filter` node and the plans
of its subqueries, ids blanked, must equal Spark's rendering of the proxy's own filtered
read of T for the same caller (`filter_block` of a reference analysis). A caller who writes
that very filter themselves gets exactly the rows the policy allows, so a look-alike is no
bypass; any other filter, or none, is. Reads inside a matching filter's subqueries are the
policy's own lookups and are not checked again.

Pure: no I/O, no Spark. The orchestration is proxy/rowgate/pipeline/enforce/second_opinion.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rowgate.policy.model import TableName

HEADERS = (
    "== Parsed Logical Plan ==",
    "== Analyzed Logical Plan ==",
    "== Optimized Logical Plan ==",
    "== Physical Plan ==",
)
WRAPPER_ALIAS = "__rowgate_second_opinion"
WRAPPER_LINE = f"SubqueryAlias {WRAPPER_ALIAS}"
# What a protected table must be read under: one `reference_block`, or any of a set of them
# (the caller's leakproof predicates placed below the barrier, rewrite/sql/leakproof.py).
Reference = tuple[str, ...] | frozenset[tuple[str, ...]]

# A child line: the levels above (`:  ` or three spaces each), then the connector.
_CHILD = re.compile(r"^((?:   |:  )*)([+:]- )(.*)$", re.DOTALL)
# What a node's text starts with: an operator name (`~` marks streaming, `'` unresolved).
_NODE = re.compile(r"^[~']?[A-Z][A-Za-z0-9_]*")
_NUMBER = re.compile(r"\d+")
_EXPR_ID = re.compile(r"#\d+")
_SCAN_KINDS = frozenset(
    {
        "Relation",
        "HiveTableRelation",
        "RelationV2",
        "DataSourceV2Relation",
        "StreamingRelation",
        "StreamingRelationV2",
        "StreamingDataSourceV2Relation",
        "StreamingDataSourceV2ScanRelation",
    }
)
_PASS_THROUGH = frozenset({"Sample"})
# Commands whose query is stored, not run: a view's plan is checked where it is read.
_STORES_QUERY = frozenset({"CreateViewCommand", "AlterViewAsCommand", "CreateView", "AlterViewAs"})


class UnreadablePlan(ValueError):
    """Spark's answer is not a plan text this module can read without guessing."""


@dataclass
class Node:
    index: int  # position among the lines of the tree (0 = root)
    depth: int
    text: str  # the node's text without prefix and streaming marker
    prefix: str  # the line's prefix as printed (levels and connector)
    parent: Node | None = None
    inner: bool = False  # an inner child (subquery plan, a command's query) of its parent
    children: list[Node] = field(default_factory=list)
    continuation: list[str] = field(default_factory=list)  # lines of its text after the first

    @property
    def kind(self) -> str:
        match = _NODE.match(self.text)
        return match.group(0) if match else ""


@dataclass(frozen=True)
class UnfilteredRead:
    table: TableName
    detail: str


def analyzed_lines(explain: str) -> list[str]:
    """The lines of the "Analyzed Logical Plan" section: the schema line(s), then the tree.

    Each header must appear exactly once and in order: a caller's text holding a header
    would otherwise move the section.

    >>> analyzed_lines("== Parsed Logical Plan ==\\n'X\\n\\n== Analyzed Logical Plan ==\\n"
    ...     "a: int\\nProject [a#1]\\n\\n== Optimized Logical Plan ==\\nP\\n\\n== Physical Plan ==\\nQ\\n")
    ['a: int', 'Project [a#1]']
    """
    lines = explain.split("\n")
    at = []
    for header in HEADERS:
        found = [i for i, line in enumerate(lines) if line == header]
        if len(found) != 1:
            raise UnreadablePlan(f"Spark's explain text has {len(found)} {header!r} lines")
        at.append(found[0])
    if at != sorted(at):
        raise UnreadablePlan("Spark's explain sections are out of order")
    section = lines[at[1] + 1 : at[2]]
    while section and section[-1] == "":
        section.pop()
    if not section:
        raise UnreadablePlan("Spark's explain text has an empty analyzed plan")
    return section


def _norm(line: str) -> str:
    return _NUMBER.sub("0", line)


def genuine_lines(plain: list[str], wrapped: list[str]) -> tuple[int, list[bool]]:
    """Where the tree starts in `plain`, and which of its lines are node lines.

    `plain` and `wrapped` are `analyzed_lines` of the plan and of the plan under
    `SubqueryAlias WRAPPER_ALIAS`. A line is a node line when Spark moved it right by one
    level in `wrapped` (numbers compared as equal) and it is shaped like one.

    >>> plain = ["a: string", "Project [x", "+- Filter (true AND (r#3 = eu)) AS a#4]", "+- OneRowRelation"]
    >>> wrapped = ["a: string", WRAPPER_LINE, "+- Project [x", "+- Filter (true AND (r#3 = eu)) AS a#9]",
    ...            "   +- OneRowRelation"]
    >>> genuine_lines(plain, wrapped)
    (1, [True, False, True])
    """
    if len(wrapped) != len(plain) + 1:
        raise UnreadablePlan("the two analyses of the plan differ in length")
    start = next((i for i, (a, b) in enumerate(zip(plain, wrapped)) if a != b), len(plain))
    if start >= len(plain) or wrapped[start] not in (WRAPPER_LINE, "~" + WRAPPER_LINE):
        raise UnreadablePlan("the wrapped analysis does not start with the wrapper")
    genuine = []
    for i in range(start, len(plain)):
        line = plain[i]
        moved = ("+- " if i == start else "   ") + line
        same = _norm(wrapped[i + 1]) == _norm(moved)
        if i == start:
            shaped = bool(_NODE.match(line))
        else:
            child = _CHILD.match(line)
            shaped = child is not None and bool(_NODE.match(child.group(3)))
        genuine.append(same and shaped)
    if not genuine[0]:
        raise UnreadablePlan("the root of the analyzed plan is not where Spark printed it")
    return start, genuine


def looks_like_node(line: str) -> bool:
    """A child line shaped like a node (used to refuse look-alikes that did not move)."""
    child = _CHILD.match(line)
    return child is not None and bool(_NODE.match(child.group(3)))


def parse_tree(lines: list[str], genuine: list[bool] | None = None) -> list[Node]:
    """Nodes of the tree lines, each with its parent; other lines continue the node before.

    Without `genuine` every line must be a node line (a text the proxy wrote itself).

    >>> nodes = parse_tree(["Filter (a#1 IN (list#2 []))", ":  +- Project [b#3]", ":     +- OneRowRelation",
    ...                     "+- SubqueryAlias spark_catalog.d.t", "   +- Relation spark_catalog.d.t[a#1] parquet"])
    >>> [(n.kind, n.depth, n.parent.index if n.parent else None, n.inner) for n in nodes]
    [('Filter', 0, None, False), ('Project', 2, 0, True), ('OneRowRelation', 3, 1, False), ('SubqueryAlias', 1, 0, False), ('Relation', 2, 3, False)]
    """
    nodes: list[Node] = []
    for i, line in enumerate(lines):
        is_node = genuine[i] if genuine is not None else True
        if not is_node:
            if not nodes:
                raise UnreadablePlan("the analyzed plan starts with a line that is not a node")
            nodes[-1].continuation.append(line)
            continue
        if not nodes:
            if _CHILD.match(line) or not _NODE.match(line):
                raise UnreadablePlan(f"the analyzed plan's root line is not a node: {line[:80]!r}")
            nodes.append(Node(index=0, depth=0, text=_bare(line), prefix=""))
            continue
        child = _CHILD.match(line)
        if child is None or not _NODE.match(child.group(3)):
            raise UnreadablePlan(f"a line of the analyzed plan is not a node: {line[:80]!r}")
        depth = len(child.group(1)) // 3 + 1
        parent = next((n for n in reversed(nodes) if n.depth < depth), None)
        if parent is None or depth - parent.depth not in (1, 2):
            raise UnreadablePlan(f"a node of the analyzed plan has no parent: {line[:80]!r}")
        node = Node(
            index=len(nodes),
            depth=depth,
            text=_bare(child.group(3)),
            prefix=child.group(1) + child.group(2),
            parent=parent,
            inner=depth - parent.depth == 2,
        )
        parent.children.append(node)
        nodes.append(node)
    return nodes


def node_text(line: str) -> str:
    """A line's text without its tree prefix and streaming marker (any line, node or not)."""
    child = _CHILD.match(line)
    return _bare(child.group(3) if child else line)


def _bare(text: str) -> str:
    return text[1:] if text.startswith("~") else text


def alias_parts(text: str) -> tuple[str, ...] | None:
    """The name parts of Spark's printed identifier (`a.b.c`, backticks where needed).

    >>> alias_parts("spark_catalog.d1.t")
    ('spark_catalog', 'd1', 't')
    >>> alias_parts("`spark_catalog.d1.t`")
    ('spark_catalog.d1.t',)
    >>> alias_parts("`a``b`.c")
    ('a`b', 'c')
    """
    parts: list[str] = []
    i, n = 0, len(text)
    while i <= n:
        if i < n and text[i] == "`":
            j, buf = i + 1, []
            while True:
                k = text.find("`", j)
                if k < 0:
                    return None
                buf.append(text[j:k])
                if text[k + 1 : k + 2] == "`":
                    buf.append("`")
                    j = k + 2
                    continue
                break
            parts.append("".join(buf))
            i = k + 1
        else:
            k = text.find(".", i)
            end = n if k < 0 else k
            word = text[i:end]
            if not word or "`" in word:
                return None
            parts.append(word)
            i = end
        if i == n:
            return tuple(parts)
        if text[i] != ".":
            return None
        i += 1
    return None


def _table(parts: tuple[str, ...] | None, protected: Iterable[TableName]) -> TableName | None:
    if parts is None or len(parts) != 3 or not all(parts):
        return None
    name = TableName(*parts)
    return name if name in protected else None


def read_alias(node_text: str, protected: Iterable[TableName]) -> TableName | None:
    """The protected table a `SubqueryAlias <catalog>.<db>.<table>` node stands for."""
    if not node_text.startswith("SubqueryAlias "):
        return None
    return _table(alias_parts(node_text[len("SubqueryAlias ") :]), protected)


_RELATION = re.compile(r"^Relation (.+?)\[")
_HIVE = re.compile(r"^HiveTableRelation \[(.+?), ")
_V2 = re.compile(r"^(?:RelationV2|DataSourceV2Relation)\[.*\] (\S+)$")


def scanned_table(node_text: str, protected: Iterable[TableName]) -> TableName | None:
    """The protected table a relation leaf reads, when its text names one."""
    for pattern in (_RELATION, _HIVE, _V2):
        match = pattern.match(node_text)
        if match:
            return _table(alias_parts(match.group(1)), protected)
    return None


def candidate_reads(lines: Iterable[str], protected: Iterable[TableName]) -> set[TableName]:
    """Protected tables some line looks like reading, whether or not it is a node line.

    Decides whether the plan needs the full check: a plan without one reads no protected
    table (a real read always prints a `SubqueryAlias` line naming the table).
    """
    protected = frozenset(protected)
    found = set()
    for line in lines:
        text = node_text(line)
        name = read_alias(text, protected) or scanned_table(text, protected)
        if name is not None:
            found.add(name)
    return found


def filter_block(node: Node) -> tuple[str, ...]:
    """A Filter node and the plans of its subqueries, ids blanked, indentation made relative."""
    if node.continuation:
        raise UnreadablePlan("a row filter's text spans several lines")
    lines = [_EXPR_ID.sub("#", node.text)]
    for sub in _inner_subtree(node):
        if sub.continuation:
            raise UnreadablePlan("a row filter's subquery text spans several lines")
        lines.append(_EXPR_ID.sub("#", (sub.prefix + sub.text)[3 * node.depth :]))
    return tuple(lines)


def _inner_subtree(node: Node) -> list[Node]:
    out: list[Node] = []
    stack = [c for c in reversed(node.children) if c.inner]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(reversed(current.children))
    return sorted(out, key=lambda n: n.index)


def _subtree(node: Node) -> list[Node]:
    out, stack = [], list(node.children)
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(current.children)
    return out


def guarding_filter(alias: Node) -> Node | None:
    """The Filter right above a table's `SubqueryAlias` (Sample nodes may sit in between)."""
    current = alias
    while True:
        parent = current.parent
        if parent is None or current.inner:
            return None
        if parent.kind == "Filter":
            return parent
        if parent.kind not in _PASS_THROUGH:
            return None
        current = parent


def reference_block(lines: list[str], table: TableName) -> tuple[str, ...]:
    """The filter block of the proxy's own filtered read of `table` (a reference analysis).

    `lines` are `analyzed_lines` of a query, so the first is its schema line.
    """
    nodes = parse_tree(lines[1:])
    blocks = {filter_block(f) for n in nodes if read_alias(n.text, (table,)) == table and (f := guarding_filter(n)) is not None}
    if len(blocks) != 1:
        raise UnreadablePlan(f"the reference analysis of {table} has {len(blocks)} row filters")
    return blocks.pop()


def reads_outside_filters(
    plain: list[str], wrapped: list[str], expected: Mapping[TableName, Reference], protected: Iterable[TableName]
) -> tuple[list[UnfilteredRead], str]:
    """The verdict on one plan from its two analyses, and the kind of its root operator.

    `expected` maps each protected table the plan may read to its `reference_block`.
    Raises `UnreadablePlan` when a line shaped like a node (or naming a protected read)
    did not move with the tree: text inside a node posing as one.
    """
    protected = frozenset(protected)
    start, genuine = genuine_lines(plain, wrapped)
    lines = plain[start:]
    for line, ok in zip(lines, genuine):
        if not ok and (looks_like_node(line) or candidate_reads([line], protected)):
            raise UnreadablePlan(f"text inside a node of the plan looks like a node: {line[:80]!r}")
    nodes = parse_tree(lines, genuine)
    return unfiltered_reads(nodes, expected), nodes[0].kind


def unfiltered_reads(nodes: list[Node], expected: Mapping[TableName, Reference]) -> list[UnfilteredRead]:
    """Reads of the tables in `expected` that are not right under their expected filter."""
    protected = frozenset(expected)
    sanctioned: set[int] = {n.index for v in nodes if v.kind in _STORES_QUERY for n in _subtree(v)}
    alias_ok: set[int] = set()
    for node in nodes:
        table = read_alias(node.text, protected)
        if table is None:
            continue
        guard = guarding_filter(node)
        wanted = expected[table]  # one reference block, or a set of them (leakproof placements)
        block = filter_block(guard) if guard is not None else None
        if guard is not None and block is not None and (block == wanted if isinstance(wanted, tuple) else block in wanted):
            alias_ok.add(node.index)
            sanctioned |= {n.index for n in _inner_subtree(guard)}
    found: list[UnfilteredRead] = []
    for node in nodes:
        if node.index in sanctioned:
            continue
        table = read_alias(node.text, protected)
        if table is not None and node.index not in alias_ok:
            guard = guarding_filter(node)
            how = "without a row filter" if guard is None else "under a filter that is not its row filter"
            found.append(UnfilteredRead(table, how))
            continue
        if node.kind in _SCAN_KINDS and not node.children:
            table = scanned_table(node.text, protected)
            if table is None:
                continue
            parent = node.parent
            if parent is None or node.inner or read_alias(parent.text, (table,)) != table:
                found.append(UnfilteredRead(table, "as a relation outside its table alias"))
    return found

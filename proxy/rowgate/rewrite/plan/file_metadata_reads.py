"""Where a plan uses file metadata of a protected table, read from Spark's analysed plan.

Spark adds a metadata column (`_metadata` for file sources, `_pos`, `_file`, ... for other
sources) to a relation's output only when something above refers to it, so the relation
line of a protected table in the caller's analysed plan, compared with the same line in the
proxy's own filtered read of that table (the second opinion's reference analysis), shows
every metadata column the plan uses: the attributes it has beyond the reference's.

Each use of such an attribute must be one of:

- a field on the allow list (proxy/rowgate/policy/file_metadata.py), `_metadata#12.file_name`;
- the attribute passed through by a `Project` that only passes attributes on (`SELECT *`
  around the row filter passes it up to where a field is taken);
- the relation's own output list.

Anything else (the whole struct in a function, a comparison, a grouping key, a sort, an
alias, a refused field, the plan's output) is refused, and so is a plan in which some list
is truncated (`... 3 more fields`) while it uses metadata: a use could hide there. Functions
a scan fills in from its file split are refused in any plan that reads a protected table.
Text a caller controls (a string literal that looks like a use) can only add refusals.

Pure: the orchestration is proxy/rowgate/pipeline/enforce/second_opinion.py.

>>> plan = ["id: int, f: string",
...         "Project [id#1, _metadata#3.file_name AS f#4]",
...         "+- Filter (o#2 = x)",
...         "   +- SubqueryAlias spark_catalog.d.t",
...         "      +- Relation spark_catalog.d.t[id#1,o#2,_metadata#3] parquet"]
>>> t = TableName("spark_catalog", "d", "t")
>>> ref = relation_text(["id: int, o: string", "Filter (o#7 = x)", "+- SubqueryAlias spark_catalog.d.t",
...                      "   +- Relation spark_catalog.d.t[id#6,o#7] parquet"], t)
>>> ref
'Relation spark_catalog.d.t[id#,o#] parquet'
>>> row_metadata_use(plan, {t: ref}) is None
True
>>> row_metadata_use([plan[0], plan[1].replace("file_name", "row_index"), *plan[2:]], {t: ref})
"_metadata.row_index of spark_catalog.d.t: the row's position in its file counts the hidden rows before it"
>>> row_metadata_use([plan[0], "Aggregate [_metadata#3], [count(1) AS n#4L]", *plan[2:]], {t: ref})
'_metadata of spark_catalog.d.t used as a whole (Aggregate)'
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from rowgate.policy.file_metadata import ALLOWED_FIELDS, REFUSED_FIELDS, REFUSED_FUNCTIONS
from rowgate.policy.model import TableName
from rowgate.rewrite.plan import analyzed_tree as tree

_EXPR_ID = re.compile(r"#\d+")
_ATTRIBUTE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)#(\d+)L?")
_TRUNCATED = re.compile(r"\.\.\. \d+ more fields")
# A Project that only passes attributes on: every item a bare `name#id` (a literal, a call or
# an alias would print parentheses, spaces or `AS`).
_PURE_PROJECT = re.compile(r"^Project \[[^\s,()\[\]]+#\d+L?(?:, [^\s,()\[\]]+#\d+L?)*\]$")
_FUNCTIONS = re.compile(r"\b(" + "|".join(map(re.escape, REFUSED_FUNCTIONS)) + r")\(", re.IGNORECASE)


def _relation_of(text: str, table: TableName) -> bool:
    return tree.scanned_table(text, (table,)) == table


def relation_text(lines: list[str], table: TableName) -> str:
    """The relation line of `table` in the proxy's own filtered read of it, ids blanked.

    `lines` are `analyzed_lines` of that read (the first is the schema line)."""
    found = {_EXPR_ID.sub("#", tree.node_text(line)) for line in lines[1:] if _relation_of(tree.node_text(line), table)}
    if len(found) != 1:
        raise tree.UnreadablePlan(f"the reference analysis of {table} has {len(found)} relation lines")
    return found.pop()


def row_metadata_use(lines: list[str], references: Mapping[TableName, str]) -> str | None:
    """Why the plan in `lines` (its `analyzed_lines`) learns about hidden rows from their
    files, or None. `references` maps each protected table the plan reads to its
    `relation_text`."""
    if not references:
        return None
    for line in lines:
        match = _FUNCTIONS.search(line)
        if match:
            name = match.group(1).lower()
            return f"{name}() on a protected table: {REFUSED_FUNCTIONS[name]}"
    extras: dict[tuple[str, str], TableName] = {}
    previous = ""
    scans: set[str] = set()  # the scan lines of protected tables: their own output lists
    for line in lines[1:]:
        text = tree.node_text(line)
        # A scan of a protected table: its relation line, or whatever Spark put right under the
        # table's `SubqueryAlias` (a streaming read prints `StreamingRelation FileSource[<path>]`,
        # which names no table).
        under_alias = tree.read_alias(previous, references)
        previous = text
        for table, reference in references.items():
            if not (_relation_of(text, table) or under_alias == table) or _EXPR_ID.sub("#", text) == reference:
                continue
            scans.add(text)
            (seen, total), (known, known_total) = _fields(text), _fields(reference.replace("#", "#0"))
            names = {name for name, _ in known}
            added = [(name, ident) for name, ident in seen if name not in names]
            if total > known_total and len(added) < total - known_total:
                return f"the plan reads columns of {table} that Spark's plan text does not show (a metadata column?)"
            for key in added:
                extras[key] = table
    if not extras:
        return None
    if any(_TRUNCATED.search(line) for line in lines):
        return "the plan uses file metadata of a protected table and Spark's plan text leaves out some of its fields"
    schema = lines[0]
    for (name, ident), table in extras.items():
        if schema.startswith(name + ": ") or (", " + name + ": ") in schema:
            return f"{name} of {table} in the result"
        use = re.compile(r"(?<![\w#])" + re.escape(name) + "#" + ident + r"(?![\d])L?")
        for line in lines[1:]:
            text = tree.node_text(line)
            for match in use.finditer(text):
                why = None if text in scans else _judge(text, match, name, table)
                if why is not None:
                    return why
    return None


def _fields(text: str) -> tuple[list[tuple[str, str]], int]:
    """The attributes a scan line shows, and how many it has (shown + `... n more fields`)."""
    seen = _ATTRIBUTE.findall(text)
    more = sum(int(m) for m in re.findall(r"\.\.\. (\d+) more fields", text))
    return seen, len(seen) + more


def _judge(text: str, match: re.Match, name: str, table: TableName) -> str | None:
    after = text[match.end() :]
    field = re.match(r"\.([A-Za-z_][A-Za-z0-9_]*)", after)
    if field is not None:
        if field.group(1) in ALLOWED_FIELDS.get(name, {}):
            return None
        key = f"{name}.{field.group(1)}"
        return f"{key} of {table}: {REFUSED_FIELDS.get(key, 'not on the allow list of file metadata')}"
    if _relation_of(text, table):
        return None  # the relation's own output list
    if _PURE_PROJECT.match(text):
        return None  # passed through, as is, to the operators above
    kind = tree.Node(0, 0, text, "").kind or "an expression"
    return f"{name} of {table} used as a whole ({kind})"

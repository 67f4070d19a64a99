"""The facts a rewrite reports, declared once, with how two reports of each combine.

One request carries several plans, a plan several SQL texts, a SQL text several reads: the
same fact (a table read, a policy applied, a predicate placed below a guard) is found at each
level and combined upwards, by the plan walker, by the plan result and by the pipeline's
`Findings` (pipeline/enforce/findings.py). Each fact is therefore a dataclass field that names
its merge (`fact(...)`), and `merge` is the one place that combines them: a new fact that
forgets to say how it merges fails `merge` (and tests/unit/rewrite/sql/test_facts.py) instead of
being silently dropped on the way up.

Facts hold immutable values (frozensets, tuples): a collector (`Run.found` in
rewrite/sql/run.py, `PlanFacts` in rewrite/plan/result.py, `Findings`) rebinds its own field
as it merges, so a value it took over from a result is never changed under that result.

>>> a = RewriteFacts(tables_read=frozenset({"t"}), policies_applied=("t:p",))
>>> a.merge(RewriteFacts(filtered=True, policies_applied=("s:q", "t:p")))
>>> a.filtered, sorted(a.tables_read), a.policies_applied
(True, ['t'], ('s:q', 't:p'))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from rowgate.policy.model import TableName

# How a field combines its value with another report's: (mine, theirs) -> merged.
Merge = Callable[[Any, Any], Any]
# How a pipeline fact is derived from another report as a whole: (mine, report) -> merged.
Take = Callable[[Any, Any], Any]


def either(mine: bool, theirs: bool) -> bool:
    """True when either report says so (e.g. at least one read is filtered)."""
    return mine or theirs


def union(mine: frozenset, theirs: Iterable) -> frozenset:
    """Every member of both, unordered."""
    return mine | frozenset(theirs)


def in_order(mine: tuple, theirs: Iterable) -> tuple:
    """Both, in the order first seen, each once."""
    return tuple(dict.fromkeys((*mine, *theirs)))


def in_sorted_order(mine: tuple, theirs: Iterable) -> tuple:
    """Both, each once, sorted by their text (stable for tests, the audit log and caches)."""
    return tuple(sorted({*mine, *theirs}, key=str))


def every(mine: tuple, theirs: Iterable) -> tuple:
    """Both, in order, repeats kept (one entry per statement, per command...)."""
    return (*mine, *theirs)


def fact(default: Any, merge: Merge, *, read: bool = False) -> Any:
    """A fact a rewrite reports and how two reports of it merge.

    `read` marks a fact about what is read: the plan walker also takes those from the SQL
    texts it only probes (expression strings, path names), whose other facts it ignores.
    """
    return field(default=default, metadata={"merge": merge, "read": read})


def derived(default_factory: Callable[[], Any], take: Take) -> Any:
    """A fact a collector derives from each report it merges (the pipeline's own form)."""
    return field(default_factory=default_factory, metadata={"take": take})


@dataclass(frozen=True)
class PathRead:
    """A read of files by path, e.g. ``parquet.`/warehouse/orders` `` (format "parquet").

    The rewriter does not decide on these; the pipeline refuses them for non-admins.
    `certain` is False when the reference is a two-part name that the catalog does not know
    (Spark then tries it as `<format>.<path>`), True when the first part is a known file format.
    """

    format: str
    path: str
    certain: bool = True


@dataclass(frozen=True)
class UserCode:
    """Code the client ships to run inside Spark: it can open files behind the proxy's back.

    `kind` is python_udf, java_udf, scalar_scala_udf, python_udtf or python_data_source (in
    plans), transform (TRANSFORM ... USING) or reflect (reflect/java_method) (in SQL text);
    `name` the function or data source name ("" when there is none); `action` "register"
    under a register_* command, else "call".
    """

    kind: str
    name: str = ""
    action: str = "call"


@dataclass(kw_only=True)
class Mergeable:
    """A set of facts that merges another report's facts into itself, field by field.

    Every field declares how it merges (`fact`), or how it is derived from a report
    (`derived`); a field of a subclass that is not a fact (the rewritten text, the message)
    makes that subclass a report only, never merged into.
    """

    def merge(self, other: Mergeable, *, reads_only: bool = False) -> None:
        """Combines `other`'s facts into these: each field by its own merge.

        A fact `other` does not report is left as it is. `reads_only` takes only the facts
        about what is read (see `fact`).
        """
        theirs = _field_names(type(other))
        for name, merge, take, read in _merges(type(self)):
            if take is not None:
                if not reads_only:
                    setattr(self, name, take(getattr(self, name), other))
            elif merge is not None and name in theirs and (read or not reads_only):
                setattr(self, name, merge(getattr(self, name), getattr(other, name)))

    def add(self, **facts: Any) -> None:
        """Merges the given facts, e.g. ``found.add(tables_read=(name,))``."""
        merges = _adders(type(self))
        for name, value in facts.items():
            merge = merges[name]
            if merge is None:
                raise TypeError(f"{type(self).__name__}.{name} is derived from whole reports, not added")
            setattr(self, name, merge(getattr(self, name), value))

    def values(self) -> dict[str, Any]:
        """The facts by name (shallow: to build a report from a collector)."""
        return {name: getattr(self, name) for name, _, _, _ in _merges(type(self))}


@dataclass(kw_only=True)
class RewriteFacts(Mergeable):
    """The facts every rewrite reports and the pipeline takes in the same form.

    The SQL rewriter's `RewriteResult`, the plan rewriter's `PlanFacts` and the pipeline's
    `Findings` all are these; `ReportedFacts` adds those the pipeline reads in another form.
    """

    # At least one protected read is filtered (also one that arrived with this caller's exact filters).
    filtered: bool = fact(False, either, read=True)
    # The rewriter changed what is forwarded (SQL text, plan message).
    changed: bool = fact(False, either)
    # current_user()/session_user()/user() became a literal of the caller.
    identity_bound: bool = fact(False, either, read=True)
    # Tables (not views) the request reads, after views are expanded.
    tables_read: frozenset[TableName] = fact(frozenset(), union, read=True)
    # Tables the request writes (INSERT, MERGE, df.write...).
    tables_written: frozenset[TableName] = fact(frozenset(), union)
    # The filters applied, as "<catalog>.<schema>.<table>:<policy>".
    policies_applied: tuple[str, ...] = fact((), in_sorted_order, read=True)
    # Session temp views read (lower-cased; global ones as "global_temp.<name>").
    temp_views_read: frozenset[str] = fact(frozenset(), union, read=True)
    # One-part names nothing rowgate knows explains, forwarded as `system.session.<name>`
    # (rewrite/sql/reads.py), refused unless Spark lists them (rules/unknown_relations.py).
    unknown_relations: frozenset[str] = fact(frozenset(), union, read=True)
    # Persistent views whose text was expanded in place of their name.
    views_expanded: frozenset[TableName] = fact(frozenset(), union, read=True)
    # Table-valued functions that are not known built-ins.
    table_functions: tuple[str, ...] = fact((), in_order, read=True)
    # (table, caller predicates) copied below a lookup policy's guard (rewrite/sql/leakproof.py):
    # the second opinion must expect those filters.
    leakproof_placed: tuple[tuple[TableName, str], ...] = fact((), in_sorted_order, read=True)


@dataclass(kw_only=True)
class ReportedFacts(RewriteFacts):
    """The facts the rewriters report in more detail than the pipeline keeps of them.

    `Findings` keeps the path of each file read and the operator setting of each kind of
    shipped code (its own `paths_read`, `user_code`), which is what its rules check.
    """

    # Files read by path: `read.data_source`, path options, `<format>.`<path>`` names.
    paths_read: tuple[PathRead, ...] = fact((), in_order, read=True)
    # Code shipped to run inside Spark (UDFs, data sources, TRANSFORM scripts, reflection).
    user_code: tuple[UserCode, ...] = fact((), in_order)


_Merges = tuple[tuple[str, Merge | None, Take | None, bool], ...]
_MERGES: dict[type, _Merges] = {}
_FIELD_NAMES: dict[type, frozenset[str]] = {}
_ADDERS: dict[type, dict[str, Merge | None]] = {}


def _merges(cls: type) -> _Merges:
    """Each field's merge, checked once per class: a field that declares none is an error."""
    if cls not in _MERGES:
        out = []
        for f in fields(cls):
            merge, take = f.metadata.get("merge"), f.metadata.get("take")
            if merge is None and take is None:
                raise TypeError(f"{cls.__name__}.{f.name} declares no merge: declare it with fact() or derived()")
            out.append((f.name, merge, take, bool(f.metadata.get("read"))))
        _MERGES[cls] = tuple(out)
    return _MERGES[cls]


def _adders(cls: type) -> dict[str, Merge | None]:
    if cls not in _ADDERS:
        _ADDERS[cls] = {name: merge for name, merge, _, _ in _merges(cls)}
    return _ADDERS[cls]


def _field_names(cls: type) -> frozenset[str]:
    if cls not in _FIELD_NAMES:
        _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    return _FIELD_NAMES[cls]

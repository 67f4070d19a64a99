"""The one schema of rewrite facts (rewrite/facts.py) and its one merge.

Every fact of every collector must say how it merges: a field added without one fails
here (and in `merge`) instead of being dropped between the rewriters and the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import pytest

from rowgate.pipeline.enforce.findings import Findings
from rowgate.policy.model import TableName
from rowgate.rewrite.facts import PathRead, ReportedFacts, RewriteFacts, UserCode, fact, union
from rowgate.rewrite.plan.result import CatalogOp, PlanFacts, PlanRewriteResult, TempView
from rowgate.rewrite.sql.result import RewriteResult, SessionEffects

COLLECTORS = (RewriteFacts, ReportedFacts, PlanFacts, Findings)
T1, T2 = TableName("spark_catalog", "default", "a"), TableName("spark_catalog", "default", "b")


def filled(cls: type, tag: str) -> Any:
    """An instance of `cls` whose every rewrite fact holds one value of its own (`tag`)."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        if "merge" not in f.metadata:
            continue
        default = f.default
        if isinstance(default, bool):
            values[f.name] = True
        elif isinstance(default, frozenset):
            values[f.name] = frozenset({f"{tag}-{f.name}"})
        else:
            assert default == (), f"{cls.__name__}.{f.name}: a default this test does not know"
            values[f.name] = (f"{tag}-{f.name}",)
    return cls(**values)


@pytest.mark.parametrize("cls", COLLECTORS, ids=lambda c: c.__name__)
def test_every_field_declares_its_merge(cls: type) -> None:
    for f in fields(cls):
        assert "merge" in f.metadata or "take" in f.metadata, f"{cls.__name__}.{f.name} declares no merge"


@pytest.mark.parametrize("cls", (RewriteFacts, ReportedFacts, PlanFacts), ids=lambda c: c.__name__)
def test_every_fact_merges_both_sides(cls: type) -> None:
    mine, theirs = filled(cls, "mine"), filled(cls, "theirs")
    mine.merge(theirs)
    for f in fields(cls):
        value = getattr(mine, f.name)
        if isinstance(value, bool):
            assert value is True, f.name
        else:
            assert {f"mine-{f.name}", f"theirs-{f.name}"} <= set(value), f.name


def test_merging_into_an_empty_collector_copies_every_fact() -> None:
    theirs = filled(PlanFacts, "theirs")
    empty = PlanFacts()
    empty.merge(theirs)
    assert empty == theirs


def test_a_field_without_a_merge_is_refused() -> None:
    @dataclass(kw_only=True)
    class Forgetful(RewriteFacts):
        novelty: tuple[str, ...] = field(default=())

    with pytest.raises(TypeError, match="Forgetful.novelty declares no merge"):
        Forgetful().merge(RewriteFacts())


def test_a_report_is_never_merged_into() -> None:
    with pytest.raises(TypeError, match="RewriteResult.sql declares no merge"):
        RewriteResult("SELECT 1", "query").merge(RewriteFacts())


def test_merges_keep_order_sort_or_repeat_as_declared() -> None:
    found = PlanFacts()
    found.add(policies_applied=("z:p", "a:p"), table_functions=("f", "g"), statement_kinds=("query",))
    found.add(policies_applied=("a:p",), table_functions=("g", "e"), statement_kinds=("query",))
    assert found.policies_applied == ("a:p", "z:p")  # sorted, once
    assert found.table_functions == ("f", "g", "e")  # first seen, once
    assert found.statement_kinds == ("query", "query")  # one per statement


def test_reads_only_takes_the_facts_about_reads() -> None:
    probe = filled(ReportedFacts, "probe")
    found = PlanFacts()
    found.merge(probe, reads_only=True)
    taken = {f.name for f in fields(ReportedFacts) if getattr(found, f.name) != f.default}
    assert taken == {f.name for f in fields(ReportedFacts) if f.metadata["read"]}
    # What the walker took of an expression string or a path probe before the schema.
    assert taken == {
        "filtered",
        "identity_bound",
        "tables_read",
        "policies_applied",
        "temp_views_read",
        "unknown_relations",
        "views_expanded",
        "table_functions",
        "leakproof_placed",
        "paths_read",
    }


def test_a_fact_added_to_a_collector_merges_by_its_own_rule() -> None:
    @dataclass(kw_only=True)
    class Wider(RewriteFacts):
        novelty: frozenset[str] = fact(frozenset(), union)

    wide = Wider()
    wide.merge(Wider(novelty=frozenset({"x"}), filtered=True))
    assert wide.novelty == {"x"} and wide.filtered


def sql(kind: str, **facts: Any) -> RewriteResult:
    return RewriteResult("", kind, **facts)


def test_findings_merge_a_plan_and_its_sql_texts_into_every_fact() -> None:
    select = sql(
        "explain",
        filtered=True,
        tables_read=frozenset({T2}),
        policies_applied=("b:p",),
        paths_read=(PathRead("csv", "/data/b.csv"),),
        user_code=(UserCode("transform"),),
        session_effects=SessionEffects(
            locations=("/data/loc",),
            temp_views_created=frozenset({"v2"}),
            temp_views_dropped=frozenset({"gone"}),
            use_target=("db",),
        ),
    )
    plan = PlanRewriteResult(
        object(),
        tables_read=frozenset({T1}),
        tables_written=frozenset({T2}),
        policies_applied=("a:p",),
        paths_read=(PathRead("parquet", "/data/a"),),
        paths_written=("/out",),
        locations=("/catalog/loc",),
        temp_views_read=frozenset({"tv"}),
        unknown_relations=frozenset({"u"}),
        temp_views_created=(TempView("V1", is_global=True, replace=False),),
        constructs=frozenset({"relation:read"}),
        user_code=(UserCode("scalar_scala_udf", "g"),),
        checkpoints=("local",),
        cached_relations_used=("id",),
        catalog_ops=(CatalogOp("drop_temp_view", (("view_name", "Old"),)), CatalogOp("set_current_catalog")),
        leakproof_placed=((T1, "x > 1"),),
        sql_results=(select,),
    )
    findings = Findings()
    findings.merge(plan)
    assert findings.filtered
    assert findings.tables_read == {T1, T2} and findings.tables_written == {T2}
    assert findings.policies_applied == ("a:p", "b:p")
    assert findings.paths_read == {"/data/a", "/data/b.csv"}
    assert findings.locations == {"/out", "/catalog/loc", "/data/loc"}
    assert findings.kinds == {"relation:read", "sql:explain"}
    assert findings.user_code == {"java_udf", "transform"}
    assert findings.sql_results == [select]
    assert findings.temp_views_created == {"global_temp.v1": {T1}, "v2": {T2}}
    assert findings.temp_views_dropped == {"old", "gone"}
    assert findings.moved_position and findings.explain and findings.checkpoints and findings.cached_relations_used
    assert findings.temp_views_read == {"tv"} and findings.unknown_relations == {"u"}
    assert findings.leakproof_placed == ((T1, "x > 1"),)
    assert findings.analysed_roots == []  # written by the second opinion, not by a rewrite
    merged = {f.name for f in fields(Findings) if getattr(findings, f.name) != getattr(Findings(), f.name)}
    assert merged == {f.name for f in fields(Findings)} - {
        "changed",
        "identity_bound",
        "views_expanded",
        "table_functions",
        "analysed_roots",
    }

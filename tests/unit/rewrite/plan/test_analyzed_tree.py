"""The second opinion's reading of Spark's analyzed plans, on texts captured from Spark 4.1.

The fixtures (fixtures/analyzed_plans.json, made by fixtures/capture_analyzed.py against a
real Spark Connect server) hold each plan explained as is and under the wrapper alias, and
the reference analyses of the proxy's own filtered reads. `eu` is the row filter
`region = 'eu'` of table t; `lookup` a filter that reads the lookup table `allowed`.
"""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

from rowgate.pipeline.enforce import second_opinion
from rowgate.policy.model import TableName
from rowgate.rewrite.plan import analyzed_tree as tree

FIXTURES = json.loads((Path(__file__).parent / "fixtures" / "analyzed_plans.json").read_text())
T = TableName("spark_catalog", "so_fixture", "t")
ALLOWED = TableName("spark_catalog", "so_fixture", "allowed")
PROTECTED = frozenset({T, ALLOWED})


def reference(name: str, table: TableName = T) -> tuple[str, ...]:
    return tree.reference_block(tree.analyzed_lines(FIXTURES["references"][name]), table)


def verdict(case: str, filter_name: str = "eu"):
    plain = tree.analyzed_lines(FIXTURES["cases"][case]["plain"])
    wrapped = tree.analyzed_lines(FIXTURES["cases"][case]["wrapped"])
    expected = {T: reference(filter_name), ALLOWED: reference("eu", T)}
    found, _root = tree.reads_outside_filters(plain, wrapped, expected, PROTECTED)
    return [(str(r.table), r.detail) for r in found]


def test_doctests():
    for module in (tree, second_opinion):
        failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert tried and not failures, module.__name__


def test_reference_blocks_are_the_filter_and_its_subquery_plans():
    assert reference("eu") == ("Filter (true AND (region# = eu))",)
    lookup = reference("lookup")
    assert lookup[0] == "Filter (true AND if ((SPARK_PARTITION_ID() >= 0)) region# IN (list# []) else false)"
    assert lookup[1:] == (
        ":  +- Project [region#]",
        ":     +- Filter (who# = ann@example.com)",
        ":        +- SubqueryAlias spark_catalog.so_fixture.allowed",
        ":           +- Relation spark_catalog.so_fixture.allowed[region#,who#] parquet",
    )


@pytest.mark.parametrize(
    "case", ["filtered", "join_cte_subquery", "sample", "dataframe_filter", "streaming_filter", "create_view"]
)
def test_reads_under_the_row_filter_pass(case):
    assert verdict(case) == []


def test_the_policy_lookup_read_inside_the_row_filter_is_the_policys_own():
    assert verdict("lookup_filtered", "lookup") == []
    # Checked against another filter, neither the read of t nor the lookup read passes.
    assert sorted(verdict("lookup_filtered", "eu")) == [
        (str(ALLOWED), "under a filter that is not its row filter"),
        (str(T), "under a filter that is not its row filter"),
    ]


@pytest.mark.parametrize(
    "case, detail",
    [
        ("unfiltered", "without a row filter"),
        ("wrong_filter", "under a filter that is not its row filter"),
        ("insert_unfiltered", "without a row filter"),
        ("view_unfiltered", "without a row filter"),
    ],
)
def test_reads_outside_the_row_filter_are_found(case, detail):
    assert verdict(case) == [(str(T), detail)]


def test_a_literal_that_prints_a_look_alike_filter_is_not_taken_for_one():
    plain = tree.analyzed_lines(FIXTURES["cases"]["forged_filter"]["plain"])
    # Read naively, line by line, the forged text puts the read right under the row filter:
    naive = tree.parse_tree(plain[1:])
    assert tree.unfiltered_reads(naive, {T: reference("eu")}) == []
    # The second analysis shows the look-alike did not move with the tree.
    with pytest.raises(tree.UnreadablePlan, match="looks like a node"):
        verdict("forged_filter")
    start, genuine = tree.genuine_lines(plain, tree.analyzed_lines(FIXTURES["cases"]["forged_filter"]["wrapped"]))
    assert genuine == [True, True, False, True, True]


def test_streaming_relation_text_over_several_lines_continues_its_node():
    plain = tree.analyzed_lines(FIXTURES["cases"]["streaming_filter"]["plain"])
    wrapped = tree.analyzed_lines(FIXTURES["cases"]["streaming_filter"]["wrapped"])
    start, genuine = tree.genuine_lines(plain, wrapped)
    nodes = tree.parse_tree(plain[start:], genuine)
    assert [n.kind for n in nodes] == ["Filter", "SubqueryAlias", "StreamingRelation"]
    assert any(line.startswith("Table: t") for line in nodes[-1].continuation)


def test_candidate_reads_see_every_line_naming_a_protected_read():
    plain = tree.analyzed_lines(FIXTURES["cases"]["lookup_filtered"]["plain"])
    assert tree.candidate_reads(plain, PROTECTED) == {T, ALLOWED}
    assert tree.candidate_reads(plain, {TableName("spark_catalog", "so_fixture", "other")}) == set()


def test_a_caller_alias_with_dots_is_not_a_table():
    assert tree.read_alias("SubqueryAlias `spark_catalog.so_fixture.t`", PROTECTED) is None
    assert tree.read_alias("SubqueryAlias spark_catalog.so_fixture.t", PROTECTED) == T
    assert tree.read_alias("SubqueryAlias `spark_catalog`.`so_fixture`.`T`", PROTECTED) == T


@pytest.mark.parametrize(
    "explain",
    [
        "no headers at all",
        "\n".join(tree.HEADERS + (tree.HEADERS[1],)),
        "== Parsed Logical Plan ==\n== Optimized Logical Plan ==\n== Analyzed Logical Plan ==\nX\n== Physical Plan ==",
    ],
)
def test_explain_texts_with_missing_doubled_or_reordered_sections_are_unreadable(explain):
    with pytest.raises(tree.UnreadablePlan):
        tree.analyzed_lines(explain)


def test_two_analyses_that_do_not_line_up_are_unreadable():
    plain = tree.analyzed_lines(FIXTURES["cases"]["filtered"]["plain"])
    wrapped = tree.analyzed_lines(FIXTURES["cases"]["unfiltered"]["wrapped"])
    with pytest.raises(tree.UnreadablePlan):
        tree.reads_outside_filters(plain, wrapped, {T: reference("eu")}, PROTECTED)


def test_canonical_key_ignores_plan_ids_and_call_sites():
    from pyspark.sql.connect.proto import relations_pb2

    def rel(first: int, second: int) -> relations_pb2.Relation:
        r = relations_pb2.Relation()
        r.common.plan_id = first
        r.filter.input.common.plan_id = second
        r.filter.input.sql.query = "SELECT 1"
        return r

    assert second_opinion.canonical_key(rel(7, 8)) == second_opinion.canonical_key(rel(40, 41))
    assert second_opinion.canonical_key(rel(7, 8)) != second_opinion.canonical_key(rel(8, 8))

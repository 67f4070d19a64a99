"""The file-metadata check on analysed plan texts (rewrite/plan/file_metadata_reads.py)."""

from __future__ import annotations

import pytest

from rowgate.policy.model import TableName
from rowgate.rewrite.plan.analyzed_tree import UnreadablePlan
from rowgate.rewrite.plan.file_metadata_reads import relation_text, row_metadata_use

T = TableName("spark_catalog", "d", "t")
REF = "Relation spark_catalog.d.t[id#,o#] parquet"
SCAN = "      +- Relation spark_catalog.d.t[id#1,o#2,{extra}] parquet"


def plan(top: str, schema: str = "id: int", extra: str = "_metadata#3") -> list[str]:
    return [
        schema,
        top,
        "+- Project [id#1, o#2, " + extra + "]",
        "   +- Filter (o#2 = x)",
        "      +- SubqueryAlias spark_catalog.d.t",
        SCAN.format(extra=extra).replace("      +- ", "         +- "),
    ]


def test_no_metadata_no_finding():
    lines = ["id: int", "Project [id#1]", "+- Filter (o#2 = x)", "   +- SubqueryAlias spark_catalog.d.t",
             "      +- Relation spark_catalog.d.t[id#1,o#2] parquet"]  # fmt: skip
    assert row_metadata_use(lines, {T: REF}) is None
    assert row_metadata_use(lines, {}) is None


@pytest.mark.parametrize(
    "top",
    [
        "Project [id#1, _metadata#3.file_name AS f#4]",
        "Project [id#1, _metadata#3.file_path AS f#4, _metadata#3.file_modification_time AS m#5]",
    ],
)
def test_allowed_fields(top):
    assert row_metadata_use(plan(top), {T: REF}) is None


@pytest.mark.parametrize(
    "top, why",
    [
        ("Project [id#1, _metadata#3.row_index AS r#4L]", "_metadata.row_index"),
        ("Project [id#1, _metadata#3.file_block_start AS r#4L]", "_metadata.file_block_start"),
        ("Project [id#1, _metadata#3.some_new_field AS r#4L]", "not on the allow list"),
        ("Project [id#1, to_json(_metadata#3) AS r#4]", "used as a whole (Project)"),
        # items that look like a passed-through attribute inside a call: not a pure Project
        ("Project [id#1, map(a, _metadata#3, b, _metadata#3, c, s#9) AS m#5]", "used as a whole"),
        ("Sort [_metadata#3 ASC NULLS FIRST], true", "used as a whole (Sort)"),
        ("Filter (_metadata#3.file_size > 0)", "_metadata.file_size"),
    ],
)
def test_refused_uses(top, why):
    found = row_metadata_use(plan(top), {T: REF})
    assert found is not None and why in found, found


def test_the_whole_struct_in_the_result_is_refused_even_passed_through():
    found = row_metadata_use(plan("Project [id#1, _metadata#3]", schema="id: int, _metadata: struct<>"), {T: REF})
    assert found is not None and "in the result" in found


def test_metadata_columns_of_other_sources_have_no_allowed_field():
    found = row_metadata_use(plan("Project [id#1, _pos#3L AS p#4L]", extra="_pos#3L"), {T: REF})
    assert found is not None and "_pos" in found


def test_a_truncated_relation_line_that_differs_is_refused():
    lines = plan("Project [id#1]", extra="... 2 more fields")
    found = row_metadata_use(lines, {T: REF})
    assert found is not None and "does not show" in found


def test_block_functions_are_refused_anywhere():
    lines = plan("Project [id#1, input_file_block_length() AS n#4L]")
    found = row_metadata_use(lines, {T: REF})
    assert found is not None and "input_file_block_length()" in found


def test_the_reference_must_have_one_relation_line():
    with pytest.raises(UnreadablePlan):
        relation_text(["id: int", "Project [id#1]", "+- OneRowRelation"], T)


def _streaming(top: str) -> list[str]:
    return [
        "id: int",
        top,
        "+- ~Filter (o#2 = x)",
        "   +- ~SubqueryAlias spark_catalog.d.t",
        "      +- ~StreamingRelation FileSource[file:/w/t], [id#1, o#2, _metadata#3]",
    ]


def test_a_streaming_scan_names_no_table_and_is_still_checked():
    """Review F1: `StreamingRelation FileSource[<path>]` names a path, not the table."""
    found = row_metadata_use(_streaming("~Project [id#1, _metadata#3.row_index AS r#4L]"), {T: REF})
    assert found is not None and "_metadata.row_index" in found
    assert row_metadata_use(_streaming("~Project [id#1, _metadata#3.file_name AS f#4]"), {T: REF}) is None
    plain = _streaming("~Project [id#1]")
    plain[-1] = "      +- ~StreamingRelation FileSource[file:/w/t], [id#1, o#2]"
    assert row_metadata_use(plain, {T: REF}) is None

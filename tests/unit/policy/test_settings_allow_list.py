"""The settings allow list as data, and the README that shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rowgate.policy.settings_allow_list import (
    ALLOWED_SETTINGS,
    FORCED_SETTINGS,
    NOT_LISTED,
    allowed,
    is_forced,
    markdown_table,
    refusal_reason,
)

README = Path(__file__).resolve().parents[3] / "README.md"


@pytest.mark.parametrize(
    "key",
    [
        "spark.sql.shuffle.partitions",
        "spark.sql.session.timeZone",
        "spark.sql.execution.arrow.maxRecordsPerBatch",
        "spark.sql.execution.arrow.pyspark.enabled",
        "spark.sql.adaptive.coalescePartitions.enabled",
        "spark.sql.session.localRelationCacheThreshold",
        "spark.connect.session.planCompression.threshold",
        "spark.app.name",
        "spark.sql.crossJoin.enabled",
        "spark.sql.transposeMaxValues",
        " Spark.SQL.Shuffle.Partitions ",
        "spark.sql.timestampNanosTypes.enabled",
        "spark.sql.parser.escapedStringLiterals",
        "spark.sql.pyspark.worker.logging.enabled",
    ],
)
def test_ordinary_settings_are_allowed(key):
    assert allowed(key) is not None


@pytest.mark.parametrize(
    "key",
    [
        "spark.sql.path.enabled",
        "spark.sql.defaultPath",
        "spark.sql.variable.substitute",
        "spark.sql.legacy.storeAnalyzedPlanForView",
        "spark.sql.caseSensitive",
        "spark.sql.catalog.evil",
        "spark.sql.defaultCatalog",
        "spark.sql.optimizer.excludedRules",
        "spark.sql.adaptive.optimizer.excludedRules",
        "spark.sql.adaptive.customCostEvaluatorClass",
        "spark.sql.extensions",
        "spark.sql.sources.default",
        "spark.sql.parser.quotedRegexColumnNames",
        "spark.sql.session.collation.default",
        "spark.sql.timestampType",
        "spark.sql.parquet.fieldId.read.enabled",
        "spark.hadoop.fs.defaultFS",
        "rowgate.state.version",
        "collation",
        "role",
        "spark.sql.shuffle.partitionsX",
        "spark.sql.execution.arrowX",
        "unheard.of",
    ],
)
def test_everything_else_is_refused(key):
    assert allowed(key) is None


def test_forced_settings_are_never_on_the_allow_list():
    assert {k for k, _ in FORCED_SETTINGS} >= {"spark.sql.variable.substitute", "spark.sql.path.enabled"}
    for key, _ in FORCED_SETTINGS:
        assert allowed(key) is None and is_forced(key) and is_forced(key.upper())


def test_every_entry_says_what_it_may_affect_and_refusals_say_why():
    assert all(e.affects and (e.pattern.endswith(".*") or "*" not in e.pattern) for e in ALLOWED_SETTINGS)
    assert len({e.pattern.lower() for e in ALLOWED_SETTINGS}) == len(ALLOWED_SETTINGS)
    assert "SQL path" in refusal_reason("SPARK.SQL.PATH.ENABLED")
    assert refusal_reason("spark.whatever") == NOT_LISTED
    assert "names no format" in refusal_reason("spark.sql.sources.default")


def test_the_readme_shows_the_allow_list_as_the_data_holds_it():
    assert markdown_table() in README.read_text(), "README.md: paste rowgate.policy.settings_allow_list.markdown_table()"

"""The error allow list: data that names, per Spark error class, the message parameters
relayed for filtered operations. Checked against Spark's own catalogue of error conditions
(error-conditions.json in the pinned pyspark's jars) and against the README."""

from __future__ import annotations

import glob
import json
import re
import zipfile
from pathlib import Path

import pyspark
import pytest

from rowgate.policy.error_allow_list import ALLOWED_ERRORS, allowed, markdown_table, withheld

README = Path(__file__).resolve().parents[3] / "README.md"

# Parameters that carry a row's value or an expression's text (which may be a policy's
# predicate): they must never be on the list, whatever class names them.
NEVER_RELAYED = {
    "CAST_INVALID_INPUT": {"expression"},
    "CAST_OVERFLOW": {"value"},
    "NUMERIC_VALUE_OUT_OF_RANGE.WITH_SUGGESTION": {"value"},
    "NUMERIC_VALUE_OUT_OF_RANGE.WITHOUT_SUGGESTION": {"roundedValue", "originalValue"},
    "INVALID_ARRAY_INDEX": {"indexValue", "arraySize"},
    "INVALID_ARRAY_INDEX_IN_ELEMENT_AT": {"indexValue", "arraySize"},
    "DUPLICATED_MAP_KEY": {"key"},
    "USER_RAISED_EXCEPTION": {"errorMessage"},
    "MISSING_AGGREGATION": {"expression", "expressionAnyValue"},
    "ARITHMETIC_OVERFLOW": {"message", "alternative"},
    "DATATYPE_MISMATCH.BINARY_OP_DIFF_TYPES": {"sqlExpr"},
    "DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE": {"sqlExpr", "inputSql"},
    "DATATYPE_MISMATCH.CAST_WITHOUT_SUGGESTION": {"sqlExpr"},
}


def _spark_conditions() -> dict:
    jars = Path(pyspark.__file__).parent / "jars"
    (jar,) = glob.glob(str(jars / "spark-common-utils_*.jar"))
    return json.loads(zipfile.ZipFile(jar).read("error/error-conditions.json"))


def _spark_parameters(conditions: dict, name: str) -> set[str] | None:
    top, _, sub = name.partition(".")
    if top not in conditions:
        return None
    text = " ".join(conditions[top]["message"])
    if sub:
        if sub not in conditions[top].get("subClass", {}):
            return None
        text += " ".join(conditions[top]["subClass"][sub]["message"])
    return set(re.findall(r"<(\w+)>", text))


@pytest.mark.parametrize("name", sorted(ALLOWED_ERRORS))
def test_every_class_and_parameter_is_sparks(name):
    known = _spark_parameters(_spark_conditions(), name)
    assert known is not None, f"{name} is not an error class of the pinned Spark"
    assert set(ALLOWED_ERRORS[name].params) <= known


@pytest.mark.parametrize("name", sorted(ALLOWED_ERRORS))
def test_the_sentence_names_only_relayed_parameters(name):
    entry = ALLOWED_ERRORS[name]
    assert entry.placeholders() <= set(entry.params)
    sentence = entry.render({p: f"<{p}>" for p in entry.params})
    assert sentence and sentence.endswith(".")


@pytest.mark.parametrize("name", sorted(NEVER_RELAYED))
def test_parameters_that_quote_values_or_expressions_are_never_relayed(name):
    entry = allowed(name)
    assert entry is not None
    assert not set(entry.params) & NEVER_RELAYED[name]


def test_a_missing_parameter_gives_no_sentence():
    assert allowed("TABLE_OR_VIEW_NOT_FOUND").render({}) is None
    assert allowed("MISSING_GROUP_BY").render({"anything": "x"}) == "The query does not include a GROUP BY clause."


def test_withheld_names_only_a_well_formed_class():
    assert withheld("DIVIDE_BY_ZERO").endswith("(error class DIVIDE_BY_ZERO).")
    assert "region" not in withheld("x'; region = 'apac")
    assert withheld(None, "org.apache.spark.SparkException").endswith("(org.apache.spark.SparkException, no error class).")
    assert withheld(None, "not a class name; 'secret'").endswith("(an error without an error class).")


def test_the_readme_prints_the_list():
    assert markdown_table() in README.read_text(), "paste markdown_table() into the README's threat model"

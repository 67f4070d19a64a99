"""The classifier of policy filters: setting-independent only when built from the allow list
with operands of one type family; everything else depends on the time zone or ANSI mode."""

import pytest

from rowgate.policy.model import TableName
from rowgate.policy.predicate_semantics import dependence, family, lookup_tables

T = TableName("spark_catalog", "sales", "orders")
L = TableName("spark_catalog", "sales", "allowed")
TYPES = {
    T: {"region": "string", "owner": "string", "ts": "timestamp", "ts2": "timestamp", "ntz": "timestamp_ntz",
        "d": "date", "n": "int", "amount": "decimal(10,2)", "flag": "boolean", "code": "string"},
    L: {"region": "string", "who": "string", "n": "bigint"},
}  # fmt: skip


@pytest.mark.parametrize(
    "text",
    [
        "region = 'EU'",
        "TRUE",
        "flag",
        "NOT flag AND (region = 'EU' OR owner = SESSION_USER())",
        "owner = current_user()",
        "region IN ('EU', 'US') AND n NOT IN (1, -2)",
        "n BETWEEN 1 AND 10 AND amount > 2.5",
        "region IS NULL OR flag IS NOT TRUE",
        "d >= DATE '2024-01-01'",
        "ts < ts2",
        "region <=> NULL",
        "owner LIKE 'a%'",
        "region IN (SELECT region FROM allowed WHERE who = SESSION_USER())",
        "EXISTS (SELECT 1 FROM allowed a WHERE a.region = orders.region AND a.who = current_user())",
        "n IN (SELECT a.n FROM sales.allowed AS a WHERE a.who = session_user())",
    ],
)
def test_setting_independent(text):
    assert dependence(text, T, TYPES) is None


@pytest.mark.parametrize(
    "text, why",
    [
        ("CAST(ts AS DATE) = current_date()", "casts"),
        ("d = current_date()", "calls current_date()"),
        ("hour(ts) < 12", "calls hour()"),
        ("ts >= '2024-01-01'", "compares timestamp with string"),
        ("ts < TIMESTAMP '2024-01-02 00:00:00'", "casts"),
        ("ntz < TIMESTAMP_NTZ '2024-01-02 00:00:00'", "casts"),
        ("d = '2024-01-01'", "compares date with string"),
        ("try_cast(code AS INT) > 10", ""),
        ("n = '1.5'", "compares numeric with string"),
        ("code = 10", "compares string with numeric"),
        ("n + 1 > 0", "computes"),
        ("lower(region) = 'eu'", "calls lower()"),
        ("ts = d", "compares timestamp with date"),
        ("mystery = 'x'", "not known"),
        ("region IN (SELECT region FROM unknown_table)", "not known"),
        ("region IN (SELECT who FROM allowed UNION SELECT 'x')", "subquery"),
        ("n IN (SELECT region FROM allowed)", "compares numeric with string"),
        ("d >= DATE '2024-1-1'", "casts"),
        ("CAST('2024-02-30' AS DATE) IS NULL", "casts"),
        ("flag = (n > 0)", ""),
    ],
)
def test_setting_dependent(text, why):
    reason = dependence(text, T, TYPES)
    assert reason is not None and why in reason, reason


def test_unknown_schema_depends():
    assert dependence("region = 'EU'", T, {}) is not None
    assert dependence("TRUE", T, {}) is None


def test_ambiguous_column_in_a_subquery_is_unknown():
    # `n` is both orders.n (int) and allowed.n (bigint): resolved innermost first as Spark does
    assert dependence("region IN (SELECT region FROM allowed WHERE n = 1)", T, TYPES) is None
    assert dependence("region IN (SELECT region FROM allowed WHERE region = 1)", T, TYPES) is not None


def test_lookup_tables_are_qualified_against_the_policy_table():
    assert lookup_tables("r IN (SELECT r FROM allowed) OR EXISTS (SELECT 1 FROM other.x)", T) == {
        L,
        TableName("spark_catalog", "other", "x"),
    }


def test_families():
    assert family("BIGINT") == family("double") == "numeric"
    assert family("char(2)") == "string"
    assert family("struct<a:int>") is None

"""Policy files: YAML round trip, determinism, strict validation, and the apply plan."""

from __future__ import annotations

import pytest

from rowgate.admin.policy_files import (
    Change,
    PolicyFileError,
    PolicySpec,
    TableNameError,
    dump_policies,
    format_table,
    load_policies,
    parse_table,
    plan_apply,
)
from rowgate.policy.model import TableName

T_ORDERS = TableName("spark_catalog", "sales", "orders")
T_ITEMS = TableName("spark_catalog", "sales", "items")


def spec(table=T_ORDERS, name="p", grantees=("allAuthenticatedUsers",), filter="TRUE") -> PolicySpec:
    return PolicySpec(table, name, tuple(grantees), filter)


# -- table names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("t", ("spark_catalog", "default", "t")),
        ("Sales.Orders", ("spark_catalog", "sales", "orders")),
        ("cat.db.t", ("cat", "db", "t")),
        ("  cat.db.t ", ("cat", "db", "t")),
        ("`my.cat`.`d``b`.t", ("my.cat", "d`b", "t")),
    ],
)
def test_parse_table(text, expected):
    assert parse_table(text) == TableName(*expected)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "required"),
        ("a.b.c.d", "at most 3"),
        ("a..b", "empty part"),
        ("`unterminated", "unterminated"),
    ],
)
def test_parse_table_errors(text, message):
    with pytest.raises(TableNameError, match=message):
        parse_table(text)


def test_format_table_quotes_only_what_needs_it():
    assert format_table(T_ORDERS) == "spark_catalog.sales.orders"
    weird = TableName("my.cat", "d`b", "t-1")
    assert format_table(weird) == "`my.cat`.`d``b`.`t-1`"
    assert parse_table(format_table(weird)) == weird


# -- writing and reading -----------------------------------------------------------------------


def test_round_trip_keeps_every_field():
    specs = [
        spec(T_ORDERS, "emea", ("group:emea@example.com", "user:Ann@Example.COM"), "region = 'EMEA'"),
        spec(T_ORDERS, "full", ("user:admin@example.com",), "TRUE"),
        spec(T_ITEMS, "mine", ("domain:example.com",), "owner = SESSION_USER()\n  AND NOT hidden"),
        spec(TableName("c", "my db", "t"), "Odd: name", ("allUsers",), "x = 'it''s: # not a comment'"),
    ]
    text = dump_policies(specs)
    loaded = load_policies(text, "x.yaml")
    assert {s.key: s for s in loaded} == {s.key: s.normalized() for s in specs}
    # grantees come back canonical: domains lower-cased, local parts kept
    emea = next(s for s in loaded if s.name == "emea")
    assert emea.grantees == ("group:emea@example.com", "user:Ann@example.com")


def test_dump_is_deterministic_and_sorted():
    a = spec(T_ORDERS, "b_policy", ("user:z@example.com", "user:a@example.com"))
    b = spec(T_ORDERS, "A_policy")
    c = spec(T_ITEMS, "zzz")
    one = dump_policies([a, b, c])
    two = dump_policies([c, b, a])
    assert one == two
    lines = [line for line in one.splitlines() if not line.startswith("#")]
    assert lines[0] == "- table: spark_catalog.sales.items"
    names = [line.split(": ", 1)[1] for line in lines if line.startswith("  name:")]
    assert names == ["zzz", "A_policy", "b_policy"]
    assert one.index("user:a@example.com") < one.index("user:z@example.com")


def test_dump_layout():
    text = dump_policies([spec(T_ORDERS, "p", ("user:a@example.com",), "a = 1\nOR b = 2"), spec(T_ITEMS, "t", filter="TRUE")])
    assert text.startswith("# Row access policies")
    assert "  grantees:\n    - user:a@example.com\n" in text
    assert "  filter: |-\n    a = 1\n    OR b = 2\n" in text
    assert "  filter: 'TRUE'\n" in text  # quoted, so it is not read back as a boolean


def test_long_filters_are_not_folded():
    long = " OR ".join(f"region = 'r{i}'" for i in range(60))
    text = dump_policies([spec(filter=long)])
    assert f"filter: {long}\n" in text


def test_empty_list_round_trip():
    assert load_policies(dump_policies([])) == []


def test_grantees_default_to_all_authenticated_users():
    [s] = load_policies("- {table: t, name: p, filter: 'x > 1'}")
    assert s.grantees == ("allAuthenticatedUsers",)
    assert s.table == TableName("spark_catalog", "default", "t")


# -- validation errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "in.yaml: the file has no policies; write []"),
        ("table: t", "expected a list of policies"),
        (
            "- table: t\n  name: p\n  filter: x\n  grantee: [allUsers]\n",
            "in.yaml:1: policy #1: unknown key 'grantee'; the keys are table, name, grantees, filter",
        ),
        ("- name: p\n  filter: x\n", "policy #1: table is missing"),
        ("- table: t\n  filter: x\n", "policy #1: name is missing"),
        ("- table: t\n  name: p\n", "in.yaml:1: policy #1 (spark_catalog.default.t p): filter is missing"),
        (
            "- table: t\n  name: p\n  filter: TRUE\n",
            "filter must be a string, got a boolean; YAML read it as the boolean true: quote it, e.g. filter: 'TRUE'",
        ),
        ("- table: t\n  name: p\n  filter: '  '\n", "filter is empty"),
        ("- table: t\n  name: 12\n  filter: x\n", "name must be a string, got a number; quote it"),
        ("- table: a.b.c.d\n  name: p\n  filter: x\n", "policy #1: table: table name 'a.b.c.d' has 4 parts"),
        ("- table: t\n  name: p\n  grantees: user:a@example.com\n  filter: x\n", "grantees must be a list of members"),
        ("- table: t\n  name: p\n  grantees: []\n  filter: x\n", "grantees must be a non-empty list"),
        (
            "- table: t\n  name: p\n  grantees: [alice@example.com]\n  filter: x\n",
            "grantee 'alice@example.com' is not a member: member 'alice@example.com' has no kind; write e.g. 'user:alice@example.com'",
        ),
        ("- table: t\n  name: p\n  grantees: [User:a@example.com]\n  filter: x\n", "unknown member kind 'User'"),
        ("- table: t\n  name: p\n  filter: x\n  name: q\n", "found the key 'name' twice"),
        (
            "- table: t\n  name: [p\n",
            "in.yaml:3:1: not valid YAML: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence at line 2)",
        ),
        ("- just a string\n", "policy #1: expected a mapping with keys table, name, grantees, filter, got a string"),
        ("- table: t\n  name: ' p'\n  filter: x\n", "leading or trailing whitespace"),
    ],
)
def test_validation_errors_are_clear(text, message):
    with pytest.raises(PolicyFileError) as info:
        load_policies(text, "in.yaml")
    assert message in str(info.value)


def test_filter_missing_names_the_policy():
    with pytest.raises(PolicyFileError, match=r"in\.yaml:1: policy #1 \(spark_catalog\.default\.t p\): filter is missing"):
        load_policies("- table: t\n  name: p\n", "in.yaml")


def test_duplicate_policy_names_are_case_insensitive_and_point_at_both():
    text = "- table: sales.orders\n  name: p\n  filter: x\n- table: spark_catalog.Sales.ORDERS\n  name: P\n  filter: y\n"
    with pytest.raises(PolicyFileError) as info:
        load_policies(text, "in.yaml")
    assert str(info.value) == (
        "in.yaml:4: policy #2 (spark_catalog.sales.orders P) repeats policy #1 (line 1);"
        " policy names are unique per table, case-insensitively"
    )


def test_error_line_numbers_point_at_the_policy():
    text = "- table: t\n  name: ok\n  filter: x\n\n- table: t\n  name: bad\n  filter: x\n  grantees: [nobody]\n"
    with pytest.raises(PolicyFileError, match=r"^in\.yaml:5: policy #2 \(spark_catalog\.default\.t bad\): grantee 'nobody'"):
        load_policies(text, "in.yaml")


def test_unsafe_yaml_tags_are_refused():
    with pytest.raises(PolicyFileError, match="not valid YAML"):
        load_policies("- !!python/object/apply:os.system ['true']\n", "in.yaml")


# -- the apply plan ----------------------------------------------------------------------------


def test_plan_creates_replaces_and_leaves_alone():
    current = [spec(name="same", grantees=("user:b@example.com", "user:a@Example.com")), spec(name="changed", filter="x = 1")]
    desired = [
        spec(name="same", grantees=("user:a@example.com", "user:b@example.com")),  # order and domain case do not matter
        spec(name="changed", filter="x = 2"),
        spec(name="new"),
    ]
    plan = plan_apply(desired, current)
    assert [(c.action, c.spec.name) for c in plan] == [("replace", "changed"), ("create", "new"), ("unchanged", "same")]


def test_plan_prunes_last_and_only_with_prune():
    current = [spec(name="keep"), spec(name="gone"), spec(T_ITEMS, "other")]
    desired = [spec(name="keep"), spec(name="added")]
    assert [c.action for c in plan_apply(desired, current)] == ["create", "unchanged"]
    plan = plan_apply(desired, current, prune=True)
    assert [(c.action, c.spec.name) for c in plan] == [
        ("create", "added"),
        ("unchanged", "keep"),
        ("drop", "other"),
        ("drop", "gone"),
    ]


def test_plan_treats_grantee_and_name_spelling_changes_as_changes():
    current = [spec(name="P", grantees=("user:a@example.com",))]
    assert plan_apply([spec(name="p", grantees=("user:a@example.com",))], current)[0] == Change(
        "replace", spec(name="p", grantees=("user:a@example.com",))
    )
    assert plan_apply([spec(name="P", grantees=("user:A@example.com",))], current)[0].action == "replace"
    assert plan_apply([spec(name="P", grantees=("user:a@example.com",), filter=" TRUE ")], current)[0].action == "unchanged"


def test_empty_file_with_prune_drops_everything():
    current = [spec(name="a"), spec(name="b")]
    assert [c.action for c in plan_apply(load_policies("[]"), current, prune=True)] == ["drop", "drop"]

import pytest

from rowgate.policy.ddl import (
    CreatePolicy,
    DropAllPolicies,
    DropPolicy,
    PolicyDdlError,
    ShowPolicies,
    ShowPolicyHistory,
    looks_like_policy_ddl,
    parse_policy_ddl,
)


def at(sql: str, needle: str, occurrence: int = 1) -> tuple[int, int]:
    """(line, column) of the n-th `needle` in `sql`, 1-based, as PolicyDdlError reports it."""
    offset = -1
    for _ in range(occurrence):
        offset = sql.index(needle, offset + 1)
    line = sql.count("\n", 0, offset) + 1
    return line, offset - (sql.rfind("\n", 0, offset) + 1) + 1


def error(sql: str) -> PolicyDdlError:
    with pytest.raises(PolicyDdlError) as e:
        parse_policy_ddl(sql)
    return e.value


# --- recognition -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE ROW ACCESS POLICY p ON t FILTER USING (TRUE)",
        "create or replace row access policy p on t filter using (true)",
        "  \n\tCreate  Or\nReplace ROW   access POLICY",
        "/* x */ create row access policy",
        "-- c\n CREATE ROW ACCESS POLICY p",
        "/* outer /* nested */ still comment */ DROP ROW ACCESS POLICY p ON t",
        "/**/--\n--x\nDROP/**/ALL/* */ROW--\nACCESS POLICIES ON t",
        "drop all row access policies on t",
        "SHOW ROW ACCESS POLICIES",
        "show row access",
        "CREATE ROW ACCESS garbage",  # starts like one: must be parsed (and fail), not forwarded
    ],
)
def test_recognises_policy_statements(sql):
    assert looks_like_policy_ddl(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "",
        "   ",
        "SELECT * FROM t",
        "CREATE TABLE t (a INT)",
        "CREATE OR REPLACE VIEW v AS SELECT 1",
        "DROP TABLE row_access",
        "SHOW TABLES",
        "CREATE ROW FORMAT",
        "SELECT 'CREATE ROW ACCESS POLICY'",
        "/* CREATE ROW ACCESS POLICY */ SELECT 1",
        "-- CREATE ROW ACCESS POLICY\nSELECT 1",
        "/* unterminated CREATE ROW ACCESS",
        "/* a /* b */ CREATE ROW ACCESS POLICY */ SELECT 1",  # nested: still inside the comment
        "CREATEROW ACCESS",
        "DROP ALL TABLES",
    ],
)
def test_ignores_other_statements(sql):
    assert not looks_like_policy_ddl(sql)


# --- CREATE ------------------------------------------------------------------------------------


def test_create_minimal():
    stmt = parse_policy_ddl("CREATE ROW ACCESS POLICY eu ON sales.orders FILTER USING (region = 'EU')")
    assert stmt == CreatePolicy(
        name="eu",
        table=("sales", "orders"),
        grantees=("allAuthenticatedUsers",),
        filter_sql="region = 'EU'",
        replace=False,
        if_not_exists=False,
    )


def test_create_full_with_comments_newlines_backticks_and_semicolon():
    sql = """
    /* header /* nested */ */
    Create Or Replace Row Access Policy `eu.only` -- the name has a dot
      ON `spark_catalog`.`sales`.`orders.2024`
      GRANT TO ('user:Alice@Example.COM', "group:eu-analysts@example.com" , 'domain:Example.org')
      FILTER USING (
          region = 'EU' /* keep me */
          AND amount > (SELECT min(limit) FROM limits WHERE who = SESSION_USER())
      ) ;  -- done
    """
    stmt = parse_policy_ddl(sql)
    assert isinstance(stmt, CreatePolicy)
    assert stmt.name == "eu.only"
    assert stmt.table == ("spark_catalog", "sales", "orders.2024")
    assert stmt.grantees == ("user:Alice@example.com", "group:eu-analysts@example.com", "domain:example.org")
    assert stmt.filter_sql == (
        "region = 'EU' /* keep me */\n          AND amount > (SELECT min(limit) FROM limits WHERE who = SESSION_USER())"
    )
    assert stmt.replace and not stmt.if_not_exists


def test_create_if_not_exists_one_part_table():
    stmt = parse_policy_ddl("create row access policy if not exists p on t filter using (true);")
    assert stmt == CreatePolicy("p", ("t",), ("allAuthenticatedUsers",), "true", False, True)


def test_policy_named_if_is_a_name_not_a_clause():
    assert parse_policy_ddl("CREATE ROW ACCESS POLICY if ON t FILTER USING (TRUE)").name == "if"
    assert parse_policy_ddl("DROP ROW ACCESS POLICY if ON t") == DropPolicy("if", ("t",), False)


def test_backtick_escape_and_reserved_word_quoted():
    stmt = parse_policy_ddl("CREATE ROW ACCESS POLICY `on` ON `a``b`.`filter` FILTER USING (x)")
    assert stmt.name == "on"
    assert stmt.table == ("a`b", "filter")


def test_duplicate_grantees_are_collapsed_by_canonical_form():
    stmt = parse_policy_ddl("CREATE ROW ACCESS POLICY p ON t GRANT TO ('user:a@X.com', 'user:a@x.com') FILTER USING (x)")
    assert stmt.grantees == ("user:a@x.com",)


def test_public_grantees():
    stmt = parse_policy_ddl("CREATE ROW ACCESS POLICY p ON t GRANT TO ('allUsers','allAuthenticatedUsers') FILTER USING (x)")
    assert stmt.grantees == ("allUsers", "allAuthenticatedUsers")


@pytest.mark.parametrize(
    "filter_sql",
    [
        "TRUE",
        "region = 'EU'",
        "owner = session_user()",
        "owner = SESSION_USER",
        "region IN (SELECT region FROM acl WHERE email = SESSION_USER())",
        "EXISTS (SELECT 1 FROM acl a WHERE a.id = id)",
        "is_public",
        "array_contains(tags, 'eu')",
        "CASE WHEN a > 1 THEN true ELSE false END",
        "NOT (a = 1 OR b IS NULL)",
        "(a = 1)",
        "a BETWEEN 1 AND 3 AND b LIKE 'x%'",
        "x = ')' AND y = '('",  # parentheses inside strings do not count
    ],
)
def test_valid_filters_keep_the_text(filter_sql):
    stmt = parse_policy_ddl(f"CREATE ROW ACCESS POLICY p ON t FILTER USING ( {filter_sql} )")
    assert stmt.filter_sql == filter_sql


# --- DROP / SHOW -------------------------------------------------------------------------------


def test_drop_forms():
    assert parse_policy_ddl("DROP ROW ACCESS POLICY p ON a.b.c") == DropPolicy("p", ("a", "b", "c"), False)
    assert parse_policy_ddl("drop row access policy if exists `P` on t;") == DropPolicy("P", ("t",), True)
    assert parse_policy_ddl("DROP ALL ROW ACCESS POLICIES ON db.t") == DropAllPolicies(("db", "t"))
    assert parse_policy_ddl("-- x\ndrop all row access policies on `d.x`.t ;") == DropAllPolicies(("d.x", "t"))


def test_show_forms():
    assert parse_policy_ddl("SHOW ROW ACCESS POLICIES") == ShowPolicies(None)
    assert parse_policy_ddl("show row access policies;") == ShowPolicies(None)
    assert parse_policy_ddl("SHOW ROW ACCESS POLICIES ON c.s.t") == ShowPolicies(("c", "s", "t"))
    assert parse_policy_ddl("show /* c */ row access policies on `t`; -- end") == ShowPolicies(("t",))


def test_show_history_forms():
    assert looks_like_policy_ddl("SHOW ROW ACCESS POLICY HISTORY")
    assert parse_policy_ddl("SHOW ROW ACCESS POLICY HISTORY") == ShowPolicyHistory(None)
    assert parse_policy_ddl("show row access policy history;") == ShowPolicyHistory(None)
    assert parse_policy_ddl("SHOW ROW ACCESS POLICY HISTORY ON s.t") == ShowPolicyHistory(("s", "t"))
    assert parse_policy_ddl("show /* c */ row access policy -- x\n history on `c`.s.`t`") == ShowPolicyHistory(("c", "s", "t"))


def test_show_history_errors():
    sql = "SHOW ROW ACCESS POLICY HISTORY FOR t"
    e = error(sql)
    assert e.position == at(sql, "FOR") and "expected ON <table> or end of statement" in str(e)
    sql = "SHOW ROW ACCESS POLICY HISTORIES"
    e = error(sql)
    assert e.position == at(sql, "POLICY") and "found POLICY 'HISTORIES'" in str(e)


# --- errors ------------------------------------------------------------------------------------


def test_misspelled_filter_after_grant():
    sql = "CREATE ROW ACCESS POLICY p ON t GRANT TO ('allUsers') FILTR USING (x)"
    e = error(sql)
    assert e.position == at(sql, "FILTR")
    assert str(e) == f"line 1, column {at(sql, 'FILTR')[1]}: expected FILTER USING, found 'FILTR'"


def test_missing_filter():
    sql = "CREATE ROW ACCESS POLICY p ON t"
    e = error(sql)
    assert "expected GRANT TO or FILTER USING, found end of statement" in str(e)
    assert e.position == (1, len(sql) + 1)


def test_missing_filter_after_grant():
    e = error("CREATE ROW ACCESS POLICY p ON t GRANT TO ('allUsers');")
    assert "expected FILTER USING, found ';'" in str(e)


def test_missing_using():
    sql = "CREATE ROW ACCESS POLICY p ON t FILTER (x)"
    e = error(sql)
    assert e.position == at(sql, "(")
    assert "expected USING, found '('" in str(e)


def test_missing_on():
    sql = "CREATE ROW ACCESS POLICY p\n  t FILTER USING (x)"
    e = error(sql)
    assert e.position == (2, 3)
    assert "expected ON, found 't'" in str(e)


def test_missing_policy_name():
    sql = "CREATE ROW ACCESS POLICY ON t FILTER USING (x)"
    e = error(sql)
    assert e.position == at(sql, "ON")
    assert "expected policy name, found 'ON'" in str(e)


def test_missing_table():
    sql = "DROP ROW ACCESS POLICY p ON ;"
    e = error(sql)
    assert e.position == at(sql, ";")
    assert "expected table name" in str(e)


def test_too_many_table_parts():
    sql = "DROP ALL ROW ACCESS POLICIES ON a.b.c.d"
    e = error(sql)
    assert e.position == at(sql, ".", 3)
    assert "at most 3 parts" in str(e)


def test_unbalanced_parentheses():
    sql = "CREATE ROW ACCESS POLICY p ON t FILTER USING (a IN (1, 2)"
    e = error(sql)
    assert e.position == at(sql, "(")
    assert "unbalanced parentheses" in str(e)


def test_extra_closing_parenthesis():
    sql = "CREATE ROW ACCESS POLICY p ON t FILTER USING (a = 1))"
    e = error(sql)
    assert e.position == (1, len(sql))
    assert "expected end of statement, found ')'" in str(e)


def test_empty_grantee_list():
    sql = "CREATE ROW ACCESS POLICY p ON t GRANT TO () FILTER USING (x)"
    e = error(sql)
    assert e.position == at(sql, ")")
    assert "expected a grantee string" in str(e)


def test_grantee_must_be_a_string():
    sql = "CREATE ROW ACCESS POLICY p ON t GRANT TO (user) FILTER USING (x)"
    assert error(sql).position == at(sql, "user")


def test_grantee_list_needs_parentheses():
    sql = "CREATE ROW ACCESS POLICY p ON t GRANT TO 'allUsers' FILTER USING (x)"
    e = error(sql)
    assert e.position == at(sql, "'allUsers'")
    assert "expected '(' before the grantee list" in str(e)


def test_trailing_comma_in_grantees():
    sql = "CREATE ROW ACCESS POLICY p ON t GRANT TO ('allUsers',) FILTER USING (x)"
    assert error(sql).position == at(sql, ")")


@pytest.mark.parametrize("bad", ["alice@example.com", "user:not-an-email", "User:a@b.com", "allUsers:x", "user:a@b.com "])
def test_bad_member(bad):
    sql = f"CREATE ROW ACCESS POLICY p ON t GRANT TO ('allUsers', '{bad}') FILTER USING (x)"
    e = error(sql) if bad != "user:a@b.com " else None
    if e is None:  # surrounding whitespace is forgiven
        assert parse_policy_ddl(sql).grantees == ("allUsers", "user:a@b.com")
        return
    assert e.position == at(sql, f"'{bad}'")
    assert f"invalid grantee '{bad}'" in str(e)


def test_trailing_garbage():
    sql = "DROP ROW ACCESS POLICY p ON t now"
    e = error(sql)
    assert e.position == at(sql, "now")
    assert "expected end of statement, found 'now'" in str(e)


def test_two_statements():
    sql = "DROP ROW ACCESS POLICY p ON t; DROP TABLE t"
    e = error(sql)
    assert e.position == at(sql, "DROP", 2)
    assert "only one statement is allowed" in str(e)


def test_two_semicolons():
    sql = "SHOW ROW ACCESS POLICIES;;"
    assert error(sql).position == (1, len(sql))


def test_empty_filter():
    sql = "CREATE ROW ACCESS POLICY p ON t FILTER USING ( /* nothing */ )"
    e = error(sql)
    assert e.position == (1, len(sql))
    assert "empty filter" in str(e)


@pytest.mark.parametrize(
    "filter_sql, word",
    [
        ("INSERT INTO t VALUES (1)", "INSERT"),
        ("DELETE FROM t", "DELETE"),
        ("UPDATE t SET a = 1", "UPDATE"),
        ("DROP TABLE t", "DROP"),
        ("CREATE TABLE x (a INT)", "CREATE"),
        ("EXECUTE IMMEDIATE 'x'", "EXECUTE"),
        ("TRUNCATE TABLE t", "TRUNCATE"),
    ],
)
def test_dml_in_filter(filter_sql, word):
    sql = f"CREATE ROW ACCESS POLICY p ON t FILTER USING ({filter_sql})"
    e = error(sql)
    assert e.position == at(sql, filter_sql)
    assert "may not contain" in str(e) and word in str(e)


def test_semicolon_inside_filter():
    sql = "CREATE ROW ACCESS POLICY p ON t FILTER USING (a = 1; DELETE FROM t)"
    e = error(sql)
    assert e.position == at(sql, ";")


@pytest.mark.parametrize("filter_sql", ["1 + 2", "'EU'", "42", "a AS b", "NULL", "*"])
def test_non_boolean_filter(filter_sql):
    e = error(f"CREATE ROW ACCESS POLICY p ON t FILTER USING ({filter_sql})")
    assert "boolean expression" in str(e)


def test_query_as_filter_needs_its_own_parentheses():
    e = error("CREATE ROW ACCESS POLICY p ON t FILTER USING (SELECT flag FROM x)")
    assert "found a query" in str(e)
    ok = parse_policy_ddl("CREATE ROW ACCESS POLICY p ON t FILTER USING ((SELECT flag FROM x))")
    assert ok.filter_sql == "(SELECT flag FROM x)"


def test_filter_may_not_run_jvm_code():
    e = error("CREATE ROW ACCESS POLICY p ON t FILTER USING (reflect('java.lang.System', 'exit', 0) IS NULL)")
    assert "reflect()" in str(e)
    e = error("CREATE ROW ACCESS POLICY p ON t FILTER USING (x IN (SELECT TRANSFORM(a) USING 'sh' FROM y))")
    assert "may not contain" in str(e)


def test_syntax_error_inside_filter_points_into_the_filter():
    sql = "CREATE ROW ACCESS POLICY p ON t\nFILTER USING (a = = 1)"
    e = error(sql)
    assert e.position[0] == 2 and e.position[1] >= at(sql, "a =")[1]
    assert "invalid filter" in str(e)


def test_or_replace_with_if_not_exists():
    sql = "CREATE OR REPLACE ROW ACCESS POLICY IF NOT EXISTS p ON t FILTER USING (x)"
    e = error(sql)
    assert e.position == at(sql, "IF")
    assert "OR REPLACE and IF NOT EXISTS cannot be combined" in str(e)


def test_unknown_keyword_after_show():
    sql = "SHOW ROW ACCESS POLICIES FOR t"
    e = error(sql)
    assert e.position == at(sql, "FOR")
    assert "expected ON <table> or end of statement, found 'FOR'" in str(e)


def test_show_singular_policy():
    sql = "SHOW ROW ACCESS POLICY"
    e = error(sql)
    assert e.position == at(sql, "POLICY")
    assert "expected POLICIES or POLICY HISTORY after ROW ACCESS, found POLICY end of statement" in str(e)


def test_drop_policies_without_all():
    sql = "DROP ROW ACCESS POLICIES ON t"
    e = error(sql)
    assert e.position == at(sql, "POLICIES")
    assert "DROP ALL ROW ACCESS POLICIES" in str(e)


def test_create_or_without_replace():
    sql = "CREATE OR ROW ACCESS POLICY p ON t FILTER USING (x)"
    e = error(sql)
    assert e.position == at(sql, "ROW")
    assert "expected REPLACE, found 'ROW'" in str(e)


def test_unterminated_string_and_comment():
    sql = "CREATE ROW ACCESS POLICY p ON t FILTER USING (a = 'EU)"
    e = error(sql)
    assert e.position == at(sql, "'EU")
    assert "unterminated string" in str(e)
    sql = "DROP ROW ACCESS POLICY p ON t /* open"
    e = error(sql)
    assert e.position == at(sql, "/*")
    assert "unterminated comment" in str(e)
    sql = "DROP ROW ACCESS POLICY p ON\n `t"
    assert error(sql).position == (2, 2)
    assert "unterminated quoted identifier" in str(error(sql))


def test_not_policy_ddl_at_all():
    e = error("SELECT 1")
    assert e.position == (1, 1)
    assert "expected CREATE, DROP or SHOW" in str(e)


def test_error_is_a_value_error_with_message():
    e = error("DROP ROW ACCESS POLICY p")
    assert isinstance(e, ValueError)
    assert e.message == "expected ON, found end of statement"

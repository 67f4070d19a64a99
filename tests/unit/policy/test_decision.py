from sqlglot import exp

from rowgate.identity.caller import ANONYMOUS, Caller
from rowgate.policy.decision import applied_policies, has_full_access, row_filter

from .helpers import policy

ALICE = Caller("user:alice@example.com", groups=frozenset({"eu@example.com"}))
BOB = Caller("user:bob@other.org")


def sql(e: exp.Expression | None) -> str | None:
    return None if e is None else e.sql(dialect="spark")


def test_unprotected_table_has_no_filter():
    assert row_filter(ALICE, []) is None
    assert applied_policies(ALICE, []) == ()
    assert has_full_access(ALICE, [])


def test_no_grant_means_false():
    policies = [policy("eu", "region = 'EU'", "user:carol@example.com")]
    f = row_filter(ALICE, policies)
    assert isinstance(f, exp.Boolean) and sql(f) == "FALSE"
    assert applied_policies(ALICE, policies) == ()
    assert not has_full_access(ALICE, policies)


def test_single_grant_is_parenthesised():
    policies = [policy("eu", "region = 'EU' OR vip", "user:alice@example.com")]
    assert sql(row_filter(ALICE, policies)) == "(region = 'EU' OR vip)"


def test_grants_are_ored_in_name_order_and_others_ignored():
    policies = [
        policy("vip", "vip = TRUE", "group:eu@example.com"),
        policy("Apac", "region = 'APAC'", "user:bob@other.org"),
        policy("eu", "region = 'EU'", "domain:example.com"),
        policy("all", "public", "allUsers"),
    ]
    assert sql(row_filter(ALICE, policies)) == "(public) OR (region = 'EU') OR (vip = TRUE)"
    assert applied_policies(ALICE, policies) == ("all", "eu", "vip")
    assert sql(row_filter(BOB, policies)) == "(public) OR (region = 'APAC')"


def test_deterministic_regardless_of_input_order():
    policies = [policy(n, f"c = '{n}'") for n in ("b", "a", "C", "d")]
    first = sql(row_filter(ALICE, policies))
    assert first == sql(row_filter(ALICE, list(reversed(policies))))
    assert first == "(c = 'a') OR (c = 'b') OR (c = 'C') OR (c = 'd')"


def test_anonymous_caller_only_matches_all_users():
    policies = [policy("auth", "a", "allAuthenticatedUsers"), policy("pub", "b", "allUsers")]
    assert sql(row_filter(ANONYMOUS, policies)) == "(b)"
    assert sql(row_filter(ANONYMOUS, policies[:1])) == "FALSE"


def test_session_user_becomes_the_callers_email():
    policies = [
        policy(
            "own",
            "owner = SESSION_USER() OR owner = session_user OR x = Current_User() OR y = current_user"
            " OR z = user() OR region IN (SELECT r FROM acl WHERE email = session_user())",
        )
    ]
    out = sql(row_filter(ALICE, policies))
    assert out.count("'alice@example.com'") == 6
    assert "SESSION_USER" not in out.upper() and "CURRENT_USER" not in out.upper() and "USER()" not in out.upper()


def test_email_is_quoted_safely():
    evil = Caller("user:o'brien@example.com")
    out = sql(row_filter(evil, [policy("own", "owner = session_user()")]))
    assert out == "(owner = 'o\\'brien@example.com')"


def test_cached_ast_is_not_mutated_between_callers():
    policies = [policy("own", "owner = session_user()")]
    assert "alice" in sql(row_filter(ALICE, policies))
    assert sql(row_filter(BOB, policies)) == "(owner = 'bob@other.org')"
    first = row_filter(ALICE, policies)
    first.find(exp.Literal).replace(exp.Literal.string("tampered"))
    assert "alice" in sql(row_filter(ALICE, policies))


def test_full_access_needs_a_true_policy_that_grants_the_caller():
    true_for_bob = policy("all", "TRUE", "user:bob@other.org")
    eu_for_alice = policy("eu", "region = 'EU'", "user:alice@example.com")
    assert not has_full_access(ALICE, [true_for_bob, eu_for_alice])
    assert has_full_access(BOB, [true_for_bob, eu_for_alice])
    assert has_full_access(ALICE, [policy("t", " ( true ) ", "group:eu@example.com")])
    assert sql(row_filter(BOB, [true_for_bob, eu_for_alice])) == "(TRUE)"

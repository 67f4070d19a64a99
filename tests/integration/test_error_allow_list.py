"""Errors of filtered operations are relayed by allow list (issue 21, items 4 and 7).

Spark's error for an operation rowgate rewrote quotes the rewrite: the subquery of a
`DECLARE VARIABLE ... DEFAULT (SELECT ...)` comes back with the policy predicate in it, and
a failed cast quotes the hidden value that failed. A deny list (withhold a message that names
a policy's literal or table) misses a predicate with no literal and every row value. So for
a filtered operation the proxy relays the error class, SQLSTATE, exception classes and only
the message parameters the allow list names (proxy/rowgate/policy/error_allow_list.py); the
`errorId` that pyspark would fetch the full error with (FetchErrorDetails) is not relayed.
Errors of operations that read no protected table are Spark's own, byte for byte.

Through real pyspark, the real proxy and a real Spark Connect server.
"""

from __future__ import annotations

import pytest

from tests.conftest import unique
from tests.harness.callers import ADMIN, READER
from tests.harness.worlds import Policy, Table, protected_world, values

pytestmark = pytest.mark.spark

LITERAL = "zebra-7731"
# Text of the policies that no error of a filtered read may show. `level < 7731` holds no
# literal, table or SESSION_USER() a deny list could look for.
POLICY_TEXT = (LITERAL, "zebra", "session_user", "level <", "7731", "tag =", "owner =")
HIDDEN = "hidden-9921"  # a value of a row the reader may not see


class World:
    def __init__(self, proxy, admin, reader, direct, lit, fn, plain, lookup):
        self.proxy, self.admin, self.reader, self.direct = proxy, admin, reader, direct
        self.lit, self.fn, self.plain, self.lookup = lit, fn, plain, lookup


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, spark_server):
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)
    columns = "id INT, owner STRING, tag STRING, level INT, code STRING"
    rows = values([(1, "reader@example.com", LITERAL, 1, "10"), (2, "other@example.com", "other", 9999, HIDDEN)])
    w = protected_world(
        proxy,
        module_sessions,
        Table("errs_lit", columns, rows=[rows]),
        Table("errs_fn", columns, rows=[rows]),
        Table("errs_plain", columns, rows=[rows]),
        # a policy with a distinctive literal, and one whose predicate names no literal or table
        Policy("lit", "errs_lit", f"tag = '{LITERAL}'"),
        Policy("fn", "errs_fn", "level < 7731"),
        # a policy whose lookup table holds a value nobody but the admin may read, which fails
        # to cast: Spark's message quotes it (`expression`), and no deny list knows it
        Table("errs_acl", "who STRING, code STRING", rows=[values([("reader@example.com", "1"), ("other@example.com", HIDDEN)])]),
        Policy("only_admin", "errs_acl", "TRUE", grantees=[ADMIN]),
        Table("errs_lookup", "id INT, level INT", rows=[values([(1, 1), (2, 2)])]),
        Policy("lookup", "errs_lookup", "level IN (SELECT CAST(code AS INT) FROM {errs_acl})"),
        spark_url=spark_server.url,
    )
    reader = w.caller(READER)
    reader.sql("SET spark.sql.ansi.enabled=true")
    w.direct.sql("SET spark.sql.ansi.enabled=true")
    t = w.table
    yield World(proxy, w.admin, reader, w.direct, t("errs_lit"), t("errs_fn"), t("errs_plain"), t("errs_lookup"))
    w.close()


def _error(action) -> Exception:
    with pytest.raises(Exception) as info:
        action()
    return info.value


def _everything_pyspark_shows(error) -> str:
    """The message, parameters, query contexts and server stack trace of a pyspark error."""
    parts = [str(error), repr(error)]
    for getter in ("getMessage", "getMessageParameters", "getQueryContext", "getStackTrace", "getSqlState", "getCondition"):
        method = getattr(error, getter, None)
        if method is not None:
            try:
                parts.append(repr(method()))
            except Exception:  # a getter pyspark cannot answer shows nothing
                pass
    return "\n".join(parts)


def _assert_no_policy(text: str) -> None:
    lowered = text.lower()
    for secret in POLICY_TEXT:
        assert secret.lower() not in lowered, (secret, text[:3000])


@pytest.mark.parametrize("which", ["lit", "fn"])
def test_declare_variable_with_a_subquery_of_a_protected_table_shows_no_policy(world, which):
    """Issue 21 example 4: Spark's error quotes the rewritten subquery."""
    table = getattr(world, which)
    error = _error(
        lambda: world.reader.sql(f"DECLARE VARIABLE {unique('v')} INT DEFAULT (SELECT count(*) FROM {table})").collect()
    )
    shown = _everything_pyspark_shows(error)
    _assert_no_policy(shown)
    condition = error.getCondition()
    assert condition and f"[{condition}]" in str(error)


def test_a_failed_cast_under_ansi_does_not_show_the_hidden_value(world):
    """CAST_INVALID_INPUT's `expression` is the value that failed to cast: here a value of
    the policy's lookup table, which the reader may not read and no deny list can name."""
    error = _error(lambda: world.reader.sql(f"SELECT id FROM {world.lookup}").collect())
    shown = _everything_pyspark_shows(error)
    assert error.getCondition() == "CAST_INVALID_INPUT" and error.getSqlState() == "22018"
    assert HIDDEN not in shown
    assert error.getMessageParameters() == {"sourceType": '"STRING"', "targetType": '"INT"'}


def test_an_error_of_an_unprotected_table_is_sparks_own(world):
    query = f"SELECT CAST(code AS INT) FROM {world.plain}"
    through_proxy = _error(lambda: world.reader.sql(query).collect())
    direct = _error(lambda: world.direct.sql(query).collect())
    assert through_proxy.getCondition() == direct.getCondition() == "CAST_INVALID_INPUT"
    assert HIDDEN in str(through_proxy)  # nothing is hidden in an unprotected table
    assert str(through_proxy).split("\n")[0] == str(direct).split("\n")[0]
    assert through_proxy.getMessageParameters() == direct.getMessageParameters()


def test_a_missing_table_next_to_a_protected_read_is_still_an_analysis_exception(world):
    from pyspark.errors import AnalysisException

    # (a one-part name nothing explains is refused by rowgate itself, rules/unknown_relations.py;
    # a qualified one is Spark's to report)
    missing = "spark_catalog.default.no_such_table_77"
    error = _error(lambda: world.reader.sql(f"SELECT * FROM {world.lit} JOIN {missing} USING (id)").collect())
    assert isinstance(error, AnalysisException), type(error)
    assert error.getCondition() == "TABLE_OR_VIEW_NOT_FOUND" and error.getSqlState() == "42P01"
    quoted = "`spark_catalog`.`default`.`no_such_table_77`"
    assert error.getMessageParameters() == {"relationName": quoted}
    assert str(error).startswith(f"[TABLE_OR_VIEW_NOT_FOUND] The table or view {quoted} cannot be found.")
    _assert_no_policy(_everything_pyspark_shows(error))


def test_fetch_error_details_of_a_filtered_error_carries_no_policy(world):
    """pyspark fetches the full error (FetchErrorDetails: Spark's message and parameters,
    query contexts quoting the SQL, the stack trace) when the error names an `errorId`; for
    a filtered operation it gets none, so what it raises is rowgate's alone."""
    sql = f"DECLARE VARIABLE {unique('v')} INT DEFAULT (SELECT count(*) FROM {{t}})"
    error = _error(lambda: world.reader.sql(sql.format(t=world.fn)).collect())
    assert error.getQueryContext() == [] and error.getStackTrace() is None  # both only come fetched
    _assert_no_policy(_everything_pyspark_shows(error))
    # the same error of an unprotected table: pyspark fetched Spark's details through rowgate
    plain = _error(lambda: world.reader.sql(sql.format(t=world.plain)).collect())
    assert plain.getCondition() == error.getCondition() == "INVALID_DEFAULT_VALUE.SUBQUERY_EXPRESSION"
    assert plain.getStackTrace(), "pyspark fetched no details of an unfiltered error"
    assert world.plain in plain.getMessageParameters()["defaultValue"]


def test_admins_errors_of_filtered_reads_are_rebuilt_too(world):
    """Admins' reads are filtered like anyone's, and so are their errors."""
    error = _error(
        lambda: world.admin.sql(f"DECLARE VARIABLE {unique('v')} INT DEFAULT (SELECT count(*) FROM {world.fn})").collect()
    )
    _assert_no_policy(_everything_pyspark_shows(error))

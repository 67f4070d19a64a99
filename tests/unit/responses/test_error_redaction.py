"""Upstream errors of row-filtered requests: the policy text must not come back."""

from __future__ import annotations

import json
import re

import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from rowgate.policy.error_allow_list import withheld
from rowgate.responses.error_redaction import ErrorSecrets, policy_tokens, redact_status, secrets_for, withheld_message

POLICY = "region = 'apac' OR owner IN (SELECT email FROM acl.team_members WHERE team = 'blue')"
SECRETS = secrets_for([POLICY], "ann@example.com", b"SELECT * FROM shop.orders WHERE id / 0 = 1")

DIVIDE = (
    "[DIVIDE_BY_ZERO] Division by zero. Use `try_divide` to tolerate divisor being 0 and return NULL instead. "
    'If necessary set "spark.sql.ansi.enabled" to "false" to bypass this error. SQLSTATE: 22012\n'
    "== SQL (line 1, position 120) ==\n"
    "...FROM `spark_catalog`.`shop`.`orders` WHERE TRUE AND (region = 'apac')) AS orders WHERE id / 0 = 1\n"
    "                                                                                          ^^^^^^"
)
UNRESOLVED = (
    "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name `nope` cannot be "
    "resolved. Did you mean one of the following? [`id`, `region`, `owner`]. SQLSTATE: 42703;\n"
    "'Project ['nope]\n+- Filter (region#12 = apac)\n   +- Relation spark_catalog.shop.orders[id#10,region#12] parquet\n"
)
TASK = (
    "Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0 "
    "(TID 3) (host executor driver): org.apache.spark.SparkArithmeticException: [DIVIDE_BY_ZERO] Division by zero. "
    'SQLSTATE: 22012\n== DataFrame ==\n"__truediv__" was called from\n<stdin>:1\n'
)


def test_policy_tokens_are_its_string_literals_and_tables():
    assert policy_tokens(POLICY) >= {"apac", "blue", "team_members", "acl.team_members"}
    assert "region" not in policy_tokens(POLICY)  # a column name the caller sees in the schema anyway


def test_what_the_caller_wrote_is_no_secret():
    own = secrets_for([POLICY], "ann@example.com", b"SELECT * FROM t WHERE region = 'apac'")
    assert "apac" not in own.tokens and "blue" in own.tokens


def test_session_user_makes_the_callers_email_a_secret():
    assert "ann@example.com" in secrets_for(["owner = SESSION_USER()"], "ann@example.com", b"").tokens
    assert "ann@example.com" not in secrets_for(["owner = 'x'"], "ann@example.com", b"").tokens


@pytest.mark.parametrize(
    "message",
    [
        DIVIDE,
        UNRESOLVED,
        TASK,
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `x` cannot be found. SQLSTATE: 42P01",
        '[CAST_INVALID_INPUT] The value \'blue\' of the type "STRING" cannot be cast to "INT". SQLSTATE: 22018',
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `acl`.`team_members` cannot be found. SQLSTATE: 42P01",
        "Something about APAC went wrong",
        "plain message without a state",
    ],
)
def test_a_message_known_only_by_text_keeps_its_class_and_state_only(message):
    """By allow list: nothing of Spark's text, whether or not it names a secret."""
    error_class = re.match(r"\[([A-Z_.]+)\]", message)
    state = re.search(r"SQLSTATE: [0-9A-Z]{5}", message)
    expected = [f"[{error_class.group(1)}]"] if error_class else []
    expected.append(withheld(error_class.group(1) if error_class else None))
    expected += [state.group(0)] if state else []
    assert withheld_message(message) == " ".join(expected)


def test_tokens_match_whole_words_only():
    secrets = ErrorSecrets(frozenset({"eu"}))
    assert not secrets.found_in("cannot be resolved, neutral")
    assert secrets.found_in("region = eu")


def status_trailer(
    message: str, params: dict, error_id: str = "e-1", error_class: str = "DIVIDE_BY_ZERO", state: str = "22012"
) -> tuple:
    info = error_details_pb2.ErrorInfo(
        reason="org.apache.spark.SparkArithmeticException",
        domain="org.apache.spark",
        metadata={
            "classes": json.dumps(["org.apache.spark.SparkArithmeticException", "java.lang.ArithmeticException"]),
            "errorClass": error_class,
            "sqlState": state,
            "errorId": error_id,
            "stackTrace": "org.apache.spark.SparkArithmeticException: " + message,
            "messageParameters": json.dumps(params),
            "somethingNew": "a key a later Spark adds",
        },
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    debug = any_pb2.Any()
    debug.Pack(error_details_pb2.DebugInfo(detail=message))
    status = status_pb2.Status(code=3, message=message, details=[detail, debug])
    return (("grpc-status-details-bin", status.SerializeToString()), ("x-other", "kept"))


def _info(out: tuple) -> tuple[status_pb2.Status, error_details_pb2.ErrorInfo]:
    status = status_pb2.Status.FromString(dict(out)["grpc-status-details-bin"])
    assert len(status.details) == 1  # DebugInfo (which repeats the message) is dropped
    info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(info)
    return status, info


DIVIDE_SENTENCE = (
    "[DIVIDE_BY_ZERO] Division by zero. Use `try_divide` to tolerate divisor being 0 and return NULL instead. "
    'If necessary set "spark.sql.ansi.enabled" to "false" to bypass this error. SQLSTATE: 22012'
)


def test_the_status_is_rebuilt_from_the_allow_list_consistently_with_the_message():
    trailing = status_trailer(DIVIDE, {"config": '"spark.sql.ansi.enabled"', "sqlExpr": "(region = 'apac')"})
    message, out = redact_status(DIVIDE, trailing, SECRETS)
    assert message == DIVIDE_SENTENCE
    assert ("x-other", "kept") in out
    status, info = _info(out)
    assert status.message == message  # pyspark's rpc_status.from_call insists on this
    assert set(info.metadata) == {"classes", "errorClass", "sqlState", "messageParameters"}
    # no errorId (no FetchErrorDetails of the full error), no stackTrace (its first line is
    # the full message), no key a later Spark adds
    assert info.metadata["errorClass"] == "DIVIDE_BY_ZERO" and info.metadata["sqlState"] == "22012"
    assert json.loads(info.metadata["classes"])[0] == "org.apache.spark.SparkArithmeticException"
    assert info.reason == "org.apache.spark.SparkArithmeticException"
    assert json.loads(info.metadata["messageParameters"]) == {"config": '"spark.sql.ansi.enabled"'}  # sqlExpr: not listed


def test_a_parameter_that_quotes_a_row_value_is_not_relayed():
    """CAST_INVALID_INPUT's `expression` is the value that failed to cast: a hidden row's,
    and no deny list could know it."""
    spark = (
        '[CAST_INVALID_INPUT] The value \'hidden-9921\' of the type "STRING" cannot be cast to "INT" because it is '
        "malformed. SQLSTATE: 22018\n== SQL ==\n..."
    )
    params = {"expression": "'hidden-9921'", "sourceType": '"STRING"', "targetType": '"INT"'}
    message, out = redact_status(spark, status_trailer(spark, params, error_class="CAST_INVALID_INPUT", state="22018"), SECRETS)
    assert "hidden-9921" not in message and "hidden-9921" not in str(out)
    assert message == (
        '[CAST_INVALID_INPUT] A value of the type "STRING" cannot be cast to "INT" because it is malformed. SQLSTATE: 22018'
    )
    _, info = _info(out)
    assert json.loads(info.metadata["messageParameters"]) == {"sourceType": '"STRING"', "targetType": '"INT"'}


def test_a_class_not_on_the_list_keeps_only_its_class_and_state():
    spark = "[SOME_NEW_ERROR] Something about the row 'ann' and region = 'apac'. SQLSTATE: 42000"
    message, out = redact_status(
        spark, status_trailer(spark, {"value": "ann"}, error_class="SOME_NEW_ERROR", state="42000"), SECRETS
    )
    assert message == (
        "[SOME_NEW_ERROR] rowgate withheld Spark's message for a read of a protected table "
        "(error class SOME_NEW_ERROR). SQLSTATE: 42000"
    )
    _, info = _info(out)
    assert json.loads(info.metadata["messageParameters"]) == {} and info.metadata["errorClass"] == "SOME_NEW_ERROR"


def test_an_allowed_parameter_naming_a_policy_table_is_withheld():
    spark = "[TABLE_OR_VIEW_NOT_FOUND] The table or view `acl`.`team_members` cannot be found. SQLSTATE: 42P01"
    trailing = status_trailer(
        spark, {"relationName": "`acl`.`team_members`"}, error_class="TABLE_OR_VIEW_NOT_FOUND", state="42P01"
    )
    message, out = redact_status(spark, trailing, SECRETS)
    assert "team_members" not in message and "team_members" not in str(out)
    assert message.startswith("[TABLE_OR_VIEW_NOT_FOUND] rowgate withheld")
    own = "[TABLE_OR_VIEW_NOT_FOUND] The table or view `shop`.`nope` cannot be found. SQLSTATE: 42P01"
    trailing = status_trailer(own, {"relationName": "`shop`.`nope`"}, error_class="TABLE_OR_VIEW_NOT_FOUND", state="42P01")
    message, _ = redact_status(own, trailing, SECRETS)
    assert message == "[TABLE_OR_VIEW_NOT_FOUND] The table or view `shop`.`nope` cannot be found. SQLSTATE: 42P01"


def test_an_operation_nobody_remembers_relays_classes_only():
    from rowgate.pipeline.operations.filtered import UNKNOWN_SECRETS

    spark = "[INVALID_HANDLE.OPERATION_NOT_FOUND] The handle abc is invalid. Operation not found. SQLSTATE: HY000"
    trailing = status_trailer(spark, {"handle": "abc"}, error_class="INVALID_HANDLE.OPERATION_NOT_FOUND", state="HY000")
    message, _ = redact_status(spark, trailing, UNKNOWN_SECRETS)
    # pyspark's reattach looks for the class in the status message
    assert message.startswith("[INVALID_HANDLE.OPERATION_NOT_FOUND] rowgate withheld") and "abc" not in message


def test_pyspark_raises_the_same_exception_type_from_the_rebuilt_status():
    from pyspark.errors import ArithmeticException
    from pyspark.errors.exceptions.connect import convert_exception

    message, out = redact_status(DIVIDE, status_trailer(DIVIDE, {"config": '"spark.sql.ansi.enabled"'}), SECRETS)
    _, info = _info(out)
    error = convert_exception(info, message, None)
    assert isinstance(error, ArithmeticException)
    assert error.getCondition() == "DIVIDE_BY_ZERO" and error.getSqlState() == "22012"
    assert error.getMessageParameters() == {"config": '"spark.sql.ansi.enabled"'}


def test_pyspark_can_still_read_the_redacted_status():
    class FakeCall:
        def __init__(self, message, trailing):
            self._m, self._t = message, trailing

        def code(self):
            import grpc

            return grpc.StatusCode.INVALID_ARGUMENT

        def details(self):
            return self._m

        def trailing_metadata(self):
            return self._t

    message, out = redact_status(DIVIDE, status_trailer(DIVIDE, {}), SECRETS)
    status = rpc_status.from_call(FakeCall(message, out))
    assert status is not None and status.message == message


def test_unreadable_status_details_are_dropped_not_passed_on():
    message, out = redact_status(DIVIDE, (("grpc-status-details-bin", b"\xff\xff"), ("x-other", "kept")), SECRETS)
    assert out == (("x-other", "kept"),) and message == withheld_message(DIVIDE)

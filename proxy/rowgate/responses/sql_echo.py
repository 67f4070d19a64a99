"""The relation a `spark.sql(query)` answer echoes: the caller's own, not rowgate's rewrite.

For a query, Spark does not run `spark.sql(...)` at once: it answers with a
`sql_command_result` whose relation is the command's input, and the client sends that
relation back when the DataFrame is collected. For a request rowgate rewrote, the input
Spark saw is the rewritten one, so the echo would hand the caller the policy predicates
(`... WHERE owner = 'reader' OR team IN (SELECT ...)`), the text error redaction withholds
(proxy/rowgate/responses/error_redaction.py). The echo of a filtered request is therefore
the relation the client sent, exactly what Spark would have echoed without the proxy;
collecting it sends it through the proxy again, where it is rewritten like any query.

Only echoes are replaced: a command's result (a `local_relation` with its output rows) is
not an echo and stays. When the client's relation is not known (a reattach of an operation
another replica started, or this process no longer remembers), the echo is neither relayed
nor replaced: `EchoUnknown` ends the answer, and the pipeline turns it into a refusal that
tells the caller to run `spark.sql` again. (An empty relation in its place made pyspark
fail later, at collect, with Spark's puzzling RELTYPE_NOT_SET.)
"""

from __future__ import annotations

from pyspark.sql.connect.proto import base_pb2, relations_pb2

from rowgate.rewrite.plan.compression import decompress_plan


class EchoUnknown(Exception):
    """A `spark.sql` answer echoes rowgate's rewrite, and the client's own relation that must
    replace it is not known here."""


# The relation kinds Spark echoes back (a query's text, with its DataFrame arguments).
ECHO_KINDS = frozenset({"sql", "with_relations"})


def client_echo(request: base_pb2.ExecutePlanRequest, raw_request: bytes) -> bytes | None:
    """The serialized relation Spark would echo for the client's own `sql_command`.

    `request` is the request as the pipeline has it (plans opened); `raw_request` as the
    client sent it. None when the request is no `sql_command`.
    """
    plan = request.plan
    if plan.WhichOneof("op_type") != "command" or plan.command.WhichOneof("command_type") != "sql_command":
        return None
    original = base_pb2.ExecutePlanRequest.FromString(raw_request).plan
    if original.WhichOneof("op_type") == "compressed_operation":
        decompress_plan(original)
    command = original.command.sql_command
    if command.HasField("input"):
        return command.input.SerializeToString()
    relation = relations_pb2.Relation()  # the older form: text and arguments on the command
    sql = relation.sql
    sql.query = command.sql
    for key in command.args:
        sql.args[key].CopyFrom(command.args[key])
    sql.pos_args.extend(command.pos_args)
    for key in command.named_arguments:
        sql.named_arguments[key].CopyFrom(command.named_arguments[key])
    sql.pos_arguments.extend(command.pos_arguments)
    return relation.SerializeToString()


def replace_echo(response: base_pb2.ExecutePlanResponse, echo: bytes | None) -> None:
    """Puts the client's relation where Spark echoed the rewrite; `EchoUnknown` when unknown."""
    relation = response.sql_command_result.relation
    if relation.WhichOneof("rel_type") not in ECHO_KINDS:
        return
    if echo is None:
        raise EchoUnknown("the echo of a spark.sql query that rowgate did not see start")
    relation.Clear()
    relation.MergeFromString(echo)

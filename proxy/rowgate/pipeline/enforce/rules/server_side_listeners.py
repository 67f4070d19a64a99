"""Rule: while any table is protected, a non-admin cannot add a JVM streaming listener.

`spark.streams.addListener` in pyspark keeps its listeners in the client: Spark sends their
events on the session's listener bus, where rowgate redacts them
(proxy/rowgate/pipeline/operations/streaming_queries.py). The protocol also lets a client install a
listener inside the server (`streaming_query_manager_command.add_listener`): a Python one
(`python_listener_payload`, shipped code, judged by proxy/rowgate/pipeline/enforce/rules/shipped_code.py)
or a JVM one, `listener_payload`, bytes Spark deserializes with Java serialization into an
object that then runs in the driver and receives every query's events unredacted (progress
counted before the policy filter, failure messages with the plan). Neither the object nor
what it does with the events can be judged by the proxy, so it is refused for non-admins.
"""

from __future__ import annotations

from google.protobuf.message import Message

from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.rules import Decision, Rule
from rowgate.rewrite.plan.compression import plans_of


def jvm_listener_added(request: Message) -> bool:
    for plan in plans_of(request):
        if (
            plan.WhichOneof("op_type") != "command"
            or plan.command.WhichOneof("command_type") != "streaming_query_manager_command"
        ):
            continue
        manager = plan.command.streaming_query_manager_command
        if manager.WhichOneof("command") == "add_listener" and manager.add_listener.listener_payload:
            return True
    return False


async def check(d: Decision) -> None:
    if not d.snapshot.has_any() or d.call.method.name != "ExecutePlan" or not jvm_listener_added(d.call.request):
        return
    raise Refusal.denied(
        "adding a JVM streaming query listener inside the server is refused for non-admins while row access "
        "policies are in force: Spark deserializes it and it would see every query's unredacted events; "
        "use spark.streams.addListener, whose events reach the client redacted",
        reason="server_side_listener",
    )


RULE = Rule("server_side_listeners", check)

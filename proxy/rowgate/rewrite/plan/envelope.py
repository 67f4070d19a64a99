"""Fields the proxy does not know in the envelope of a plan: the request and its `Plan`.

The plan walker (walker.py) checks every message inside a plan's relation or command. The
messages around them are just as able to carry something the proxy cannot see: a newer
client's `Plan` member, an `AnalyzePlanRequest` analysis kind this protobuf does not have
(it arrives as an unknown field, with its plan inside), a new option of the request. While
any table is protected such a request is refused for every caller, admins included (no
unanalysed forwarding for anyone), naming the field number; `unknown_envelope_field` finds
it. The walk stops at `Relation` and `Command` messages: the walker checks those, with the
field path of the plan.

>>> from pyspark.sql.connect.proto import base_pb2
>>> request = base_pb2.AnalyzePlanRequest(session_id="s")
>>> request.schema.plan.root.range.end = 3
>>> unknown_envelope_field(request) is None
True
>>> extra = bytes([0xFA, 0x06, 0x02, 0x08, 0x01])  # field 111, length 2: a message {1: 1}
>>> unknown_envelope_field(base_pb2.AnalyzePlanRequest.FromString(request.SerializeToString() + extra))
'field 111 of spark.connect.AnalyzePlanRequest (at <root>)'
"""

from __future__ import annotations

from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

# Checked by the plan walker, field by field, with the plan's own paths.
_WALKED = frozenset({"spark.connect.Relation", "spark.connect.Command"})


def unknown_envelope_field(request: Message) -> str | None:
    """The first field (by number) the proxy's protobuf does not know in `request` outside
    its relations and commands, as "field N of <message> (at <path>)"; None when there is none."""
    stack: list[tuple[Message, str]] = [(request, "")]
    while stack:
        msg, path = stack.pop()
        if msg.DESCRIPTOR.full_name in _WALKED:
            continue
        unknown = UnknownFieldSet(msg)
        if len(unknown):
            numbers = sorted({f.field_number for f in unknown})
            fields = ", ".join(str(n) for n in numbers)
            plural = "s" if len(numbers) > 1 else ""
            return f"field{plural} {fields} of {msg.DESCRIPTOR.full_name} (at {path or '<root>'})"
        for field, value in msg.ListFields():
            if field.message_type is None:
                continue
            child = f"{path}.{field.name}" if path else field.name
            if field.message_type.GetOptions().map_entry:
                if field.message_type.fields_by_name["value"].message_type is None:
                    continue
                values = [value[key] for key in sorted(value)]
            else:
                values = value if field.is_repeated else [value]
            stack.extend((item, child) for item in values)
    return None

"""Visits every set message field of a plan, by protobuf descriptor, and calls hooks by type.

Walking by descriptor instead of by known field names means a relation nested somewhere
new (a new operator's `input`, an ML command's dataset, a merge's source) is still seen and
classified. Hooks are keyed by message full name (`spark.connect.Relation`, ...); a hook
returns the `Frame` to walk the message's fields with, or `None` to stop there (it has
handled, or replaced, the message itself).

The walk is iterative: DataFrame plans nest one relation per operator and can be deeper
than Python's recursion limit.

Fields the proxy's protobuf modules do not know (a newer client or server) are kept by
protobuf and would be forwarded, but the proxy cannot see what they mean: a field may hold
a relation that reads a protected table (to a proxy on 4.1's protocol, 4.2's `nearestByJoin`
was such a field). While protection is in
force they are refused for every caller, admins included, naming the field: admins' reads
are filtered like anyone's, so nobody's plan is forwarded unanalysed. The same holds for a
relation, command, expression or catalog kind that protobuf knows but the proxy's tables do
not (`restricted(..., unknown=True)`). Known kinds reserved to admins (`classify.ADMIN`)
stay usable by admins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from rowgate.rewrite.plan.classify import PRUNE
from rowgate.rewrite.plan.result import PlanFacts
from rowgate.rewrite.sql import RewriteResult, protection_in_force, rewrite_sql
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.context import RewriteContext
from rowgate.rewrite.sql.names import Args

# Fields along which "this relation is what a sql_command runs" carries on (see sqltext.py).
_TOP_FIELDS = frozenset({"sql_command", "input", "with_relations", "root"})


@dataclass(frozen=True, slots=True)
class Frame:
    """Where a message sits: its field path (for messages) and what encloses it."""

    field: str = ""
    parent: Frame | None = None
    top: bool = False  # the relation a sql_command runs itself (policy DDL is allowed there)
    code_name: str = ""  # name of the enclosing user-defined function or data source
    register: bool = False  # under a register_* command

    def child(self, field: str) -> Frame:
        return Frame(field, self, self.top and field in _TOP_FIELDS, self.code_name, self.register)

    def but(self, **changes: Any) -> Frame:
        return replace(self, **changes)

    def path(self) -> str:
        parts: list[str] = []
        frame: Frame | None = self
        while frame is not None and frame.field:
            parts.append(frame.field)
            frame = frame.parent
        return ".".join(reversed(parts)) or "<root>"


Hook = Callable[["Walk", Message, Frame], "Frame | None"]


class Walk:
    """State of one `rewrite_plan` call: the context, the hooks and what has been found."""

    def __init__(self, ctx: RewriteContext, hooks: dict[str, Hook], sql_args: Args = None, *, _parent: Walk | None = None):
        self.ctx = ctx
        self.hooks = hooks
        self.sql_args = sql_args
        self.found = PlanFacts()
        if _parent is None:
            self.guarded = protection_in_force(ctx)
            self.probes: dict[str, RewriteResult] = {}
            # id(read relation) -> (it, conjuncts of the DataFrame filters over it), see placement.py
            self.placements: dict[int, tuple[Message, list]] = {}
        else:
            self.guarded = _parent.guarded
            self.probes = _parent.probes
            self.placements = _parent.placements
        # Unknown fields and kinds are refused while protection is in force, for everyone.
        self.strict = self.guarded
        # Known constructs reserved to admins are refused for the others.
        self.reserved = self.guarded and not ctx.is_admin

    def fork(self) -> Walk:
        """A walk with its own findings (to judge a sub-plan alone), sharing caches."""
        return Walk(self.ctx, self.hooks, self.sql_args, _parent=self)

    def absorb(self, other: Walk) -> None:
        self.found.merge(other.found)

    # -- traversal ------------------------------------------------------------------------

    def run(self, root: Message, frame: Frame) -> None:
        stack: list[tuple[Message, Frame]] = [(root, frame)]
        while stack:
            msg, frame = stack.pop()
            name = msg.DESCRIPTOR.full_name
            if name in PRUNE:
                continue
            if self.strict:
                self.check_known(msg, frame)
            hook = self.hooks.get(name)
            if hook is not None:
                next_frame = hook(self, msg, frame)
                if next_frame is None:
                    continue
                frame = next_frame
            children = list(_children(msg, frame))
            stack.extend(reversed(children))

    def check_known(self, msg: Message, frame: Frame) -> None:
        unknown = UnknownFieldSet(msg)
        if len(unknown):
            numbers = sorted({f.field_number for f in unknown})
            fields = ", ".join(str(n) for n in numbers)
            raise refuse.invalid(
                "unknown_plan_field",
                f"field{'s' if len(numbers) > 1 else ''} {fields} of {msg.DESCRIPTOR.full_name} (at {frame.path()}) "
                "is unknown to rowgate, so it cannot tell what the plan reads; plans with fields rowgate does not "
                "know are refused for every caller, admins included, while row access policies are in force "
                "(a client newer than the proxy?)",
            )

    def check_tree(self, msg: Message, frame: Frame) -> None:
        """Only the unknown-field check, over a subtree a hook skips (it recognised it)."""
        Walk(self.ctx, {}, _parent=self).run(msg, frame)

    # -- verdicts -------------------------------------------------------------------------

    def restricted(self, what: str, frame: Frame, *, unknown: bool = False) -> None:
        """A construct only admins may use while protection is in force; an `unknown` one
        (no entry in the proxy's tables) nobody may use then."""
        if unknown and self.strict:
            raise refuse.invalid(
                "unknown_construct",
                f"{what} (at {frame.path()}) is unknown to rowgate and cannot be analysed; it is refused for every "
                "caller, admins included, while row access policies are in force",
            )
        if self.reserved:
            raise refuse.denied("admin_only_construct", f"{what} is reserved to admins while row access policies are in force")
        self.found.add(unchecked=(what,))

    def unanalysable(self, what: str) -> None:
        """Something that may reach a protected table but cannot be analysed: refuse for everyone."""
        if self.guarded:
            raise refuse.invalid("unanalysable_plan", f"cannot analyse {what} while row access policies are in force")
        self.found.add(unchecked=(what,))

    # -- the SQL rewriter -----------------------------------------------------------------

    def probe(self, sql: str) -> RewriteResult:
        """`rewrite_sql` of a text the proxy wrote itself (cached: the same read recurs)."""
        if sql not in self.probes:
            self.probes[sql] = rewrite_sql(sql, self.ctx)
        return self.probes[sql]


def _children(msg: Message, frame: Frame) -> Iterator[tuple[Message, Frame]]:
    for field, value in msg.ListFields():
        kind = _field_kind(field)
        if kind == _SCALAR:
            continue
        child = frame.child(field.name)
        if kind == _SINGLE:
            yield value, child
        elif kind == _REPEATED:
            for item in value:
                yield item, child
        else:  # map with message values
            for key in sorted(value):
                yield value[key], child


_SCALAR, _SINGLE, _REPEATED, _MAP = range(4)
_KINDS: dict[str, int] = {}


def _field_kind(field: FieldDescriptor) -> int:
    kind = _KINDS.get(field.full_name)
    if kind is None:
        message_type = field.message_type
        if message_type is None:
            kind = _SCALAR
        elif message_type.GetOptions().map_entry:
            kind = _MAP if message_type.fields_by_name["value"].message_type is not None else _SCALAR
        elif field.is_repeated:
            kind = _REPEATED
        else:
            kind = _SINGLE
        _KINDS[field.full_name] = kind
    return kind

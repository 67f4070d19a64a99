"""`rewrite_plan`: one Spark Connect Relation or Command, one caller -> what Spark may run.

This module only wires the type tables (`classify`) to their handlers and runs the walk;
each handler module does one job: `reads` (reads by name, path and table function),
`sqltext` (SQL text), `expressions` (expression text, identity functions), `commands`
(writes, views, checkpoints), `catalog_ops`, `code` (shipped code).

The message is rewritten in place. When a `Refusal` is raised it may be partly
rewritten and must not be forwarded (the request is refused anyway).
"""

from __future__ import annotations

from google.protobuf.message import Message

from rowgate.policy import kinds
from rowgate.rewrite.plan import catalog_ops, code, commands, expressions, reads, sqltext
from rowgate.rewrite.plan.classify import (
    ADMIN,
    CODE_NAMES,
    COMMANDS,
    EXPRESSIONS,
    REFUSED,
    RELATIONS,
    USER_CODE,
    WALK,
    named_locations,
)
from rowgate.rewrite.plan.result import PlanRewriteResult
from rowgate.rewrite.plan.walker import Frame, Hook, Walk
from rowgate.rewrite.sql import errors as refuse
from rowgate.rewrite.sql.context import RewriteContext
from rowgate.rewrite.sql.names import Args

HANDLERS: dict[str, Hook] = {
    "read": reads.read,
    "changes": reads.changes,
    "filter": reads.filtered,
    "table_function": reads.table_function,
    "sql": sqltext.sql_relation,
    "catalog": catalog_ops.catalog,
    "sql_command": commands.sql_command,
    "create_view": commands.create_view,
    "write": commands.write,
    "write_v2": commands.write_v2,
    "write_stream": commands.write_stream,
    "merge": commands.merge,
    "checkpoint": commands.checkpoint,
    "register": commands.register,
    "expression_string": expressions.expression_string,
    "function": expressions.function,
}


def _typed(table: dict[str, str], oneof: str, what: str) -> Hook:
    """A hook that classifies a message by its type oneof against `table`."""
    for entry in table.values():
        if entry not in (WALK, ADMIN, REFUSED) and entry not in HANDLERS:
            raise AssertionError(f"no handler {entry!r} for a {what} type")

    def hook(walk: Walk, msg: Message, frame: Frame) -> Frame | None:
        kind = msg.WhichOneof(oneof)
        if kind is None:
            return frame  # empty (Spark rejects it); an unknown member is an unknown field
        walk.found.add(constructs=(f"{what}:{kind}",))
        walk.found.add(locations=named_locations(f"{what}:{kind}", msg))  # as policy/kinds.py names them
        entry = table.get(kind)
        if entry == WALK:
            return frame
        if entry is None:
            walk.restricted(f"the {kind} {what}", frame, unknown=True)
            return frame
        if entry == ADMIN:
            walk.restricted(f"the {kind} {what}", frame)
            return frame
        if entry == REFUSED:
            refuse_for_everyone(walk, f"{what}:{kind}", f"the {kind} {what}")
            return frame
        return HANDLERS[entry](walk, msg, frame)

    return hook


def refuse_for_everyone(walk: Walk, kind: str, what: str) -> None:
    """A kind nobody's request may carry while protection is in force (policy/kinds.py says
    why): admins' reads are filtered like anyone's, and nothing in it can be filtered."""
    if walk.guarded:
        raise refuse.denied(
            "kind_refused_for_all",
            f"{what} ({kind}) is refused for every caller, admins included, while row access policies are in "
            f"force: {kinds.refused_for_admins(kind)}",
        )
    walk.found.add(unchecked=(what,))


HOOKS: dict[str, Hook] = {
    "spark.connect.Relation": _typed(RELATIONS, "rel_type", "relation"),
    "spark.connect.Command": _typed(COMMANDS, "command_type", "command"),
    "spark.connect.Expression": _typed(EXPRESSIONS, "expr_type", "expression"),
    "spark.connect.CachedRemoteRelation": reads.cached_relation,
    **{name: code.user_code for name in USER_CODE},
    **{name: code.code_name for name in CODE_NAMES},
}

_ROOTS = frozenset({"spark.connect.Relation", "spark.connect.Command", "spark.connect.Plan"})


def rewrite_plan(message: Message, ctx: RewriteContext, *, sql_args: Args = None) -> PlanRewriteResult:
    """Rewrite a Relation, Command (or Plan holding one) for the caller of `ctx`, in place.

    Raises a `Refusal` (rewrite/sql/errors.py). `sql_args` are SQL arguments for SQL texts in the plan that
    carry none of their own (Spark binds only a text's own arguments, so they only help
    the proxy read `IDENTIFIER(:name)` where Spark would fail anyway).
    """
    if message.DESCRIPTOR.full_name not in _ROOTS:
        raise TypeError(f"rewrite_plan takes a Relation, Command or Plan, not {message.DESCRIPTOR.full_name}")
    walk = Walk(ctx, HOOKS, sql_args)
    if message.DESCRIPTOR.full_name == "spark.connect.Plan" and message.WhichOneof("op_type") == "compressed_operation":
        walk.unanalysable("a compressed plan (it must be opened before it is rewritten)")
    try:
        walk.run(message, Frame())
    except RecursionError:
        raise refuse.invalid("plan_nested_too_deeply", "the plan is nested too deeply for the proxy to analyse") from None
    return PlanRewriteResult.of(walk.found, message)

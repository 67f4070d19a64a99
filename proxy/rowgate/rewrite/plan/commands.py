"""Commands: what they write, what views they create, and what they hand back to the client.

The read side of every command (a write's `input`, a merge's `source_table_plan`, a
checkpoint's `relation`) is an ordinary relation that the walk filters. What is decided
here is the other side:

- a protected table is written only by a caller a `FILTER USING (TRUE)` policy grants
  (append, overwrite, saveAsTable, writeTo, MERGE, streaming sinks alike);
- a global temp view is shared by every session of the server, so one whose input read
  protected rows (or the session's own temp views or cached relations, which may hold
  them) is refused, as in the SQL rewriter;
- path targets, checkpoints and code registrations are reported for the pipeline;
- names pinned (issue #12): while protection is in force a write target the proxy resolved
  is forwarded fully qualified, so a concurrent `USE`/`SET CATALOG` of the session cannot
  make Spark write another table than the one judged here. A one-part name that is a temp
  view Spark confirmed stays as written where Spark's write path looks temp views up
  (`insertInto`, `writeTo(...).append()/overwrite*()`, MERGE, `toTable`); `saveAsTable` and
  `writeTo(...).create()/replace()/createOrReplace()` ignore temp views, so their target is
  pinned to the catalog table of that name.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.connect.proto import commands_pb2

from rowgate.policy import decision
from rowgate.policy.model import TableName
from rowgate.rewrite.plan.classify import PATH_OPTIONS
from rowgate.rewrite.plan.reads import resolve_name, table_like
from rowgate.rewrite.plan.result import TempView
from rowgate.rewrite.plan.sqltext import arguments, rewrite_text
from rowgate.rewrite.plan.walker import Frame, Walk
from rowgate.rewrite.sql import errors as refuse


def sql_command(walk: Walk, cmd: commands_pb2.Command, frame: Frame) -> Frame | None:
    """`spark.sql(...)`: the SQL relation in `input` (4.x) or the legacy `sql` text."""
    command = cmd.sql_command
    if command.HasField("input"):
        if command.sql and walk.guarded:
            raise refuse.invalid(
                "sql_command_relation_and_text", "a sql_command with both an input relation and sql text is not supported"
            )
    elif command.sql:
        rewrite_text(walk, command, "sql", arguments(command, walk.sql_args), top=True)
    return frame.but(top=True)


def create_view(walk: Walk, cmd: commands_pb2.Command, frame: Frame) -> Frame | None:
    view = cmd.create_dataframe_view
    sub = walk.fork()
    sub.run(view, frame.child("create_dataframe_view"))
    walk.absorb(sub)
    if view.is_global and (sub.found.filtered or (walk.guarded and _session_data(sub))):
        raise refuse.denied(
            "global_temp_view_over_protected",
            f"the global temporary view {view.name} over protected or session data would show this caller's rows to "
            "every session; create a session temporary view instead",
        )
    walk.found.add(temp_views_created=(TempView(view.name, view.is_global, view.replace),))
    return None


def _session_data(sub: Walk) -> bool:
    session_views = any(not v.startswith("global_temp.") for v in sub.found.temp_views_read)
    return session_views or bool(sub.found.cached_relations_used)


# Write paths of the DataFrame API that never resolve a name to a temp view (Spark builds an
# `UnresolvedIdentifier` or qualifies the name with the current database).
_SAVE_AS_TABLE = commands_pb2.WriteOperation.SaveTable.TABLE_SAVE_METHOD_SAVE_AS_TABLE
_V2_CREATING = frozenset(
    {
        commands_pb2.WriteOperationV2.MODE_CREATE,
        commands_pb2.WriteOperationV2.MODE_REPLACE,
        commands_pb2.WriteOperationV2.MODE_CREATE_OR_REPLACE,
    }
)


def write(walk: Walk, cmd: commands_pb2.Command, frame: Frame) -> Frame | None:
    """`df.write ... .save(path)`, `.saveAsTable(t)`, `.insertInto(t)`."""
    op = cmd.write_operation
    target = op.WhichOneof("save_type")
    if target == "table":
        table = op.table
        pin = written_table(walk, table.table_name, temp_views=table.save_method != _SAVE_AS_TABLE)
        if pin is not None:
            table.table_name = pin_target(walk, table.table_name, pin)
    elif target == "path":
        written_path(walk, op.path)
    _path_options(walk, op.options)
    return frame


def write_v2(walk: Walk, cmd: commands_pb2.Command, frame: Frame) -> Frame | None:
    """`df.writeTo(t).append()/overwrite(...)/create()/replace()...`."""
    op = cmd.write_operation_v2
    pin = written_table(walk, op.table_name, temp_views=op.mode not in _V2_CREATING)
    if pin is not None:
        op.table_name = pin_target(walk, op.table_name, pin)
    _path_options(walk, op.options)
    return frame


def write_stream(walk: Walk, cmd: commands_pb2.Command, frame: Frame) -> Frame | None:
    """`writeStream ... .start(path)` / `.toTable(t)`; foreach sinks are reported as user code."""
    op = cmd.write_stream_operation_start
    target = op.WhichOneof("sink_destination")
    if target == "table_name":
        pin = written_table(walk, op.table_name)
        if pin is not None:
            op.table_name = pin_target(walk, op.table_name, pin)
    elif target == "path":
        written_path(walk, op.path)
    _path_options(walk, op.options)
    return frame


def merge(walk: Walk, cmd: commands_pb2.Command, frame: Frame) -> Frame | None:
    command = cmd.merge_into_table_command
    pin = written_table(walk, command.target_table_name)
    if pin is not None:
        command.target_table_name = pin_target(walk, command.target_table_name, pin)
    return frame


def checkpoint(walk: Walk, cmd: commands_pb2.Command, frame: Frame) -> Frame | None:
    walk.found.add(checkpoints=("local" if cmd.checkpoint_command.local else "reliable",))
    return frame


def register(walk: Walk, cmd: commands_pb2.Command, frame: Frame) -> Frame | None:
    return frame.but(register=True)


def written_table(walk: Walk, text: str, *, temp_views: bool = True) -> TableName | None:
    """Refuse writing into a protected table without the full-access grant; return the name
    to pin the target to (None: leave it as written).

    A one-part name that is a temp view is also checked as the catalog table of that name:
    which of the two a DataFrame writer targets differs between write paths. `temp_views`
    says whether this write path looks temp views up at all; when it does not, the target
    is the catalog table and is pinned to it.
    """
    resolved = resolve_name(walk, text, "the write target")
    if resolved is None:
        return None
    candidates: list[TableName] = []
    pin: TableName | None = None
    if resolved.kind == "catalog" and resolved.name is not None:
        candidates.append(resolved.name)
        pin = resolved.name
    elif resolved.kind == "temp_view":
        candidates.append(TableName(walk.ctx.current_catalog, walk.ctx.current_schema, resolved.parts[-1]))
        pin = None if temp_views else candidates[0]
    for name in candidates:
        walk.found.add(tables_written=(name,))
        policies = walk.ctx.policies_for(name)
        if policies and not decision.has_full_access(walk.ctx.caller, policies):
            raise refuse.denied("write_needs_full_access", f"writing to {name} requires a FILTER USING (TRUE) grant")
    return pin if walk.guarded else None


def pin_target(walk: Walk, text: str, name: TableName) -> str:
    """The write target `text` pinned to `name`, fully qualified (noted as a change)."""
    pinned = name.sql()
    if pinned != text:
        walk.found.changed = True
    return pinned


def written_path(walk: Walk, path: str) -> None:
    """A path target; some formats take a table name there (`format("iceberg").save("db.t")`)."""
    walk.found.add(paths_written=(path,))
    name = table_like(walk, path)
    if name is None:
        return
    policies = walk.ctx.policies_for(name)
    if policies and not decision.has_full_access(walk.ctx.caller, policies):
        raise refuse.denied("write_needs_full_access", f"writing to {name} requires a FILTER USING (TRUE) grant")


def _path_options(walk: Walk, options: Mapping[str, str]) -> None:
    for key in sorted(options):
        if key.lower() in PATH_OPTIONS:
            written_path(walk, options[key])

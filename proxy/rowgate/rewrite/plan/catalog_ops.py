"""Catalog API calls (`spark.catalog.*`) are reported with the names they carry.

None of them returns table rows, but several change what later plans mean
(`setCurrentDatabase`, `setCurrentCatalog`) or create tables over a location
(`createTable(path=...)`): the pipeline updates the session state and judges locations.

Names pinned (issue #12): while protection is in force, the table name of a call that
resolves it against the session's current catalog and database (`_RELATION_NAMES`) is
forwarded fully qualified, as the proxy resolved it, so a concurrent `USE`/`SET CATALOG`
cannot make Spark cache, refresh, recover or describe another table. Left as written:

- a call with `db_name` (Spark then reads `spark_catalog.<db>.<table>`, or the global temp
  database: no current namespace is involved);
- a one-part name that is a temp view Spark confirmed, or that the catalog does not know
  (Spark may have made a temp view the proxy does not track, e.g. a memory sink's query
  name), except for `createTable`, which always creates a catalog table;
- a two-part name the catalog does not know, which `spark.table` reads as
  `<format>.<path>` (reported as a path read for the calls that read the relation);
- temp view names (`dropTempView`, `dropGlobalTempView`): they are never resolved through
  the current database; listing calls without a database name the session's current one
  as Spark sees it when it runs them (names only, no rows).

Those that drop, truncate or describe one table (Spark 4.2+) are judged as their SQL twin
(catalog_statements.py), which pins their names the same way.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from pyspark.sql.connect.proto import relations_pb2

from rowgate.policy import decision
from rowgate.policy.model import TableName
from rowgate.rewrite.plan import catalog_statements
from rowgate.rewrite.plan.classify import ADMIN, CATALOG_OPS, named_locations
from rowgate.rewrite.plan.reads import resolve_name
from rowgate.rewrite.plan.result import CatalogOp
from rowgate.rewrite.plan.walker import Frame, Walk
from rowgate.rewrite.sql import PathRead
from rowgate.rewrite.sql import errors as refuse

# Catalog calls whose `table_name` Spark resolves in the session's namespace -> whether the
# call creates the table (the name is then a catalog table whatever else bears it).
_RELATION_NAMES: dict[str, bool] = {
    "list_columns": False,
    "get_table": False,
    "table_exists": False,
    "is_cached": False,
    "cache_table": False,
    "uncache_table": False,
    "refresh_table": False,
    "recover_partitions": False,
    "create_table": True,
    "create_external_table": True,
}
# Of those, the calls that change a table's data as `ALTER TABLE ... RECOVER PARTITIONS` does
# (partitions from files in its directory): like the SQL form, they need the full-access grant.
_DATA_CHANGES = frozenset({"recover_partitions"})
# Of those, the calls Spark runs as `spark.table(name)`, which reads `<format>.`<path>`` files.
_TABLE_READS = frozenset({"is_cached", "cache_table", "uncache_table", "refresh_table"})


def catalog(walk: Walk, rel: relations_pb2.Relation, frame: Frame) -> Frame | None:
    op = rel.catalog.WhichOneof("cat_type")
    if op is None:
        return frame
    walk.found.add(constructs=(f"catalog:{op}",))
    if op not in CATALOG_OPS:
        walk.restricted(f"the catalog operation {op}", frame, unknown=True)
        return frame
    body = getattr(rel.catalog, op)
    names = tuple(
        (field.name, value)
        for field, value in body.ListFields()
        if field.type == FieldDescriptor.TYPE_STRING and not field.is_repeated
    )
    walk.found.add(catalog_ops=(CatalogOp(op, names),))
    if CATALOG_OPS[op] == ADMIN:
        walk.restricted(f"the catalog operation {op}", frame)
    # dropTable, truncateTable, analyzeTable, listPartitions, ...: judged as their SQL twin
    catalog_statements.judge(walk, op, body)
    # createTable(path=...), refreshByPath(...): the fields policy/kinds.py names as locations
    walk.found.add(locations=named_locations(f"catalog:{op}", rel.catalog))
    if op in _RELATION_NAMES:
        pin_table_name(walk, op, body)
    return frame


def pin_table_name(walk: Walk, op: str, body: Message) -> None:
    """Qualify `body.table_name` as the proxy resolves it (module docstring); refuse a data
    change of a protected table without the full-access grant."""
    if not walk.guarded:
        return
    if "db_name" in body.DESCRIPTOR.fields_by_name and body.HasField("db_name"):
        return
    text = body.table_name
    resolved = resolve_name(walk, text, f"the table name of the catalog operation {op}")
    if resolved is None:
        return
    creates = _RELATION_NAMES[op]
    if resolved.kind == "temp_view" and creates:  # createTable makes a catalog table of that name
        name = TableName(walk.ctx.current_catalog, walk.ctx.current_schema, resolved.parts[-1])
    elif resolved.kind == "catalog" and resolved.name is not None:
        name = resolved.name
    else:
        return  # temp views and global temp views: no namespace to pin
    if op in _DATA_CHANGES:
        walk.found.add(tables_written=(name,))
        policies = walk.ctx.policies_for(name)
        if policies and not decision.has_full_access(walk.ctx.caller, policies):
            raise refuse.denied(
                "catalog_op_needs_full_access", f"{op} of protected table {name} requires a FILTER USING (TRUE) grant"
            )
    if not creates and len(resolved.parts) <= 2 and walk.ctx.lookup(name) is None:
        if resolved.maybe_path is not None and op in _TABLE_READS:
            fmt, path = resolved.maybe_path
            walk.found.add(paths_read=(PathRead(fmt.lower(), path, certain=False),))
        return
    pinned = name.sql()
    if pinned != text:
        body.table_name = pinned
        walk.found.changed = True

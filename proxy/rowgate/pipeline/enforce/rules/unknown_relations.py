"""Rule: a relation name that resolves to nothing rowgate knows is refused (issue #21, item 2).

While a table is protected every relation is forwarded in a form that names exactly one
object: tables fully qualified, session temp views as ``system.session.<view>``
(rewrite/sql/reads.py, rewrite/plan/reads.py). A one-part name that is neither a catalog
relation nor a temp view the proxy knows of goes out as ``system.session.<name>`` too, so
Spark reads a temp view of that name or fails; no table created, renamed or moved in the
meantime, and no temp view dropped, can make the name land on a protected table.

Such a name is then refused unless Spark itself says what it is, so that a name meaning
nothing never reaches Spark:

- an alias pyspark sends along with the SQL text (``spark.sql("... {df} ...", df=df)``
  sends ``_pyspark_connect_temp_view_<uuid>`` as a `with_relations` reference, which Spark
  turns into a temp view for that query only);
- a temp view Spark lists for the session (one ``SHOW VIEWS`` in the caller's session),
  made without a statement through the proxy, such as a memory sink's query name.

A table of that name in the current database made around the proxy since its catalog
cache last said "absent" gets FAILED_PRECONDITION asking to send the request again (the
cache is refreshed, so the retry reads the table, pinned). Everything else gets
INVALID_ARGUMENT naming it. Admins are not concerned: they may turn on
Spark's SQL path, through which a one-part name can be a table of another database, so
their names go as written and the second opinion checks what Spark resolved. The listing only decides the refusal: the
forwarded text is already the temp-view form, so a view dropped after the listing makes
Spark fail, never read a table.
"""

from __future__ import annotations

import grpc
from google.protobuf.message import Message
from pyspark.sql.connect.proto import relations_pb2

from rowgate.catalog.upstream_catalog import CatalogUnavailable
from rowgate.catalog.upstream_sql import UpstreamSqlError
from rowgate.message_walk import messages
from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.rules import Decision, Rule
from rowgate.pipeline.session.recall import LIST_TEMP_VIEWS
from rowgate.policy.model import TableName


def reference_aliases(request: Message) -> set[str]:
    """Lower-cased aliases of the `with_relations` references of the request's plans.

    >>> from pyspark.sql.connect.proto import base_pb2
    >>> req = base_pb2.ExecutePlanRequest()
    >>> ref = req.plan.root.with_relations.references.add()
    >>> ref.subquery_alias.alias = "_pyspark_connect_temp_view_AB"
    >>> sorted(reference_aliases(req))
    ['_pyspark_connect_temp_view_ab']
    """
    aliases: set[str] = set()
    for message in messages([request]):
        if isinstance(message, relations_pb2.WithRelations):
            for ref in message.references:
                if ref.WhichOneof("rel_type") == "subquery_alias":
                    aliases.add(ref.subquery_alias.alias.lower())
    return aliases


async def check(d: Decision) -> None:
    if not d.findings.unknown_relations:
        return
    names = sorted({n.lower() for n in d.findings.unknown_relations} - reference_aliases(d.call.request))
    if not names:
        return
    try:
        rows = await d.settings.catalog.run_sql_rows(LIST_TEMP_VIEWS, session=(d.call.user_id, d.call.session_id))
    except (UpstreamSqlError, CatalogUnavailable) as e:
        raise Refusal(
            grpc.StatusCode.UNAVAILABLE,
            f"cannot ask Spark whether {names[0]} is a temp view of this session: {e}",
            reason="upstream",
        ) from e
    listed = {str(row[1]).lower() for row in rows if not row[0] and row[2]}
    for name in names:
        if name in listed:
            continue
        # The catalog's "absent" is cached for a while: a table made around the proxy since
        # (another session, replica or tool) is asked about afresh, and the caller told to
        # send the request again, which then reads that table pinned.
        table = TableName(d.state.current_catalog, d.state.current_schema, name)
        d.settings.catalog.invalidate(table)
        try:
            found = await d.settings.catalog.lookup(table)
        except CatalogUnavailable as e:
            raise Refusal(grpc.StatusCode.UNAVAILABLE, f"cannot look up {table}: {e}", reason="upstream") from e
        if found is not None:
            raise Refusal(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{table} was created since rowgate last looked it up; send the request again",
                reason="unknown_relation",
            )
        raise Refusal.invalid(
            f"the relation {name} is no table, view or temp view rowgate can see; while row access policies "
            "are in force every relation name must resolve to exactly one existing object",
            reason="unknown_relation",
        )


RULE = Rule("unknown_relations", check)  # admins' unknown names go as written (rewrite/sql/run.py)

"""Re-learning a session from Spark, so that any replica can serve any request of it.

The proxy remembers per session what it needs to resolve names and to judge temp views:
the current catalog and database, the session's temp views, and when (under which policy
snapshot, over which tables) each temp view and checkpoint was made, so that one made
before a policy change is refused (proxy/rowgate/pipeline/enforce/rules/stale_session_data.py).
That memory lives in one process. A client whose connection lands on another replica
(a reconnect, a rolling restart, a balancer) brings a session that replica has not seen,
or has seen before another replica changed it.

Spark holds the session, so Spark is asked:

- the position with `SELECT current_catalog(), current_database()`
  (proxy/rowgate/pipeline/session/position.py);
- the temp views with `SHOW VIEWS IN spark_catalog.global_temp` (Spark lists the
  session's local temp views with every database's views; those are the rows with an
  empty namespace);
- the facts Spark cannot know (the snapshot a temp view or checkpoint was made under, the
  tables it read) from the session's own configuration: the proxy writes them there as a
  *record*, one key per temp view and per checkpoint under `rowgate.session.`, once Spark
  confirmed the statement (a checkpoint's before it runs: an extra entry only makes the
  staleness rule stricter). No caller may set or unset these keys, admins included
  (proxy/rowgate/pipeline/statements/guard_config.py), so a replica reads back exactly what a replica
  wrote. Policy snapshot versions are the store's, shared by every replica of one store.

A temp view Spark has and no record explains (made by a proxy that died before writing the
record, or by an older rowgate) is taken as made at an unknown time: reads of it are
refused while any policy exists, with the usual "recreate it". A record a replica failed
to write therefore refuses, never serves.

When the memory is re-learned: when the replica first meets the session, and whenever a
request of a session it knows arrives on another connection than the last one did. A
client channel holds one connection, so as long as its requests keep arriving on the
same connection no other replica can have changed the session in between; a new
connection may come after requests served elsewhere. Re-learning waits, as a reader of
the session's state (proxy/rowgate/pipeline/session/state_gate.py), for a statement of this
process that is still changing it.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Collection, Iterable

import grpc
from pyspark.sql.connect.proto import base_pb2

from rowgate.catalog.upstream_catalog import CatalogUnavailable, UpstreamCatalog
from rowgate.catalog.upstream_sql import UpstreamSqlError
from rowgate.pipeline.core import Answer, Call, Refusal
from rowgate.pipeline.session.registry import SessionRegistry, SessionState
from rowgate.policy.model import TableName

log = logging.getLogger("rowgate.sessions")

RECORD_PREFIX = "rowgate.session."
VIEW_PREFIX = RECORD_PREFIX + "tempview."
CHECKPOINT_PREFIX = RECORD_PREFIX + "checkpoint."
# (version, tables) of a temp view no record explains: refused while any policy exists.
UNKNOWN_VERSION = -1
LIST_TEMP_VIEWS = "SHOW VIEWS IN spark_catalog.global_temp"


def encode(version: int, tables: Iterable[TableName]) -> str:
    """A record value.

    >>> encode(3, {TableName("spark_catalog", "db", "t")})
    '{"v": 3, "t": [["spark_catalog", "db", "t"]]}'
    """
    return json.dumps({"v": version, "t": sorted([t.catalog, t.schema, t.table] for t in tables)})


def decode(value: str) -> tuple[int, frozenset] | None:
    """The (version, tables) of a record value; None when it cannot be read.

    >>> decode(encode(3, {TableName("spark_catalog", "db", "t")}))
    (3, frozenset({TableName(catalog='spark_catalog', schema='db', table='t')}))
    >>> decode("garbage") is None
    True
    """
    try:
        data = json.loads(value)
        return int(data["v"]), frozenset(TableName(*parts) for parts in data["t"])
    except (ValueError, TypeError, KeyError):
        return None


def _user(call: Call) -> base_pb2.UserContext:
    return base_pb2.UserContext(user_id=call.user_id, user_name=call.user_id)


class SessionRecall:
    def __init__(self, sessions: SessionRegistry, catalog: UpstreamCatalog, timeout: float = 30.0) -> None:
        self.sessions = sessions
        self.catalog = catalog
        self.timeout = timeout

    async def connection_step(self, call: Call) -> Answer | None:
        """Marks a known session's memory for re-learning when its connection changed."""
        peer = call.peer
        if not peer or not call.session_id:
            return None
        state = self.sessions.find((call.user_id, call.session_id))
        if state is None:
            return None  # a first meeting learns everything anyway
        if state.peer and state.peer != peer:
            state.recalled = False
            state.position_known = False
        state.peer = peer
        return None

    async def recall(self, call: Call, state: SessionState) -> None:
        """Replaces the memory of the session's temp views and checkpoints with Spark's."""
        session = (call.user_id, call.session_id)
        try:
            rows = await self.catalog.run_sql_rows(LIST_TEMP_VIEWS, session=session)
        except UpstreamSqlError as e:
            raise CatalogUnavailable(f"cannot list the session's temp views: {e.message}") from e
        local = {str(row[1]).lower() for row in rows if not row[0] and row[2]}
        views, checkpoints = await self._read_record(call, state)
        state.temp_views = set(local)
        state.temp_view_versions = {name: views.get(name, (UNKNOWN_VERSION, frozenset())) for name in local}
        state.checkpoint_versions = checkpoints
        state.peer = call.peer or state.peer

    async def _read_record(self, call: Call, state: SessionState) -> tuple[dict, list]:
        request = base_pb2.ConfigRequest(
            session_id=call.session_id,
            user_context=_user(call),
            operation=base_pb2.ConfigRequest.Operation(get_all=base_pb2.ConfigRequest.GetAll(prefix=RECORD_PREFIX)),
        )
        if state.server_side_session_id:
            request.client_observed_server_side_session_id = state.server_side_session_id
        try:
            response = await call.upstream.call("Config", request, timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            raise CatalogUnavailable(f"cannot read the session's record: {e.code().name} {e.details()}") from e
        views: dict[str, tuple[int, frozenset]] = {}
        checkpoints: list[tuple[int, frozenset]] = []
        for pair in response.pairs:
            created = decode(pair.value) if pair.HasField("value") else None
            if created is None:
                continue  # unreadable: a view it was for counts as unknown
            key = pair.key if pair.key.startswith(RECORD_PREFIX) else RECORD_PREFIX + pair.key
            if key.startswith(VIEW_PREFIX):
                views[key[len(VIEW_PREFIX) :]] = created
            elif key.startswith(CHECKPOINT_PREFIX):
                checkpoints.append(created)
        return views, checkpoints

    async def write(self, call: Call, state: SessionState, set_pairs: dict[str, str], unset: list[str]) -> None:
        """Writes record keys into the session's configuration; raises when Spark did not."""
        ops = []
        if unset:
            ops.append(base_pb2.ConfigRequest.Operation(unset=base_pb2.ConfigRequest.Unset(keys=unset)))
        if set_pairs:
            pairs = [base_pb2.KeyValue(key=k, value=v) for k, v in set_pairs.items()]
            ops.append(base_pb2.ConfigRequest.Operation(set=base_pb2.ConfigRequest.Set(pairs=pairs)))
        for op in ops:
            request = base_pb2.ConfigRequest(session_id=call.session_id, user_context=_user(call), operation=op)
            if state.server_side_session_id:
                request.client_observed_server_side_session_id = state.server_side_session_id
            await call.upstream.call("Config", request, timeout=self.timeout)

    async def record_views(self, call: Call, state: SessionState, created: Collection[str], dropped: Iterable[str]) -> None:
        """After Spark confirmed: the record follows the temp views. A failed write leaves a
        view unexplained, which other replicas refuse (see the module docstring)."""
        set_pairs = {VIEW_PREFIX + view: encode(*state.temp_view_versions[view]) for view in created}
        unset = [VIEW_PREFIX + view for view in dropped if view not in created]
        if not set_pairs and not unset:
            return
        try:
            await self.write(call, state, set_pairs, unset)
        except grpc.aio.AioRpcError as e:
            log.warning("could not record temp views of a session in Spark: %s %s", e.code().name, e.details())

    async def record_checkpoint(self, call: Call, state: SessionState, created: tuple[int, frozenset]) -> None:
        """Before the checkpoint runs; a failed write refuses it (another replica could not
        tell its rows are from before a policy change)."""
        try:
            await self.write(call, state, {CHECKPOINT_PREFIX + uuid.uuid4().hex: encode(*created)}, [])
        except grpc.aio.AioRpcError as e:
            raise Refusal(
                grpc.StatusCode.UNAVAILABLE,
                f"upstream Spark Connect did not record the checkpoint in the session ({e.code().name}); retry",
                reason="upstream",
            ) from e

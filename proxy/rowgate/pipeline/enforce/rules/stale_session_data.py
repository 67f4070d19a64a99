"""Rule: temp views and checkpoints made before the policies on their tables changed are
refused: they hold rows the policies of that time allowed, which the current ones may hide.

So are those made where the proxy cannot tell when: a session temp view no record in the
session explains (proxy/rowgate/pipeline/session/recall.py), and a global temp view this
process did not see created (another replica, or before a restart, made it).
"""

from __future__ import annotations

import grpc

from rowgate.catalog.upstream_sql import UpstreamSqlError, UpstreamUnavailable
from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.rules import Decision, Rule
from rowgate.policy.snapshot import PolicySnapshot

UNKNOWN: tuple[int, frozenset] = (-1, frozenset())  # (version, tables) of data made where this process cannot tell when


def refuse_if_stale(what: str, created: tuple[int, frozenset] | None, snapshot: PolicySnapshot) -> None:
    """`created` is (policy version, tables read) of when the data was captured."""
    if created is None or created[0] == snapshot.version:
        return
    if created[0] < 0 and snapshot.has_any():  # no record says when (proxy/rowgate/pipeline/session/recall.py)
        raise Refusal(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{what} was created where rowgate cannot tell under which row access policies; recreate it",
            reason="stale_session_data",
        )
    changed = sorted(str(t) for t in created[1] if snapshot.policies_for(t))
    if changed:
        raise Refusal(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{what} was created before the row access policies on {changed[0]} changed; recreate it",
            reason="stale_session_data",
        )


async def check(d: Decision) -> None:
    for view in d.findings.temp_views_read:
        if view.startswith("global_temp."):
            name = view.split(".", 1)[1]
            created = d.settings.global_temp_view_versions.get(name)
            if created is None and d.snapshot.has_any() and await _global_temp_view_exists(d, name):
                created = UNKNOWN
        else:
            created = d.state.temp_view_versions.get(view)
        refuse_if_stale(f"temp view {view}", created, d.snapshot)
    if d.findings.cached_relations_used:
        for created in d.state.checkpoint_versions:
            refuse_if_stale("a checkpointed or cached DataFrame of this session", created, d.snapshot)


async def _global_temp_view_exists(d: Decision, name: str) -> bool:
    """Asked of Spark (one that does not exist is Spark's to report as missing); a name a
    LIKE pattern cannot spell exactly counts as existing."""
    if not name or any(c in name for c in "*|'\\`"):
        return True
    try:
        rows = await d.settings.catalog.run_sql_rows(f"SHOW VIEWS IN spark_catalog.global_temp LIKE '{name}'")
    except UpstreamUnavailable as e:
        raise Refusal(
            grpc.StatusCode.UNAVAILABLE, f"cannot ask Spark about the global temp view {name}: {e}", reason="upstream"
        ) from e
    except UpstreamSqlError:
        return True
    return any(str(row[1]).lower() == name and row[0] == "global_temp" for row in rows)


RULE = Rule("stale_session_data", check)

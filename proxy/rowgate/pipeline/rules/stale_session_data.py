"""Rule: temp views and checkpoints made before the policies on their tables changed are
refused: they hold rows the policies of that time allowed, which the current ones may hide.
"""

from __future__ import annotations

import grpc

from rowgate.pipeline.core import Refusal
from rowgate.pipeline.rules import Decision, Rule


def refuse_if_stale(what: str, created: tuple[int, frozenset] | None, snapshot) -> None:
    """`created` is (policy version, tables read) of when the data was captured."""
    if created is None or created[0] == snapshot.version:
        return
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
            created = d.settings.global_temp_view_versions.get(view.split(".", 1)[1])
        else:
            created = d.state.temp_view_versions.get(view)
        refuse_if_stale(f"temp view {view}", created, d.snapshot)
    if d.findings.cached_relations_used:
        for created in d.state.checkpoint_versions:
            refuse_if_stale("a checkpointed or cached DataFrame of this session", created, d.snapshot)


RULE = Rule("stale_session_data", check)

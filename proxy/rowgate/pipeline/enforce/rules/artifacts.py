"""Rule: while any table is protected, a non-admin uploads code (jars, classes, Python files)
only with the operator's permission for that kind (proxy/rowgate/pipeline/statements/shipped_code.py).

The AddArtifacts RPC's counterpart of shipped_code.py, which checks code inside plans. Only
the first message of an artifact names it (a batch, or the first chunk of a chunked one); a
later chunk belongs to an artifact already checked. `cache/` artifacts carry local data,
not code, and pass.
"""

from __future__ import annotations

from rowgate.pipeline.enforce.rules import Decision, Rule
from rowgate.pipeline.statements.shipped_code import artifact_kind


async def check(d: Decision) -> None:
    request = d.call.request
    payload = request.WhichOneof("payload")
    if payload == "batch":
        names = [a.name for a in request.batch.artifacts]
    elif payload == "begin_chunk":
        names = [request.begin_chunk.name]
    else:
        return  # a later chunk of an artifact whose first chunk was checked
    kinds = {k for k in map(artifact_kind, names) if k}
    if kinds and d.snapshot.has_any():
        d.settings.code_rules.check(sorted(kinds))


RULE = Rule("artifacts", check, rpcs=frozenset({"AddArtifacts"}))

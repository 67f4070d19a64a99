"""The proxy never sends the upstream a message it cannot read.

The proxy speaks the newest protocol (upstream/protocol_versions.py); the upstream may be
an older Spark (4.0 on). A server reads a field it does not know as unknown and ignores
it, so a rewrite whose meaning rests on a field the server lacks would run there as if the
field were not set: a filter placed in a newer field would be no filter. So, once the
request is rewritten, the fields newer than the upstream that the proxy itself put in (set
in what goes out, not in what the client sent) refuse the request, naming the release
that added them. Fields the client sent itself are forwarded: a newer client asking an
older server for something it lacks gets the server's own error, as it would directly.

The check costs nothing while the upstream runs the newest release, which is the common
case; the version is learned once per connection (upstream/channel.py).
"""

from __future__ import annotations

import grpc

from rowgate.pipeline.core import Answer, Call, Refusal
from rowgate.rewrite.plan.compression import decompress_plan, plans_of
from rowgate.upstream.channel import UpstreamVersionUnknown
from rowgate.upstream.protocol_versions import SINCE, newer_fields, newest

# The RPCs whose messages the proxy rewrites beyond pinning the caller.
REWRITTEN_RPCS = ("ExecutePlan", "AnalyzePlan")


async def upstream_compat(call: Call) -> Answer | None:
    if call.method.name not in REWRITTEN_RPCS:
        return None
    try:
        text, version = await call.upstream.spark_version()
    except UpstreamVersionUnknown as e:
        raise Refusal(
            grpc.StatusCode.UNAVAILABLE,
            f"upstream Spark Connect did not say its Spark version ({e}); rowgate cannot tell which messages it reads",
            reason="upstream_version",
        ) from e
    if version >= newest():
        return None
    introduced = newer_fields(call.request) - _client_fields(call)
    too_new = sorted((SINCE[key], key) for key in introduced if SINCE[key] > version)
    if not too_new:
        return None
    release, (message, field) = too_new[0]
    raise Refusal.invalid(
        f"rowgate's rewrite of this request needs {message}.{field}, which Spark {release[0]}.{release[1]} added; "
        f"the upstream runs Spark {text}, which would ignore it",
        reason="upstream_too_old",
    )


def _client_fields(call: Call) -> set[tuple[str, str]]:
    """The newer fields of the request as the client sent it (compressed plans opened)."""
    original = call.method.request_type.FromString(call.raw_request)
    for plan in plans_of(original):
        if plan.WhichOneof("op_type") == "compressed_operation":
            decompress_plan(plan)
    return newer_fields(original)

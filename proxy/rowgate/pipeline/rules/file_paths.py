"""Rule: no file read by path, and no table made over a location, may reach the files of a
protected table (`spark.read.parquet(<its directory>)`, `CREATE TABLE ... LOCATION`, ...).
"""

from __future__ import annotations

import grpc

from rowgate.catalog.upstream_sql import UpstreamUnavailable
from rowgate.pipeline.core import Refusal
from rowgate.pipeline.rules import Decision, Rule
from rowgate.policy.file_locations import may_reach


async def protected_locations(d: Decision) -> list[str]:
    """Every protected table's location (cached lookups): a path read is checked against
    all of them, so a table missing from the cache is looked up, never skipped."""
    try:
        found = await d.settings.catalog.locations_of(d.snapshot.protected_tables())
    except UpstreamUnavailable as e:
        raise Refusal(grpc.StatusCode.UNAVAILABLE, f"cannot check protected locations: {e}", reason="catalog_unavailable") from e
    return list(found.values())


async def check(d: Decision) -> None:
    if not d.findings.paths_read:
        return
    locations = await protected_locations(d)
    for path in d.findings.paths_read:
        for location in locations:
            if may_reach(path, location):
                raise Refusal.denied(
                    f"reading files under {location} is refused: they belong to a table protected by row access policies"
                )


RULE = Rule("file_paths", check)

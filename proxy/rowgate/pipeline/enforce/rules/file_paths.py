"""Rule: while any table is protected, a non-admin reads, writes or names files by path only
under a prefix the operator allowed (`--allow-path`), and never the proxy's own files,
Spark's directories or a protected table's files.

Covers every path a request carries (`Findings.paths_read`: `spark.read...load(p)` in any
format, `` parquet.`p` ``, path options) and every location it names (`Findings.locations`:
writes by path, `CREATE TABLE ... LOCATION`, `ALTER TABLE ... [ADD PARTITION ...] LOCATION`,
`LOAD DATA INPATH`, `INSERT OVERWRITE DIRECTORY`, `catalog.createTable(path=...)`, ...). The
decision itself is proxy/rowgate/policy/path_allow_list.py; this module gathers what is
never allowed:

- the proxy's data directory and its policy store (the SQLite file and its -wal/-shm/-journal);
- the location of every protected table (cached catalog lookups);
- Spark's warehouse, event log, streaming checkpoint and working directories, its log
  directory, and Spark's spill directories under its local directory, asked from Spark once
  (the first time a path under an allowed prefix needs checking).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from rowgate.catalog.upstream_catalog import UpstreamCatalog
from rowgate.catalog.upstream_sql import UpstreamSqlError, UpstreamUnavailable
from rowgate.config import ServeConfig
from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.rules import Decision, Rule
from rowgate.policy.path_allow_list import Forbidden, PathAllowList

log = logging.getLogger("rowgate.paths")

# Spark settings that name directories of Spark's own (asked with `SET <key>`).
SPARK_DIR_SETTINGS = {
    "spark.sql.warehouse.dir": "Spark's warehouse",
    "spark.eventLog.dir": "Spark's event log directory",
    "spark.sql.streaming.checkpointLocation": "Spark's streaming checkpoint directory",
    "spark.local.dir": "Spark's local directory",
}
# Names Spark gives what it writes under its local directory (java.io.tmpdir by default,
# shared with everything else): shuffle and spill files, session files, Hive scratch.
SPILL_CHILDREN = ("blockmgr-", "spark-", "hive")
# Directories the JVM knows (asked with java_method): the log directory of Spark's scripts,
# Spark's home (its `logs/`), the working directory (rowgate's embedded Spark logs there).
_JVM_FACTS = (
    ("getenv", "SPARK_LOG_DIR"),
    ("getenv", "SPARK_HOME"),
    ("getProperty", "user.dir"),
    ("getProperty", "java.io.tmpdir"),
    ("getenv", "SPARK_LOCAL_DIRS"),
)
_UNDEFINED = ("", "<undefined>", "null")


@dataclass
class PathRules:
    """What the operator allowed and what the proxy knows to be its own."""

    allowed: PathAllowList = field(default_factory=PathAllowList)
    own: tuple[Forbidden, ...] = ()
    spark: SparkDirectories = field(default_factory=lambda: SparkDirectories())

    @staticmethod
    def from_config(config: ServeConfig) -> PathRules:
        """From `ServeConfig`: `allow_path` prefixes; the data dir and a SQLite store."""
        data_dir = str(Path(config.data_dir).resolve())
        own = [Forbidden(data_dir, "the proxy's data directory")]
        store = config.resolved_policy_store()
        if store.startswith("sqlite:///"):
            db = store[len("sqlite:///") :]
            db = db if db.startswith("/") else str(Path(db).resolve())
            own += [Forbidden(db + suffix, "the proxy's policy store") for suffix in ("", "-wal", "-shm", "-journal")]
        return PathRules(PathAllowList(config.allow_path), tuple(own))


class SparkDirectories:
    """Spark's own directories, asked from Spark once (a failed question is asked again)."""

    def __init__(self) -> None:
        self.known: tuple[Forbidden, ...] | None = None
        self._lock = asyncio.Lock()

    async def get(self, catalog: UpstreamCatalog) -> tuple[Forbidden, ...]:
        if self.known is not None:
            return self.known
        async with self._lock:
            if self.known is None:
                self.known = await _ask_spark(catalog)
                log.info("Spark's directories, never readable by path", extra={"dirs": [f.location for f in self.known]})
        return self.known


async def _ask_spark(catalog: UpstreamCatalog) -> tuple[Forbidden, ...]:
    out: list[Forbidden] = []
    local_dirs: list[str] = []
    for key, reason in SPARK_DIR_SETTINGS.items():
        rows = await catalog.run_sql_rows(f"SET {key}")
        value = str(rows[0][1]) if rows and len(rows[0]) > 1 and rows[0][1] is not None else ""
        if value.strip() in _UNDEFINED:
            continue
        if key == "spark.local.dir":
            local_dirs += [v.strip() for v in value.split(",") if v.strip()]
        else:
            out.append(Forbidden(value.strip(), reason))
    calls = ", ".join(f"java_method('java.lang.System', '{method}', '{arg}')" for method, arg in _JVM_FACTS)
    try:
        rows = await catalog.run_sql_rows(f"SELECT {calls}")
    except UpstreamSqlError as e:  # reflection switched off upstream: settings only
        log.warning("cannot ask Spark for its log and working directories (%s); only its settings are known", e.message)
        return tuple(out)
    log_dir, home, cwd, tmp, local_env = (str(v).strip() if v else "" for v in (rows[0] if rows else ("",) * 5))
    if log_dir:
        out.append(Forbidden(log_dir, "Spark's log directory"))
    if home:
        out.append(Forbidden(home.rstrip("/") + "/logs", "Spark's log directory"))
    if cwd and cwd != "/":
        out.append(Forbidden(cwd, "Spark's working directory (its log and metastore when started in place)"))
    if local_env:
        local_dirs = [v.strip() for v in local_env.split(",") if v.strip()]
    for local in local_dirs or ([tmp] if tmp else []):
        out.append(Forbidden(local, "Spark's spill and scratch files", SPILL_CHILDREN))
    return tuple(out)


async def _forbidden(d: Decision) -> list[Forbidden]:
    rules: PathRules = d.settings.paths
    try:
        spark = await rules.spark.get(d.settings.catalog)
        protected = await d.settings.catalog.locations_of(d.snapshot.protected_tables())
    except UpstreamUnavailable as e:
        raise Refusal(
            grpc.StatusCode.UNAVAILABLE, f"cannot check which paths are Spark's or protected: {e}", reason="catalog_unavailable"
        ) from e
    except UpstreamSqlError as e:
        raise Refusal(
            grpc.StatusCode.UNAVAILABLE, f"Spark did not say where its directories are: {e.message}", reason="catalog_unavailable"
        ) from e
    tables = [
        Forbidden(loc, f"the files of {name}, which is protected by row access policies")
        for name, loc in sorted(protected.items())
    ]
    return [*tables, *rules.own, *spark]  # the most specific reason first


async def check(d: Decision) -> None:
    if not (d.findings.paths_read or d.findings.locations) or not d.snapshot.has_any():
        return
    rules: PathRules = d.settings.paths
    named = [("reading files by path", p) for p in sorted(d.findings.paths_read)]
    named += [("naming the location", p) for p in sorted(d.findings.locations - d.findings.paths_read)]
    forbidden: list[Forbidden] | None = None
    for what, path in named:
        reason = rules.allowed.refusal(path, ())
        if reason is None:  # under an allowed prefix: but never the proxy's or Spark's files
            if forbidden is None:
                forbidden = await _forbidden(d)
            reason = rules.allowed.refusal(path, forbidden)
        if reason is not None:
            raise Refusal.denied(
                f"{what} {path} is refused while row access policies are in force: {reason}", reason="path_refused"
            )


RULE = Rule("file_paths", check)

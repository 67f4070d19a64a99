"""The settings a non-admin may change, as data: each with what it may affect.

A setting changes how Spark reads the text and plans the proxy checked: a catalog, the SQL
path, variable substitution, parser flags, case sensitivity, a collation, excluded
optimizer rules, a class name Spark loads. A deny list of such settings is never complete
(every Spark release adds some: 4.3 added `spark.sql.path.enabled`), so the rule is the
other way round: a non-admin may set, unset or `RESET` only a setting listed here, through
every route (Config RPC, `SET k=v`, `SET TIME ZONE`, `RESET k`), whether or not row access
policies exist yet. Reading settings (`get`, `get_all`, `SET k`, `SET -v`) stays open.

The list is generous wherever a setting cannot widen what a caller reads (partitions,
batch sizes, join strategies, result formatting): every refused setting is a cost to
ordinary programs. An entry is an exact key or a family (`prefix.*`); keys compare
case-insensitively; `EXCEPTIONS` names the keys inside an allowed family that stay refused.

Two entries carry a `caveat`: the session time zone and ANSI mode change what a policy
predicate that reads time, casts or overflows returns. They are allowed because ordinary
programs set them all the time; a read filtered by a policy whose filter depends on them
(predicate_semantics.py) runs only while the session holds the server's values
(proxy/rowgate/pipeline/enforce/predicate_settings.py).

>>> allowed("spark.sql.shuffle.partitions").affects
'the number of partitions of shuffles: speed only'
>>> allowed("SPARK.SQL.EXECUTION.ARROW.MAXRECORDSPERBATCH").pattern
'spark.sql.execution.arrow.*'
>>> allowed("spark.sql.path.enabled") is None, allowed("spark.sql.adaptive.optimizer.excludedRules") is None
(True, True)
>>> refusal_reason("spark.sql.defaultPath")
'it moves the SQL path, which decides which table a one-part name reads'
>>> refusal_reason("spark.unheard.of")
'it is not on the allow list of settings that cannot widen what a caller reads'
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AllowedSetting:
    pattern: str  # a key, or a family: a prefix ending in ".*"
    affects: str  # what changing it may affect
    caveat: str = ""  # how it could still change a policy predicate's result, if it can

    def matches(self, key: str) -> bool:
        k = normal(key)
        p = self.pattern.lower()
        return k.startswith(p[:-1]) if p.endswith(".*") else k == p


_PREDICATE_SEMANTICS = (
    "a table whose policy {what} is read only under the server's value; tables with setting-independent policies under any"
)

ALLOWED_SETTINGS: tuple[AllowedSetting, ...] = (
    # -- execution: how fast, never what -------------------------------------------------
    AllowedSetting("spark.sql.shuffle.partitions", "the number of partitions of shuffles: speed only"),
    AllowedSetting("spark.sql.adaptive.enabled", "adaptive query execution on or off: speed only"),
    AllowedSetting("spark.sql.adaptive.coalescePartitions.*", "how adaptive execution merges small partitions: speed only"),
    AllowedSetting("spark.sql.adaptive.skewJoin.*", "how adaptive execution splits skewed joins: speed only"),
    AllowedSetting("spark.sql.adaptive.advisoryPartitionSizeInBytes", "the partition size adaptive execution aims at"),
    AllowedSetting("spark.sql.adaptive.localShuffleReader.enabled", "a shuffle read strategy: speed only"),
    AllowedSetting("spark.sql.adaptive.autoBroadcastJoinThreshold", "when adaptive execution broadcasts a join side"),
    AllowedSetting("spark.sql.adaptive.maxShuffledHashJoinLocalMapThreshold", "a join strategy threshold: speed only"),
    AllowedSetting("spark.sql.adaptive.forceOptimizeSkewedJoin", "a join strategy: speed only"),
    AllowedSetting("spark.sql.autoBroadcastJoinThreshold", "when a join side is broadcast: speed only"),
    AllowedSetting("spark.sql.broadcastTimeout", "how long a broadcast may take before the query fails"),
    AllowedSetting("spark.sql.join.preferSortMergeJoin", "a join strategy: speed only"),
    AllowedSetting("spark.sql.cbo.enabled", "cost-based join ordering: speed only"),
    AllowedSetting("spark.sql.cbo.joinReorder.enabled", "cost-based join ordering: speed only"),
    AllowedSetting("spark.sql.codegen.wholeStage", "whole-stage code generation on or off: speed only"),
    # Both fail the caller's own query or not, from its plan or its own result (the rows a
    # policy left); neither changes which rows a read returns (pyspark's own suites set them).
    AllowedSetting("spark.sql.crossJoin.enabled", "whether the caller's joins without a condition may run"),
    AllowedSetting("spark.sql.transposeMaxValues", "how many columns DataFrame.transpose may make before it fails"),
    # Not spark.sql.files.maxPartitionBytes / openCostInBytes / minPartitionNum: with splits
    # of a few KB, spark_partition_id() of an allowed row measures the bytes before it in
    # its file, hidden rows included (what input_file_block_start() is refused for).
    AllowedSetting("spark.sql.files.maxRecordsPerFile", "how many rows the caller's own writes put in one file"),
    AllowedSetting("spark.sql.inMemoryColumnarStorage.batchSize", "the batch size of the caller's cached data"),
    AllowedSetting("spark.sql.inMemoryColumnarStorage.compressed", "whether the caller's cached data is compressed"),
    # -- writes of the caller's own data --------------------------------------------------
    AllowedSetting("spark.sql.sources.partitionOverwriteMode", "which partitions the caller's own overwrite replaces"),
    AllowedSetting("spark.sql.parquet.compression.codec", "the compression of the caller's own parquet writes"),
    AllowedSetting("spark.sql.orc.compression.codec", "the compression of the caller's own ORC writes"),
    # -- results as the client receives them ---------------------------------------------
    AllowedSetting("spark.sql.execution.arrow.*", "Arrow batches of results and of pandas conversions"),
    AllowedSetting("spark.sql.execution.pandas.*", "how results convert to and from pandas"),
    AllowedSetting("spark.sql.execution.pythonUDF.arrow.enabled", "how the caller's Python UDFs exchange rows"),
    AllowedSetting("spark.sql.execution.pythonUDTF.arrow.enabled", "how the caller's Python UDTFs exchange rows"),
    AllowedSetting("spark.sql.repl.eagerEval.*", "how a DataFrame displays itself in a notebook"),
    AllowedSetting("spark.sql.pyspark.inferNestedDictAsStruct.enabled", "the schema pyspark infers for local data"),
    AllowedSetting("spark.sql.pyspark.legacy.inferArrayTypeFromFirstElement.enabled", "the schema inferred for local data"),
    AllowedSetting("spark.sql.pyspark.legacy.inferMapTypeFromFirstElement.enabled", "the schema inferred for local data"),
    AllowedSetting(
        "spark.sql.pyspark.worker.logging.enabled",
        "whether the caller's own Python UDFs' log records are kept for the session's python_worker_logs()",
    ),
    # -- the client's own session settings (pyspark sets or reads these itself) ----------
    AllowedSetting("spark.app.name", "the application's name (SparkSession.builder.appName); Spark ignores it here"),
    AllowedSetting(
        "spark.sql.session.localRelationCacheThreshold",
        "above which size pyspark uploads local data as an artifact instead of inlining it",
    ),
    AllowedSetting("spark.connect.session.planCompression.threshold", "above which size pyspark compresses a plan"),
    AllowedSetting("spark.connect.session.planCompression.defaultAlgorithm", "how pyspark compresses a plan"),
    # -- the caller's own semantics (see the module docstring) ----------------------------
    AllowedSetting(
        "spark.sql.session.timeZone",
        "the time zone the caller's timestamps are shown and parsed in",
        caveat=_PREDICATE_SEMANTICS.format(what="reads the time, a date or a timestamp"),
    ),
    AllowedSetting(
        "spark.sql.ansi.enabled",
        "whether a failing cast or overflow is an error (ANSI) or NULL/wraps around",
        caveat=_PREDICATE_SEMANTICS.format(what="casts or can overflow"),
    ),
    AllowedSetting(
        "spark.sql.timestampNanosTypes.enabled",
        "whether timestamps carry nanoseconds (Spark 4.3: `TIMESTAMP(9)`, literals with more than six fractional digits)",
        caveat=_PREDICATE_SEMANTICS.format(what="reads a timestamp literal or a type DESCRIBE does not give"),
    ),
    AllowedSetting(
        "spark.sql.parser.escapedStringLiterals",
        "whether a backslash in a string literal is an escape or the character itself",
        caveat="a text holding a string literal with a backslash is forwarded under it only when Spark reads the "
        "client's own literals and rowgate decided nothing on their values; else only under the server's value",
    ),
)

# Inside an allowed family, yet refused: none today (the families above hold no class names,
# rule lists or name resolution); a key a later Spark adds to one of them belongs here.
EXCEPTIONS: frozenset[str] = frozenset()

# Why some refused settings are refused: named in the refusal. Never consulted to allow.
REFUSED_REASONS: tuple[tuple[str, str], ...] = (
    ("spark.sql.path.", "it moves the SQL path, which decides which table a one-part name reads"),
    ("spark.sql.defaultpath", "it moves the SQL path, which decides which table a one-part name reads"),
    ("spark.sql.variable.substitute", "rowgate forces it off: with it on, Spark would run other text than rowgate checked"),
    ("spark.sql.legacy.storeanalyzedplanforview", "rowgate forces it on: a temp view keeps the filtered plan it was made with"),
    ("spark.sql.catalog", "a catalog can name protected data under another name"),
    ("spark.sql.defaultcatalog", "a catalog can name protected data under another name"),
    ("spark.sql.session.collation", "a collation changes how strings compare, in policy predicates too"),
    ("collation", "a collation changes how strings compare, in policy predicates too"),
    ("spark.sql.casesensitive", "case sensitivity changes which column or table a name resolves to"),
    ("spark.sql.parser.", "it changes how Spark parses the text rowgate checked"),
    ("spark.sql.ansi.doublequotedidentifiers", "it changes how Spark parses the text rowgate checked"),
    ("spark.sql.optimizer.", "excluded or changed optimizer rules change the plan of a filtered query"),
    ("spark.sql.adaptive.optimizer.", "excluded or changed optimizer rules change the plan of a filtered query"),
    ("spark.sql.extensions", "extensions load code into Spark's analyzer and optimizer"),
    (
        "spark.sql.sources.default",
        "it picks the data source (a class Spark loads) of every read and write that names no format; rowgate reads those as the server's",
    ),
    ("spark.sql.legacy.", "legacy behaviour changes how Spark reads and resolves a query"),
    ("rowgate.", "it is rowgate's own record of the session"),
)
NOT_LISTED = "it is not on the allow list of settings that cannot widen what a caller reads"

# The settings rowgate forces on every session before its first request is forwarded, and
# again after anything reset them (proxy/rowgate/pipeline/statements/guard_config.py).
FORCED_SETTINGS: tuple[tuple[str, str], ...] = (
    # `${x}` is never rewritten behind the proxy's back
    ("spark.sql.variable.substitute", "false"),
    # a temp view keeps the filtered plan it was created with instead of re-reading its text
    ("spark.sql.legacy.storeAnalyzedPlanForView", "true"),
    # one-part names resolve in the current catalog and database only, as the rewriter reads
    # them, never along a SQL path (Spark 4.3; an older Spark keeps the unknown key unread)
    ("spark.sql.path.enabled", "false"),
)


def normal(key: str) -> str:
    """Keys compare stripped and case-insensitively: a variant is the same key or one Spark ignores."""
    return key.strip().lower()


def allowed(key: str) -> AllowedSetting | None:
    """The entry that lets a non-admin change `key`, or None."""
    if normal(key) in {e.lower() for e in EXCEPTIONS}:
        return None
    return next((entry for entry in ALLOWED_SETTINGS if entry.matches(key)), None)


def refusal_reason(key: str) -> str:
    k = normal(key)
    return next((reason for prefix, reason in REFUSED_REASONS if k.startswith(prefix)), NOT_LISTED)


def is_forced(key: str) -> bool:
    return normal(key) in {k.lower() for k, _ in FORCED_SETTINGS}


def markdown_table() -> str:
    """The allow list as the README shows it (tests/unit/policy/test_settings_allow_list.py
    checks that the README holds exactly this)."""
    lines = ["| Setting | What it may affect |", "| --- | --- |"]
    for entry in ALLOWED_SETTINGS:
        text = entry.affects + (f" (caveat: {entry.caveat})" if entry.caveat else "")
        lines.append(f"| `{entry.pattern}` | {text} |")
    return "\n".join(lines)

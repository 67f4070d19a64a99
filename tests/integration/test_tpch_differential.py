"""Differential test: the 22 TPC-H queries through the proxy against an oracle.

TPC-H is loaded once into the database `tpch` (directly, without the proxy; skipped when the
tables are already there with the right row counts). Policies go on lineitem, orders,
customer and supplier, through a proxy of this module's own (so the shared proxy stays free
of policies on `tpch`). For each caller, the oracle is a database `tpch_oracle_<caller>`
made directly against Spark: the four protected tables copied with exactly the rows the
caller's policies allow (the OR of the filters of the policies that grant the caller, with
SESSION_USER() replaced by the caller's email; FALSE when none does), the other four as views
of the originals. Each query then runs

- through the proxy, as the caller, with `USE tpch` (the queries name tables with one part),
- directly, with `USE tpch_oracle_<caller>`,

and the answers must be equal: same columns and types, same rows (in order when the query
ends with ORDER BY ... LIMIT, else as multisets; floats compared to 6 significant digits).
The full-access caller's oracle is `tpch` itself; its answers are also the reference that
shows the other callers' policies change the answers at all (test_policies_change_the_answers).

Who may see what (grantee matching is re-implemented here, independently of the proxy):

    customer  america       group:america@example.com  c_nationkey IN (SELECT n_nationkey FROM tpch.nation
                                                       WHERE n_regionkey = 1)
              own_segments  domain:example.com         c_mktsegment IN (SELECT segment FROM tpch_acl.segment_access
                                                       WHERE email = SESSION_USER())
    orders    before_1996   user:ann@example.com       o_orderdate < DATE '1996-01-01'
              urgent        group:america@example.com  o_orderpriority IN ('1-URGENT', '2-HIGH')
    lineitem  modes         domain:example.com         l_shipmode IN ('AIR', 'MAIL', 'SHIP')
              small         user:bob@partner.org       l_quantity <= 10
    supplier  solvent       user:ann@..., group:america@...   s_acctbal > 0
    all four  audit         group:audit@example.com    TRUE
"""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from tests import tpch
from tests.conftest import remote_url

pytestmark = pytest.mark.spark

ADMIN = "user:admin@example.com"
TPCH = "tpch"
ACL = "tpch_acl"
PROTECTED = ("customer", "orders", "lineitem", "supplier")
if not (tpch.DATA / "queries.sql").exists():
    pytest.skip(f"TPC-H data not found at {tpch.DATA} (set ROWGATE_TPCH_DIR)", allow_module_level=True)
QUERIES = tpch.queries()
# Small data, two cores: one shuffle partition and broadcast joins keep each query short.
SESSION_CONF = {"spark.sql.shuffle.partitions": "1", "spark.sql.autoBroadcastJoinThreshold": "64MB"}


@dataclass(frozen=True)
class Caller:
    name: str
    user: str
    groups: tuple[str, ...] = ()
    full_access: bool = False  # the reference caller: every policy table wholly visible

    @property
    def email(self) -> str:
        return self.user.split(":", 1)[1]


CALLERS = [
    Caller("ann", "user:ann@example.com"),  # user grants + lookup by SESSION_USER()
    Caller("amy", "user:amy@example.com", ("america@example.com",)),  # group grants, lookups OR-ed
    Caller("bob", "user:bob@partner.org"),  # one grant on lineitem only
    Caller("eve", "user:eve@nowhere.net"),  # no grant at all: the four tables are empty for her
    Caller("carl", "user:carl@example.com", ("audit@example.com",), full_access=True),
]
BY_NAME = {c.name: c for c in CALLERS}


@dataclass(frozen=True)
class Policy:
    table: str
    name: str
    grantees: tuple[str, ...]
    predicate: str


POLICIES = [
    Policy(
        "customer",
        "america",
        ("group:america@example.com",),
        f"c_nationkey IN (SELECT n_nationkey FROM {TPCH}.nation WHERE n_regionkey = 1)",
    ),
    Policy(
        "customer",
        "own_segments",
        ("domain:example.com",),
        f"c_mktsegment IN (SELECT segment FROM {ACL}.segment_access WHERE email = SESSION_USER())",
    ),
    Policy("orders", "before_1996", ("user:ann@example.com",), "o_orderdate < DATE '1996-01-01'"),
    Policy("orders", "urgent", ("group:america@example.com",), "o_orderpriority IN ('1-URGENT', '2-HIGH')"),
    Policy("lineitem", "modes", ("domain:example.com",), "l_shipmode IN ('AIR', 'MAIL', 'SHIP')"),
    Policy("lineitem", "small", ("user:bob@partner.org",), "l_quantity <= 10"),
    Policy("supplier", "solvent", ("user:ann@example.com", "group:america@example.com"), "s_acctbal > 0"),
    *(Policy(t, "audit", ("group:audit@example.com",), "TRUE") for t in PROTECTED),
]
SEGMENT_ACCESS = [("ann@example.com", "BUILDING"), ("ann@example.com", "MACHINERY"), ("amy@example.com", "AUTOMOBILE")]


def grants(grantee: str, caller: Caller) -> bool:
    """The contract's grantee matching (row-access-semantics.md), written out for the oracle."""
    if grantee in ("allUsers", "allAuthenticatedUsers"):
        return True  # every caller here is authenticated
    kind, _, value = grantee.partition(":")
    caller_kind, _, email = caller.user.partition(":")
    if kind in ("user", "serviceAccount"):
        if kind != caller_kind:
            return False
        local, _, host = value.partition("@")
        c_local, _, c_host = email.partition("@")
        return local == c_local and host.lower() == c_host.lower()
    if kind == "domain":
        return email.partition("@")[2].lower() == value.lower()
    if kind == "group":
        return value.lower() in {g.lower() for g in caller.groups}
    raise ValueError(grantee)


def oracle_predicate(table: str, caller: Caller) -> str:
    granted = [p for p in POLICIES if p.table == table and any(grants(g, caller) for g in p.grantees)]
    if not granted:
        return "FALSE"
    bound = [re.sub(r"(?i)\bSESSION_USER\s*\(\s*\)", f"'{caller.email}'", p.predicate) for p in granted]
    return " OR ".join(f"({b})" for b in bound)


def oracle_db(caller: Caller) -> str:
    return TPCH if caller.full_access else f"tpch_oracle_{caller.name}"


# -- results ----------------------------------------------------------------------------------


@dataclass
class Answer:
    schema: list[tuple[str, str]]
    rows: list[tuple]
    seconds: float


def normal(value):
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value) or value == 0:
            return value
        return float(f"{value:.6g}")
    if isinstance(value, (list, tuple)):
        return tuple(normal(v) for v in value)
    return value


def sort_key(row: tuple):
    return tuple((v is None, v if v is not None else 0) for v in row)


def run(spark, sql: str) -> Answer:
    started = time.monotonic()
    df = spark.sql(sql)
    rows = df.collect()
    schema = [(f.name, f.dataType.simpleString()) for f in df.schema.fields]
    return Answer(schema, [tuple(normal(v) for v in r) for r in rows], time.monotonic() - started)


def comparable(answer: Answer, ordered: bool) -> list[tuple]:
    return answer.rows if ordered else sorted(answer.rows, key=sort_key)


# -- fixtures ---------------------------------------------------------------------------------


@dataclass
class World:
    proxied: dict[str, object]
    oracles: dict[str, object]
    pool: ThreadPoolExecutor
    results: dict[tuple[str, int], tuple[Answer, Answer]] = field(default_factory=dict)
    setup_seconds: float = 0.0


def tpch_loaded(spark) -> bool:
    counts = tpch.row_counts()
    try:
        got = spark.sql(
            "SELECT " + ", ".join(f"(SELECT count(*) FROM {TPCH}.{t}) AS {t}" for t in tpch.TABLES)
        ).first().asDict()
    except Exception:  # noqa: BLE001 - a table is missing
        return False
    return got == counts


@pytest.fixture(scope="module")
def tpch_proxy(proxy_factory):
    """A proxy of the module's own: the policies on `tpch` stay out of the shared proxy."""
    return proxy_factory("--identity", "header", "--admin", ADMIN)


@pytest.fixture(scope="module")
def world(spark_server, tpch_proxy, module_sessions, report_summary) -> World:
    started = time.monotonic()
    direct = module_sessions(spark_server.url)
    if not tpch_loaded(direct):
        tpch.load(direct, TPCH, replace=True)
        assert tpch_loaded(direct), "TPC-H did not load with the row counts of the files"
    direct.sql(f"CREATE DATABASE IF NOT EXISTS {ACL}")
    direct.sql(f"DROP TABLE IF EXISTS {ACL}.segment_access")
    direct.createDataFrame(SEGMENT_ACCESS, "email STRING, segment STRING").write.format("parquet").saveAsTable(
        f"{ACL}.segment_access"
    )

    # Oracles: copies with the allowed rows, made without the proxy.
    for caller in CALLERS:
        if caller.full_access:
            continue
        db = oracle_db(caller)
        direct.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")
        direct.sql(f"CREATE DATABASE {db}")
        for table in tpch.TABLES:
            if table in PROTECTED:
                direct.sql(
                    f"CREATE TABLE {db}.{table} USING parquet AS "
                    f"SELECT * FROM {TPCH}.{table} WHERE {oracle_predicate(table, caller)}"
                )
            else:
                direct.sql(f"CREATE VIEW {db}.{table} AS SELECT * FROM {TPCH}.{table}")

    admin = module_sessions(remote_url(tpch_proxy.url, user=ADMIN))
    for p in POLICIES:
        grantees = ", ".join(f"'{g}'" for g in p.grantees)
        admin.sql(
            f"CREATE OR REPLACE ROW ACCESS POLICY {p.name} ON {TPCH}.{p.table} "
            f"GRANT TO ({grantees}) FILTER USING ({p.predicate})"
        ).collect()

    proxied, oracles = {}, {}
    for caller in CALLERS:
        groups = ",".join(f"group:{g}" for g in caller.groups) or None
        through = module_sessions(remote_url(tpch_proxy.url, user=caller.user, groups=groups))
        beside = module_sessions(spark_server.url)
        for spark, db in ((through, TPCH), (beside, oracle_db(caller))):
            for key, value in SESSION_CONF.items():
                spark.conf.set(key, value)
            spark.sql(f"USE {db}")
        proxied[caller.name], oracles[caller.name] = through, beside
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tpch-oracle")
    w = World(proxied=proxied, oracles=oracles, pool=pool, setup_seconds=time.monotonic() - started)
    yield w
    pool.shutdown(wait=True)
    report_summary(summary(w))
    # The policies die with the module's proxy; the oracle copies are dropped, TPC-H stays.
    for caller in CALLERS:
        if not caller.full_access:
            direct.sql(f"DROP DATABASE IF EXISTS {oracle_db(caller)} CASCADE")


def summary(w: World) -> str:
    lines = [f"TPC-H differential (setup {w.setup_seconds:.1f}s):"]
    by_caller = defaultdict(list)
    for (name, q), pair in sorted(w.results.items()):
        by_caller[name].append((q, pair))
    full = {q: pair[1] for (name, q), pair in w.results.items() if BY_NAME[name].full_access}
    for caller in CALLERS:
        done = by_caller.get(caller.name, [])
        if not done:
            continue
        nonempty = sum(1 for _, (p, _) in done if p.rows)
        differ = sum(
            1
            for q, (p, _) in done
            if q in full and sorted(p.rows, key=sort_key) != sorted(full[q].rows, key=sort_key)
        )
        proxy_s = sum(p.seconds for _, (p, _) in done)
        oracle_s = sum(o.seconds for _, (_, o) in done)
        rows = sum(len(p.rows) for _, (p, _) in done)
        lines.append(
            f"  {caller.name:5} {caller.user:26} queries={len(done):2} rows={rows:5} non-empty={nonempty:2} "
            f"differ-from-full={differ:2} proxy={proxy_s:5.1f}s oracle={oracle_s:5.1f}s"
        )
    return "\n".join(lines)


# -- tests ------------------------------------------------------------------------------------


def test_queries_name_tables_with_one_part():
    """The harness runs the queries with USE <database>: that only works for one-part names."""
    for number, sql in QUERIES.items():
        assert not re.search(r"\b\w+\.(" + "|".join(tpch.TABLES) + r")\b", sql, re.I), number


def test_oracle_copies_hold_what_the_policies_allow(world, spark_server, module_sessions):
    direct = module_sessions(spark_server.url)
    full = {t: direct.sql(f"SELECT count(*) FROM {TPCH}.{t}").first()[0] for t in PROTECTED}
    sizes = {}
    for caller in CALLERS:
        db = oracle_db(caller)
        sizes[caller.name] = {t: direct.sql(f"SELECT count(*) FROM {db}.{t}").first()[0] for t in PROTECTED}
    assert sizes["carl"] == full
    assert all(n == 0 for n in sizes["eve"].values())
    assert sizes["bob"]["lineitem"] > 0 and sizes["bob"]["orders"] == 0
    for name in ("ann", "amy"):
        for t in PROTECTED:
            assert 0 < sizes[name][t] < full[t], (name, t, sizes[name][t], full[t])
    # Through the proxy the same counts come back.
    for caller in CALLERS:
        got = world.proxied[caller.name].sql(
            "SELECT " + ", ".join(f"(SELECT count(*) FROM {t}) AS {t}" for t in PROTECTED)
        ).first().asDict()
        assert got == sizes[caller.name], caller.name


@pytest.mark.parametrize("query", sorted(QUERIES))
@pytest.mark.parametrize("name", [c.name for c in CALLERS])
def test_tpch_query_matches_the_oracle(world, name, query):
    sql = QUERIES[query]
    expected_future = world.pool.submit(run, world.oracles[name], sql)
    try:
        got = run(world.proxied[name], sql)
    finally:
        expected = expected_future.result()
    world.results[(name, query)] = (got, expected)
    assert got.schema == expected.schema
    ordered = tpch.has_order_by_and_limit(sql)
    assert comparable(got, ordered) == comparable(expected, ordered), (
        f"TPC-H {query} as {name}: {len(got.rows)} rows through the proxy, {len(expected.rows)} in the oracle"
    )


def test_policies_change_the_answers(world):
    """The differential test has teeth: filtered callers get answers other than the full ones."""
    full = {q: pair[1] for (name, q), pair in world.results.items() if name == "carl"}
    if len(full) < len(QUERIES):
        pytest.skip("the full-access caller's queries did not all run")
    differ = defaultdict(set)
    for (name, q), (got, _) in world.results.items():
        if name != "carl" and sorted(got.rows, key=sort_key) != sorted(full[q].rows, key=sort_key):
            differ[name].add(q)
    print("\n" + summary(world))
    for name in ("ann", "amy", "bob", "eve"):
        assert len(differ[name]) >= 12, (name, sorted(differ[name]))

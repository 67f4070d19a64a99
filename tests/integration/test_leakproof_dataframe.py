"""DataFrame filters below a lookup policy's guard: leakproof conditions only (rewrite/plan/placement.py).

The DataFrame twin of test_leakproof_placement.py. alice's lookup policy hides row 3; each
adversarial predicate raises when it runs on row 3 (checked directly on Spark first), and it
is combined with a leakproof `day` condition that the proxy places in front of the guard. If
the placement moved the adversarial predicate below the guard too, Spark would run it on the
hidden row and the query would fail. Checked: with `leakproof.is_leakproof` answering True for
everything, the expression-string forms fail (the Column-built forms are also kept above by
placement.py's translation, which has no arithmetic, casts of columns, CASE or UDF calls).
The proxy runs with --allow-python-udfs so a Python UDF can be the predicate.
"""

from __future__ import annotations

import pytest

from tests.conftest import unique
from tests.harness.answers import ids
from tests.harness.callers import ADMIN, ALICE
from tests.harness.worlds import Policy, Table, protected_world, values

DAY = "2024-01-01"
# id, secret, n, region, day. alice may see region eu only; row 3 is hidden from her.
ROWS = [(1, "1", 1, "eu", DAY), (2, "2", 2, "eu", DAY), (3, "x", 7, "us", DAY), (4, "4", 4, "eu", "2024-01-02")]


def _make_boom():
    """A UDF that raises on the hidden row; made in a function so cloudpickle ships it by value
    (Spark's Python workers cannot import the tests package)."""

    def boom(n):
        if n == 7:
            raise ValueError("hidden row seen by a UDF")
        return True

    return boom


boom = _make_boom()


def column_predicates():
    from pyspark.sql import functions as F

    udf = F.udf(boom, "boolean")
    return {
        "divide_by_zero": F.lit(1) / (F.col("n") - 7) != 0,
        "raise_error": F.when(F.col("n") == 7, F.raise_error(F.lit("hidden row seen"))).otherwise(F.lit(True)),
        "failed_cast": F.col("secret").cast("int") > 0,
        "python_udf": udf(F.col("n")),
    }


TEXT_PREDICATES = {
    "divide_by_zero": "1 / (n - 7) <> 0",
    "raise_error": "CASE WHEN n = 7 THEN raise_error('hidden row seen') ELSE TRUE END",
    "failed_cast": "CAST(secret AS INT) > 0",
    "python_udf": "{udf}(n)",
}


@pytest.fixture(scope="module")
def world(proxy_factory, spark_server, module_sessions):
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN, "--allow-python-udfs")
    w = protected_world(
        proxy,
        module_sessions,
        Table(
            "ev",
            "id INT, secret STRING, n INT, region STRING, day DATE",
            partitioned_by="day",
            rows=["VALUES " + ", ".join(f"({i}, '{s}', {n}, '{r}', DATE '{d}')" for i, s, n, r, d in ROWS)],
        ),
        Table("acl", "who STRING, region STRING", rows=[values([("alice@example.com", "eu")])]),
        Policy("lookup", "ev", "region IN (SELECT region FROM {db}.acl WHERE who = SESSION_USER())", grantees=[ALICE]),
        database="leakproof_df",
        spark_url=spark_server.url,
    )
    alice = w.caller(ALICE)
    udf_name = unique("boom")
    alice.udf.register(udf_name, boom, "boolean")
    w.direct.udf.register(udf_name, boom, "boolean")
    assert w.direct.conf.get("spark.sql.ansi.enabled") == "true"
    yield w.db, alice, w.direct, udf_name, w.admin
    w.close()


def _no_leak(df) -> list[int]:
    try:
        return ids(df.select("id"))
    except Exception as e:
        pytest.fail(f"alice's predicate ran on a hidden row: {str(e).splitlines()[0][:300]}")


@pytest.mark.parametrize("oracle", sorted(TEXT_PREDICATES))
def test_a_raising_dataframe_predicate_never_sees_the_hidden_row(world, oracle):
    from pyspark.sql import functions as F

    db, alice, direct, udf_name, _ = world
    text = TEXT_PREDICATES[oracle].format(udf=udf_name)
    column = column_predicates()[oracle]
    with pytest.raises(Exception):  # the control: directly, the predicate raises on row 3
        ids(direct.table(f"{db}.ev").filter((F.col("day") == DAY) & F.expr(text)))
    ev = alice.table(f"{db}.ev")
    for df in (
        ev.filter((F.col("day") == DAY) & F.expr(text)),  # one filter, both conditions
        ev.filter(F.expr(text)).filter(F.col("region").isin("eu", "us") & (F.col("day") == DAY)),
        ev.filter(f"day = '{DAY}' AND {text} AND id BETWEEN 1 AND 3"),
        ev.filter((F.col("day") == DAY) & column),
        ev.filter(column).where(F.col("n").isNotNull() & (F.col("day") == F.lit(DAY).cast("date"))),
    ):
        assert _no_leak(df) == [1, 2]


def test_leakproof_dataframe_predicates_return_the_same_rows(world):
    import datetime

    from pyspark.sql import functions as F

    db, alice, _, _, _ = world
    ev = alice.table(f"{db}.ev")
    assert ids(ev.filter(F.col("day") == DAY)) == [1, 2]
    assert ids(ev.filter(F.col("day") == datetime.date(2024, 1, 2))) == [4]
    assert ids(ev.filter((F.col("day") != DAY) | F.col("n").isNull())) == [4]
    assert ids(ev.filter(F.col("region") == "us")) == []
    assert ids(ev.filter(~(F.col("n") < 2) & F.col("region").like("e%"))) == [2, 4]
    assert ids(ev.filter(ev["n"].between(1, 7)).filter("day = '2024-01-01'")) == [1, 2]


def test_spark_prunes_the_partitions_a_placed_condition_excludes(world):
    """Pruning itself, seen from outside: the files of one day are overwritten with bytes
    that are no Parquet, so any scan that opens them fails. alice's reads of another day, as
    a DataFrame and as SQL, succeed only if Spark pruned that day's partition by her
    condition, which it can do only when the proxy placed the condition below the lookup
    policy's non-deterministic guard (checked: with placement.py's translation returning
    None for every condition, the DataFrame read fails on the broken file)."""
    from pathlib import Path
    from urllib.parse import urlparse

    from pyspark.sql import functions as F

    db, alice, direct, _, admin = world
    table = f"{db}.pruned"
    direct.sql(f"CREATE TABLE {table} (id INT, region STRING, day DATE) USING parquet PARTITIONED BY (day)")
    direct.sql(f"INSERT INTO {table} VALUES (1, 'eu', DATE '{DAY}'), (2, 'us', DATE '{DAY}'), (3, 'eu', DATE '2024-01-02')")
    admin.sql(
        f"CREATE ROW ACCESS POLICY lookup ON {table} GRANT TO ('{ALICE}') "
        f"FILTER USING (region IN (SELECT region FROM {db}.acl WHERE who = SESSION_USER()))"
    ).collect()
    location = next(r[1] for r in direct.sql(f"DESCRIBE TABLE EXTENDED {table}").collect() if r[0] == "Location")
    broken = Path(urlparse(location).path) / "day=2024-01-02"
    if not broken.is_dir():
        pytest.skip(f"the Spark server's warehouse is not on this machine ({location})")
    for part in broken.glob("*.parquet"):
        part.write_bytes(b"no parquet here")
    with pytest.raises(Exception):  # the control: a scan that opens that day fails
        direct.table(table).filter(F.col("day") != DAY).collect()
    assert ids(alice.table(table).filter(F.col("day") == DAY)) == [1]
    assert ids(alice.sql(f"SELECT id FROM {table} WHERE day = '{DAY}'")) == [1]

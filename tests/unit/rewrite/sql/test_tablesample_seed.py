"""Samples of protected tables are taken of the filtered rows (review F4): Spark's own
TABLESAMPLE runs below a filter and spends its draws on hidden rows too, so which allowed
rows survive tells where hidden rows lie (with `REPEATABLE (n)` directly, without it over
repeated runs: Spark draws an unseeded sample's seed from 1000 values). The rewrite puts
`RAND(seed) < fraction` above the barrier instead (wrap.split_sample); seeded samples of
unprotected tables reach Spark as Spark reads them."""

import grpc
import pytest

from rowgate.refusal import Refusal
from tests.unit.rewrite.fakes import rw, shop


def test_repeatable_is_rendered_as_spark_reads_it():
    sql = rw("SELECT count(*) FROM range(10) TABLESAMPLE (50 PERCENT) REPEATABLE (3)", shop()).sql
    assert "REPEATABLE (3)" in sql and "SEED" not in sql, sql


@pytest.mark.parametrize(
    "sample, condition",
    [("50 PERCENT", "RAND(3) < 50 / 100"), ("BUCKET 1 OUT OF 4", "RAND(3) < 1 / 4"), ("12.5 PERCENT", "RAND(3) < 12.5 / 100")],
)
def test_a_seeded_sample_of_a_protected_table_samples_filtered_rows(sample, condition):
    sql = rw(f"SELECT count(*) FROM orders TABLESAMPLE ({sample}) REPEATABLE (3)", shop()).sql
    assert "TABLESAMPLE" not in sql and f"SPARK_PARTITION_ID() >= 0) WHERE {condition}) AS orders" in sql, sql


def test_an_unseeded_sample_of_a_protected_table_gets_a_random_seed_above_the_barrier():
    sql = rw("SELECT count(*) FROM orders TABLESAMPLE (50 PERCENT)", shop()).sql
    assert "TABLESAMPLE" not in sql and "SPARK_PARTITION_ID() >= 0) WHERE RAND(" in sql and " < 50 / 100) AS orders" in sql


@pytest.mark.parametrize("sample", ["150 PERCENT", "BUCKET 5 OUT OF 4", "BUCKET 1 OUT OF 0"])
def test_a_fraction_out_of_range_is_refused(sample):
    with pytest.raises(Refusal) as info:
        rw(f"SELECT count(*) FROM orders TABLESAMPLE ({sample})", shop())
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_the_proxys_own_sampled_text_is_recognised_whatever_its_seed():
    ours = rw("SELECT count(*) FROM orders TABLESAMPLE (10 PERCENT)", shop()).sql
    assert rw(ours, shop()).sql == ours
    other = rw("SELECT count(*) FROM orders TABLESAMPLE (10 PERCENT) REPEATABLE (42)", shop()).sql
    assert rw(other, shop()).sql == other


@pytest.mark.parametrize(
    "below", ["TABLESAMPLE (10 ROWS)", "TABLESAMPLE (10 PERCENT)", "TABLESAMPLE (10 PERCENT) REPEATABLE (3)"]
)
def test_a_sample_sent_back_below_the_filter_is_not_taken_as_filtered(below):
    """A `(n ROWS)` below the filter is a LIMIT on the unfiltered scan (the count of allowed
    rows among the first n tells how many are hidden); a percent one spends draws on hidden
    rows. A look-alike of the proxy's text with either is wrapped again."""
    ours = rw("SELECT count(*) FROM orders", shop()).sql
    forged = ours.replace("`orders` WHERE TRUE", f"`orders` {below} WHERE TRUE")
    assert forged != ours
    again = rw(forged, shop()).sql
    assert again != forged and again.count("SPARK_PARTITION_ID() >= 0") == 2, again

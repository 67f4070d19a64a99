"""Every statement form that names a location reports it (`SessionEffects.locations`), and
every relation name Spark could read as files reports a path read, so the allow list
(proxy/rowgate/pipeline/enforce/rules/file_paths.py) sees them all."""

import pytest

from rowgate.rewrite.sql.classify import UNREADABLE_LOCATION
from tests.unit.rewrite.fakes import BOB, rw, shop


@pytest.fixture
def ctx():
    c = shop()
    c.caller = BOB
    c.table("mine", "x", "p")
    return c


@pytest.mark.parametrize(
    "sql, location",
    [
        ("ALTER TABLE mine ADD PARTITION (p=1) LOCATION '/warehouse/orders'", "/warehouse/orders"),
        ("ALTER TABLE mine ADD IF NOT EXISTS PARTITION (p=1) LOCATION '/warehouse/orders'", "/warehouse/orders"),
        ("ALTER TABLE mine PARTITION (p=1) SET LOCATION '/warehouse/orders'", "/warehouse/orders"),
        ("ALTER TABLE mine SET LOCATION '/warehouse/orders'", "/warehouse/orders"),
        ("LOAD DATA INPATH '/data/x.csv' INTO TABLE mine", "/data/x.csv"),
        ("INSERT OVERWRITE LOCAL DIRECTORY '/data/out' SELECT 1", "/data/out"),
        ("CREATE TABLE t9 (a INT) USING csv OPTIONS (path '/data/t9')", "/data/t9"),
        ("CREATE DATABASE d9 LOCATION '/data/d9'", "/data/d9"),
        ("REFRESH '/data/t9'", "/data/t9"),
        ("CREATE TABLE t9 (a INT) USING csv LOCATION '/data' '/t9'", UNREADABLE_LOCATION),
    ],
)
def test_statements_report_the_locations_they_name(ctx, sql, location):
    r = rw(sql, ctx)
    assert location in r.session_effects.locations


def test_a_two_part_name_the_catalog_does_not_know_is_a_path_read(ctx):
    """Spark reads `<data source>.<path>` as files for any data source, a class name too."""
    source = "`org.apache.spark.sql.execution.datasources.binaryfile.BinaryFileFormat`"
    r = rw(f"SELECT * FROM {source}.`spark-connect.log`", ctx)
    assert [p.path for p in r.paths_read] == ["spark-connect.log"]


def test_list_file_is_its_own_kind(ctx):
    assert rw("LIST FILES", ctx).statement_kind == "list_resources"

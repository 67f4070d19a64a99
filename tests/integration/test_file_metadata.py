"""Values a scan fills in from the file describe hidden rows too (issue 21 item 8).

`_metadata.row_index` of the allowed rows of one file (0, 10, 20) counts the hidden rows
between them; `_metadata.file_size` and the block offsets measure the whole file. For reads
of protected tables only the fields on the allow list (proxy/rowgate/policy/file_metadata.py)
may be used; the second opinion refuses every other use it sees in Spark's analysed plan
(proxy/rowgate/rewrite/plan/file_metadata_reads.py).

The property, checked the way tests/integration/test_side_channels.py checks metrics: two
tables that differ only in rows the caller may not see give the caller the same answer, or a
refusal, whatever file metadata the query asks for.
"""

from __future__ import annotations

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from tests.conftest import unique
from tests.harness.callers import ADMIN, READER
from tests.harness.worlds import Policy, Table, protected_world, values

pytestmark = pytest.mark.spark

VISIBLE = [(i, "reader") for i in range(3)]
# Interleaved in the same file: each visible row has hidden rows before it.
MIXED = [row for i in range(3) for row in ([(100 + 10 * i + j, "other") for j in range(9)] + [(i, "reader")])]

QUERIES = {
    "row_index": "SELECT id, _metadata.row_index AS r FROM {t}",
    "file_size": "SELECT id, _metadata.file_size AS r FROM {t}",
    "block_length": "SELECT id, _metadata.file_block_length AS r FROM {t}",
    "whole_struct": "SELECT id, _metadata FROM {t}",
    "struct_in_function": "SELECT id, to_json(_metadata) AS r FROM {t}",
    "struct_aliased": "SELECT id, m.row_index AS r FROM (SELECT id, _metadata AS m FROM {t})",
    "grouped_by_struct": "SELECT count(*) AS n FROM {t} GROUP BY _metadata",
    "filtered_on_index": "SELECT id FROM {t} WHERE _metadata.row_index > 5",
    "ordered_by_index": "SELECT id FROM {t} ORDER BY _metadata.row_index LIMIT 1",
    "block_start": "SELECT id, input_file_block_start() AS r FROM {t}",
    "block_length_function": "SELECT id, input_file_block_length() AS r FROM {t}",
    "union_of_structs": "SELECT _metadata FROM {t} UNION ALL SELECT _metadata FROM {t}",
}


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, spark_server):
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)

    def one_file(rows):  # one file, rows in this order
        return f"SELECT /*+ COALESCE(1) */ * FROM {values(rows)} AS v(id, owner)"

    w = protected_world(
        proxy,
        module_sessions,
        Table("meta_visible_only", "id INT, owner STRING", rows=[one_file(VISIBLE)]),
        Table("meta_mixed", "id INT, owner STRING", rows=[one_file(MIXED)]),
        Table("meta_plain", "id INT, owner STRING", rows=[one_file(MIXED)]),
        Policy("mine", "meta_visible_only", "owner = 'reader'"),
        Policy("mine", "meta_mixed", "owner = 'reader'"),
        spark_url=spark_server.url,
    )
    yield w.caller(READER), w.table("meta_visible_only"), w.table("meta_mixed"), w.table("meta_plain")
    w.close()


def _answer(run):
    try:
        return sorted(map(tuple, run().collect())), None
    except PySparkException as e:
        return None, str(e)


def _dataframe_queries(reader, table):
    yield "df_row_index", lambda: reader.table(table).select("id", "_metadata.row_index")
    yield "df_whole_struct", lambda: reader.table(table).select("id", F.col("_metadata"))
    yield "df_filter_on_size", lambda: reader.table(table).where("_metadata.file_size > 0").select("id")
    yield "df_block_start", lambda: reader.table(table).select("id", F.expr("input_file_block_start()"))


def test_hidden_rows_change_no_answer_about_files(world):
    reader, only, mixed, _ = world
    runs = [(name, lambda q=q, t=t: reader.sql(q.format(t=t))) for name, q in QUERIES.items() for t in (only, mixed)]
    for (name, a), (_, b) in zip(runs[0::2], runs[1::2]):
        (rows_a, err_a), (rows_b, err_b) = _answer(a), _answer(b)
        assert rows_b == rows_a or (err_a is not None and err_b is not None), f"{name}: {rows_a} vs {rows_b}"
        if err_b is not None:
            assert "ROWGATE_PERMISSION_DENIED" in err_b and "hidden rows from their files" in err_b, (name, err_b)
    for (name, a), (_, b) in zip(_dataframe_queries(reader, only), _dataframe_queries(reader, mixed)):
        (rows_a, err_a), (rows_b, err_b) = _answer(a), _answer(b)
        assert rows_b == rows_a or (err_a is not None and err_b is not None), f"{name}: {rows_a} vs {rows_b}"


def test_refused_uses_name_the_reason(world):
    reader, _, mixed, _ = world
    _, error = _answer(lambda: reader.sql(QUERIES["row_index"].format(t=mixed)))
    assert error is not None and "_metadata.row_index" in error and "counts the hidden rows" in error, error
    _, error = _answer(lambda: reader.sql(QUERIES["block_start"].format(t=mixed)))
    assert error is not None and "input_file_block_start()" in error, error


def test_the_allowed_fields_still_work(world):
    reader, _, mixed, _ = world
    for query in (
        f"SELECT id, _metadata.file_name AS f, _metadata.file_path AS p, _metadata.file_modification_time AS m FROM {mixed}",
        f"SELECT id, input_file_name() AS f FROM {mixed}",
    ):
        rows, error = _answer(lambda q=query: reader.sql(q))
        assert error is None, (query, error)
        assert [r[0] for r in rows] == [0, 1, 2], (query, rows)
        assert all(r[1].endswith(".parquet") for r in rows), rows
    rows, error = _answer(lambda: reader.table(mixed).select("id", "_metadata.file_name"))
    assert error is None and [r[0] for r in rows] == [0, 1, 2], (rows, error)


def test_unprotected_tables_keep_every_metadata_column(world):
    """Transparency: no policy on the table, nothing to hide."""
    reader, _, _, plain = world
    rows, error = _answer(lambda: reader.sql(f"SELECT id, _metadata.row_index AS r FROM {plain} WHERE owner = 'reader'"))
    assert error is None, error
    assert rows == [(0, 9), (1, 19), (2, 29)]
    rows, error = _answer(lambda: reader.sql(f"SELECT count(*) FROM {plain} GROUP BY _metadata"))
    assert error is None and rows == [(1,)] * 30, (rows, error)  # one group per row: row_index differs


def test_a_streaming_read_is_checked_like_a_batch_read(world):
    """Review F1: Spark prints a streaming scan as `StreamingRelation FileSource[<path>]`,
    naming no table; its metadata columns are found under the table's alias instead."""
    reader, _, mixed, _ = world
    name = unique("meta_sink")
    try:
        query = (
            reader.readStream.table(mixed)
            .select("id", "_metadata.row_index")
            .writeStream.format("memory")
            .queryName(name)
            .trigger(availableNow=True)
            .start()
        )
    except PySparkException as e:
        assert "_metadata.row_index" in str(e), e
        return
    query.awaitTermination(120)
    rows = sorted(map(tuple, reader.sql(f"SELECT * FROM {name}").collect()))
    assert rows != [(0, 9), (1, 19), (2, 29)], f"row positions of hidden rows leaked: {rows}"
    raise AssertionError(f"a streaming read of _metadata.row_index was not refused: {rows}")


def test_errors_of_a_temp_view_of_a_protected_table_are_rebuilt(world):
    """Review F3: Spark's error for a read through a temp view printed the view's stored plan,
    the policy filter included."""
    reader, _, mixed, _ = world
    view = unique("meta_view")
    reader.table(mixed).createOrReplaceTempView(view)
    for run in (lambda: reader.table(view).select("nope").collect(), lambda: reader.sql(f"SELECT nope FROM {view}").collect()):
        with pytest.raises(PySparkException) as info:
            run()
        text = str(info.value)
        assert "Filter" not in text and "owner = reader" not in text and "owner#" not in text, text

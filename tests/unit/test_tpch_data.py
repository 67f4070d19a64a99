"""The TPC-H generator the tests and benchmarks share: offline, deterministic, cached."""

import hashlib

from tests import tpch, tpch_data


def _digests(directory):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_generates_the_eight_tables_deterministically(tmp_path, monkeypatch):
    monkeypatch.setattr(tpch_data, "CACHE_ROOT", tmp_path / "first")
    first = tpch_data.generate(0.001)
    assert first == tmp_path / "first" / "sf0.001"
    assert sorted(p.name for p in first.iterdir()) == sorted(f"{t}.parquet" for t in tpch_data.TABLES)
    counts = tpch_data.row_counts(0.001)
    assert counts["region"] == 5 and counts["nation"] == 25 and counts["orders"] == 1500
    monkeypatch.setattr(tpch_data, "CACHE_ROOT", tmp_path / "second")
    assert _digests(first) == _digests(tpch_data.generate(0.001))
    # No temporary directory is left beside the cache.
    assert [p.name for p in (tmp_path / "second").iterdir()] == ["sf0.001"]


def test_a_complete_cache_is_reused(tmp_path, monkeypatch):
    monkeypatch.setattr(tpch_data, "CACHE_ROOT", tmp_path)
    made = tpch_data.generate(0.001)
    stamps = {p.name: p.stat().st_mtime_ns for p in made.iterdir()}
    assert tpch_data.generate(0.001) == made
    assert {p.name: p.stat().st_mtime_ns for p in made.iterdir()} == stamps


def test_columns_match_the_spark_schemas(tmp_path, monkeypatch):
    monkeypatch.setattr(tpch_data, "CACHE_ROOT", tmp_path)
    for table in tpch.TABLES:
        assert tpch_data.read_table(table, 0.001).column_names == [c for c, _ in tpch.SCHEMAS[table]]


def test_the_22_queries_come_from_the_extension():
    queries = tpch.queries()
    assert sorted(queries) == list(range(1, 23))
    assert all(sql and not sql.rstrip().endswith(";") for sql in queries.values())
    assert "lineitem" in queries[1]


def test_the_extension_is_the_packaged_file_for_the_installed_duckdb():
    import duckdb

    path = tpch_data.extension_path()
    assert path.is_file() and f"v{duckdb.__version__}" in path.parts

"""`--allow-path` in its three forms: repeatable flag, comma-separated environment, YAML list."""

import argparse

from rowgate.config import add_serve_arguments, config_from_args
from rowgate.pipeline.enforce.rules.file_paths import PathRules


def parse(argv, environ=None):
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return config_from_args(parser.parse_args(argv), environ or {})


def test_flag_environment_and_file(tmp_path):
    assert parse(["--allow-path", "/data/a", "--allow-path", "s3a://b/x"]).allow_path == ["/data/a", "s3a://b/x"]
    assert parse([], {"ROWGATE_ALLOW_PATH": "/data/a, /data/b"}).allow_path == ["/data/a", "/data/b"]
    config = tmp_path / "rowgate.yaml"
    config.write_text("allow_path:\n  - /data/a\n")
    assert parse(["--config", str(config)]).allow_path == ["/data/a"]
    assert parse([]).allow_path == []


def test_the_data_dir_and_a_sqlite_store_are_never_allowed(tmp_path):
    rules = PathRules.from_config(parse(["--data-dir", str(tmp_path), "--allow-path", str(tmp_path)]))
    places = {f.location for f in rules.own}
    assert str(tmp_path) in places and str(tmp_path / "policies.db-wal") in places
    assert "the proxy's data directory" in (rules.allowed.refusal(str(tmp_path / "policies.db"), rules.own) or "")

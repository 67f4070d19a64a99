"""`rowgate serve` loads pyspark's protocol modules, not pyspark's client (rowgate/spark_protocol.py).

Run in fresh interpreters: this test process has the pyspark client loaded already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import rowgate

PROXY = str(Path(rowgate.__file__).resolve().parent.parent)
CLIENT_MODULES = ("pandas", "py4j", "pyspark.testing", "pyspark.sql.connect.session")


def run(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=PROXY)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


def test_serve_imports_the_protocol_and_not_the_client():
    # The real start-up path up to serving: cli.main(serve) imports rowgate.app (every module
    # the proxy runs); `serve` itself is replaced so that nothing listens.
    out = run(
        f"""
import importlib, json, sys, types
import rowgate.cli as cli
def serve(config):
    del sys.modules["rowgate.app"]
    importlib.import_module("rowgate.app")
    from pyspark.sql.connect.proto import base_pb2
    print(json.dumps([m for m in {CLIENT_MODULES!r} if m in sys.modules] + [base_pb2.ExecutePlanRequest.__name__]))
    return 0
sys.modules["rowgate.app"] = types.SimpleNamespace(serve=serve)
sys.exit(cli.main(["serve", "--listen", "127.0.0.1:0", "--upstream", "sc://127.0.0.1:9"]))
"""
    )
    assert json.loads(out.splitlines()[-1]) == ["ExecutePlanRequest"]


def test_a_process_that_loaded_pyspark_keeps_it():
    out = run(
        """
import json
import pyspark.sql
from rowgate.spark_protocol import load_protocol_only
print(json.dumps([load_protocol_only(), hasattr(pyspark.sql, "SparkSession")]))
"""
    )
    assert json.loads(out) == [False, True]


def test_the_embedded_server_still_finds_the_spark_jars():
    out = run(
        """
from rowgate.spark_protocol import load_protocol_only
load_protocol_only()
from rowgate.embedded.spark import spark_home
print((spark_home() / "jars").is_dir())
"""
    )
    assert out.strip() == "True"

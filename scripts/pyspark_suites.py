#!/usr/bin/env python
"""pyspark's own Spark Connect test suites, directly and through the proxy (issue #22).

One row access policy on a table the suites never read must not change what they see: every
test that passes against Spark directly should pass through rowgate too, unless rowgate
refuses it on purpose (a path outside `--allow-path`, shipped code: Python UDFs, artifacts;
the README lists these). This script starts one Spark Connect server, a `rowgate serve` in
front of it with such a policy, and runs the chosen parity suites twice, each in a child
process of its own: directly and through the proxy as an ordinary (non-admin) caller. It
prints per suite how many tests passed each way, then every test that passes directly but
fails through the proxy, with the first line of its error.

The suites are not part of this repository: point `--tests` at a directory holding Spark's
`python/pyspark/sql/tests` files of the pinned pyspark release (the mixins `test_*.py` and
the parity suites `connect/test_parity_*.py`). Within the children that directory stands
in for the package `pyspark.sql.tests` (the wheel does not ship it), so the parity files
run unchanged. A suite is named by its module under that directory, e.g.
`connect.test_parity_column`. pyspark's `ReusedConnectTestCase` connects to
`SPARK_CONNECT_TESTING_REMOTE`; the children set it to the server's URL or to the proxy's,
with the caller's trusted header as a URL parameter, and set `SPARK_SKIP_CONNECT_COMPAT_TESTS`
so pyspark treats itself as a Connect-only client (no local JVM).

Usage (from the repository root; starts its own Spark Connect server unless --upstream):

  .venv/bin/python scripts/pyspark_suites.py --tests DIR connect.test_parity_column connect.test_parity_group ...
      [--upstream sc://127.0.0.1:15002 | --spark-conf spark.sql.timeType.enabled=true]
      [--only direct|proxy] [--allow-python-udfs] [--json OUT]

Runs take minutes per suite on two cores; each child has `--timeout` seconds. The proxy runs
this tree's rowgate, or the one on PYTHONPATH when set (`PYTHONPATH=<other tree>/proxy`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

ADMIN = "user:admin@example.com"
CALLER = "user:suites@example.com"
# The same as tests/conftest.py and pyspark's own ReusedConnectTestCase: the server cuts
# result streams every second and 123 bytes, so every suite exercises ReattachExecute too.
REATTACH_CONF = {
    "spark.connect.execute.reattachable.senderMaxStreamDuration": "1s",
    "spark.connect.execute.reattachable.senderMaxStreamSize": "123",
}


# ---------------------------------------------------------------------------------------
# The child: runs one suite against one remote and writes each test's outcome as JSON.


def _alias_tests_package(tests_dir: Path) -> None:
    """Makes `pyspark.sql.tests` (and `.connect`) the given directory, so that Spark's
    parity files import their mixins as they do in Spark's source tree."""
    import types

    import pyspark.sql

    for name, path in (("pyspark.sql.tests", tests_dir), ("pyspark.sql.tests.connect", tests_dir / "connect")):
        module = types.ModuleType(name)
        module.__path__ = [str(path)]  # type: ignore[attr-defined]
        sys.modules[name] = module
    pyspark.sql.tests = sys.modules["pyspark.sql.tests"]  # type: ignore[attr-defined]


def child(tests_dir: Path, suite: str, out: Path) -> None:
    import unittest

    _alias_tests_package(tests_dir)
    outcomes: dict[str, dict] = {}

    class Recorder(unittest.TextTestResult):
        def _put(self, test, outcome, err=None):
            text = ""
            if err is not None:
                text = self._exc_info_to_string(err, test)
            outcomes[test.id()] = {"outcome": outcome, "error": text}

        def addSuccess(self, test):
            super().addSuccess(test)
            self._put(test, "pass")

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self._put(test, "fail", err)

        def addError(self, test, err):
            super().addError(test, err)
            self._put(test, "error", err)

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            outcomes[test.id()] = {"outcome": "skip", "error": reason}

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            self._put(test, "xfail")

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            self._put(test, "pass")

    try:
        import importlib

        module = importlib.import_module(f"pyspark.sql.tests.{suite}")
        tests = unittest.defaultTestLoader.loadTestsFromModule(module)
        unittest.TextTestRunner(resultclass=Recorder, verbosity=1, stream=sys.stderr).run(tests)
    finally:
        out.write_text(json.dumps(outcomes, indent=1, sort_keys=True))


# ---------------------------------------------------------------------------------------
# The parent: Spark, the proxy, the policy, then each suite each way.


def run_suite(tests_dir: Path, suite: str, remote: str, work: Path, timeout: float) -> tuple[dict, str]:
    out = work / f"{suite}.{uuid.uuid4().hex[:6]}.json"
    env = dict(os.environ)
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    env["SPARK_CONNECT_TESTING_REMOTE"] = remote
    env["SPARK_SKIP_CONNECT_COMPAT_TESTS"] = "1"
    # Temporary files (tempfile.mkdtemp in the suites) under one directory the proxy allows.
    env["TMPDIR"] = str(work / "tmp")
    (work / "tmp").mkdir(exist_ok=True)
    cmd = [sys.executable, __file__, "--child", "--tests", str(tests_dir), "--out", str(out), suite]
    started = time.monotonic()
    log = work / f"{suite}.{out.stem.rsplit('.', 1)[1]}.log"
    with open(log, "wb") as sink:
        try:
            subprocess.run(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            print(f"  {suite}: timed out after {timeout:.0f}s (see {log})", file=sys.stderr)
    took = time.monotonic() - started
    outcomes = json.loads(out.read_text()) if out.exists() else {}
    return outcomes, f"{took:.0f}s, log {log}"


# Refusals the README lists: shipped code (Python UDFs, artifacts, Java functions), paths
# outside --allow-path, settings off the settings allow list. A test that fails through the proxy only for one of these is counted
# apart, with its reason.
DOCUMENTED_REFUSALS = (
    "(operator setting --allow-python-udfs",
    "(operator setting --allow-artifacts",
    "(operator setting --allow-java-udfs",
    "reading files by path",
    "naming the location",
    "is reserved for rowgate admins",
    "creating functions is reserved to admins",
)


def documented_refusal(error: str) -> bool:
    return "ROWGATE_" in error and any(marker in error for marker in DOCUMENTED_REFUSALS)


def first_line(error: str) -> str:
    """The line of a traceback that says what went wrong (the last non-blank one)."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    for line in reversed(lines):
        if not line.startswith(("File ", "^", "~")):
            return line[:300]
    return lines[-1][:300] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suites", nargs="+", help="modules under --tests, e.g. connect.test_parity_column")
    parser.add_argument("--tests", type=Path, required=True, help="a copy of Spark's python/pyspark/sql/tests")
    parser.add_argument("--upstream", default=None, help="a running Spark Connect server (default: start one)")
    parser.add_argument("--spark-conf", action="append", default=[], help="KEY=VALUE for the Spark it starts (repeatable)")
    parser.add_argument("--only", choices=("direct", "proxy"), default=None, help="run one side only")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one suite may take, each way")
    parser.add_argument("--allow-python-udfs", action="store_true", help="run the proxy with --allow-python-udfs")
    parser.add_argument("--json", type=Path, default=None, help="write every outcome here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    tests_dir = args.tests.resolve()
    if args.child:
        child(tests_dir, args.suites[0], args.out)
        return

    sys.path.insert(0, str(REPO / "benchmarks"))
    sys.path.insert(0, str(REPO / "proxy"))
    from measure import new_session, proxy_process, stop_session

    from rowgate.embedded.spark import EmbeddedSparkConnect, free_port

    # The proxy is this tree's rowgate unless PYTHONPATH names another (to compare versions).
    os.environ.setdefault("PYTHONPATH", str(REPO / "proxy"))
    work = Path(tempfile.mkdtemp(prefix="rowgate-pyspark-suites-"))
    server = None
    proxy = None
    sessions: list = []
    results: dict[str, dict[str, dict]] = {}
    try:
        upstream = args.upstream
        if upstream is None:
            conf = dict(REATTACH_CONF)
            conf.update(pair.split("=", 1) for pair in args.spark_conf)
            server = EmbeddedSparkConnect(data_dir=work / "spark", driver_memory="1g", conf=conf).start()
            upstream = server.url
        proxy_args = ["--identity", "header", "--admin", ADMIN, "--allow-path", str(work / "tmp")]
        if args.allow_python_udfs:
            proxy_args.append("--allow-python-udfs")
        proxy = proxy_process(free_port(), upstream, work / "proxy", proxy_args, work / "proxy.log")
        proxy.start()
        direct = new_session(upstream)
        admin = new_session(f"sc://{proxy.target}/;x-rowgate-user={ADMIN}")
        sessions += [direct, admin]
        db = "suites_" + uuid.uuid4().hex[:8]
        direct.sql(f"CREATE DATABASE {db}")
        direct.sql(f"CREATE TABLE {db}.unrelated (id INT) USING parquet")
        admin.sql(f"CREATE ROW ACCESS POLICY p ON {db}.unrelated GRANT TO ('{CALLER}') FILTER USING (id < 100)").collect()
        remotes = {"direct": upstream + "/", "proxy": f"sc://{proxy.target}/;x-rowgate-user={CALLER}"}
        sides = [args.only] if args.only else ["direct", "proxy"]
        for suite in args.suites:
            results[suite] = {}
            for side in sides:
                outcomes, note = run_suite(tests_dir, suite, remotes[side], work, args.timeout)
                results[suite][side] = outcomes
                passed = sum(1 for o in outcomes.values() if o["outcome"] == "pass")
                print(f"{suite} [{side}]: {passed} of {len(outcomes)} pass ({note})", flush=True)
        report(results, sides)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1, sort_keys=True))
    finally:
        for session in sessions:
            stop_session(session)
        if proxy is not None:
            proxy.stop()
        if server is not None:
            server.stop()
        print(f"work directory (logs): {work}", file=sys.stderr)


def report(results: dict[str, dict[str, dict]], sides: list[str]) -> None:
    print()
    print(f"{'suite':44} {'tests':>5} {'direct':>6} {'proxy':>6} {'refused':>7} {'proxy-only':>10}")
    total = [0, 0, 0, 0, 0]
    differing: list[tuple[str, str]] = []
    refused: list[tuple[str, str]] = []
    for suite, by_side in results.items():
        direct = by_side.get("direct", {})
        proxied = by_side.get("proxy", {})
        names = set(direct) | set(proxied)
        d_pass = {n for n, o in direct.items() if o["outcome"] == "pass"}
        p_pass = {n for n, o in proxied.items() if o["outcome"] == "pass"}
        only = sorted(d_pass - p_pass) if len(sides) == 2 else []
        n_refused = 0
        for name in only:
            error = proxied.get(name, {}).get("error", "not run")
            if documented_refusal(error):
                refused.append((name, first_line(error)))
                n_refused += 1
            else:
                differing.append((name, first_line(error)))
        row = [len(names), len(d_pass), len(p_pass), n_refused, len(only) - n_refused]
        total = [a + b for a, b in zip(total, row)]
        print(f"{suite:44} {row[0]:>5} {row[1]:>6} {row[2]:>6} {row[3]:>7} {row[4]:>10}")
    print(f"{'total':44} {total[0]:>5} {total[1]:>6} {total[2]:>6} {total[3]:>7} {total[4]:>10}")
    if refused:
        print("\npasses directly, refused through the proxy as the README documents:")
        for name, error in refused:
            print(f"  {name}\n      {error[:160]}")
    if differing:
        print("\npasses directly, fails through the proxy:")
        for name, error in differing:
            print(f"  {name}\n      {error}")


if __name__ == "__main__":
    main()

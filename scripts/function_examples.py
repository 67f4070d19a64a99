#!/usr/bin/env python
"""How faithfully SQL passes the proxy while a policy is in force (issue #22).

Runs the examples of Spark's own function documentation (`SHOW FUNCTIONS`, then the
`Examples:` of `DESCRIBE FUNCTION EXTENDED <f>`) directly against Spark Connect and through
a `rowgate serve` with one row access policy on a table the examples never read, and
prints the share of examples whose outcome is identical: same column names and values, or
the same error class. Examples whose direct outcome differs between two direct runs
(rand(), uuid(), current_timestamp(), ...) are left out of the share and counted apart.
The identity functions (`current_user()`, `session_user()`, `user()`) answer the caller
behind the proxy by design: directly, Spark's own user in their answer stands for the
caller's name. A function whose examples change settings (`SET ...`) runs them in sessions
of its own.

Usage (from the repository root; starts its own Spark Connect server unless --upstream):

  .venv/bin/python scripts/function_examples.py [--upstream sc://127.0.0.1:15002] [--limit N] [--show-diffs 20]

The proxy runs the `rowgate` found on PYTHONPATH, so `PYTHONPATH=<other tree>/proxy`
measures another version against the same examples.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "proxy"))

from measure import new_session, proxy_process, stop_session  # noqa: E402

from rowgate.embedded.spark import EmbeddedSparkConnect, free_port  # noqa: E402

ADMIN = "user:admin@example.com"
CALLER = "user:cal@example.com"
_ERROR_CLASS = re.compile(r"\[([A-Z0-9_.]+)\]")


def examples(text: str) -> list[str]:
    """The `> SELECT ...;` statements of one function's documentation (multi-line too)."""
    out: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if current is None and stripped.startswith(">"):
            current = [stripped[1:].strip()]
        elif current is not None:
            current.append(stripped)
        if current is not None and current[-1].endswith(";"):
            statement = " ".join(current).rstrip(";").strip()
            if statement:
                out.append(statement)
            current = None
    return out


def outcome(spark, sql: str) -> tuple:
    try:
        df = spark.sql(sql)
        rows = df.collect()
        columns = tuple(rows[0].__fields__) if rows else tuple(df.columns)
        return "rows", columns, tuple(repr(tuple(r)) for r in rows)
    except Exception as e:  # noqa: BLE001 - any error is an outcome to compare
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        match = _ERROR_CLASS.search(first)
        return "error", match.group(1) if match else first[:120]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", default=None, help="a running Spark Connect server (default: start one)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N functions")
    parser.add_argument("--workers", type=int, default=4, help="functions compared at once")
    parser.add_argument("--show-diffs", type=int, default=10, help="print this many differing examples")
    args = parser.parse_args()
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)  # pyspark logs every failed example
    work = Path(tempfile.mkdtemp(prefix="rowgate-function-examples-"))
    server = None
    sessions: list = []
    proxy = None
    try:
        upstream = args.upstream
        if upstream is None:
            server = EmbeddedSparkConnect(data_dir=work / "spark", driver_memory="1g").start()
            upstream = server.url
        proxy = proxy_process(free_port(), upstream, work / "proxy", ["--identity", "header", "--admin", ADMIN], work / "p.log")
        proxy.start()
        direct = new_session(upstream)
        admin = new_session(f"sc://{proxy.target}/;x-rowgate-user={ADMIN}")
        caller = new_session(f"sc://{proxy.target}/;x-rowgate-user={CALLER}")
        sessions += [direct, admin, caller]
        db = "fx_" + uuid.uuid4().hex[:8]
        direct.sql(f"CREATE DATABASE {db}")
        direct.sql(f"CREATE TABLE {db}.unrelated (id INT) USING parquet")
        admin.sql(f"CREATE ROW ACCESS POLICY p ON {db}.unrelated GRANT TO ('{CALLER}') FILTER USING (id < 100)").collect()

        names = sorted({r[0] for r in direct.sql("SHOW FUNCTIONS").collect()})
        if args.limit:
            names = names[: args.limit]

        server_user = direct.sql("SELECT current_user()").first()[0]

        def as_caller(sql: str, want: tuple) -> tuple:
            """The identity functions answer the caller behind the proxy, by design."""
            if want[0] != "rows" or "user" not in sql.lower():
                return want
            caller_name = CALLER.split(":", 1)[1]
            return (want[0], want[1], tuple(r.replace(repr(server_user), repr(caller_name)) for r in want[2]))

        def compare(name: str) -> list[tuple[str, str, tuple, tuple]]:
            quoted = "`" + name.replace("`", "``") + "`"
            try:
                doc = "\n".join(r[0] for r in direct.sql(f"DESCRIBE FUNCTION EXTENDED {quoted}").collect())
            except Exception:  # noqa: BLE001 - operators like `!` may not describe
                return []
            found = examples(doc)
            if not any(sql.upper().startswith("SET ") for sql in found):
                return compare_in(direct, caller, found)
            # Examples that change settings run in sessions of their own, so that no other
            # function's examples run under them (the comparison would race).
            own = [new_session(upstream), new_session(f"sc://{proxy.target}/;x-rowgate-user={CALLER}")]
            try:
                return compare_in(own[0], own[1], found)
            finally:
                for s in own:
                    stop_session(s)

        def compare_in(direct, caller, found: list[str]) -> list[tuple[str, str, tuple, tuple]]:
            out = []
            for sql in found:
                want, got = as_caller(sql, outcome(direct, sql)), outcome(caller, sql)
                if want == got:
                    out.append(("same", sql, want, got))
                elif as_caller(sql, outcome(direct, sql)) != want:  # differs from itself: not comparable
                    out.append(("unstable", sql, want, got))
                else:
                    out.append(("different", sql, want, got))
            return out

        identical, different, unstable = 0, [], 0
        with ThreadPoolExecutor(max_workers=args.workers) as pool:
            for results in pool.map(compare, names):
                for verdict, sql, want, got in results:
                    if verdict == "same":
                        identical += 1
                    elif verdict == "unstable":
                        unstable += 1
                    else:
                        different.append((sql, want, got))
        total = identical + len(different)
        share = 100.0 * identical / total if total else 0.0
        print(f"functions: {len(names)}; examples compared: {total}; identical: {identical} ({share:.1f}%); "
              f"different: {len(different)}; left out as non-deterministic: {unstable}")  # fmt: skip
        for sql, want, got in different[: args.show_diffs]:
            print(f"  {sql}\n    direct: {str(want)[:160]}\n    proxy:  {str(got)[:160]}")
        direct.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")
    finally:
        for s in sessions:
            stop_session(s)
        if proxy is not None and proxy.proc is not None:
            proxy.stop()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()

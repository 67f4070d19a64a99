"""The compatibility matrix: pyspark clients x Spark Connect servers, each cell through rowgate.

    scripts/compat.sh [--clients 3.5.9,4.3.0] [--servers 4.0.5] [--subset ci] [--output FILE]

A cell runs tests/compat/scenario.py in the client's venv against a proxy in front of the
server: three callers (two grantees with different filters, one with no grant) each run
policy-filtered SQL, a DataFrame aggregation, a temp view, a CTE, a createDataFrame join, a
Python UDF, an error and stop, and their rows are compared with an oracle computed from the
inserted data; then the same questions about unprotected data are asked of the server
directly and through the proxy, and must get the same answers. The same checks run against
the server directly, so a failure that happens there too is a client/server mismatch, not
the proxy's doing.

Verdicts: PASS; MISMATCH-ALSO-DIRECT (each failing check named, with the error it also gets
directly); FAIL (a wrong row, an error only through the proxy, a transparency difference, a
crash).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.compat.stack import ROOT, Stand, key, pinned_version, python_for, scenario, ships_server

VERSIONS = ("3.5.9", "4.0.5", "4.1.4", "4.2.1", "4.3.0")
PASS, MISMATCH, FAIL = "PASS", "MISMATCH-ALSO-DIRECT", "FAIL"


@dataclass
class CellResult:
    client: str
    server: str
    status: str
    failures: list[str] = field(default_factory=list)  # why FAIL
    mismatches: list[str] = field(default_factory=list)  # fails directly too
    seconds: float = 0.0

    def summary(self) -> str:
        return "; ".join(self.failures or self.mismatches) or "all checks passed"


def classify(client: str, server: str, result: dict) -> CellResult:
    """Turns the scenario's outcomes into a verdict.

    Only an error can be a mismatch, and only when the same check errs directly: rows other
    than the oracle's are always a FAIL (a leak or a lost row is the proxy's alone).
    """
    failures: list[str] = []
    mismatches: list[str] = []
    callers = result.get("callers", {})
    direct = callers.get("direct", {})
    for name, checks in callers.items():
        if name == "direct":
            continue
        for check, outcome in checks.items():
            if outcome["kind"] == "ok":
                continue
            label = f"{check} ({name}): {outcome['detail']}"
            same = direct.get(check, {})
            if outcome["kind"] == "error" and same.get("kind") == "error":
                mismatch = f"{check}: {same['detail']}"
                if mismatch not in mismatches:
                    mismatches.append(mismatch)
            else:
                failures.append(label)
    for check, outcome in direct.items():
        if outcome["kind"] == "rows":
            failures.append(f"{check} (direct, the oracle or the data is wrong): {outcome['detail']}")
    transparency = result.get("transparency") or {}
    if not transparency:
        failures.append("transparency: no direct and proxied session to compare")
    for check, there in transparency.get("direct", {}).items():
        here = transparency["proxy"].get(check, {})
        if there["kind"] == "error":
            mismatch = f"{check}: {there['detail']}"
            if here.get("kind") != "error":
                failures.append(f"transparency {check}: fails directly ({there['detail']}) but not through the proxy")
            elif mismatch not in mismatches:
                mismatches.append(mismatch)
        elif here != there:
            failures.append(f"transparency {check}: directly {there.get('got')}, through the proxy {here}")
    status = FAIL if failures else MISMATCH if mismatches else PASS
    return CellResult(client, server, status, failures, mismatches)


def run_cell(client: str, server: str, stand: Stand, proxy_url: str | None = None, timeout: float = 900) -> CellResult:
    """One cell against a running stand (its proxy, or `proxy_url` instead)."""
    started = time.monotonic()
    spec = {"proxy": proxy_url or stand.proxy.url, "direct": stand.server.url, "db": stand.db}
    try:
        result = classify(client, server, scenario(python_for(client), "run", spec, timeout=timeout))
    except Exception as err:  # a crash or a timeout of the client is the cell's verdict
        result = CellResult(client, server, FAIL, [f"scenario did not finish: {str(err).strip()[-600:]}"])
    result.seconds = time.monotonic() - started
    return result


def ci_cells(versions: tuple[str, ...] = VERSIONS, pinned: str | None = None) -> list[tuple[str, str]]:
    """The reduced matrix: oldest and newest client against the pinned server, the pinned
    client against the oldest and newest server (servers start at 4.0), duplicates once."""
    pinned = pinned or pinned_version()
    clients = sorted(versions, key=key)
    servers = [v for v in clients if ships_server(v)]
    cells = [(clients[0], pinned), (clients[-1], pinned), (pinned, servers[0]), (pinned, servers[-1])]
    return list(dict.fromkeys(cells))


def run_matrix(cells: list[tuple[str, str]], log=print, on_result=None) -> list[CellResult]:
    """Cells grouped by server: one server (and its proxy) runs at a time. `on_result(results)`
    after each cell, so a long run leaves its table so far behind."""
    results: list[CellResult] = []
    for server in dict.fromkeys(s for _, s in cells):
        clients = [c for c, s in cells if s == server]
        try:
            stand = Stand.start(server, log)
        except Exception as err:
            for client in clients:
                results.append(CellResult(client, server, FAIL, [f"server or proxy did not start: {err}"]))
                log(f"compat: {client} -> {server}: FAIL ({err})")
                if on_result:
                    on_result(results)
            continue
        try:
            for client in clients:
                result = run_cell(client, server, stand)
                log(f"compat: client {client} -> server {server}: {result.status} in {result.seconds:.0f}s")
                results.append(result)
                if on_result:
                    on_result(results)
        finally:
            stand.stop()
    return results


def markdown(results: list[CellResult], pinned: str) -> str:
    """Clients as rows, servers as columns; mismatches and failures spelled out below."""
    clients = sorted({r.client for r in results}, key=key)
    servers = sorted({r.server for r in results}, key=key)
    cell = {(r.client, r.server): r for r in results}
    notes: list[str] = []
    lines = [
        "| client \\ server | " + " | ".join(servers) + " |",
        "| --- | " + " | ".join("---" for _ in servers) + " |",
    ]
    for client in clients:
        row = []
        for server in servers:
            result = cell.get((client, server))
            if result is None:
                row.append("")
            elif result.status == PASS:
                row.append(PASS)
            else:
                notes.append(f"{client} -> {server}: {result.status}: {result.summary()}")
                row.append(f"{result.status} [{len(notes)}]")
        lines.append(f"| {client} | " + " | ".join(row) + " |")
    lines.append("")
    lines.append(f"Proxy built against pyspark {pinned}; 3.5 wheels ship no Connect server.")
    lines += [f"{n}. {text}" for n, text in enumerate(notes, 1)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/compat.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", help=f"comma-separated pyspark versions (default {','.join(VERSIONS)})")
    parser.add_argument("--servers", help="comma-separated Spark Connect versions (default: those of 4.0 and later)")
    parser.add_argument("--subset", choices=["ci"], help="ci: the reduced matrix the test suite runs")
    parser.add_argument("--output", type=Path, default=ROOT / "matrix.md", help="where the markdown table goes")
    args = parser.parse_args(argv)
    pinned = pinned_version()
    clients = tuple(args.clients.split(",")) if args.clients else VERSIONS
    servers = tuple(args.servers.split(",")) if args.servers else tuple(v for v in VERSIONS if ships_server(v))
    for server in servers:
        if not ships_server(server):
            parser.error(f"pyspark {server} ships no Spark Connect server")
    if args.subset == "ci":
        cells = ci_cells(tuple(dict.fromkeys(clients + servers)), pinned)
    else:
        cells = [(c, s) for s in servers for c in clients]

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def write(results: list[CellResult]) -> str:
        table = markdown(results, pinned)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(table)
        args.output.with_suffix(".json").write_text(json.dumps([r.__dict__ for r in results], indent=1))
        return table

    started = time.monotonic()
    results = run_matrix(cells, log, on_result=write)
    print(write(results))
    log(f"compat: {len(results)} cells in {time.monotonic() - started:.0f}s; table written to {args.output}")
    return 1 if any(r.status == FAIL for r in results) else 0

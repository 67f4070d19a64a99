"""The reduced compatibility matrix, run by CI: old and new pyspark clients, old and new servers.

Cells (tests/compat/matrix.py `ci_cells`): the oldest client (3.5) and the newest against a
server of the pinned version (the pyspark in rowgate's venv), and the pinned client against
the oldest (4.0) and newest server. Each cell is the full scenario of scripts/compat.sh: three
callers' rows checked against the oracle, transparency against the server directly, and a
failure counted against the proxy only when it does not also happen directly. Venvs are
built under .rowgate/compat on the first run (from pip's cache when it has the wheels) and
reused after that.

The last test shows the oracle has teeth: a proxy without the policies must make the cell FAIL.
"""

from __future__ import annotations

import time

import pytest

from tests.compat.matrix import FAIL, CellResult, ci_cells, markdown, run_cell
from tests.compat.stack import Stand, pinned_version

# A first run installs up to three pyspark venvs and starts three servers on a busy machine.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]

CELLS = ci_cells()


class Stands:
    """One server (and its proxy) at a time: the cells come grouped by server."""

    def __init__(self) -> None:
        self.current: Stand | None = None
        self.results: list[CellResult] = []

    def get(self, version: str) -> Stand:
        if self.current is None or self.current.server.version != version:
            self.close()
            self.current = Stand.start(version)
        return self.current

    def close(self) -> None:
        stand, self.current = self.current, None
        if stand is not None:
            stand.stop()


@pytest.fixture(scope="module")
def stands(report_summary):
    started = time.monotonic()
    held = Stands()
    yield held
    held.close()
    if held.results:
        report_summary(f"compatibility subset ({time.monotonic() - started:.0f}s):\n" + markdown(held.results, pinned_version()))


@pytest.mark.parametrize(("client", "server"), CELLS, ids=[f"client{c}-server{s}" for c, s in CELLS])
def test_cell_has_no_failure(stands, client, server):
    result = run_cell(client, server, stands.get(server))
    stands.results.append(result)
    assert result.status != FAIL, result.summary()


def test_a_proxy_without_policies_fails_the_cell(stands):
    """The same scenario through a proxy that has no policies: the callers see every row."""
    stand = stands.get(CELLS[-1][1])
    bare = stand.bare_proxy()
    try:
        result = run_cell(pinned_version(), stand.server.version, stand, proxy_url=bare.url)
    finally:
        bare.stop()
    assert result.status == FAIL
    assert any(failure.startswith("sql (carl): got [1, 2") for failure in result.failures), result.failures

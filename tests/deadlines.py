"""Every deadline of the suite, from one place, scaled for slow and busy machines.

A test waits on a condition (a table renamed, a health status, a log line), never on a fixed
sleep, and gives up after a deadline. That deadline is only an upper bound: a condition that
holds returns at once, so stretching the bound on a loaded machine never weakens what a test
asserts; it only keeps a slow but correct run from failing. Promises the product makes about
time (a policy change reaches every replica within a second, readiness returns within 5 s)
are asserted on measured durations, not through these deadlines.

The factor is `ROWGATE_TEST_TIME_SCALE` when set (CI on a slow runner), else read from the
machine's load at the moment a deadline is taken: one run queue per core is normal, so the
one-minute load average divided by the cores stretches deadlines once the cores are
oversubscribed (capped at 8x so a stuck test still ends).

>>> scaled(10, factor=3.0)
30.0
>>> wait_until(lambda: 42, "the answer")
42
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

SCALE_ENV = "ROWGATE_TEST_TIME_SCALE"
MAX_AUTOMATIC_SCALE = 8.0


def time_scale() -> float:
    """How much longer than on a quiet machine waits may take now (>= 1)."""
    explicit = os.environ.get(SCALE_ENV)
    if explicit:
        return max(1.0, float(explicit))
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        return 1.0
    return min(MAX_AUTOMATIC_SCALE, max(1.0, load / (os.cpu_count() or 1)))


def scaled(seconds: float, *, factor: float | None = None) -> float:
    """A deadline of `seconds` on a quiet machine, stretched for this one."""
    return seconds * (time_scale() if factor is None else factor)


def wait_until(condition: Callable[[], T], what: str, timeout: float = 60.0, interval: float = 0.05) -> T:
    """Poll `condition` until it returns something truthy and return that.

    Fails the test naming `what` once the scaled deadline passes. The condition is tried one
    last time after the deadline, so a slow final poll still counts.
    """
    limit = scaled(timeout)
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            value = condition()
            if value:
                return value
            raise AssertionError(f"timed out after {limit:.0f}s waiting for {what}")
        time.sleep(interval)

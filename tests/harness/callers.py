"""The principals tests call as (trusted-header identity): one name per role, so that a test
reads as who does what. Policies grant to these strings; `--admin ADMIN` makes one an admin."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

ADMIN = "user:admin@example.com"
ANN = "user:ann@example.com"
ALICE = "user:alice@example.com"
BOB = "user:bob@example.com"
CAROL = "user:carol@example.com"
READER = "user:reader@example.com"
MALLORY = "user:mallory@example.com"  # the attacker


@contextmanager
def active(session: Any) -> Iterator[Any]:
    """Makes `session` pyspark's active session (kept per thread) while the block runs.

    A UDTF call (`One()`) or a checkpoint builds its DataFrame with the *active* session, not
    with a session the test holds; with several callers in one process a test must say whose
    it is, or it runs as whichever session happened to be made last (an admin's, say).
    """
    from pyspark.sql.connect.session import SparkSession

    before = getattr(SparkSession._active_session, "session", None)
    SparkSession._active_session.session = session
    try:
        yield session
    finally:
        SparkSession._active_session.session = before

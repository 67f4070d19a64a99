"""A config file that can change while the proxy runs (token lists, JWKS key rotation).

Reloading must not cost the request path a `stat` per call, and must never make things
worse: a file that is half-written, deleted or broken leaves the last good copy in force
(with a warning) instead of locking every caller out or letting a revoked token back in
through an empty table. Only at start-up is a bad file fatal, because there is no last
good copy to keep.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from rowgate.identity.errors import IdentityConfigError

log = logging.getLogger("rowgate.identity")

T = TypeVar("T")

_Signature = tuple[int, int, int, int, int]  # device, inode, size, mtime, ctime


class WatchedFile(Generic[T]):
    """The parsed contents of `path`, re-parsed when its stat signature changes.

    `parse` turns the file's bytes into a value and raises `ValueError` (or `OSError`)
    with a message that must not contain secrets from the file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        parse: Callable[[bytes], T],
        *,
        what: str,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self._parse = parse
        self._what = what
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: _Signature | None
        try:
            self._seen = self._signature()
            self._value = parse(self.path.read_bytes())
        except (OSError, ValueError) as exc:
            raise IdentityConfigError(f"{what} {self.path}: {_reason(exc)}") from exc
        self._next_check = clock() + interval

    @property
    def value(self) -> T:
        """The current contents; at most one stat per `interval`, by whichever thread gets there first."""
        if self._clock() >= self._next_check and self._lock.acquire(blocking=False):
            try:
                self._next_check = self._clock() + self._interval
                self._refresh()
            finally:
                self._lock.release()
        return self._value

    def _refresh(self) -> None:
        try:
            signature = self._signature()
        except OSError as exc:
            if self._seen is not None:  # warn once when the file disappears, not every second
                self._seen = None
                self._warn(exc)
            return
        if signature == self._seen:
            return
        # Stat before reading: a change in between is caught by the next check, whereas
        # stat-after-read could pair the new signature with the old contents. Recorded
        # before parsing so a broken file is warned about once; fixing it changes the
        # signature again (ctime is in it, so even a chmod counts) and it is re-read.
        self._seen = signature
        try:
            self._value = self._parse(self.path.read_bytes())
        except (OSError, ValueError) as exc:
            self._warn(exc)
            return
        log.info("reloaded %s %s", self._what, self.path)

    def _warn(self, exc: Exception) -> None:
        log.warning("could not reload %s %s (%s); keeping the last good copy", self._what, self.path, _reason(exc))

    def _signature(self) -> _Signature:
        st = os.stat(self.path)
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc)

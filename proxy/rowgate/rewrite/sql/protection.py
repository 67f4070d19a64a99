"""Whether row access protection is in force for a rewrite: the one switch every rule reads.

While any table has a policy, every SQL text the proxy forwards is its own rendering and
every relation name is pinned (reads.py, pin.py); with none, unprotected texts may pass as sent.
The memo (memo.py) keys on this too, since it decides the rendering.
"""

from __future__ import annotations


def protection_in_force(ctx: object) -> bool:
    """Whether any table has a row access policy (True when the context cannot say).

    >>> from types import SimpleNamespace
    >>> protection_in_force(SimpleNamespace(has_protected_tables=lambda: False)), protection_in_force(object())
    (False, True)
    """
    probe = getattr(ctx, "has_protected_tables", None)
    if probe is None:
        return True
    return bool(probe() if callable(probe) else probe)

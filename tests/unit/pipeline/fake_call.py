"""A stand-in for `Call` holding only what a test gives it, with the real hooks of `Call`."""

from __future__ import annotations

from types import SimpleNamespace

from rowgate.pipeline.core import HOOKS, Call


class FakeCall(SimpleNamespace):
    add_hook = Call.add_hook
    first_response = Call.first_response
    upstream_error = Call.upstream_error
    response_hook = Call.response_hook

    def __init__(self, **attrs):
        super().__init__(hooks={name: [] for name in HOOKS}, running=None, **attrs)

"""`GranteeSet.covers` answers exactly what matching each grantee one by one answers."""

from __future__ import annotations

import itertools
import random

from rowgate.identity.caller import ANONYMOUS, Caller
from rowgate.identity.members import GranteeSet, grantee_matches

GRANTEES = [
    "allUsers",
    "allAuthenticatedUsers",
    "user:Ann@Example.com",
    "user:ann@example.com",
    "serviceAccount:etl@proj.example.com",
    "user:etl@proj.example.com",
    "group:Eng@Example.COM",
    "group:ops@example.org",
    "domain:Example.com",
    "domain:proj.example.com",
    "not a member",
    "group:",
]
CALLERS = [
    ANONYMOUS,
    Caller("user:ann@EXAMPLE.com"),
    Caller("user:Ann@example.com"),
    Caller("serviceAccount:etl@proj.example.com"),
    Caller("user:bob@example.org", frozenset({"eng@example.com"})),
    Caller("user:bob@example.org", frozenset({"OPS@EXAMPLE.ORG", "not-an-email"})),
    Caller("user:carl@elsewhere.net"),
    Caller("group:eng@example.com"),  # not a principal kind a caller can be
    Caller("user:anonymous", authenticated=False),
]


def test_covers_equals_any_single_grantee_match_for_every_small_combination():
    for size in range(3):
        for grantees in itertools.combinations(GRANTEES, size):
            index = GranteeSet.of(grantees)
            for caller in CALLERS:
                assert index.covers(caller) == any(grantee_matches(g, caller) for g in grantees), (grantees, caller)


def test_covers_equals_any_single_grantee_match_on_random_large_sets():
    rng = random.Random(16)
    for _ in range(300):
        grantees = tuple(rng.sample(GRANTEES, rng.randint(0, len(GRANTEES))))
        caller = rng.choice(CALLERS)
        assert GranteeSet.of(grantees).covers(caller) == any(grantee_matches(g, caller) for g in grantees)

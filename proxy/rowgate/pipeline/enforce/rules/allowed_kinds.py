"""Rule: while any table is protected, a non-admin uses only kinds on the allow list.

Every relation, command, expression, catalog operation and SQL statement kind the request
uses (`Findings.kinds`) must have an entry in proxy/rowgate/policy/kinds.py that allows it
for non-admins; a kind with no entry (a newer protocol, a statement the rewriter reports
under a new name) or one marked admin-only is refused, naming the kind. The plan walker
refuses the same kinds while it walks; this rule is the one place that sees SQL statement
kinds and plan kinds together, after every rewriter has reported.
"""

from __future__ import annotations

from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.rules import Decision, Rule
from rowgate.policy.kinds import refusal_of


def describe(kind: str) -> str:
    """``relation:ml_relation`` -> "the ml_relation relation"; ``sql:unknown`` -> "the unknown SQL statement"."""
    family, _, name = kind.partition(":")
    what = {"sql": "SQL statement", "catalog": "catalog operation"}.get(family, family)
    return f"the {name} {what}"


async def check(d: Decision) -> None:
    if not d.findings.kinds or not d.snapshot.has_any():
        return
    for kind in sorted(d.findings.kinds):
        why = refusal_of(kind)
        if why is not None:
            raise Refusal.denied(
                f"{describe(kind)} ({kind}) is refused for non-admins while row access policies are in force: {why}",
                reason="kind_not_allowed",
            )


RULE = Rule("allowed_kinds", check)

"""Rule: while any table is protected, a non-admin uses only kinds on the allow list.

Every relation, command, expression, catalog operation and SQL statement kind the request
uses (`Findings.kinds`) must have an entry in proxy/rowgate/policy/kinds.py that allows it
for non-admins; a kind with no entry (a newer protocol, a statement the rewriter reports
under a new name) or one marked admin-only is refused, naming the kind. The plan walker
refuses the same kinds while it walks; this rule is the one place that sees SQL statement
kinds and plan kinds together, after every rewriter has reported.

Both applications stay, because they do not answer alike: the walker refuses a plan kind
it has no entry for with INVALID_ARGUMENT ("unknown to rowgate and cannot be analysed") and
an admin-only one with PERMISSION_DENIED "reserved to admins" (reason `rewrite_refused`),
and it refuses first, so clients see those for plan kinds today; this rule answers
PERMISSION_DENIED with the kind's reason from policy/kinds.py (reason `kind_not_allowed`)
and is the only check of SQL statement kinds. Folding one into the other would change a
status or a message clients see. Both read the same table (policy/kinds.py), so they
cannot disagree about *whether* a kind is allowed.
"""

from __future__ import annotations

from rowgate.pipeline.core import Refusal
from rowgate.pipeline.enforce.rules import Decision, Rule
from rowgate.policy.access_control import AccessControl


def describe(kind: str) -> str:
    """``relation:ml_relation`` -> "the ml_relation relation"; ``sql:unknown`` -> "the unknown SQL statement"."""
    family, _, name = kind.partition(":")
    what = {"sql": "SQL statement", "catalog": "catalog operation"}.get(family, family)
    return f"the {name} {what}"


async def check(d: Decision) -> None:
    if not d.findings.kinds or not d.snapshot.has_any():
        return
    for kind in sorted(d.findings.kinds):
        why = AccessControl.kind_refusal(kind, admin=False)  # rules of RULES run for non-admins
        if why is not None:
            raise Refusal.denied(
                f"{describe(kind)} ({kind}) is refused for non-admins while row access policies are in force: {why}",
                reason="kind_not_allowed",
            )


RULE = Rule("allowed_kinds", check)

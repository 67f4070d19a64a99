"""Rule: code shipped inside a plan (UDFs, reflection, TRANSFORM scripts) while tables are
protected needs the operator's permission for that kind (proxy/rowgate/pipeline/statements/shipped_code.py).
"""

from __future__ import annotations

from rowgate.pipeline.enforce.rules import Decision, Rule


async def check(d: Decision) -> None:
    if d.findings.user_code and d.snapshot.has_any():
        d.settings.code_rules.check(sorted(d.findings.user_code))


RULE = Rule("shipped_code", check)

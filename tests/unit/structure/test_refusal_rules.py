"""Every refusal built in rewrite/ names the rewriter check that refused (issue 24, item 4).

The audit log records a refusal's `rule`; a rewriter refusal without one would be logged as
the bare reason `rewrite_refused`, and nobody could tell which check refused. The rewriters
build their refusals only through rewrite/sql/errors.py (`refuse.invalid(rule, message)`,
`refuse.denied(rule, message)`, the module imported as `refuse`), with the rule first: a
short snake_case name of the check written at the call, or the `.rule` of a refusal caught
and refused again. This walks the source, so a new raise that forgets its rule fails here
before any request meets it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import rowgate
from rowgate.rewrite.sql import errors

REWRITE = Path(rowgate.__file__).parent / "rewrite"
ERRORS = Path(errors.__file__)
RULE_NAME = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)+")  # at least two words: it names a check


def _problems(source: str, where: str) -> tuple[list[str], int]:
    """What is wrong with the refusals built in `source`, and how many it builds."""
    problems: list[str] = []
    built = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "rowgate.rewrite.sql.errors":
            problems.append(f"{where}:{node.lineno}: import the module (`from rowgate.rewrite.sql import errors as refuse`)")
        elif isinstance(node, ast.ImportFrom) and node.module == "rowgate.rewrite.sql":
            for alias in node.names:
                if alias.name == "errors" and alias.asname != "refuse":
                    problems.append(f"{where}:{node.lineno}: import errors as `refuse`, the name this check knows")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (isinstance(func, ast.Name) and func.id == "Refusal") or (
            isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "Refusal"
        ):
            problems.append(f"{where}:{node.lineno}: build rewriter refusals with refuse.invalid/denied, not Refusal")
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "refuse"
            and func.attr in ("invalid", "denied")
        ):
            built += 1
            if len(node.args) != 2 or node.keywords:
                problems.append(f"{where}:{node.lineno}: refuse.{func.attr}(rule, message) takes the rule first")
                continue
            rule = node.args[0]
            if isinstance(rule, ast.Constant) and isinstance(rule.value, str):
                if not RULE_NAME.fullmatch(rule.value) or rule.value == errors.REASON:
                    problems.append(f"{where}:{node.lineno}: {rule.value!r} is not a snake_case name of a check")
            elif not (isinstance(rule, ast.Attribute) and rule.attr == "rule"):
                problems.append(f"{where}:{node.lineno}: the rule is a literal name, or a caught refusal's .rule")
    return problems, built


def test_every_refusal_in_rewrite_names_its_rule() -> None:
    problems: list[str] = []
    built = 0
    for path in sorted(REWRITE.rglob("*.py")):
        if path == ERRORS:
            continue
        found, count = _problems(path.read_text(), str(path.relative_to(REWRITE.parent)))
        problems += found
        built += count
    assert not problems, "\n".join(problems)
    assert built >= 60, f"only {built} rewriter refusals found: does the walk still see them?"


def test_the_check_catches_a_raise_without_its_rule() -> None:
    assert _problems('raise refuse.invalid("write_needs_full_access", "no")', "x.py") == ([], 1)
    assert _problems('raise refuse.invalid(e.rule, f"view v: {e}")', "x.py") == ([], 1)
    for source in (
        'raise refuse.invalid("writing to t requires a grant")',  # the rule dropped
        'raise refuse.denied(f"writing to {t}", "no")',  # a message where the rule goes
        'raise refuse.denied("", "no")',
        'raise refuse.denied("rewrite_refused", "no")',  # the reason, not a check
        'raise refuse.denied("no", rule="write_needs_full_access")',
        'raise Refusal.denied("no", rule="write_needs_full_access")',  # past errors.py: wrong reason
        "from rowgate.rewrite.sql.errors import invalid",  # a bare name this walk would not see
    ):
        problems, _ = _problems(source, "x.py")
        assert problems, source


def test_a_rewriter_refusal_keeps_the_reason_metrics_count() -> None:
    for refusal in (errors.invalid("unanalysable_sql", "no"), errors.denied("write_needs_full_access", "no")):
        assert refusal.reason == "rewrite_refused"
    assert errors.invalid("unanalysable_sql", "no").rule == "unanalysable_sql"

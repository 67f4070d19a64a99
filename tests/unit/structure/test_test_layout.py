"""The unit tests mirror the modules: tests/unit/<package>/ tests proxy/rowgate/<package>/.

A reader who changes `rewrite/plan/reads.py` finds its tests in tests/unit/rewrite/plan/, and
one who looks for what tests `pipeline/session/epoch.py` looks in tests/unit/pipeline/session/.
That holds only while nobody adds a test package rowgate does not have, or a test beside the
package it tests; these checks say so at once instead of at the next reorganisation.
"""

from __future__ import annotations

from pathlib import Path

import rowgate

ROOT = Path(rowgate.__file__).parent
UNIT = Path(__file__).resolve().parent.parent

# Test packages about the tests themselves, with no package of rowgate to mirror.
OWN = {"structure"}


def test_packages():
    test_packages = [p.parent.relative_to(UNIT) for p in UNIT.rglob("__init__.py") if p.parent != UNIT]
    strays = [str(p) for p in test_packages if p.parts[0] not in OWN and not (ROOT / p / "__init__.py").exists()]
    assert not strays, f"test packages with no package of rowgate of the same path: {strays}"


def test_rewrite_tests_live_with_their_half():
    """rewrite/ is two halves (sql/, plan/); its top holds only helpers both halves share."""
    tests = sorted(p.name for p in (UNIT / "rewrite").glob("test_*.py"))
    assert not tests, f"tests at the top of tests/unit/rewrite (move them to sql/ or plan/): {tests}"


def test_pipeline_tests_live_with_their_module():
    """A test named after a module of a pipeline part lives in that part's test package."""
    misplaced = []
    for test in sorted((UNIT / "pipeline").glob("test_*.py")):
        module = test.stem.removeprefix("test_")
        parts = [p.name for p in (ROOT / "pipeline").iterdir() if (p / f"{module}.py").exists()]
        if parts:
            misplaced.append(f"{test.name} -> pipeline/{parts[0]}/")
    assert not misplaced, f"pipeline tests beside the part they test: {misplaced}"

#!/usr/bin/env bash
# The static gates, run by .ci/run before the test suite: lint and format (ruff), types
# (mypy), docstring examples of every module, layer contracts (imports point down), and
# generated proto code that matches proto/. Sets itself up like the other scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
PY=.venv/bin/python
step() { printf '== %s\n' "$1"; }
step "ruff check";   "$PY" -m ruff check proxy tests benchmarks
step "ruff format";  "$PY" -m ruff format --check proxy tests benchmarks
step "mypy";         "$PY" -m mypy
step "doctests";     "$PY" -m pytest -p no:cacheprovider -q --doctest-modules proxy/rowgate \
                       -o doctest_optionflags="ELLIPSIS IGNORE_EXCEPTION_DETAIL NORMALIZE_WHITESPACE"
step "layers";       "$PY" -m pytest -p no:cacheprovider -q tests/unit/structure
step "proto";        PYTHON="$PY" scripts/gen_proto.sh --check
echo "static gates passed"

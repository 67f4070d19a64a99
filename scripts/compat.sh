#!/usr/bin/env bash
# The compatibility matrix: every pyspark client version (a venv each, under
# .rowgate/compat/venvs) against every Spark Connect server shipped in a pyspark wheel (4.0
# and later), through rowgate, with the same scenario checked directly against the server.
# Prints the markdown table and writes it to .rowgate/compat/matrix.md (see tests/compat/).
#   scripts/compat.sh                         # the full matrix (slow: five venvs, four servers)
#   scripts/compat.sh --subset ci             # the reduced matrix the test suite runs
#   scripts/compat.sh --clients 3.5.9 --servers 4.0.5,4.3.0
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python -m tests.compat "$@"

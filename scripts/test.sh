#!/usr/bin/env bash
# Runs the whole test suite: unit tests, and integration tests against a real Spark
# Connect server the suite starts itself (set ROWGATE_TEST_UPSTREAM=sc://host:port to use
# a running one instead). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python -m pytest -p no:cacheprovider -ra "$@"

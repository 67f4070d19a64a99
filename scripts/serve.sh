#!/usr/bin/env bash
# Starts rowgate in front of an embedded local Spark Connect server (no flags needed).
# Any arguments are passed to `rowgate serve`, e.g. --admin user:you@example.com
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/rowgate serve "$@"

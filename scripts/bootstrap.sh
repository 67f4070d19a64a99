#!/usr/bin/env bash
# Sets up what rowgate needs on a fresh machine: Java 17+ (for the embedded Spark Connect
# server) and a virtual environment with the project and its test dependencies.
# Idempotent: re-running it when nothing changed takes a second.
set -euo pipefail
cd "$(dirname "$0")/.."

java_major() {
  java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}

if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
  echo "rowgate: installing Java 17 (openjdk-17-jre-headless) with apt-get" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# The test and dev extras (pytest, the static gates' tools) at the versions constraints.txt
# pins, the same versions CI and the image use.
stamp=".venv/.rowgate-installed"
constraints=()
[ -f constraints.txt ] && constraints=(-c constraints.txt)
want="$(cat pyproject.toml constraints.txt 2>/dev/null | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q "${constraints[@]}" -e ".[test,dev]"
  echo "$want" > "$stamp"
fi

#!/usr/bin/env bash
# Regenerates the Python code of rowgate's own protos (proto/rowgate/v1/*.proto) into
# proxy/rowgate/admin/v1/ with grpc_tools.protoc, and turns the generated absolute import of the
# sibling module into a relative one so the package imports from anywhere. The generated
# files are committed; re-run this after editing a .proto (needs the dev extra: grpcio-tools).
# `scripts/gen_proto.sh --check` regenerates into a temporary folder and fails if the
# committed files differ (a static gate in scripts/check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
COMMITTED=proxy/rowgate/admin/v1
OUT=$COMMITTED
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
CHECK=""
if [ "${1:-}" = "--check" ]; then
  CHECK=1
  OUT="$TMP/out"
  cp -r "$COMMITTED" "$OUT"
fi

"$PYTHON" -m grpc_tools.protoc \
  --proto_path=proto \
  --python_out="$TMP" \
  --pyi_out="$TMP" \
  --grpc_python_out="$TMP" \
  proto/rowgate/v1/policy_admin.proto

mkdir -p "$OUT"
[ -f "$OUT/__init__.py" ] || printf '"""Generated from proto/rowgate/v1 by scripts/gen_proto.sh; do not edit."""\n' > "$OUT/__init__.py"
for f in policy_admin_pb2.py policy_admin_pb2.pyi policy_admin_pb2_grpc.py; do
  # `from rowgate.v1 import policy_admin_pb2 as ...` -> `from . import policy_admin_pb2 as ...`
  sed -E 's/^from rowgate\.v1 import /from . import /; s/^import rowgate\.v1\.([a-z_0-9]+) as /from . import \1 as /' \
    "$TMP/rowgate/v1/$f" > "$OUT/$f"
done
if grep -nE '^(from|import) rowgate' "$OUT"/policy_admin_pb2*.py*; then
  echo "gen_proto.sh: an absolute rowgate import is left in the generated code" >&2
  exit 1
fi
if [ -n "$CHECK" ]; then
  if ! diff -r -x __pycache__ "$COMMITTED" "$OUT"; then
    echo "gen_proto.sh: $COMMITTED is not what proto/ generates; run scripts/gen_proto.sh" >&2
    exit 1
  fi
  echo "generated proto code is current"
  exit 0
fi
echo "generated $OUT/policy_admin_pb2.py, policy_admin_pb2.pyi, policy_admin_pb2_grpc.py"

#!/usr/bin/env bash
# Runs the whole suite (scripts/test.sh) while other processes keep every core busy, the way
# a shared CI runner or a developer's loaded laptop does: one CPU burner per core, at the
# suite's own priority, for the whole run. A test that fails here and passes on a quiet
# machine depends on timing; fix it by waiting on a condition or by taking its deadline from
# tests/deadlines.py, never by loosening what it asserts.
#
#   scripts/test-busy.sh                 # one burner per core
#   BURNERS=4 scripts/test-busy.sh -x    # more burners; extra arguments go to pytest
#
# Prints the load average before and after, and exits with pytest's status.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
BURNERS="${BURNERS:-$(nproc)}"
pids=()
stop_burners() {
  if [ "${#pids[@]}" -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
  fi
}
trap stop_burners EXIT
for _ in $(seq "$BURNERS"); do
  .venv/bin/python -c "while True: pass" &
  pids+=("$!")
done
echo "test-busy: $BURNERS CPU burners on $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
scripts/test.sh "$@" || status=$?
echo "test-busy: load after: $(cut -d' ' -f1-3 /proc/loadavg); pytest exit $status"
exit "$status"

#!/usr/bin/env bash
# Runs every worker-exit scenario of test/fixtures/worker-exit.js under compute-sanitizer's
# memcheck, both ways of ending the worker, and prints one line per case and a total.
#   bash scripts/teardown-sanitizer.sh [LOG_DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
logs=${1:-$(mktemp -d)}
mkdir -p "$logs"
sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
failed=0
total=0
for scenario in driver staged pinned registered stream allocator async-allocator mixed-100; do
  for mode in exit terminate; do
    total=$((total + 1))
    log="$logs/sanitizer-$scenario-$mode.log"
    "$sanitizer" --tool memcheck --target-processes all --error-exitcode 99 \
      node "$root/test/fixtures/worker-exit.js" "$scenario" "$mode" >"$log" 2>&1
    rc=$?
    summary=$(grep -o 'ERROR SUMMARY: [0-9]* error[s]*' "$log" | tail -1)
    report=$(grep -o '{"scenario".*}' "$log" | tail -1)
    if [ $rc -ne 0 ] || [ -z "$report" ]; then failed=$((failed + 1)); verdict=FAIL; else verdict=ok; fi
    echo "$verdict $scenario/$mode rc=$rc ${summary:-no summary} $report"
  done
done
echo "compute-sanitizer memcheck: $((total - failed)) of $total worker-exit cases clean"
[ $failed -eq 0 ]

#!/usr/bin/env bash
# Builds and runs the native core's tests (no Node, no GPU) under AddressSanitizer and
# UndefinedBehaviorSanitizer: one program per native/core/test/<concern>/*_test.cc.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
sources=$(find "$root/native/core" -name '*.cc' -not -path '*/test/*' | sort)
for test in $(find "$root/native/core/test" -name '*_test.cc' | sort); do
  name=$(basename "$test" .cc)
  g++ -std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
    -Wall -Wextra -I"$root/native" $sources "$test" -o "$out/$name"
  # A time limit: a test of something that must end (a back-off, a lock wait) fails, not hangs.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 timeout 600 "$out/$name"
done

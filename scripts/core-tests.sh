#!/usr/bin/env bash
# Builds and runs the native core's tests (no Node, no GPU) under AddressSanitizer and
# UndefinedBehaviorSanitizer.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
g++ -std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
  -Wall -Wextra -I"$root/native" "$root"/native/core/*.cc "$root/native/core/test/core_test.cc" -o "$out/core_test"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 "$out/core_test"

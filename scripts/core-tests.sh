#!/usr/bin/env bash
# Builds and runs the native core's tests (no Node, no GPU) under AddressSanitizer and
# UndefinedBehaviorSanitizer: one program per native/core/test/<concern>/*_test.cc.
#
#   bash scripts/core-tests.sh            every test
#   bash scripts/core-tests.sh ledger     only the tests whose file name contains "ledger"
#
# Each core source is compiled once, into an object every test program links against, and the
# compiles run on every CPU: compiling all the sources into each program took most of CI's time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
filter=${1:-}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
jobs=$(nproc 2>/dev/null || echo 2)
# The include folder apart, quoted where it is used: a clone's path may hold a space.
export CXXFLAGS_CORE="-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all -Wall -Wextra"
export root out

# One object per source; the object's name is the source's path under native/ with / as _.
compile() {
  local src=$1 obj
  obj="$out/$(realpath --relative-to="$root/native" "${src%.cc}" | tr / _).o"
  # shellcheck disable=SC2086
  g++ $CXXFLAGS_CORE -I"$root/native" -c "$src" -o "$obj" || { echo "core-tests: compiling $src failed" >&2; return 1; }
}
export -f compile

find "$root/native/core" -name '*.cc' -not -path '*/test/*' | sort | xargs -r -P "$jobs" -I{} bash -c 'compile "$1"' _ {}
mkdir -p "$out/core" && mv "$out"/*.o "$out/core/"

tests=$(find "$root/native/core/test" -name '*_test.cc' | sort | grep -- "$filter" || true)
[ -n "$tests" ] || { echo "core-tests: no test matches '$filter'" >&2; exit 1; }
echo "$tests" | xargs -r -P "$jobs" -I{} bash -c 'compile "$1"' _ {}

link() {
  local obj=$1 name
  name=$(basename "$obj" .o)
  # shellcheck disable=SC2086
  g++ $CXXFLAGS_CORE -I"$root/native" "$obj" "$out"/core/*.o -o "$out/bin_$name" -pthread -ldl ||
    { echo "core-tests: linking $name failed" >&2; return 1; }
}
export -f link
ls "$out"/*.o | xargs -r -P "$jobs" -I{} bash -c 'link "$1"' _ {}

# The programs run one at a time: some race processes against each other and need the CPUs.
for bin in "$out"/bin_*; do
  name=${bin##*/bin_core_test_}
  echo "== $name"
  # A time limit: a test of something that must end (a back-off, a lock wait) fails, not hangs.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 timeout 600 "$bin"
done

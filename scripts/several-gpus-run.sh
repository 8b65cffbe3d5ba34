#!/usr/bin/env bash
# The several-GPU run in one go, on a host of 2 to 8 GPUs: the topology, the C++ baseline
# (scripts/p2p-baseline.cc) before and after, `cuda-memory info`, `bench --devices all --p2p`
# (table, JSON, HTML, Prometheus textfile) and `doctor --devices all` (text and JUnit), every file
# in OUTDIR. Run in the project root with the package built and nvcc on the PATH:
#   bash scripts/several-gpus-run.sh OUTDIR [bench options...]
# Extra options go to the benchmark (default: --modes pinned,staged --sizes 64MiB,1GiB).
set -uo pipefail
out=${1:?usage: several-gpus-run.sh OUTDIR [bench options...]}
shift
bench_options=("$@")
[ ${#bench_options[@]} -eq 0 ] && bench_options=(--modes pinned,staged --sizes 64MiB,1GiB)
mkdir -p "$out"
cli=(node dist/cli.js)
status=0
step() {  # step NAME COMMAND...: runs it, keeps going, remembers a failure
  local name=$1
  shift
  echo "== $name: $*" >&2
  "$@" || { echo "== $name failed (exit $?)" >&2; status=1; }
}
nvidia-smi topo -m > "$out/topo.txt" 2>&1
baseline=$(mktemp -d)
trap 'rm -rf "$baseline"' EXIT
step build-baseline nvcc -O2 -std=c++17 -o "$baseline/p2p-baseline" scripts/p2p-baseline.cc
step baseline-before sh -c "'$baseline/p2p-baseline' > '$out/baseline-before.json'"
step info sh -c "${cli[*]} info > '$out/info.txt'"
step bench sh -c "${cli[*]} bench --devices all --p2p ${bench_options[*]} --out '$out/bench.json' \
  --html '$out/bench.html' --prometheus '$out/bench.prom' > '$out/bench.txt'"
step doctor sh -c "${cli[*]} doctor --devices all --junit '$out/doctor.xml' > '$out/doctor.txt'"
step baseline-after sh -c "'$baseline/p2p-baseline' > '$out/baseline-after.json'"
exit $status

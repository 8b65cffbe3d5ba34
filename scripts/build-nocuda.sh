#!/usr/bin/env bash
# Builds the addon as a machine without a CUDA toolkit gets it (CUDA_MEMORY_NO_CUDA forces that),
# into build-nocuda/Release/, leaving the main build in build/ alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for p in binding.gyp native scripts node_modules package.json; do ln -s "$root/$p" "$work/$p"; done
# NODE_PRESERVE_SYMLINKS: node-addon-api's headers are found through the link in $work, so gyp
# writes them relative to it; through its real path, a clone whose path holds a space would split
# the include flag in the Makefile.
(cd "$work" && CUDA_MEMORY_NO_CUDA=1 NODE_PRESERVE_SYMLINKS=1 "$root/node_modules/.bin/node-gyp" rebuild --nodedir="${npm_config_nodedir:-/usr}" 2>&1 | grep -E "error" || true)
mkdir -p "$root/build-nocuda/Release"
cp "$work/build/Release/cuda_memory.node" "$root/build-nocuda/Release/"
echo "built build-nocuda/Release/cuda_memory.node (without CUDA)"

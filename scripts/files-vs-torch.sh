#!/usr/bin/env bash
# A safetensors checkpoint onto the GPU in one call: written into DIR, then loaded cold and warm by
# the library, by safetensors.torch.load_file(..., device='cuda') and by fs + copy(), beside the
# storage's own rate and the link, every pass checked byte for byte (scripts/files-vs-torch.js).
# With OUT set, the JSON report is also written to $OUT/files-vs-torch.json.
# usage: scripts/files-vs-torch.sh DIR [GiB, default 3] [passes, default 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:?usage: scripts/files-vs-torch.sh DIR [GiB] [passes]}
exec node "$root/scripts/files-vs-torch.js" --dir "$dir" --gib "${2:-3}" --passes "${3:-3}"

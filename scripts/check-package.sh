#!/usr/bin/env bash
# Packs the package and installs the tarball as a user on a driver-only machine gets it: into a new,
# empty folder, with no CUDA toolkit visible and with CC/CXX set to a command that fails, so any
# compile breaks the install. Then checks what a user sees: the prebuilt binary loaded (status()
# reason EXPECT_REASON, NO_DRIVER by default: a CUDA-enabled binary on a machine without a
# driver), nothing compiled, require/import/the CLI, and the types under TypeScript's node16 and
# bundler resolution, frozen intrinsics, an esbuild bundle, for every entry point (cuda-memory,
# cuda-memory/bench, /metrics, /testing). Last, `npx cuda-memory build --from-source`.
#
#   bash scripts/check-package.sh [KEEP_DIR]   KEEP_DIR receives the tarball and an npm cache
#                                              holding its dependencies, for an offline install
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
expect_reason=${EXPECT_REASON:-NO_DRIVER}
# The package is packed, installed and built from source under a folder whose name has a space, as
# a user's "~/my projects/" can be: every path the build hands on must stay one argument.
base=$(mktemp -d)
work="$base/with space"
mkdir "$work"
trap 'rm -rf "$base"' EXIT
keep=${1:-}
cache="$work/npm-cache"

echo "== npm pack"
(cd "$root" && npm pack --pack-destination "$work" --silent >"$work/packed")
tgz="$work/$(tail -1 "$work/packed")"
bytes=$(stat -c %s "$tgz")
files=$(tar tzf "$tgz")
echo "tarball $(basename "$tgz"): $bytes bytes ($((bytes / 1024)) KiB), $(echo "$files" | wc -l) files, $(tar xzOf "$tgz" | wc -c) bytes unpacked"
# A listing is searched as a here-string, never piped: under pipefail, `echo | grep -q` fails at
# random when grep exits on its match before echo has written the rest (SIGPIPE, exit 141).
for must in package/prebuilds/linux-x64/cuda-memory.napi.glibc.node package/prebuilds/linux-x64/cuda_memory_preload.so package/dist/index.js package/dist/index.d.ts \
  package/dist/index.mjs package/dist/index.d.mts package/dist/bench/index.mjs package/dist/metrics/index.mjs package/dist/testing/index.mjs package/dist/cli.js package/binding.gyp package/scripts/build-addon.js package/scripts/cuda_memory_ipc.py package/scripts/pytorch-trace.py package/README.md \
  package/docs/install.md package/docs/troubleshooting.md package/docs/api/index.html package/examples/basics.js \
  package/LICENSE package/CHANGELOG.md; do
  grep -qxF "$must" <<<"$files" || { echo "FAIL: the tarball lacks $must"; exit 1; }
done
if echo "$files" | grep -E '^package/(test|build|build-cmake|build-nocuda|docs/screenshots|\.gpu|native/core/test|node_modules)/|\.tsbuildinfo$|\.o$'; then
  echo "FAIL: the tarball holds files a user does not need (above)"
  exit 1
fi

# The API reference renders the guides as its own pages and links those, not the raw Markdown.
for guide in $(echo "$files" | sed -n 's#^package/docs/\([a-z0-9-]*\)\.md$#\1#p' | grep -vx api-intro); do
  grep -qxF "package/docs/api/documents/$guide.html" <<<"$files" || { echo "FAIL: the API reference does not render docs/$guide.md"; exit 1; }
done
if tar xzOf "$tgz" --wildcards 'package/docs/api/*.html' | grep -oE 'href="[^"]*media/[a-z0-9-]+\.md"' | grep -v 'media/README.md' | sort -u | grep .; then
  echo "FAIL: the API reference links the raw Markdown of the guides above"
  exit 1
fi

echo "== install the tarball with no toolkit and a failing compiler"
# The failing compiler lives outside the spaced folder: CC and CXX are split at spaces by design.
mkdir -p "$work/app" "$base/bin"
printf '#!/bin/sh\necho "check-package: a compiler was called: $0 $*" >&2\nexit 1\n' >"$base/bin/fail"
chmod +x "$base/bin/fail"
# PATH without any folder that holds nvcc; node and npm stay.
path=""
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do [ -n "$d" ] && [ ! -e "$d/nvcc" ] && path="$path${path:+:}$d"; done
command -v node >/dev/null || { echo "FAIL: node not found"; exit 1; }
echo '{ "name": "app", "version": "1.0.0", "private": true }' >"$work/app/package.json"
(cd "$work/app" && env PATH="$path" CUDA_PATH=/nonexistent CUDA_HOME=/nonexistent CC="$base/bin/fail" CXX="$base/bin/fail" \
  npm install --no-audit --no-fund --foreground-scripts --cache "$cache" ${OFFLINE:+--offline} "$tgz" 2>&1 | tee "$work/install.log")
grep -q 'a compiler was called' "$work/install.log" && { echo "FAIL: the install compiled"; exit 1; }
# npm 11 warns about dependencies' install scripts it blocks; this package must have none.
grep -qi 'install scripts\|allowScripts' "$work/install.log" && { echo "FAIL: npm reports install scripts"; exit 1; }
node -e "const p = require('$work/app/node_modules/cuda-memory/package.json'); const s = p.scripts || {};
  for (const k of ['preinstall', 'install', 'postinstall']) if (s[k]) { console.error('FAIL: an ' + k + ' script'); process.exit(1); }
  if (p.gypfile !== false) { console.error('FAIL: gypfile must be false, or npm adds node-gyp rebuild'); process.exit(1); }"
pkg="$work/app/node_modules/cuda-memory"
[ -e "$pkg/build" ] && { echo "FAIL: the install made $pkg/build"; exit 1; }

echo "== what a user sees"
cd "$work/app"
node -e "
  const cm = require('cuda-memory'); const s = cm.status();
  console.log(JSON.stringify({ reason: s.reason, available: s.available, builtWithCuda: s.builtWithCuda, binary: s.binary }));
  const want = process.argv[1] === 'none' ? null : process.argv[1];
  if (s.reason !== want) { console.error('FAIL: status().reason is ' + s.reason + ', expected ' + want); process.exit(1); }
  if (s.binary.kind !== 'prebuilt' || !s.builtWithCuda) { console.error('FAIL: not the prebuilt CUDA binary'); process.exit(1); }
" "$expect_reason"
node --input-type=module -e "
  import cm, { status, copy } from 'cuda-memory';
  if (cm.copy !== copy || typeof status().available !== 'boolean') { console.error('FAIL: import'); process.exit(1); }
  console.log('import: ok');"
# The entry points by audience, from require and import: the same module, the same names.
for entry in cuda-memory/bench cuda-memory/metrics cuda-memory/testing; do
  node --input-type=module -e "
    import m from '$entry'; import * as all from '$entry'; import { createRequire } from 'node:module';
    const r = createRequire(import.meta.url)('$entry'); const names = Object.keys(r);
    if (m !== r || names.length === 0 || names.some((k) => all[k] !== r[k])) { console.error('FAIL: $entry from import and require'); process.exit(1); }
    console.log('$entry: ' + names.length + ' names, import and require: ok');"
done
node -e "const cm = require('cuda-memory'); for (const k of ['runTransferBenchmark', 'registerMetrics', 'createLeakGate']) if (k in cm) { console.error('FAIL: cuda-memory exports ' + k); process.exit(1); }"
echo "cuda-memory --version: $(npx --no-install cuda-memory --version)"
npx --no-install cuda-memory info || true # exits 2 where CUDA is unavailable

echo "== the Python scripts the docs name, from the installed package (no CuPy or PyTorch needed)"
if command -v python3 >/dev/null; then
  PYTHONPATH="$pkg/scripts" python3 -c "import cuda_memory_ipc as cmi; assert 'cuda-ipc@1' in cmi.__doc__ and callable(cmi.open_descriptor), 'cuda_memory_ipc'" ||
    { echo "FAIL: scripts/cuda_memory_ipc.py does not import from the installed package"; exit 1; }
  grep -q 'usage: pytorch-trace.py' <<<"$(python3 "$pkg/scripts/pytorch-trace.py" --help)" ||
    { echo "FAIL: scripts/pytorch-trace.py --help"; exit 1; }
  echo "python scripts: ok"
else
  echo "python3 not installed: the Python scripts not checked"
fi

echo "== frozen intrinsics: load and a copy"
node --frozen-intrinsics -e "const cm = require('cuda-memory'); cm.copyAsync(new Uint8Array(8), new Uint8Array(8).fill(1)).then(() => console.log('frozen intrinsics: ok'))" 2>&1 | grep -v ExperimentalWarning | grep -v trace-warnings

echo "== a bundle (esbuild): inlined, it says so; external, it loads"
esbuild="${ESBUILD:-$root/node_modules/.bin/esbuild}"
if [ -x "$esbuild" ]; then
  echo "const cm = require('cuda-memory'); console.log(JSON.stringify(cm.status()));" >"$work/app/entry.js"
  "$esbuild" entry.js --bundle --platform=node --log-level=error --outfile=bundle-inlined.js
  grep -q 'it was bundled' <<<"$(node bundle-inlined.js)" || { echo "FAIL: an inlined bundle does not say it was bundled"; exit 1; }
  "$esbuild" entry.js --bundle --platform=node --log-level=error --external:cuda-memory --outfile=bundle-external.js
  grep -q '"binary":{"kind":"prebuilt"' <<<"$(node bundle-external.js)" || { echo "FAIL: an external bundle does not load the prebuilt binary"; exit 1; }
  # The other entry points, inlined (they load the addon through the same loader) and external.
  echo "const { parseGate } = require('cuda-memory/bench'); const { metricsText } = require('cuda-memory/metrics');
    const { createLeakGate } = require('cuda-memory/testing'); const g = createLeakGate({ driver: 'off' }); g.begin();
    console.log(parseGate('h2d.pinned>=48GB/s').value, typeof metricsText({}), g.end('t').leaks.length);" >"$work/app/entries.js"
  for how in inlined external; do
    "$esbuild" entries.js --bundle --platform=node --log-level=error $([ $how = external ] && echo --external:cuda-memory) --outfile=bundle-entries-$how.js
    [ "$(node bundle-entries-$how.js 2>&1)" = "48 string 0" ] || { echo "FAIL: a bundle ($how) of the entry points: $(node bundle-entries-$how.js 2>&1 | head -3)"; exit 1; }
  done
  echo "bundles: ok"
else
  echo "esbuild not installed (a devDependency): bundles not checked"
fi

echo "== types: strict, nodenext and bundler, TypeScript 5.0, 5 and the latest, with and without @types/node"
node "$root/scripts/check-typings.js" "$tgz"

echo "== source build, as a user asks for it: npx cuda-memory build --from-source"
if [ -z "${SKIP_SOURCE_BUILD:-}" ]; then
  npx --no-install cuda-memory build --from-source 2>&1 | tee "$work/build.log" | grep -E '^cuda-memory:' | sed -n '1,3p;$p'
  grep -q '\[1/' "$work/build.log" || { echo "FAIL: the build showed no progress"; exit 1; }
  node -e "
    const s = require('cuda-memory').status(); console.log(JSON.stringify(s.binary));
    if (s.binary.kind !== 'source') { console.error('FAIL: expected the source build'); process.exit(1); }"
fi

if [ -n "$keep" ]; then
  mkdir -p "$keep"
  cp "$tgz" "$keep/"
  rm -rf "$keep/npm-cache" && cp -r "$cache" "$keep/npm-cache"
  echo "kept $(basename "$tgz") and its dependencies' npm cache in $keep"
fi
echo "check-package: passed"

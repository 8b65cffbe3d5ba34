#!/usr/bin/env node
// Builds what a clone lacks to run, and nothing else: the TypeScript (dist/, when absent or older
// than lib/) and the addon (build/Release/cuda_memory.node: compiled with CUDA where a toolkit is
// found, else without, when absent; the changed sources recompiled when older than native/).
// Each step is announced; a failing one says which step and what to install, once, and exits 1.
// `npm start` and `npm test` (its pretest) run it first, so that `npm ci && npm start` and
// `npm test` work on a fresh clone.
//
//   node scripts/build-missing.js
'use strict';
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { buildFromSource, recompile } = require('./build-addon');

const root = path.join(__dirname, '..');
const say = (msg) => process.stdout.write(`cuda-memory: ${msg}\n`);
const rel = (p) => path.relative(root, p);

// The newest modification time of the files under `dir` whose names pass `keep` (0 if none).
function newest(dir, keep) {
  let t = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) t = Math.max(t, newest(p, keep));
    else if (keep(p)) t = Math.max(t, fs.statSync(p).mtimeMs);
  }
  return t;
}

// Why `output` must be (re)built from `inputs`, or null when it is newer than all of them.
function staleness(output, inputs) {
  if (!fs.existsSync(output)) return `${rel(output)} is missing`;
  const built = fs.statSync(output).mtimeMs;
  const changed = inputs.find((i) => i.time > built);
  return changed ? `${rel(output)} is older than ${changed.name}` : null;
}

function fail(step, what) {
  console.error(`cuda-memory: ${step} failed: ${what}`);
  process.exit(1);
}

async function main() {
  const tsStep = 'step 1 of 2, the TypeScript';
  const addonStep = 'step 2 of 2, the addon';
  if (!fs.existsSync(path.join(root, 'node_modules', 'typescript')))
    fail(tsStep, 'node_modules/ lacks the development dependencies; run `npm ci` first (Node.js 18 or newer with npm)');

  const tsWhy = staleness(path.join(root, 'dist', 'index.mjs'), [
    { name: 'lib/', time: newest(path.join(root, 'lib'), (p) => p.endsWith('.ts')) },
    { name: 'tsconfig.json', time: fs.statSync(path.join(root, 'tsconfig.json')).mtimeMs },
    { name: 'scripts/write-esm.js', time: fs.statSync(path.join(__dirname, 'write-esm.js')).mtimeMs },
  ]);
  if (tsWhy) {
    say(`${tsStep}: ${tsWhy}; compiling lib/ into dist/ (npm run build:ts)`);
    const t0 = Date.now();
    // npm's own path when npm runs this (npm start, npm test), else the npm on the PATH.
    const npm = process.env.npm_execpath ? [process.execPath, [process.env.npm_execpath]] : ['npm', []];
    const r = spawnSync(npm[0], [...npm[1], 'run', '--silent', 'build:ts'], { cwd: root, stdio: 'inherit' });
    if (r.status !== 0) fail(tsStep, `npm run build:ts exited with ${r.error ? r.error.message : r.status} (its errors above)`);
    say(`${tsStep}: compiled in ${Math.round((Date.now() - t0) / 1000)} s`);
  }

  const addon = path.join(root, 'build', 'Release', 'cuda_memory.node');
  const nativeTime = newest(path.join(root, 'native'), (p) => /\.(cc|h)$/.test(p) && !p.includes(`${path.sep}test${path.sep}`));
  const addonWhy = staleness(addon, [
    { name: 'native/', time: nativeTime },
    { name: 'binding.gyp', time: fs.statSync(path.join(root, 'binding.gyp')).mtimeMs },
  ]);
  if (addonWhy) {
    // A configured build folder recompiles only what changed; otherwise a build from scratch.
    const configured = fs.existsSync(addon) && fs.existsSync(path.join(root, 'build', 'Makefile'));
    const ok = configured ? await recompile(`${addonStep}: ${addonWhy}`) : await buildFromSource(`${addonStep}: ${addonWhy}`);
    if (!ok) fail(addonStep, 'no addon could be built (the reason above)');
  }
  if (!tsWhy && !addonWhy) say(`dist/ and ${rel(addon)} are up to date; nothing to build`);
}

main();

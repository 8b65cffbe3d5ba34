#!/usr/bin/env node
// `npm install`: use the prebuilt binary when it loads here, and compile nothing. Otherwise build
// from source: against a CUDA toolkit if one is found (scripts/find-cuda.js), else without CUDA;
// if the CUDA build fails, the build without CUDA is tried before giving up.
//
// CUDA_MEMORY_BUILD_FROM_SOURCE=1, or `npm install --build-from-source`, skips the prebuilt binary.
'use strict';
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

const root = path.join(__dirname, '..');
const truthy = (v) => v !== undefined && v !== '' && v !== '0' && v !== 'false';
const say = (msg) => console.log(`cuda-memory: ${msg}`);

// Loads the prebuilt binary in a child process (a binary that does not fit, say for an older
// glibc, fails there, not here) and returns its status, or the reason it did not load.
function tryPrebuilt() {
  const probe = `
    const file = require('node-gyp-build').path(${JSON.stringify(root)});
    const st = require(file).status();
    process.stdout.write(JSON.stringify({ file, builtWithCuda: st.builtWithCuda, reason: st.reason }));`;
  // PREBUILDS_ONLY: node-gyp-build looks in prebuilds/ alone, never at an old build/.
  const r = spawnSync(process.execPath, ['-e', probe], { cwd: root, encoding: 'utf8', env: { ...process.env, PREBUILDS_ONLY: '1' } });
  if (r.status !== 0)
    return {
      error:
        (r.stderr || '')
          .trim()
          .split('\n')
          .find((l) => /Error/.test(l)) || `exit ${r.status}`,
    };
  try {
    return JSON.parse(r.stdout);
  } catch {
    return { error: `unexpected output: ${r.stdout.slice(0, 200)}` };
  }
}

function nodeGyp(extraEnv) {
  // npm hands scripts its own node-gyp; a plain `node scripts/install.js` finds the one on PATH.
  const bundled = process.env.npm_config_node_gyp;
  const [cmd, args] = bundled ? [process.execPath, [bundled, 'rebuild']] : ['node-gyp', ['rebuild']];
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit', env: { ...process.env, ...extraEnv } });
  return r.status === 0;
}

function main() {
  const forced = truthy(process.env.CUDA_MEMORY_BUILD_FROM_SOURCE) || truthy(process.env.npm_config_build_from_source);
  if (!forced && fs.existsSync(path.join(root, 'prebuilds'))) {
    const p = tryPrebuilt();
    if (p.file && p.builtWithCuda) {
      say(`using the prebuilt binary ${path.relative(root, p.file)} (nothing compiled; status now: ${p.reason || 'CUDA available'})`);
      return 0;
    }
    say(`the prebuilt binary does not fit this machine (${p.error || 'built without CUDA'}); building from source`);
  } else if (forced) {
    say('building from source (CUDA_MEMORY_BUILD_FROM_SOURCE / --build-from-source)');
  }
  if (nodeGyp({})) return 0;
  if (!truthy(process.env.CUDA_MEMORY_NO_CUDA)) {
    say('the source build failed; trying the build without CUDA (every GPU call will report NOT_BUILT_WITH_CUDA)');
    if (nodeGyp({ CUDA_MEMORY_NO_CUDA: '1' })) return 0;
  }
  // Installing still succeeds, so an application that only sometimes uses a GPU installs;
  // require('cuda-memory') then loads, and status() reports ADDON_NOT_LOADED with the reason.
  console.warn('cuda-memory: no binary could be built or loaded; status() will report ADDON_NOT_LOADED. See the build errors above.');
  return 0;
}

process.exit(main());

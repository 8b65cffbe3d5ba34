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
// npm runs install scripts with their output hidden unless --foreground-scripts; a line that
// says why a long compile is happening also goes to the terminal itself, where there is one.
const say = (msg) => {
  const line = `cuda-memory: ${msg}\n`;
  process.stdout.write(line);
  if (process.stdout.isTTY) return;
  try {
    fs.appendFileSync('/dev/tty', line);
  } catch {
    // no terminal (CI, a service): the line is in npm's log with --foreground-scripts
  }
};

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

// Compiles with node-gyp, saying first why and about how long, and after, how long it took. Its
// own output is shown only when it fails (or with CUDA_MEMORY_VERBOSE_BUILD=1).
function nodeGyp(extraEnv, why) {
  const cuda = !truthy(extraEnv.CUDA_MEMORY_NO_CUDA) && !truthy(process.env.CUDA_MEMORY_NO_CUDA);
  const cudaHome = cuda ? spawnSync(process.execPath, [path.join(__dirname, 'find-cuda.js')], { encoding: 'utf8' }).stdout.trim() : '';
  const cores = require('os').availableParallelism?.() ?? require('os').cpus().length;
  // 48 s on 2 cores of the development machine (2026-11-23); the compile uses every core.
  const seconds = Math.max(20, Math.round(100 / Math.min(cores, 8) / 10) * 10);
  say(
    `${why}: compiling the addon from source ${cudaHome ? `with the CUDA toolkit in ${cudaHome}` : 'without CUDA (no toolkit found)'}; ` +
      `this takes about ${seconds} s on ${cores} core${cores === 1 ? '' : 's'}`,
  );
  // npm hands scripts its own node-gyp; a plain `node scripts/install.js` uses the project's, or
  // the one on PATH.
  let gyp = process.env.npm_config_node_gyp;
  if (!gyp)
    try {
      gyp = require.resolve('node-gyp/bin/node-gyp.js', { paths: [root] });
    } catch {
      gyp = undefined;
    }
  const [cmd, args] = gyp ? [process.execPath, [gyp, 'rebuild']] : ['node-gyp', ['rebuild']];
  const verbose = truthy(process.env.CUDA_MEMORY_VERBOSE_BUILD);
  const t0 = Date.now();
  const r = spawnSync(cmd, args, {
    cwd: root,
    stdio: verbose ? 'inherit' : 'pipe',
    encoding: 'utf8',
    env: { ...process.env, ...extraEnv },
    maxBuffer: 64 * 2 ** 20,
  });
  const took = Math.round((Date.now() - t0) / 1000);
  if (r.status === 0) {
    say(`compiled in ${took} s`);
    return true;
  }
  if (r.error) process.stderr.write(`${cmd}: ${r.error.message}\n`);
  else if (!verbose) process.stderr.write(`${r.stdout || ''}${r.stderr || ''}`.split('\n').slice(-40).join('\n') + '\n');
  say(`the compile failed after ${took} s (its last lines above)`);
  return false;
}

function main() {
  const forced = truthy(process.env.CUDA_MEMORY_BUILD_FROM_SOURCE) || truthy(process.env.npm_config_build_from_source);
  if (!forced && fs.existsSync(path.join(root, 'prebuilds'))) {
    const p = tryPrebuilt();
    if (p.file && p.builtWithCuda) {
      say(`using the prebuilt binary ${path.relative(root, p.file)} (nothing compiled; status now: ${p.reason || 'CUDA available'})`);
      return 0;
    }
    say(`the prebuilt binary does not load here: ${p.error || 'it was built without CUDA'}`);
  }
  const why = forced
    ? 'CUDA_MEMORY_BUILD_FROM_SOURCE / --build-from-source'
    : fs.existsSync(path.join(root, 'prebuilds'))
      ? 'the prebuilt binary does not load here'
      : 'no prebuilt binary in this checkout (npm pack makes it)';
  if (nodeGyp({}, why)) return 0;
  if (!truthy(process.env.CUDA_MEMORY_NO_CUDA)) {
    if (
      nodeGyp(
        { CUDA_MEMORY_NO_CUDA: '1' },
        'the CUDA build failed; trying the build without CUDA (GPU calls will report NOT_BUILT_WITH_CUDA)',
      )
    )
      return 0;
  }
  // Installing still succeeds, so an application that only sometimes uses a GPU installs;
  // require('cuda-memory') then loads, and status() reports ADDON_NOT_LOADED with the reason.
  console.warn('cuda-memory: no binary could be built or loaded; status() will report ADDON_NOT_LOADED. See the build errors above.');
  return 0;
}

process.exit(main());

#!/usr/bin/env node
// `npx cuda-memory build` (or `node scripts/build-addon.js`): makes the addon load here. Uses the
// prebuilt binary when it loads and compiles nothing; otherwise builds from source, against a
// CUDA toolkit if one is found (scripts/find-cuda.js), else without CUDA; if the CUDA build fails,
// the build without CUDA is tried before giving up. It prints what it does as it goes: each
// source file as it compiles, and the time taken.
//
// A failed build never displaces a binary that works: build/ is set aside while node-gyp rebuilds
// and put back if the build fails, and the variant without CUDA is built only where no binary with
// CUDA loads. The last line says which binary the package loads afterwards.
//
// The package has no install script (npm 11 blocks those of dependencies by default, and the
// prebuilt binary needs none): the loader finds prebuilds/ itself, and this is the one command
// for the machines it does not serve. CUDA_MEMORY_BUILD_FROM_SOURCE=1 or --from-source skips
// the prebuilt binary.
'use strict';
const fs = require('fs');
const path = require('path');
const { spawn, spawnSync } = require('child_process');
const { findCuda } = require('./find-cuda');

const root = path.join(__dirname, '..');
const truthy = (v) => v !== undefined && v !== '' && v !== '0' && v !== 'false';
const say = (msg) => process.stdout.write(`cuda-memory: ${msg}\n`);
const rel = (p) => (path.isAbsolute(p) && !path.relative(root, p).startsWith('..') ? path.relative(root, p) : p);

// Runs `code` in a child process (a binary that does not fit, say for an older glibc, fails
// there, not here) and returns the JSON it prints, or { error } with the line that says why not.
function probe(code, env = process.env) {
  const r = spawnSync(process.execPath, ['-e', code], { cwd: root, encoding: 'utf8', env });
  if (r.status === 0)
    try {
      return JSON.parse(r.stdout);
    } catch {
      return { error: `unexpected output: ${r.stdout.slice(0, 200)}` };
    }
  const why = (r.stderr || '')
    .trim()
    .split('\n')
    .find((l) => /Error/.test(l));
  return { error: why || `exit ${r.status}` };
}

// Which binary the package loads now and what it reports, as a program's require('cuda-memory')
// sees it: { kind, file, builtWithCuda, reason, message }, or { error }. Without dist/ (a clone
// whose TypeScript is not compiled yet) the loader cannot be asked: null.
function loadedNow() {
  if (!fs.existsSync(path.join(root, 'dist', 'index.js'))) return null;
  return probe(`
    const s = require(${JSON.stringify(root)}).status();
    process.stdout.write(JSON.stringify({ kind: s.binary.kind, file: s.binary.path, builtWithCuda: s.builtWithCuda, reason: s.reason, message: s.message }));`);
}

// What loadedNow() found, in words.
function describeLoaded(l) {
  if (!l) return 'which binary the package loads is not known yet (dist/ is not compiled)';
  if (l.error) return `the package does not load: ${l.error}`;
  if (!l.file) return `the package loads no binary (ADDON_NOT_LOADED): ${l.message}`;
  return l.builtWithCuda
    ? `the package loads ${rel(l.file)}, built with CUDA (status: ${l.reason || 'CUDA available'})`
    : `the package loads ${rel(l.file)}, built without CUDA (status: NOT_BUILT_WITH_CUDA; GPU calls throw CudaUnavailableError)`;
}

// The prebuilt binary's status, or the reason it does not load. PREBUILDS_ONLY: node-gyp-build
// looks in prebuilds/ alone, never at an old build/.
function tryPrebuilt() {
  return probe(
    `const file = require('node-gyp-build').path(${JSON.stringify(root)});
    const st = require(file).status();
    process.stdout.write(JSON.stringify({ file, builtWithCuda: st.builtWithCuda, reason: st.reason }));`,
    { ...process.env, PREBUILDS_ONLY: '1' },
  );
}

// Compiles with node-gyp, saying first why and about how long, and after, how long it took. Its
// own output is shown only when it fails (or with CUDA_MEMORY_VERBOSE_BUILD=1). `rebuild`
// configures afresh (with CUDA where a toolkit is found); `build` recompiles what changed since
// the last one, in the variant it configured.
async function nodeGyp(extraEnv, why, command = 'rebuild') {
  const cuda = !truthy(extraEnv.CUDA_MEMORY_NO_CUDA) && !truthy(process.env.CUDA_MEMORY_NO_CUDA);
  const cudaHome = cuda ? spawnSync(process.execPath, [path.join(__dirname, 'find-cuda.js')], { encoding: 'utf8' }).stdout.trim() : '';
  const cores = require('os').availableParallelism?.() ?? require('os').cpus().length;
  // 48 s on 2 cores of the development machine (2026-11-23); the compile uses every core.
  const seconds = Math.max(20, Math.round(100 / Math.min(cores, 8) / 10) * 10);
  const variant = cudaHome
    ? `with the CUDA toolkit in ${cudaHome}`
    : cuda
      ? 'without CUDA (no toolkit in CUDA_PATH, CUDA_HOME, /usr/local/cuda or beside nvcc on the PATH)'
      : 'without CUDA (CUDA_MEMORY_NO_CUDA)';
  say(
    command === 'rebuild'
      ? `${why}: compiling the addon from source ${variant}; this takes about ${seconds} s on ${cores} core${cores === 1 ? '' : 's'}`
      : `${why}: recompiling the sources that changed (node-gyp build, in the variant configured before)`,
  );
  const gyp = findNodeGyp();
  const headers = localNodeHeaders();
  const gypArgs = [command, ...(headers ? [`--nodedir=${headers}`] : [])];
  const [cmd, args] = gyp ? [process.execPath, [gyp, ...gypArgs]] : ['node-gyp', gypArgs];
  const verbose = truthy(process.env.CUDA_MEMORY_VERBOSE_BUILD);
  const t0 = Date.now();
  const r = await runWithProgress(cmd, args, { ...process.env, ...extraEnv }, verbose);
  const took = Math.round((Date.now() - t0) / 1000);
  if (r.status === 0) {
    say(`compiled in ${took} s`);
    return true;
  }
  if (r.error) process.stderr.write(`${cmd}: ${r.error.message}\n`);
  else if (!verbose) process.stderr.write(r.output.split('\n').slice(-40).join('\n') + '\n');
  say(`the compile failed after ${took} s (its last lines above)`);
  return false;
}

// The sources binding.gyp compiles, for the progress count.
function sourceCount() {
  try {
    return (fs.readFileSync(path.join(root, 'binding.gyp'), 'utf8').match(/\.cc['"]/g) || []).length;
  } catch {
    return 0;
  }
}

// The node-gyp process running now, if any (an interrupted build ends it).
let building = null;

// Runs node-gyp, printing "[i/n] file" as make starts each source (its whole output with
// verbose, and its last lines when it fails). Resolves to the exit status.
function runWithProgress(cmd, args, env, verbose) {
  const total = sourceCount();
  return new Promise((resolve) => {
    const c = spawn(cmd, args, { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
    building = c;
    let n = 0;
    let output = '';
    const onData = (d) => {
      const text = d.toString();
      output = (output + text).slice(-64 * 1024);
      if (verbose) process.stdout.write(text);
      else
        for (const m of text.matchAll(/CXX\(target\) \S*?obj\.target\/\w+\/(\S+)\.o/g))
          say(`[${++n}${total ? `/${total}` : ''}] ${m[1]}.cc`);
    };
    c.stdout.on('data', onData);
    c.stderr.on('data', onData);
    c.on('error', (error) => resolve({ status: 127, error, output }));
    c.on('close', (status) => {
      building = null;
      resolve({ status: status ?? 1, output });
    });
  });
}

// node-gyp: npm's own (npm hands scripts its path; npx does not, so it is also looked for beside
// npm), the project's, or the one on PATH.
function findNodeGyp() {
  const tries = [
    process.env.npm_config_node_gyp,
    path.join(path.dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'),
  ];
  for (const t of tries) if (t && fs.existsSync(t)) return t;
  try {
    return require.resolve('node-gyp/bin/node-gyp.js', { paths: [root] });
  } catch {
    return undefined;
  }
}

async function main() {
  const forced =
    truthy(process.env.CUDA_MEMORY_BUILD_FROM_SOURCE) ||
    truthy(process.env.npm_config_build_from_source) ||
    process.argv.includes('--from-source');
  const hasPrebuilds = fs.existsSync(path.join(root, 'prebuilds'));
  if (!forced) {
    const now = loadedNow();
    if (now && now.builtWithCuda) {
      say(`nothing to build: ${describeLoaded(now)}`);
      return 0;
    }
    if (hasPrebuilds) {
      const p = tryPrebuilt();
      if (!now && p.file && p.builtWithCuda) {
        say(`using the prebuilt binary ${rel(p.file)} (nothing compiled; status now: ${p.reason || 'CUDA available'})`);
        return 0;
      }
      say(
        `the prebuilt binary does not load here: ${p.error || (p.builtWithCuda ? `it loads, but ${describeLoaded(now)}` : 'it was built without CUDA')}`,
      );
    }
  }
  const why = forced
    ? 'a source build was asked for'
    : hasPrebuilds
      ? 'the prebuilt binary does not load here'
      : 'no prebuilt binary in this checkout (npm pack makes it)';
  return (await buildFromSource(why)) ? 0 : 1;
}

// build/ while node-gyp rebuilds (which removes build/ first): moved aside to build-previous/, and
// put back if the build fails, so that a failed build leaves the binary that was there. A run
// interrupted earlier may have left build-previous/ behind: it is put back first when build/ holds
// no addon, else dropped.
const buildDir = path.join(root, 'build');
const asideDir = path.join(root, 'build-previous');
const addonIn = (dir) => fs.existsSync(path.join(dir, 'Release', 'cuda_memory.node'));
function setAside() {
  if (fs.existsSync(asideDir)) {
    if (!addonIn(buildDir)) {
      fs.rmSync(buildDir, { recursive: true, force: true });
      fs.renameSync(asideDir, buildDir);
    } else fs.rmSync(asideDir, { recursive: true, force: true });
  }
  if (!fs.existsSync(buildDir)) return false;
  fs.renameSync(buildDir, asideDir);
  return true;
}
// The failed build is removed whole (a target that did link, the addon beside a failed
// interposer say, is part of a failed build), and what was there before is put back.
function putBack(aside) {
  fs.rmSync(buildDir, { recursive: true, force: true });
  if (aside) fs.renameSync(asideDir, buildDir);
}
function drop(aside) {
  if (aside) fs.rmSync(asideDir, { recursive: true, force: true });
}

// One node-gyp rebuild with build/ set aside: kept on success, put back on failure, and put back
// too if this process is interrupted meanwhile (then it ends with the signal's status).
async function rebuildKeepingPrevious(extraEnv, why) {
  const aside = setAside();
  const onSignal = (signal) => {
    building?.kill(signal);
    putBack(aside);
    process.exit(128 + require('os').constants.signals[signal]);
  };
  process.once('SIGINT', onSignal).once('SIGTERM', onSignal);
  try {
    const ok = await nodeGyp(extraEnv, why);
    if (ok) drop(aside);
    else putBack(aside);
    return ok;
  } finally {
    process.removeListener('SIGINT', onSignal).removeListener('SIGTERM', onSignal);
  }
}

// Compiles build/Release/cuda_memory.node: with CUDA where a toolkit is found, else without. When
// the CUDA build fails, a binary with CUDA that loads (the one build/ held, or the prebuilt
// binary) stays in use; only where none does is the variant without CUDA built. Says first what
// is missing to compile at all, once, instead of node-gyp's error; says last what the package loads.
async function buildFromSource(why) {
  const missing = missingTools();
  if (missing.length) {
    console.warn(
      `cuda-memory: ${why}, but the addon cannot be compiled here: ${missing.join(', ')} not found. ` +
        'Install them (Debian/Ubuntu: apt-get install -y g++ make python3; Fedora/RHEL: dnf install -y gcc-c++ make python3) and run this again.',
    );
    return false;
  }
  const withCuda = !truthy(process.env.CUDA_MEMORY_NO_CUDA) && findCuda() !== '';
  if (await rebuildKeepingPrevious({}, why)) {
    const now = loadedNow();
    say(`built ${withCuda ? 'with' : 'without'} CUDA; ${describeLoaded(now)}`);
    return true;
  }
  if (withCuda) {
    const now = loadedNow();
    if (now && now.builtWithCuda) {
      say(`the CUDA build failed (its last lines above) and nothing was replaced: ${describeLoaded(now)}`);
      return false;
    }
    const fallback =
      'the CUDA build failed (its last lines above) and no binary with CUDA loads here; building the variant without CUDA instead';
    if (await rebuildKeepingPrevious({ CUDA_MEMORY_NO_CUDA: '1' }, fallback)) {
      say(`built the variant without CUDA because the CUDA build failed; ${describeLoaded(loadedNow())}`);
      return true;
    }
  }
  console.warn(`cuda-memory: no binary could be built (the build errors above); ${describeLoaded(loadedNow())}`);
  return false;
}

// What node-gyp needs to compile and cannot find: python3, make and a C++ compiler ($CXX if set).
function missingTools() {
  const onPath = (cmd) => !!cmd && spawnSync('sh', ['-c', 'command -v "$0"', cmd], { stdio: 'ignore' }).status === 0;
  const python = process.env.npm_config_python || process.env.PYTHON || 'python3';
  const cxx = process.env.CXX ? process.env.CXX.split(' ')[0] : ['g++', 'c++', 'clang++'].find(onPath) || 'g++';
  return [
    [python, 'python3'],
    ['make', 'make'],
    [cxx, `a C++ compiler (${cxx})`],
  ]
    .filter(([cmd]) => !onPath(cmd))
    .map(([, name]) => name);
}

// The running Node's own headers, so that node-gyp downloads nothing: npm's nodedir setting, else
// the installation the node binary belongs to; undefined where it has none.
function localNodeHeaders() {
  const configured = process.env.npm_config_nodedir;
  if (configured) return configured;
  const prefix = path.dirname(path.dirname(process.execPath));
  return fs.existsSync(path.join(prefix, 'include', 'node', 'node_api.h')) ? prefix : undefined;
}

module.exports = { buildFromSource, recompile: (why) => nodeGyp({}, why, 'build'), localNodeHeaders, describeLoaded, loadedNow };
if (require.main === module) main().then((code) => process.exit(code));

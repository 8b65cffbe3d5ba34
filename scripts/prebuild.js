#!/usr/bin/env node
// Builds the prebuilt binary that the package ships: prebuilds/linux-x64/cuda-memory.napi.glibc.node,
// in the layout node-gyp-build loads (platform-arch folder, Node-API and libc tags in the name).
// One Node-API binary serves every supported Node version. It links the CUDA runtime and the C++
// runtime statically, so it needs only glibc and, at run time, the NVIDIA driver.
//
//   node scripts/prebuild.js          build it (run by `npm pack` through prepack)
//   node scripts/prebuild.js --clean  remove prebuilds/ (run after packing)
//   node scripts/prebuild.js --glibc FILE   print the newest glibc symbol version FILE needs
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const { findCuda } = require('./find-cuda');
const { localNodeHeaders } = require('./build-addon');

const root = path.join(__dirname, '..');
const outDir = path.join(root, 'prebuilds', `${process.platform}-${process.arch}`);
const outFile = path.join(outDir, 'cuda-memory.napi.glibc.node');
// The interposer (native/allocator/preload), shipped beside the addon: `cuda-memory run` preloads it.
const preloadFile = path.join(outDir, 'cuda_memory_preload.so');

// The newest GLIBC_x.y symbol version a binary needs: the oldest glibc it runs on.
function glibcFloor(file) {
  const text = execFileSync('objdump', ['-T', file], { encoding: 'utf8' });
  const versions = [...text.matchAll(/GLIBC_(\d+)\.(\d+)(?:\.(\d+))?/g)].map((m) => m.slice(1).map((x) => Number(x || 0)));
  versions.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]);
  const v = versions.pop();
  return v ? v.filter((x, i) => i < 2 || x).join('.') : 'none';
}

// The running Node's own headers (nothing is downloaded).
function nodeHeaders() {
  const dir = localNodeHeaders();
  if (dir) return dir;
  throw new Error(`prebuild: no Node headers under ${path.dirname(path.dirname(process.execPath))}/include/node; set npm_config_nodedir`);
}

function build() {
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    console.error(`prebuild: only linux-x64 binaries are prebuilt; nothing built on ${process.platform}-${process.arch}`);
    return;
  }
  if (!findCuda())
    throw new Error(
      'prebuild: no CUDA toolkit found (CUDA_PATH, CUDA_HOME, /usr/local/cuda, nvcc); the prebuilt binary must link the CUDA runtime',
    );
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-memory-prebuild-'));
  try {
    for (const p of ['binding.gyp', 'native', 'scripts', 'node_modules', 'package.json'])
      fs.symlinkSync(path.join(root, p), path.join(work, p));
    const nodeGyp = require.resolve('node-gyp/bin/node-gyp.js', { paths: [root] });
    const args = [nodeGyp, 'rebuild', '--release'];
    args.push(`--nodedir=${nodeHeaders()}`);
    execFileSync(process.execPath, args, {
      cwd: work,
      stdio: ['ignore', 'ignore', 'inherit'],
      // NODE_PRESERVE_SYMLINKS: node-addon-api's headers through the link in `work`, so that gyp
      // writes their path relative to it (a real path with a space would split the include flag).
      env: { ...process.env, CUDA_MEMORY_STATIC_CXX: '1', CUDA_MEMORY_NO_CUDA: '', NODE_PRESERVE_SYMLINKS: '1' },
    });
    fs.mkdirSync(outDir, { recursive: true });
    fs.copyFileSync(path.join(work, 'build', 'Release', 'cuda_memory.node'), outFile);
    fs.copyFileSync(path.join(work, 'build', 'Release', 'cuda_memory_preload.so'), preloadFile);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  execFileSync('strip', ['--strip-unneeded', outFile, preloadFile]);
  const st = JSON.parse(
    execFileSync(
      process.execPath,
      ['-e', 'const b = require(process.argv[1]); process.stdout.write(JSON.stringify(b.status()))', outFile],
      {
        encoding: 'utf8',
      },
    ),
  );
  if (!st.builtWithCuda) throw new Error('prebuild: the binary was built without CUDA');
  const needed = execFileSync('objdump', ['-p', outFile], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => /NEEDED/.test(l))
    .map((l) => l.trim().split(/\s+/)[1]);
  const kib = Math.round(fs.statSync(outFile).size / 1024);
  console.error(
    `prebuild: ${path.relative(root, preloadFile)} (${Math.round(fs.statSync(preloadFile).size / 1024)} KiB, needs glibc >= ${glibcFloor(preloadFile)})`,
  );
  console.error(
    `prebuild: ${path.relative(root, outFile)} (${kib} KiB, CUDA runtime ${st.runtimeVersion}, needs glibc >= ${glibcFloor(outFile)}; links ${needed.join(', ')})`,
  );
}

const arg = process.argv[2];
if (arg === '--clean') fs.rmSync(path.join(root, 'prebuilds'), { recursive: true, force: true });
else if (arg === '--glibc') console.log(glibcFloor(process.argv[3]));
else build();

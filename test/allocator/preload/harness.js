'use strict';
// The harness of the interposer's tests (test/allocator/preload*.test.js): the stand-in CUDA
// driver, runtime and NVML (fake_driver.c, fake_runtime.c, fake_nvml.c) and the test programs
// built with gcc into a folder of the test file's own, a shared-memory folder of its own, and
// programs driven line by line on stdin (program.c, nvml.c), each a child process with a time
// limit on each answer, so that a hang fails a test. useHarness() registers the build and the
// cleanup with the test file's hooks.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync, spawn } = require('child_process');
const { cm, root } = require('../../helpers');
// LD_PRELOAD cannot carry a path with a space (a clone in "with space/"): such a path goes in as a
// link, as cuda-memory run puts it.
const { preloadablePath } = require(path.join(root, 'dist', 'allocator', 'member'));

const MiB = 2 ** 20;
const preload = path.join(root, 'build', 'Release', 'cuda_memory_preload.so');
const src = __dirname;
const DEV0 = 'GPU-11111111-1111-1111-1111-111111111111'; // the stand-in's device 0

const base = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
const dir = fs.mkdtempSync(path.join(base, 'cuda-memory-preload-test-'));
const files = path.join(dir, `cuda-memory-${process.geteuid()}`);
const bin = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-memory-preload-bin-'));
process.env.CUDA_MEMORY_SHM_DIR = dir;
const children = new Set();
function cleanUp() {
  for (const c of children) c.kill('SIGKILL');
  fs.rmSync(dir, { recursive: true, force: true });
  fs.rmSync(bin, { recursive: true, force: true });
}

// The stand-ins and the programs, built once per test file with the system's C compiler.
function build() {
  if (!fs.existsSync(preload)) throw new Error(`${preload} is not built: run npx node-gyp rebuild`);
  const cc = (args) => execFileSync('gcc', ['-O1', '-Wall', ...args], { cwd: src, stdio: ['ignore', 'ignore', 'inherit'] });
  // -Bsymbolic: the driver's own references to its functions (its cuGetProcAddress table) bind inside
  // it, as in the real driver, so that only the interposer's substitution can hand out its wrappers.
  cc(['-shared', '-fPIC', 'fake_driver.c', '-o', `${bin}/libcuda.so.1`, '-Wl,-soname,libcuda.so.1', '-Wl,-Bsymbolic']);
  cc(['-shared', '-fPIC', 'fake_nvml.c', '-o', `${bin}/libnvidia-ml.so.1`, '-Wl,-soname,libnvidia-ml.so.1']);
  cc(['nvml.c', '-o', `${bin}/nvml`, '-ldl']);
  cc(['-DLINKED', 'nvml.c', '-o', `${bin}/nvml-linked`, `-L${bin}`, '-l:libnvidia-ml.so.1']);
  cc(['-shared', '-fPIC', 'fake_runtime.c', '-o', `${bin}/libcudart.so.13`, '-Wl,-soname,libcudart.so.13', '-ldl', '-lpthread']);
  cc(['program.c', '-o', `${bin}/dynamic`, `-L${bin}`, '-l:libcudart.so.13', '-lpthread', '-ldl']);
  cc(['program.c', 'fake_runtime.c', '-o', `${bin}/static`, '-ldl', '-lpthread']);
  cc(['-DDIRECT_DRIVER', 'program.c', 'fake_runtime.c', '-o', `${bin}/driver`, `-L${bin}`, '-l:libcuda.so.1', '-lpthread', '-ldl']);
  // The program as a module, found only through the loader's RUNPATH, with the runtime compiled in
  // or linked with the driver.
  fs.mkdirSync(path.join(bin, 'deep'));
  const lib = ['-shared', '-fPIC', '-Dmain=program_main', 'program.c', 'fake_runtime.c'];
  cc([...lib, '-o', `${bin}/deep/libprogram.so`, '-ldl', '-lpthread']);
  cc([...lib, '-DDIRECT_DRIVER', '-o', `${bin}/deep/libprogram-driver.so`, `-L${bin}`, '-l:libcuda.so.1', '-ldl', '-lpthread']);
  cc(['deepbind.c', '-o', `${bin}/deepbind`, '-ldl', '-Wl,--enable-new-dtags,-rpath,$ORIGIN/deep']);
  cc(['holdlock.c', '-o', `${bin}/holdlock`]);
  cc(['-shared', '-fPIC', 'wrap_used.c', '-o', `${bin}/wrap_used.so`, '-ldl']);
}

/** A program under the interposer: send(line) resolves with its one-line answer. `kind` is a
 * program of bin/, or [program, ...arguments] (a program of bin/, or an absolute path). */
function start(kind, env = {}, preloads = [preload]) {
  const [file, ...args] = Array.isArray(kind) ? kind : [kind];
  const child = spawn(path.isAbsolute(file) ? file : path.join(bin, file), args, {
    env: { ...process.env, LD_LIBRARY_PATH: bin, LD_PRELOAD: preloads.map(preloadablePath).join(':'), ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.add(child);
  let out = '';
  let err = '';
  const waiting = [];
  child.stdout.on('data', (d) => {
    out += d;
    let i;
    while ((i = out.indexOf('\n')) >= 0) {
      const line = out.slice(0, i);
      out = out.slice(i + 1);
      const w = waiting.shift();
      if (w) w.resolve(line);
    }
  });
  child.stderr.on('data', (d) => (err += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  exited.then(() => {
    children.delete(child);
    for (const w of waiting.splice(0)) w.reject(new Error(`${kind} exited; stderr: ${err}`));
  });
  return {
    pid: child.pid,
    exited,
    stderr: () => err,
    send(line, ms = 20000) {
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`no answer to "${line}" within ${ms} ms; stderr: ${err}`)), ms);
        waiting.push({
          resolve: (v) => (clearTimeout(t), resolve(v)),
          reject: (e) => (clearTimeout(t), reject(e)),
        });
        child.stdin.write(line + '\n');
      });
    },
    async exit() {
      child.stdin.end('exit\n');
      return exited;
    },
    kill: () => child.kill('SIGKILL'),
  };
}

// A program's stderr once it matches `re` (it comes on its own pipe, after or before stdout's answer).
async function stderrOf(p, re) {
  for (let i = 0; i < 200 && !re.test(p.stderr()); i++) await new Promise((r) => setTimeout(r, 10));
  return p.stderr();
}

// Overwrites a ledger's budget in its header, so that the header's checksum fails; returns the path.
function damage(file) {
  const fd = fs.openSync(file, 'r+');
  fs.writeSync(fd, Buffer.alloc(8, 0xff), 0, 8, 24);
  fs.closeSync(fd);
  return file;
}

// The stand-in's pools grow in 2 MiB pages (an H200's in chunks of 32 MiB, the interposer's default).
const member = (name) => ({ CUDA_MEMORY_GROUP: name, CUDA_MEMORY_GROUP_DEVICE: DEV0, CUDA_MEMORY_POOL_CHUNK: String(2 * MiB) });
const budget = (name, bytes) => ({ ...member(name), CUDA_MEMORY_GROUP_BUDGET: String(bytes) });

function group(name) {
  return cm.listGroups().groups.find((g) => g.name === name) || null;
}
// A member's published bytes in use reach the ledger within milliseconds (its publishing thread):
// waits up to 2 s for `expected`, then asserts it.
async function expectInUse(name, pid, expected) {
  let m;
  for (let i = 0; i < 200; i++) {
    m = group(name)?.members.find((x) => x.pid === pid);
    if (m && m.bytesInUse === expected) break;
    await new Promise((r) => setTimeout(r, 10));
  }
  expect(m?.bytesInUse).toBe(expected);
}

/** Registers the harness with the calling test file: builds before its tests, cleans up after. */
function useHarness() {
  beforeAll(build, 120000);
  afterAll(cleanUp);
}

module.exports = {
  preloadablePath,
  MiB,
  DEV0,
  preload,
  dir,
  files,
  bin,
  children,
  useHarness,
  start,
  stderrOf,
  damage,
  member,
  budget,
  group,
  expectInUse,
};

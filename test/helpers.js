'use strict';
// Shared test helpers. GPU tests go through describeGpu: without a usable device they are
// skipped with the reason printed; with REQUIRE_GPU=1 the missing device is a failure instead.
const fs = require('fs');
const os = require('os');
const path = require('path');

// The package under test: this checkout, or an installed copy (CUDA_MEMORY_PACKAGE=/app/node_modules/
// cuda-memory), so that the suites can check a tarball installed the way users install it.
const root = process.env.CUDA_MEMORY_PACKAGE ? path.resolve(process.env.CUDA_MEMORY_PACKAGE) : path.join(__dirname, '..');
const cm = require(root);

const st = cm.status();
const requireGpu = process.env.REQUIRE_GPU === '1';
const gpu = st.available;

function describeGpu(name, fn) {
  if (gpu) return describe(`[GPU] ${name}`, fn);
  if (requireGpu) {
    return describe(`[GPU] ${name}`, () => {
      test('needs a GPU (REQUIRE_GPU=1)', () => {
        throw new Error(`REQUIRE_GPU=1 but CUDA is not available: ${st.reason}: ${st.message}`);
      });
    });
  }
  // A visible reason, in the test name itself.
  return describe.skip(`[GPU] ${name} — skipped: no GPU (${st.reason}: ${st.message})`, fn);
}

const gpuCount = gpu ? st.deviceCount : 0;

// Tests of two or more GPUs: skipped with the count of devices here, failing under REQUIRE_GPUS=2.
function describeTwoGpus(name, fn) {
  if (gpuCount >= 2) return describe(`[2 GPUs] ${name}`, fn);
  if (process.env.REQUIRE_GPUS === '2')
    return describe(`[2 GPUs] ${name}`, () => test('needs two GPUs (REQUIRE_GPUS=2)', () => expect(gpuCount).toBeGreaterThanOrEqual(2)));
  return describe.skip(`[2 GPUs] ${name} — skipped: ${gpuCount} device${gpuCount === 1 ? '' : 's'} here`, fn);
}

// Deterministic pseudo-random bytes (xorshift32), different for each seed.
/** An allocator on a simulated 80 GiB device (the H100's size); `device` overrides its fields. */
function simAllocator(opts = {}, device = {}) {
  return cm.createAllocator({ ...opts, simulate: { totalBytes: 80 * 2 ** 30, ...device } });
}

function randomBytes(n, seed = 1) {
  const out = new Uint8Array(n);
  let x = seed >>> 0 || 0x9e3779b9;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = x & 0xff;
  }
  return out;
}

function rng(seed = 12345) {
  let x = seed >>> 0;
  return (n) => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return n === undefined ? x / 4294967296 : x % n;
  };
}

// A new temporary folder, removed with everything in it when the test file ends (a test file that
// leaves anything in the temporary folder fails the run: test/reporters/tmpdir.js).
const tempDirs = [];
if (typeof afterAll === 'function') afterAll(() => tempDirs.splice(0).forEach((d) => fs.rmSync(d, { recursive: true, force: true })));
function tempDir(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

// Byte-for-byte equality of two views.
function same(a, b) {
  return Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0;
}

// Runs a shell script in a private mount namespace (unshare -m, root only), where a test may
// unmount /proc or mount a small or read-only tmpfs without touching the machine's mounts.
function inPrivateMounts(script, options = {}) {
  return require('child_process').execFileSync('unshare', ['-m', '--propagation', 'private', 'sh', '-c', script], options);
}

// Whether `probe` succeeds there: the tests that need it skip, saying so, where it does not.
function privateMountsWork(probe) {
  try {
    inPrivateMounts(probe, { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

// structuredClone and postMessage (through `port`) of each [value, what] throw ERR_NOT_CLONEABLE
// naming `what` ("a DeviceBuffer").
function expectNotCloneable(port, cases) {
  for (const [value, what] of cases) {
    const refused = expect.objectContaining({
      name: 'CudaMemoryError',
      code: 'ERR_NOT_CLONEABLE',
      message: expect.stringMatching(new RegExp(`^${what} cannot be cloned or sent to another thread \\(structuredClone, postMessage\\)`)),
    });
    expect(() => structuredClone(value)).toThrow(refused);
    expect(() => port.postMessage(value)).toThrow(refused);
  }
}

// What fn() throws as "CODE: message", or 'returned' when it throws nothing.
function thrown(fn) {
  try {
    fn();
  } catch (e) {
    return `${e.code}: ${e.message}`;
  }
  return 'returned';
}

module.exports = {
  cm,
  root,
  st,
  gpu,
  gpuCount,
  requireGpu,
  describeGpu,
  describeTwoGpus,
  simAllocator,
  randomBytes,
  rng,
  same,
  inPrivateMounts,
  privateMountsWork,
  tempDir,
  expectNotCloneable,
  thrown,
};

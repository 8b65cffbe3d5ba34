'use strict';
// Shared test helpers. GPU tests go through describeGpu: without a usable device they are
// skipped with the reason printed; with REQUIRE_GPU=1 the missing device is a failure instead.
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

// Byte-for-byte equality of two views.
function same(a, b) {
  return Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0;
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

module.exports = { cm, root, st, gpu, requireGpu, describeGpu, simAllocator, randomBytes, rng, same, expectNotCloneable };

'use strict';
// Buffers detached around the library's use of them: by transfer(), another realm's transfer(),
// structuredClone or postMessage with a transfer list, or a web byte stream; with and without
// --frozen-intrinsics. Each case runs in a child process (test/fixtures/detach-during-copy.js),
// so that a crash shows as a signal instead of taking jest down. Every case runs on this Node
// and, where CUDA_MEMORY_NODE22 names another node binary (docs/development.md), on that too.
const path = require('path');
const { spawnSync } = require('child_process');
const { describeGpu } = require('../helpers');

const fixture = path.join(__dirname, '..', 'fixtures', 'detach-during-copy.js');
const HOWS = ['transfer', 'realm', 'structuredClone', 'postMessage', 'stream'];

const nodes = [['this node', process.execPath]];
if (process.env.CUDA_MEMORY_NODE22) nodes.push(['CUDA_MEMORY_NODE22', process.env.CUDA_MEMORY_NODE22]);

function major(node) {
  const r = spawnSync(node, ['-p', 'process.versions.node'], { encoding: 'utf8' });
  return Number(r.stdout.split('.')[0]);
}

// Runs every kind with every way in one child (a crash in any shows as its signal) and returns
// the results by "<kind> <how>".
function run(node, flags, kinds, hows = HOWS) {
  const r = spawnSync(node, ['--expose-gc', ...flags, fixture, kinds.join(','), hows.join(',')], {
    encoding: 'utf8',
    timeout: 120000,
  });
  const line = r.stdout.trim().split('\n').pop() || '{}';
  expect({ signal: r.signal, status: r.status }).toEqual({ signal: null, status: 0 });
  return JSON.parse(line);
}

// What every kind gives with every way: { "<kind> <how>": expected(kind, how) }.
function expected(kinds, expect1) {
  const out = {};
  for (const kind of kinds) for (const how of HOWS) out[`${kind} ${how}`] = expect1(kind, how);
  return out;
}

for (const [label, node] of nodes) {
  const m = major(node);
  // transfer() exists from Node 21; before, that way (and another realm's) is skipped.
  const detached = (how) => (m < 21 && (how === 'transfer' || how === 'realm') ? 'unsupported' : 'detached');

  describe(`${label} (Node ${m}): host buffers around copyAsync (no GPU)`, () => {
    for (const flags of [[], ['--frozen-intrinsics']]) {
      const f = flags.join(' ') || 'no flags';
      test(`${f}: after copyAsync settles, every way moves the buffer as if the library had never seen it`, () => {
        const kinds = ['settled-dst', 'settled-src'];
        expect(run(node, flags, kinds)).toEqual(expected(kinds, (k, how) => ({ attempt: detached(how), intact: true })));
      });

      test(`${f}: copyAsync { take: true } detaches the caller's buffer, no way finds its memory, the memory comes back`, () => {
        const kinds = ['take-dst', 'take-src'];
        expect(run(node, flags, kinds)).toEqual(
          expected(kinds, (k, how) => ({ takenAtCall: true, movedMemory: false, intact: true, after: detached(how) })),
        );
      });
    }

    test('nothing built in is replaced: ArrayBuffer.prototype is untouched after copyAsync', () => {
      const r = spawnSync(
        node,
        [
          '-e',
          `const before = Object.getOwnPropertyNames(ArrayBuffer.prototype).map((k) => [k, Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, k)]);
           const cm = require(${JSON.stringify(path.join(__dirname, '..', '..'))});
           cm.copyAsync(new Uint8Array(64), new Uint8Array(64)).then(() => cm.copyAsync(new Uint8Array(64), new Uint8Array(64), { take: true })).then(() => {
             const same = before.every(([k, d]) => { const a = Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, k); return a.value === d.value && a.get === d.get; });
             console.log(JSON.stringify({ same, count: Object.getOwnPropertyNames(ArrayBuffer.prototype).length === before.length }));
           });`,
        ],
        { encoding: 'utf8' },
      );
      expect(r.stderr).toBe('');
      expect(JSON.parse(r.stdout)).toEqual({ same: true, count: true });
    });
  });
}

describe('copyAsync { take: true } (host to host, no GPU)', () => {
  const cm = require('../..');

  test('resolves to new buffers of the same kinds over the same memory; library buffers pass through', async () => {
    const src = Buffer.alloc(4096, 7);
    const dst = new Float32Array(1024);
    const taken = await cm.copyAsync(dst, src, { take: true });
    expect(src.byteLength).toBe(0);
    expect(dst.byteLength).toBe(0);
    expect(Buffer.isBuffer(taken.src)).toBe(true);
    expect(taken.dst).toBeInstanceOf(Float32Array);
    expect(taken.dst.length).toBe(1024);
    expect(new Uint8Array(taken.dst.buffer)[4095]).toBe(7);
    expect(taken.src[0]).toBe(7);
  });

  test('without take the promise resolves to undefined and the buffers stay the caller’s', async () => {
    const src = new Uint8Array(64).fill(1);
    const dst = new Uint8Array(64);
    await expect(cm.copyAsync(dst, src)).resolves.toBeUndefined();
    expect(dst[63]).toBe(1);
  });

  test('a view over part of an ArrayBuffer (a pooled small Buffer) is refused, and nothing is detached', async () => {
    const pooled = Buffer.from('abc');
    await expect(cm.copyAsync(new Uint8Array(3), pooled, { take: true })).rejects.toMatchObject({
      code: 'ERR_INVALID_ARG_VALUE',
      message: expect.stringContaining('Expected src to cover its whole ArrayBuffer'),
    });
    expect(pooled.toString()).toBe('abc');
  });

  test('take must be a boolean', async () => {
    await expect(cm.copyAsync(new Uint8Array(3), new Uint8Array(3), { take: 1 })).rejects.toMatchObject({ code: 'ERR_INVALID_ARG_TYPE' });
  });
});

describeGpu('buffers detached around GPU work', () => {
  const m = major(process.execPath);
  const detached = (how) => (m < 21 && (how === 'transfer' || how === 'realm') ? 'unsupported' : 'detached');

  test('copyAsync { take: true } through the GPU (h2d, d2h, staged both ways): no way reaches the memory while it runs; data intact', () => {
    const kinds = ['take-h2d', 'take-d2h', 'take-staged-h2d', 'take-staged-d2h'];
    expect(run(process.execPath, [], kinds)).toEqual(
      expected(kinds, (k, how) => ({ takenAtCall: true, movedMemory: false, intact: true, after: detached(how) })),
    );
  });

  test('registerHost: once freed, the buffer moves every way as before', () => {
    expect(run(process.execPath, [], ['registered'])).toEqual(
      expected(['registered'], (k, how) => ({ attempt: detached(how), intact: true })),
    );
  });

  test("a PinnedBuffer's bytes moved away: free() leaves the memory to the ArrayBuffer that holds it", () => {
    // Node marks memory made by an addon untransferable: transfer lists copy it (Node 20) or
    // refuse it (later); transfer() and byte streams move it.
    const attemptOf = (how) =>
      how === 'transfer' || how === 'realm' || how === 'stream' ? detached(how) : m < 21 ? 'copied' : 'refused DataCloneError';
    expect(run(process.execPath, [], ['pinned-bytes'])).toEqual(
      expected(['pinned-bytes'], (k, how) => ({
        attempt: attemptOf(how),
        freed: true,
        movedIntact: attemptOf(how) === 'detached' || attemptOf(how) === 'copied' ? true : null,
        deviceIntact: true,
      })),
    );
  });
});

'use strict';
// The routes to device memory beyond cudaMalloc's, each charged to the group for as long as the
// memory lives (native/allocator/preload/: vmm.cc, pools.cc, arrays.cc, graphs.cc, contexts.cc,
// loader.cc), against the stand-in driver (test/allocator/preload/fake_driver.c), which behaves as
// an H200 with driver 580 was seen to. Each through the three ways a program reaches the driver.
const { cm } = require('../helpers');
const { MiB, useHarness, start, stderrOf, budget, group, expectInUse } = require('./preload/harness');

useHarness();

const kinds = ['dynamic', 'static', 'driver'];
const STREAM = 576 * 1024; // what the interposer charges for a stream (core::kStreamBytes)
const answer = (line) => line.split(' ')[1];
const plus = (address, bytes) => `0x${(BigInt(address) + BigInt(bytes)).toString(16)}`;

describe('CUDA virtual memory: a handle is charged while it is referenced or mapped', () => {
  test.each(kinds)('%s: a pool that maps and releases at once (llama.cpp) stays charged until its last unmap', async (kind) => {
    const name = `vmm-${kind}`;
    const p = start(kind, budget(name, 64 * MiB));
    const h = answer(await p.send(`alloc create ${40 * MiB}`));
    const va = answer(await p.send(`vmm reserve ${40 * MiB}`));
    expect(await p.send(`vmm map ${va} ${40 * MiB} ${h}`)).toBe('ok');
    expect(await p.send(`free create ${h}`)).toBe('ok'); // released while mapped: the memory lives
    expect(await p.send('used 0')).toBe(`ok ${40 * MiB}`);
    await expectInUse(name, p.pid, 40 * MiB);
    // A second 40 MiB handle does not fit beside it (it did when the release gave the charge back).
    expect(await p.send(`alloc create ${40 * MiB}`)).toBe('err 2');
    // Retained through its address and released again: still mapped, still charged.
    const again = answer(await p.send(`vmm retain ${va}`));
    expect(again).toBe(h);
    expect(await p.send(`free create ${again}`)).toBe('ok');
    await expectInUse(name, p.pid, 40 * MiB);
    // The last unmap frees it, and its charge comes back.
    expect(await p.send(`vmm unmap ${va} ${40 * MiB}`)).toBe('ok');
    expect(await p.send('used 0')).toBe('ok 0');
    await expectInUse(name, p.pid, 0);
    expect(await p.send(`alloc create ${40 * MiB}`)).toMatch(/^ok 0x/);
    await p.exit();
  });

  test('a handle mapped twice lives to its last unmap; one unmap over several mappings frees what it ends', async () => {
    const name = 'vmm-mappings';
    const p = start('static', budget(name, 64 * MiB));
    const h1 = answer(await p.send(`alloc create ${8 * MiB}`));
    const h2 = answer(await p.send(`alloc create ${8 * MiB}`));
    const va = answer(await p.send(`vmm reserve ${24 * MiB}`));
    expect(await p.send(`vmm map ${va} ${8 * MiB} ${h1}`)).toBe('ok');
    expect(await p.send(`vmm map ${plus(va, 8 * MiB)} ${8 * MiB} ${h2}`)).toBe('ok');
    expect(await p.send(`vmm map ${plus(va, 16 * MiB)} ${8 * MiB} ${h1}`)).toBe('ok');
    expect(await p.send(`free create ${h1}`)).toBe('ok');
    expect(await p.send(`free create ${h2}`)).toBe('ok');
    await expectInUse(name, p.pid, 16 * MiB);
    // The first 16 MiB: h1's first mapping and h2's only one. h2 goes; h1 is mapped still.
    expect(await p.send(`vmm unmap ${va} ${16 * MiB}`)).toBe('ok');
    await expectInUse(name, p.pid, 8 * MiB);
    expect(await p.send(`vmm unmap ${plus(va, 16 * MiB)} ${8 * MiB}`)).toBe('ok');
    await expectInUse(name, p.pid, 0);
    // A handle released before it was ever mapped goes at once.
    const h3 = answer(await p.send(`alloc create ${8 * MiB}`));
    await expectInUse(name, p.pid, 8 * MiB);
    expect(await p.send(`free create ${h3}`)).toBe('ok');
    await expectInUse(name, p.pid, 0);
    expect(await p.send('used 0')).toBe('ok 0');
    await p.exit();
  });
});

describe('streams: a context is charged for the most streams it has had live at once, until its end', () => {
  test.each(kinds)(
    "%s: a stream on the group's device is charged what one takes; its memory stays charged after its destroy, for the next",
    async (kind) => {
      const name = `stream-${kind}`;
      const p = start(kind, budget(name, 64 * MiB));
      expect(await p.send(`alloc malloc ${10 * MiB}`)).toMatch(/^ok 0x/);
      expect(await p.send('stream')).toMatch(/^ok 0x/);
      await expectInUse(name, p.pid, 10 * MiB + STREAM);
      // Destroyed: the driver keeps its memory (the H200 still held 64 streams' 34 MiB after their
      // destroy), and the next stream takes it.
      expect(await p.send('stream destroy')).toMatch(/^ok/);
      await expectInUse(name, p.pid, 10 * MiB + STREAM);
      expect(await p.send('stream')).toMatch(/^ok 0x/);
      await expectInUse(name, p.pid, 10 * MiB + STREAM);
      // A second live at once is charged; the context's reset gives both back with its allocations.
      expect(await p.send('stream')).toMatch(/^ok 0x/);
      await expectInUse(name, p.pid, 10 * MiB + 2 * STREAM);
      expect(await p.send('reset')).toBe('ok');
      await expectInUse(name, p.pid, 0);
      // Another device's stream is not the group's.
      expect(await p.send('device 1')).toBe('ok');
      expect(await p.send('stream')).toMatch(/^ok 0x/);
      await expectInUse(name, p.pid, 0);
      await p.exit();
    },
  );

  test.each(kinds)(
    "%s: a green context's stream (cuGreenCtxStreamCreate) is charged, and goes with its device's primary context",
    async (kind) => {
      const name = `stream-green-${kind}`;
      const p = start(kind, budget(name, 64 * MiB));
      expect(await p.send(`alloc malloc ${10 * MiB}`)).toMatch(/^ok 0x/); // the primary context is active
      expect(await p.send('stream green')).toMatch(/^ok 0x/);
      await expectInUse(name, p.pid, 10 * MiB + STREAM);
      expect(await p.send('stream green')).toMatch(/^ok 0x/);
      await expectInUse(name, p.pid, 10 * MiB + 2 * STREAM);
      expect(await p.send('reset')).toBe('ok');
      await expectInUse(name, p.pid, 0);
      await p.exit();
    },
  );

  test('a stream the budget cannot afford is not created: CUDA_ERROR_OUT_OF_MEMORY, nothing charged', async () => {
    const name = 'stream-full';
    const p = start('static', budget(name, 64 * MiB));
    expect(await p.send(`alloc malloc ${63 * MiB + 1}`)).toMatch(/^ok 0x/); // 64 MiB in pages
    await expectInUse(name, p.pid, 64 * MiB);
    expect(await p.send('stream')).toBe('err 2');
    await expectInUse(name, p.pid, 64 * MiB);
    await p.exit();
  });
});

describe("stream-ordered pools: the pool's reserve is charged, on the pool's device", () => {
  test.each(kinds)(
    "%s: a pool whose release threshold is raised (RMM's async resource) keeps its peak charged until trimmed",
    async (kind) => {
      const name = `pool-threshold-${kind}`;
      const p = start(kind, budget(name, 64 * MiB));
      const pool = answer(await p.send('pool create device 0'));
      expect(await p.send(`pool threshold ${pool} 18446744073709551615`)).toBe('ok');
      expect(await p.send(`pool use ${pool}`)).toBe('ok');
      const a = answer(await p.send(`alloc pool ${40 * MiB}`));
      expect(await p.send(`free async ${a}`)).toBe('ok');
      expect(await p.send('sync')).toBe('ok');
      expect(await p.send(`pool reserved ${pool}`)).toBe(`ok ${40 * MiB}`);
      await expectInUse(name, p.pid, 40 * MiB); // freed, synchronised, still reserved: still charged
      // Taken from the reserve again: once the driver has answered, nothing more is charged.
      const b = answer(await p.send(`alloc pool ${16 * MiB}`));
      await expectInUse(name, p.pid, 40 * MiB);
      // 30 more might grow the pool to 70 (what it holds free may be in pieces): the pool is
      // trimmed to its 16 live first, then grows by 30.
      const c = answer(await p.send(`alloc pool ${30 * MiB}`));
      expect(await p.send(`pool reserved ${pool}`)).toBe(`ok ${46 * MiB}`);
      await expectInUse(name, p.pid, 46 * MiB);
      // All of the reserve is live: a trim frees nothing, and a plain allocation past it is refused.
      expect(await p.send(`alloc malloc ${30 * MiB}`)).toBe('err 2');
      expect(await p.send(`free async ${b}`)).toBe('ok');
      expect(await p.send(`free async ${c}`)).toBe('ok');
      expect(await p.send(`pool trim ${pool} 0`)).toBe('ok');
      await expectInUse(name, p.pid, 0);
      expect(await p.send(`alloc malloc ${30 * MiB}`)).toMatch(/^ok 0x/);
      await p.exit();
    },
  );

  test('with the default threshold, a freed block is charged until a synchronisation trims the pool', async () => {
    const name = 'pool-default';
    const p = start('dynamic', budget(name, 64 * MiB));
    const a = answer(await p.send(`alloc async ${10 * MiB}`));
    expect(await p.send(`free async ${a}`)).toBe('ok');
    expect(await p.send('used 0')).toBe(`ok ${10 * MiB}`);
    await expectInUse(name, p.pid, 10 * MiB);
    expect(await p.send('sync ctx')).toBe('ok');
    expect(await p.send('used 0')).toBe('ok 0');
    await expectInUse(name, p.pid, 0);
    await p.exit();
  });

  test('a small allocation is charged the chunk the pool reserves for it; one whose chunk the budget cannot afford is refused and leaves nothing', async () => {
    const chunk = { FAKE_CUDA_POOL_CHUNK: String(32 * MiB) }; // an H200 reserved 32 MiB for 4 KiB
    const fits = start('static', { ...budget('pool-chunk', 64 * MiB), ...chunk });
    expect(await fits.send('alloc async 4096')).toMatch(/^ok 0x/);
    expect(await fits.send('used 0')).toBe(`ok ${32 * MiB}`);
    await expectInUse('pool-chunk', fits.pid, 32 * MiB);
    await fits.exit();
    const small = start('static', { ...budget('pool-chunk-small', 16 * MiB), ...chunk });
    expect(await small.send('alloc async 4096')).toBe('err 2');
    expect(await small.send('used 0')).toBe('ok 0'); // freed, the stream waited for, trimmed
    await expectInUse('pool-chunk-small', small.pid, 0);
    expect(await small.send(`alloc malloc ${10 * MiB}`)).toMatch(/^ok 0x/);
    await small.exit();
  });

  test("charged to the stream's device, not the calling thread's current one", async () => {
    const name = 'pool-stream-device';
    const p = start('dynamic', budget(name, 64 * MiB));
    // A stream of device 0 used while device 1 is current: device 0's pool, the group's.
    expect(await p.send('stream')).toMatch(/^ok 0x/);
    expect(await p.send('device 1')).toBe('ok');
    expect(await p.send(`alloc async ${100 * MiB}`)).toBe('err 2');
    expect(await p.send(`alloc async ${10 * MiB}`)).toMatch(/^ok 0x/);
    await expectInUse(name, p.pid, 10 * MiB + STREAM); // and the stream itself
    // The reverse: a stream of device 1 used while device 0 is current charges nothing.
    expect(await p.send('stream')).toMatch(/^ok 0x/);
    expect(await p.send('device 0')).toBe('ok');
    expect(await p.send(`alloc async ${100 * MiB}`)).toMatch(/^ok 0x/);
    expect(await p.send('used 1')).toBe(`ok ${100 * MiB}`);
    await expectInUse(name, p.pid, 10 * MiB + STREAM);
    await p.exit();
  });

  test("a pool's allocations are charged to the pool's device; a pool in host memory is not device memory", async () => {
    const name = 'pool-location';
    const p = start('driver', budget(name, 64 * MiB));
    const other = answer(await p.send('pool create device 1'));
    const own = answer(await p.send('pool create device 0'));
    const host = answer(await p.send('pool create host'));
    expect(await p.send(`pool use ${other}`)).toBe('ok');
    expect(await p.send(`alloc pool ${100 * MiB}`)).toMatch(/^ok 0x/); // device 1's
    expect(await p.send(`pool use ${host}`)).toBe('ok');
    expect(await p.send(`alloc pool ${100 * MiB}`)).toMatch(/^ok 0x/); // host memory
    expect(await p.send('used 0')).toBe('ok 0');
    expect(await p.send('device 1')).toBe('ok');
    expect(await p.send(`pool use ${own}`)).toBe('ok');
    expect(await p.send(`alloc pool ${100 * MiB}`)).toBe('err 2'); // device 0's, from device 1
    expect(await p.send(`alloc pool ${20 * MiB}`)).toMatch(/^ok 0x/);
    expect(group(name).members.find((m) => m.pid === p.pid)).toBeDefined();
    await expectInUse(name, p.pid, 20 * MiB);
    await p.exit();
  });

  test.each(kinds)(
    "%s: a refusal first trims the process's pools: what they keep unused is given back, then the charge (stream-ordered, plain, a stream, a graph's launch) is tried again",
    async (kind) => {
      const name = `pool-trim-on-refusal-${kind}`;
      const p = start(kind, budget(name, 64 * MiB));
      const keeper = answer(await p.send('pool create device 0'));
      expect(await p.send(`pool threshold ${keeper} 18446744073709551615`)).toBe('ok');
      expect(await p.send(`pool use ${keeper}`)).toBe('ok');
      const keep = async (bytes) => {
        const a = answer(await p.send(`alloc pool ${bytes}`));
        expect(await p.send(`free async ${a}`)).toBe('ok');
        expect(await p.send('sync')).toBe('ok');
      };
      await keep(40 * MiB);
      await expectInUse(name, p.pid, 40 * MiB);
      // 30 MiB more from the default pool does not fit beside the reserve: the keeper is trimmed.
      expect(await p.send(`alloc async ${30 * MiB}`)).toMatch(/^ok 0x/);
      expect(await p.send(`pool reserved ${keeper}`)).toBe('ok 0');
      await expectInUse(name, p.pid, 30 * MiB);
      // The same for a plain allocation, and for a stream.
      await keep(34 * MiB);
      await expectInUse(name, p.pid, 64 * MiB);
      const plainAt = answer(await p.send(`alloc malloc ${30 * MiB}`));
      expect(plainAt).toMatch(/^0x/);
      expect(await p.send(`pool reserved ${keeper}`)).toBe('ok 0');
      await keep(4 * MiB);
      await expectInUse(name, p.pid, 64 * MiB);
      expect(await p.send('stream')).toMatch(/^ok 0x/);
      expect(await p.send(`pool reserved ${keeper}`)).toBe('ok 0');
      await expectInUse(name, p.pid, 60 * MiB + STREAM);
      // And for a graph's first launch: 26 MiB of memory nodes beside the keeper's 2.
      const graph = answer(await p.send(`graph ${26 * MiB}`));
      await keep(2 * MiB);
      expect(await p.send(`graph launch ${graph}`)).toBe('err 2'); // 62 + 26 in use: no trim helps
      expect(await p.send(`free malloc ${plainAt}`)).toBe('ok');
      await keep(32 * MiB);
      await expectInUse(name, p.pid, 62 * MiB + STREAM);
      expect(await p.send(`graph launch ${graph}`)).toBe('ok');
      expect(await p.send(`pool reserved ${keeper}`)).toBe('ok 0');
      await expectInUse(name, p.pid, 56 * MiB + STREAM);
      await p.exit();
    },
  );

  test('a pool whose free reserve is in pieces grows by the whole allocation: charged for that first, it never holds more than the budget', async () => {
    // The device has exactly the budget (a neighbour holds the rest): a pool that outgrew its
    // charge would be refused by the device itself.
    const name = 'pool-pieces';
    const env = { ...budget(name, 64 * MiB), FAKE_CUDA_TOTAL: String(64 * MiB), FAKE_CUDA_POOL_PIECES: '1' };
    const p = start('driver', env);
    const pool = answer(await p.send('pool create device 0'));
    expect(await p.send(`pool threshold ${pool} 18446744073709551615`)).toBe('ok');
    expect(await p.send(`pool use ${pool}`)).toBe('ok');
    const a = answer(await p.send(`alloc pool ${20 * MiB}`));
    expect(await p.send(`free async ${a}`)).toBe('ok');
    expect(await p.send('sync')).toBe('ok');
    expect(await p.send(`alloc pool ${30 * MiB}`)).toMatch(/^ok 0x/); // 20 free in pieces: grows to 50
    expect(await p.send('used 0')).toBe(`ok ${50 * MiB}`);
    await expectInUse(name, p.pid, 50 * MiB);
    // 20 more would grow it to 70: the pool is trimmed first, then grows from 30 to 50, and no
    // refusal is said for it.
    expect(await p.send(`alloc pool ${20 * MiB}`)).toMatch(/^ok 0x/);
    expect(await p.send('used 0')).toBe(`ok ${50 * MiB}`);
    await new Promise((r) => setTimeout(r, 50));
    expect(p.stderr()).not.toMatch(/refused/);
    await expectInUse(name, p.pid, 50 * MiB);
    // 20 more cannot fit beside 50 live: refused by the group, before the device is asked.
    expect(await p.send(`alloc pool ${20 * MiB}`)).toBe('err 2');
    expect(await stderrOf(p, /refused/)).toMatch(/group 'pool-pieces' refused cuMemAllocFromPoolAsync of /);
    expect(await p.send('used 0')).toBe(`ok ${50 * MiB}`);
    await p.exit();
  });
});

describe('CUDA arrays: charged their texels, summed over mipmap levels, until destroyed or their context ends', () => {
  test.each(kinds)('%s: 3D, mipmapped and 2D arrays', async (kind) => {
    const name = `arrays-${kind}`;
    const p = start(kind, budget(name, 512 * MiB));
    expect(await p.send('meminfo')).toMatch(/^ok/); // the runtime up (its context current) first
    const a = answer(await p.send('array 3d 1024 1024 16 0')); // float4: 256 MiB
    await expectInUse(name, p.pid, 256 * MiB);
    const mip = answer(await p.send('array mip 1024 1024 4')); // 21.25 MiB of texels: 22 MiB
    await expectInUse(name, p.pid, 278 * MiB);
    expect(await p.send('used 0')).toBe(`ok ${278 * MiB}`);
    expect(await p.send('array 2d 512 512')).toMatch(/^ok 0x/); // 4 MiB
    await expectInUse(name, p.pid, 282 * MiB);
    // Past the budget: refused before the driver sees it.
    expect(await p.send('array 3d 1024 1024 16 0')).toBe('err 2');
    // A sparse array takes no memory until something is mapped into it: not charged.
    expect(await p.send('array 3d 1024 1024 16 64')).toMatch(/^ok 0x/);
    await expectInUse(name, p.pid, 282 * MiB);
    expect(await p.send(`free array ${a}`)).toBe('ok');
    await expectInUse(name, p.pid, 26 * MiB);
    // The context's end takes the others with it.
    expect(mip).toMatch(/^0x/);
    expect(await p.send('reset')).toBe('ok');
    expect(await p.send('used 0')).toBe('ok 0');
    await expectInUse(name, p.pid, 0);
    await p.exit();
  });
});

describe("graph memory nodes: the device's graph reserve is charged from a graph's first launch to a trim", () => {
  test.each(kinds)('%s: a graph that does not fit is refused before it runs', async (kind) => {
    const name = `graphs-${kind}`;
    const p = start(kind, budget(name, 64 * MiB));
    const one = answer(await p.send(`graph ${40 * MiB}`));
    expect(await p.send(`graph launch ${one}`)).toBe('ok');
    expect(await p.send('graph reserved')).toBe(`ok ${40 * MiB}`);
    await expectInUse(name, p.pid, 40 * MiB);
    expect(await p.send(`graph launch ${one}`)).toBe('ok'); // its memory is reserved already
    await expectInUse(name, p.pid, 40 * MiB);
    // Its memory node inside a child graph: 40 MiB more, which the budget does not have.
    const two = answer(await p.send(`graph ${40 * MiB} child`));
    expect(await p.send(`graph upload ${two}`)).toBe('err 2');
    expect(await p.send('graph reserved')).toBe(`ok ${40 * MiB}`);
    // Destroyed, the first graph's memory stays reserved, and charged, until a trim.
    expect(await p.send(`graph destroy ${one}`)).toBe('ok');
    await expectInUse(name, p.pid, 40 * MiB);
    expect(await p.send('graph trim')).toBe('ok');
    await expectInUse(name, p.pid, 0);
    expect(await p.send(`graph launch ${two}`)).toBe('ok');
    await expectInUse(name, p.pid, 40 * MiB);
    await p.exit();
  });
});

describe('contexts and the oldest entry points', () => {
  test.each(kinds)("%s: a green context's allocations go with its device's primary context", async (kind) => {
    const name = `green-${kind}`;
    const p = start(kind, budget(name, 64 * MiB));
    expect(await p.send('green on')).toBe('ok');
    expect(await p.send(`alloc malloc ${20 * MiB}`)).toMatch(/^ok 0x/);
    expect(await p.send('green off')).toBe('ok');
    await expectInUse(name, p.pid, 20 * MiB);
    expect(await p.send('reset')).toBe('ok');
    expect(await p.send('used 0')).toBe('ok 0');
    await expectInUse(name, p.pid, 0);
    await p.exit();
  });

  test.each(kinds)('%s: the 32-bit v1 cuMemAlloc is charged where a driver serves it', async (kind) => {
    const name = `v1-${kind}`;
    const p = start(kind, { ...budget(name, 64 * MiB), FAKE_CUDA_V1: '1' });
    const a = answer(await p.send(`alloc v1 ${10 * MiB}`));
    await expectInUse(name, p.pid, 10 * MiB);
    expect(await p.send(`alloc v1 ${60 * MiB}`)).toBe('err 2');
    expect(await p.send(`free v1 ${a}`)).toBe('ok');
    await expectInUse(name, p.pid, 0);
    await p.exit();
    // As the H200's driver: CUDA_ERROR_INVALID_CONTEXT, nothing charged.
    const q = start(kind, budget(`${name}-refused`, 64 * MiB));
    expect(await q.send(`alloc v1 ${10 * MiB}`)).toBe('err 201');
    await expectInUse(`${name}-refused`, q.pid, 0);
    await q.exit();
  });
});

describe('modules that would bind past the interposer', () => {
  test.each([
    ['the runtime compiled in', 'libprogram.so'],
    ['linked with the driver', 'libprogram-driver.so'],
  ])('a module loaded with RTLD_DEEPBIND (%s), found through its loader’s RUNPATH, is charged as a plain one is', async (_, lib) => {
    for (const how of ['plain', 'deep']) {
      const name = `module-${how}-${lib.replace(/\W/g, '')}`;
      const p = start(['deepbind', how, lib], budget(name, 64 * MiB));
      expect([how, await p.send(`alloc malloc ${40 * MiB}`)]).toEqual([how, expect.stringMatching(/^ok 0x/)]);
      expect([how, await p.send(`alloc malloc ${40 * MiB}`)]).toEqual([how, 'err 2']);
      await expectInUse(name, p.pid, 40 * MiB);
      expect(await p.exit()).toEqual({ code: 0, signal: null });
      expect(p.stderr()).not.toMatch(/namespace|could not be bound/);
    }
  });

  test('a module loaded into another link-map namespace is said on stderr and recorded beside the ledger while the process lives', async () => {
    const name = 'module-namespace';
    const p = start(['deepbind', 'newlm', 'libcuda.so.1'], budget(name, 64 * MiB));
    expect(await p.send('status')).toBe('ok loaded');
    expect(await stderrOf(p, /namespace/)).toMatch(/loaded into another link-map namespace \(dlmopen\).*not charged/);
    const listed = cm.listGroups().uncharged.find((u) => u.name === name);
    expect(listed.processes).toEqual([
      expect.objectContaining({ pid: p.pid, code: 'ERR_PRELOAD_MODULE', strict: false, unchargedBytes: 0 }),
    ]);
    expect(cm.formatGroups(cm.listGroups())).toMatch(new RegExp(`group ${name} on .*no ledger to read`));
    await p.exit();
    expect(cm.listGroups().uncharged.find((u) => u.name === name)).toBeUndefined();
  });
});

'use strict';
// Copies between two devices' buffers under every strategy (native/transfer/peer_copy.cc). Needs
// two GPUs: with fewer it is skipped with the reason, and fails instead under REQUIRE_GPUS=2.
const path = require('path');
const { execFileSync, spawnSync } = require('child_process');
const { cm, root, gpuCount: count, describeTwoGpus, randomBytes, same } = require('../helpers');

const MiB = 2 ** 20;

describeTwoGpus('copies between two devices', () => {
  test('peerAccess() lists every ordered pair', () => {
    const m = cm.peerAccess();
    expect(m).toHaveLength(count * (count - 1));
    for (const p of m) {
      expect(p.from).not.toBe(p.to);
      expect(typeof p.canAccess).toBe('boolean');
      // Pairs joined by NVLink say its generation and rate; the others have none.
      if (p.linkType === 'nvlink') {
        expect(p.nvlinkRate.gbpsPerLink).toBeGreaterThan(0);
        expect(p.nvlinkRate.generation === null || /^\d\.\d$/.test(p.nvlinkRate.generation)).toBe(true);
        expect(p.nvlinkRate.source).toMatch(/^(reported by NVML|from compute capability|25 GB\/s assumed)/);
      } else expect(p.nvlinkRate).toBeNull();
    }
    if (m.find((p) => p.from === 0 && p.to === 1).canAccess) expect(cm.enablePeerAccess(0, 1)).toBe(true);
    expect(cm.peerAccess().find((p) => p.from === 0 && p.to === 1).enabled).toBe(
      cm.peerAccess().find((p) => p.from === 0 && p.to === 1).canAccess,
    );
  });

  for (const strategy of ['auto', 'peer', 'host', 'driver'])
    test(`copy and copyAsync 0 -> 1 -> 0 with strategy ${strategy}, odd sizes and offsets, byte for byte`, async () => {
      const canPeer = cm.peerAccess().find((p) => p.from === 0 && p.to === 1).canAccess;
      if (strategy === 'peer' && !canPeer) {
        const a = cm.DeviceBuffer.alloc(MiB, { device: 0 });
        const b = cm.DeviceBuffer.alloc(MiB, { device: 1 });
        expect(() => cm.copy(b, a, { strategy })).toThrow(expect.objectContaining({ code: 'cudaErrorPeerAccessUnsupported' }));
        a.free();
        b.free();
        return;
      }
      for (const n of [1, 4096 + 3, 37 * MiB + 123, 80 * MiB]) {
        const data = randomBytes(n, n);
        const a = cm.DeviceBuffer.alloc(n + 64, { device: 0 });
        const b = cm.DeviceBuffer.alloc(n + 64, { device: 1 });
        cm.copy(a, data, { dstOffset: 64 });
        cm.copy(b, a, { strategy, srcOffset: 64, dstOffset: 0, byteLength: n });
        const back = cm.DeviceBuffer.alloc(n, { device: 0 });
        await cm.copyAsync(back, b, { strategy, byteLength: n });
        const host = new Uint8Array(n);
        cm.copy(host, back);
        expect(same(host, data)).toBe(true);
        for (const x of [a, b, back]) x.free();
      }
    });

  // In a child process, so that peer access is first turned on there after the blocks are
  // mapped: the grant must reach mappings made before it and those made after.
  test('peer copies into and out of expandable-segment blocks on both devices, mapped before and after peer access is on', () => {
    const canPeer = [
      [0, 1],
      [1, 0],
    ].every(([from, to]) => cm.peerAccess().find((p) => p.from === from && p.to === to).canAccess);
    const script = `
      const cm = require(${JSON.stringify(root)});
      const n = 37 * 2 ** 20 + 5;
      const data = new Uint8Array(n).map((_, i) => (i * 7 + 3) & 255);
      const on = [0, 1].map((device) => cm.createAllocator({ device, expandableSegments: true, memoryLimit: 2 ** 30 }));
      const round = (tag) => {
        const a = on[0].alloc(n), b = on[1].alloc(n), back = on[0].alloc(n);
        cm.copy(a, data);
        cm.copy(b, a, { strategy: '${canPeer ? 'peer' : 'auto'}' });
        cm.copy(back, b, { strategy: '${canPeer ? 'peer' : 'auto'}' });
        const host = new Uint8Array(n);
        cm.copy(host, back);
        if (!host.every((v, i) => v === data[i])) throw new Error(tag + ': bytes differ');
        return [a, b, back];
      };
      const first = round('mapped before');
      const second = round('mapped after'); // grows both segments: new granules
      for (const x of [...first, ...second]) x.free();
      console.log(JSON.stringify(cm.peerAccess().filter((p) => p.from + p.to === 1).map((p) => p.enabled)));
    `;
    const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout.trim())).toEqual([canPeer, canPeer]);
  });

  test('two copies in opposite directions at once (copyAsync) both arrive', async () => {
    const n = 64 * MiB;
    const x = randomBytes(n, 1);
    const y = randomBytes(n, 2);
    const a = cm.DeviceBuffer.alloc(n, { device: 0 });
    const b = cm.DeviceBuffer.alloc(n, { device: 1 });
    const a2 = cm.DeviceBuffer.alloc(n, { device: 0 });
    const b2 = cm.DeviceBuffer.alloc(n, { device: 1 });
    cm.copy(a, x);
    cm.copy(b, y);
    await Promise.all([cm.copyAsync(b2, a), cm.copyAsync(a2, b)]);
    const h = new Uint8Array(n);
    cm.copy(h, b2);
    expect(same(h, x)).toBe(true);
    cm.copy(h, a2);
    expect(same(h, y)).toBe(true);
    for (const z of [a, b, a2, b2]) z.free();
  });

  test('cuda-memory info prints each GPU with its NUMA node, and the peer matrix', () => {
    const out = execFileSync(process.execPath, [path.join(root, 'dist', 'cli.js'), 'info'], { encoding: 'utf8' });
    expect(out).toMatch(/device 1: /);
    expect(out).toMatch(/NUMA node/);
    expect(out).toMatch(/peer access \(from -> to/);
    expect(out).toMatch(
      / {2}0 -> 1: (yes|no), (NVLink (\d\.\d )?x\d+( through NVSwitch)? \([\d.]+ GB\/s per link each way, .+\)|PCIe|link unknown \(no NVML\)), rank \d+/,
    );
    expect(out).toMatch(/staging placement: /);
    const json = JSON.parse(execFileSync(process.execPath, [path.join(root, 'dist', 'cli.js'), 'info', '--json'], { encoding: 'utf8' }));
    expect(json.peers).toHaveLength(count * (count - 1));
  });
});

describeTwoGpus('a peer copy on a stream', () => {
  test("a peer copyAsync on a stream comes after the stream's work and before what is queued after it", async () => {
    const n = 48 * MiB;
    const data = randomBytes(n, 21);
    const a = cm.DeviceBuffer.alloc(n, { device: 0 });
    const b = cm.DeviceBuffer.alloc(n, { device: 1 });
    const c = cm.DeviceBuffer.alloc(n, { device: 1 });
    const s = new cm.Stream({ device: 1 });
    try {
      cm.copy(a, data);
      for (let round = 0; round < 3; round++) {
        cm.memset(b, 0);
        cm.memset(c, 0);
        const first = cm.copyAsync(b, a, { stream: s }); // queued at once, on the JS thread
        const second = cm.copyAsync(c, b, { stream: s }); // must see the bytes the first brought
        await Promise.all([first, second]);
        const out = new Uint8Array(n);
        cm.copy(out, c);
        expect(same(out, data)).toBe(true);
      }
    } finally {
      s.dispose();
      for (const x of [a, b, c]) x.free();
    }
  });
});

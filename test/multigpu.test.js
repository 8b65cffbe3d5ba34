'use strict';
// Several GPUs on one host: the peer matrix, copies between two devices' buffers under every
// strategy, and `cuda-memory info` on such a host. The GPU part needs two devices: with fewer it
// is skipped with the reason, and fails instead under REQUIRE_GPUS=2.
const path = require('path');
const { execFileSync } = require('child_process');
const { cm, root, gpu, randomBytes, same } = require('./helpers');

const count = gpu ? cm.status().deviceCount : 0;
const MiB = 2 ** 20;

function describeTwoGpus(name, fn) {
  if (count >= 2) return describe(`[2 GPUs] ${name}`, fn);
  if (process.env.REQUIRE_GPUS === '2')
    return describe(`[2 GPUs] ${name}`, () => test('needs two GPUs (REQUIRE_GPUS=2)', () => expect(count).toBeGreaterThanOrEqual(2)));
  return describe.skip(`[2 GPUs] ${name} — skipped: ${count} device${count === 1 ? '' : 's'} here`, fn);
}

describe('multi-GPU API without two GPUs', () => {
  test('the peer strategies are accepted names; others are refused naming all', () => {
    const h = new Uint8Array(16);
    expect(() => cm.copy(h, new Uint8Array(16), { strategy: 'peer' })).not.toThrow();
    expect(() => cm.copy(h, new Uint8Array(16), { strategy: 'host' })).not.toThrow();
    expect(() => cm.copy(h, new Uint8Array(16), { strategy: 'nvlink' })).toThrow(/'auto', 'driver', 'staged', 'register', 'peer', 'host'/);
  });

  test('deviceLocality reads sysfs for a bus id, and says null for what it cannot parse', () => {
    const { deviceLocality } = require(path.join(root, 'dist', 'discovery'));
    expect(deviceLocality('not a bus id')).toBeNull();
    const l = deviceLocality('00000000:00:00.0');
    if (l) expect(typeof l.numaNode).toBe('number');
  });
});

describeTwoGpus('copies between two devices', () => {
  test('peerAccess() lists every ordered pair', () => {
    const m = cm.peerAccess();
    expect(m).toHaveLength(count * (count - 1));
    for (const p of m) {
      expect(p.from).not.toBe(p.to);
      expect(typeof p.canAccess).toBe('boolean');
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
    expect(out).toMatch(/ {2}0 -> 1: (yes|no), rank \d+/);
    const json = JSON.parse(execFileSync(process.execPath, [path.join(root, 'dist', 'cli.js'), 'info', '--json'], { encoding: 'utf8' }));
    expect(json.peers).toHaveLength(count * (count - 1));
  });
});

'use strict';
// What a service's log shows of the library's objects: util.inspect and JSON.stringify give a
// summary (kind, size, device, address, state) and never the handles or private fields.
const util = require('util');
const cm = require('../..');

const PRIVATE = /_h\b|_owner|_watched|_a\b|_b\b|_freed|_closed|_stacks|_noClone|cannotBeCloned/;

describe('inspect and toJSON', () => {
  test('a buffer of a simulated allocator: a summary, live then freed', () => {
    const a = cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true });
    const b = a.alloc(1000);
    const json = JSON.parse(JSON.stringify(b));
    expect(json).toEqual({ kind: 'device', byteLength: 1000, device: 0, address: b.address, simulated: true, state: 'live' });
    const text = util.inspect(b);
    expect(text).toMatch(/^DeviceBuffer \{/);
    expect(text).toContain("state: 'live'");
    expect(text).not.toMatch(PRIVATE);
    b.free();
    expect(b.toJSON()).toMatchObject({ address: null, state: 'freed' });
    expect(util.inspect(a)).not.toMatch(PRIVATE);
    expect(JSON.parse(JSON.stringify(a))).toEqual({
      kind: 'allocator',
      backend: a.backend,
      device: 0,
      simulated: true,
      bytesInUse: 0,
      poolBytes: a.stats().poolBytes,
      limitBytes: a.limitBytes,
      state: 'open',
    });
    a.close();
    expect(a.toJSON()).toMatchObject({ state: 'closed', bytesInUse: null });
  });

  test('the guard against cloning shows in neither, and a block of a force-closed allocator reads as freed', () => {
    const a = cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true });
    const b = a.alloc(1000);
    for (const o of [a, b]) {
      expect(Object.keys(o.toJSON())).not.toContain('_noClone');
      expect(JSON.stringify(o)).not.toMatch(PRIVATE);
      expect(util.inspect(o, { showHidden: true })).not.toMatch(PRIVATE);
    }
    a.close({ force: true });
    expect(b.toJSON()).toMatchObject({ address: null, state: 'freed' });
    expect(util.inspect(b)).toContain("state: 'freed'");
  });

  test('nested in a logged object, the depth is respected', () => {
    const a = cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true });
    expect(util.inspect({ x: { y: a } }, { depth: 1 })).toBe('{ x: { y: [Allocator] } }');
    a.close();
  });

  test('a pinned pool: kind, bytes and state; no limit is null in JSON', () => {
    const p = cm.createPinnedPool();
    expect(JSON.parse(JSON.stringify(p))).toEqual({ kind: 'pinned-pool', bytesInUse: 0, cachedBytes: 0, limitBytes: null, state: 'open' });
    expect(util.inspect(p)).toMatch(/^PinnedPool \{/);
    p.close();
    expect(p.toJSON().state).toBe('closed');
  });
});

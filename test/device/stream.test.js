'use strict';
// lib/device/stream.ts: streams and events.
const { cm, describeGpu } = require('../helpers');

const MiB = 2 ** 20;

describeGpu('streams and events', () => {
  test('streams and events: record, synchronize, query, elapsedTime, dispose', async () => {
    const s = new cm.Stream();
    const a = new cm.Event();
    const b = new cm.Event();
    const d = cm.DeviceBuffer.alloc(256 * MiB);
    const p = cm.PinnedBuffer.alloc(256 * MiB);
    a.record(s);
    await cm.copyAsync(d, p, { stream: s });
    b.record(s);
    b.synchronize();
    expect(b.query()).toBe(true);
    expect(s.query()).toBe(true);
    const ms = cm.Event.elapsedTime(a, b);
    expect(ms).toBeGreaterThan(0);
    expect(() => cm.Event.elapsedTime(new cm.Event({ timing: false }).record(), b)).toThrow(/timing/);
    s.dispose();
    s.dispose();
    expect(() => s.synchronize()).toThrow(/disposed/);
    for (const x of [a, b, d, p]) x[Symbol.dispose]();
  });
});

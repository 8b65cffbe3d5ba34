'use strict';
// lib/device/discovery.ts: status, devices, memGetInfo and where a device sits on the host.
const path = require('path');
const { cm, describeGpu, root } = require('../helpers');

describe('device locality', () => {
  test('deviceLocality reads sysfs for a bus id, and says null for what it cannot parse', () => {
    const { deviceLocality } = require(path.join(root, 'dist', 'device', 'discovery'));
    expect(deviceLocality('not a bus id')).toBeNull();
    const l = deviceLocality('00000000:00:00.0');
    if (l) expect(typeof l.numaNode).toBe('number');
  });
});

describeGpu('discovery', () => {
  test('the binary in use is a CUDA build, and the expected one where CUDA_MEMORY_EXPECT_BINARY says', () => {
    const { binary, builtWithCuda } = cm.status();
    expect(builtWithCuda).toBe(true);
    expect(binary.path.startsWith(root)).toBe(true);
    expect(binary.kind).toBe(process.env.CUDA_MEMORY_EXPECT_BINARY || (binary.path.includes('/prebuilds/') ? 'prebuilt' : 'source'));
    console.log(`binary: ${binary.kind} ${binary.path}`);
  });

  test('devices() and memGetInfo describe the device', () => {
    const [d] = cm.devices();
    expect(d.name.length).toBeGreaterThan(0);
    expect(d.uuid).toMatch(/^GPU-[0-9a-f-]{36}$/);
    expect(d.totalMemory).toBeGreaterThan(2 ** 30);
    expect(d.computeCapability).toMatch(/^\d+\.\d+$/);
    expect(d.pciBusId).toMatch(/^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d$/);
    const m = cm.memGetInfo(0);
    expect(m.total).toBeGreaterThan(m.free);
    expect(m.total).toBeLessThanOrEqual(d.totalMemory);
    expect(() => cm.memGetInfo(cm.status().deviceCount)).toThrow(/device/);
  });
});

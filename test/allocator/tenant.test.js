'use strict';
// The group a process runs in (lib/allocator/tenant.ts), as the library names it beside the device:
// read from the live ledger as the interposer reads it, else the budget the process was started
// with; none for another device, another budget, or no budget at all; a damaged ledger is said.
// Without a GPU on a simulated device's group; on a GPU, memGetInfo(), availableBytes() and
// doctor's platform check inside a group.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { cm, root, describeGpu } = require('../helpers');

const { tenantGroup } = require(path.join(root, 'dist', 'allocator', 'tenant'));
const MiB = 2 ** 20;
const sim = { totalBytes: 80 * 2 ** 30 };

const base = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
const dir = fs.mkdtempSync(path.join(base, 'cuda-memory-tenant-test-'));
process.env.CUDA_MEMORY_SHM_DIR = dir;
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const env = (name, budget, device = 'simulated') => ({
  CUDA_MEMORY_GROUP: name,
  CUDA_MEMORY_GROUP_DEVICE: device,
  CUDA_MEMORY_GROUP_BUDGET: String(budget),
});

describe('the group this process is a tenant of', () => {
  test('before any member has charged: the budget it was started with, nothing charged', () => {
    expect(tenantGroup('simulated', env('t-new', 64 * MiB))).toEqual({
      group: {
        name: 't-new',
        device: 'simulated',
        budgetBytes: 64 * MiB,
        budgetSource: 'limit 64 MiB',
        chargedBytes: 0,
        freeBytes: 64 * MiB,
        live: false,
      },
      warning: null,
    });
  });

  test('a live group: its budget and what its members have charged', () => {
    const a = cm.createAllocator({ simulate: sim, memoryLimit: 16 * MiB, shared: { name: 't-live', memoryLimit: 64 * MiB } });
    const { group, warning } = tenantGroup('simulated', env('t-live', 64 * MiB));
    expect(warning).toBe(null);
    expect(group).toMatchObject({ name: 't-live', budgetBytes: 64 * MiB, chargedBytes: 16 * MiB, freeBytes: 48 * MiB, live: true });
    // Joining the group's budget (0): the same.
    expect(tenantGroup('simulated', env('t-live', 0)).group).toMatchObject({ budgetBytes: 64 * MiB, chargedBytes: 16 * MiB });
    // Started with another budget: the interposer could not join it, so no group applies.
    expect(tenantGroup('simulated', env('t-live', 32 * MiB))).toEqual({ group: null, warning: null });
    a.close();
  });

  test('none: no group named, another device, no budget and no ledger', () => {
    expect(tenantGroup('simulated', {})).toEqual({ group: null, warning: null });
    expect(tenantGroup('simulated', env('t-other', 64 * MiB, 'GPU-11111111-1111-1111-1111-111111111111'))).toEqual({
      group: null,
      warning: null,
    });
    expect(tenantGroup(undefined, env('t-other', 64 * MiB))).toEqual({ group: null, warning: null });
    expect(tenantGroup('simulated', env('t-nobudget', 0))).toEqual({ group: null, warning: null });
  });

  test('a damaged ledger: no group, and the reason', () => {
    const a = cm.createAllocator({ simulate: sim, memoryLimit: 16 * MiB, shared: { name: 't-damaged', memoryLimit: 64 * MiB } });
    const file = cm.groupStats('t-damaged', { simulated: true }).path;
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, Buffer.alloc(8, 0xff), 0, 8, 24); // the budget, under the header's checksum
    fs.closeSync(fd);
    const { group, warning } = tenantGroup('simulated', env('t-damaged', 64 * MiB));
    expect(group).toBe(null);
    expect(warning).toMatch(/^group 't-damaged': .*damaged/);
    try {
      a.close();
    } catch {
      // its ledger is damaged: closing may say so
    }
    fs.rmSync(file, { force: true });
  });
});

describeGpu('the library inside a group names its budget beside the device', () => {
  test('memGetInfo(), availableBytes() and doctor name the group; outside it, the device alone', () => {
    const uuid = cm.devices()[0].uuid;
    const plain = cm.memGetInfo(0);
    expect(plain.group).toBeUndefined();
    const a = cm.createAllocator({ memoryLimit: 64 * MiB, shared: { name: 't-gpu', memoryLimit: 256 * MiB } });
    const saved = { ...process.env };
    Object.assign(process.env, env('t-gpu', 256 * MiB, uuid));
    try {
      const m = cm.memGetInfo(0);
      expect(m.group).toMatchObject({ name: 't-gpu', budgetBytes: 256 * MiB, chargedBytes: 64 * MiB, live: true });
      expect(m.total).toBe(256 * MiB);
      expect(m.free).toBe(Math.min(m.device.free, 192 * MiB));
      expect(m.device.total).toBe(plain.total);
      const av = cm.availableBytes(0);
      expect(av.terms.find((t) => t.name === 'group')).toMatchObject({ bytes: 192 * MiB });
      expect(av.limitedBy).toBe('group');
      const { platformCheck } = require(path.join(root, 'dist', 'bench', 'doctor'));
      const c = platformCheck(0);
      expect(c.detail).toMatch(/held to group 't-gpu' \(CUDA_MEMORY_GROUP\): 192 MiB free of its budget of 256 MiB/);
    } finally {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      a.close();
    }
  });
});

'use strict';
// NVML through the interposer (native/allocator/preload/nvml.cc): nvmlDeviceGetMemoryInfo and _v2
// tell a member's process the group's budget for the group's device, adding up and never
// underflowing; everything else NVML answers passes through. Against a stand-in NVML built here
// (test/allocator/preload/fake_nvml.c), reached the two ways real programs reach it: linked
// (nvml-linked) and opened with dlopen and dlsym as pynvml does (nvml); no GPU.
const fs = require('fs');
const { MiB, DEV0, useHarness, start, damage, member, budget, group } = require('./preload/harness');

useHarness();

const GiB = 2 ** 30; // the stand-in device
const RESERVED = 4 * MiB; // the stand-in driver's own
const V2 = 40 + 2 * 2 ** 24; // nvmlMemory_v2
const DEV1 = 'GPU-22222222-2222-2222-2222-222222222222';

// The answers of the NVML program, as numbers.
async function mem(p, device = 0) {
  const r = await p.send(`mem ${device}`);
  expect(r).toMatch(/^ok \d+ \d+ \d+$/);
  const [total, free, used] = r.split(' ').slice(1).map(Number);
  return { total, free, used };
}
async function mem2(p, device = 0) {
  const r = await p.send(`mem2 ${device}`);
  expect(r).toMatch(/^ok \d+ \d+ \d+ \d+ \d+$/);
  const [version, total, reserved, free, used] = r.split(' ').slice(1).map(Number);
  return { version, total, reserved, free, used };
}
// NVML's own figures for a stand-in device with `used` bytes in use.
const device = (used = 0) => ({ total: GiB, free: GiB - RESERVED - used, used: used + RESERVED });
const device2 = (used = 0) => ({ version: V2, total: GiB, reserved: RESERVED, free: GiB - RESERVED - used, used });

const routes = ['nvml', 'nvml-linked'];

describe('NVML tells a member the budget of its group', () => {
  test.each(routes)('%s: no group: NVML as it is', async (kind) => {
    const p = start(kind, { CUDA_MEMORY_GROUP: '' });
    expect(await mem(p)).toEqual(device());
    expect(await mem2(p)).toEqual(device2());
    expect(await p.exit()).toEqual({ code: 0, signal: null });
    expect(p.stderr()).toBe('');
  });

  test.each(routes)(
    '%s: total the budget, used the group charge, free what it has left; the other device and every other call as NVML answers them',
    async (kind) => {
      const name = `nvml-${kind}`;
      // No ledger yet: the budget the group will start with, nothing used.
      const n = start(kind, budget(name, 64 * MiB));
      expect(await mem(n)).toEqual({ total: 64 * MiB, free: 64 * MiB, used: 0 });
      expect(group(name)).toBe(null); // asking does not join
      // A member charged: NVML's process (not a member) sees the whole charge as used.
      const p = start('static', budget(name, 64 * MiB));
      expect(await p.send(`alloc malloc ${10 * MiB}`)).toMatch(/^ok/);
      const charged = group(name).chargedBytes;
      expect(charged).toBeGreaterThan(10 * MiB); // with the member's grant
      expect(await mem(n)).toEqual({ total: 64 * MiB, free: 64 * MiB - charged, used: charged });
      // _v2: the same, and none of the budget reserved, so that the figures add up.
      expect(await mem2(n)).toEqual({ version: V2, total: 64 * MiB, reserved: 0, free: 64 * MiB - charged, used: charged });
      // Device 1 is not the group's; the calls that are not memory figures pass through.
      expect(await mem(n, 1)).toEqual(device());
      expect(await mem2(n, 1)).toEqual(device2());
      expect(await n.send('name 0')).toBe('ok Stand-in H200 0');
      expect(await n.send('procs 0')).toBe(`ok 1 ${n.pid} ${518 * MiB}`);
      // Given back: the budget is free again.
      await p.exit();
      expect(await mem(n)).toEqual({ total: 64 * MiB, free: 64 * MiB, used: 0 });
      expect(await n.exit()).toEqual({ code: 0, signal: null });
      expect(n.stderr()).toBe('');
    },
  );

  test('a module loaded with RTLD_DEEPBIND, whose dlsym binds past the interposer, is answered the same', async () => {
    const name = 'nvml-deep';
    const p = start(['deepbind', 'deep', 'libprogram.so'], budget(name, 64 * MiB));
    expect(await p.send(`alloc malloc ${10 * MiB}`)).toMatch(/^ok/);
    const [free, total] = (await p.send('meminfo')).split(' ').slice(1).map(Number);
    expect(total).toBe(64 * MiB);
    expect(await p.send('nvml 0')).toBe(`ok ${total} ${free} ${total - free}`);
    await p.exit();
  });

  test('the group on the second device: that device answers the budget, the first as NVML does', async () => {
    const n = start('nvml', { ...budget('nvml-dev1', 64 * MiB), CUDA_MEMORY_GROUP_DEVICE: DEV1 });
    expect(await mem(n, 0)).toEqual(device());
    expect(await mem(n, 1)).toEqual({ total: 64 * MiB, free: 64 * MiB, used: 0 });
    await n.exit();
  });

  test("a member's own NVML figures agree with its cudaMemGetInfo", async () => {
    const name = 'nvml-agree';
    const p = start('static', budget(name, 64 * MiB));
    expect(await p.send(`alloc malloc ${10 * MiB}`)).toMatch(/^ok/);
    const [free, total] = (await p.send('meminfo')).split(' ').slice(1).map(Number);
    expect(total).toBe(64 * MiB);
    expect(free).toBe(54 * MiB); // its own grant is its to use
    expect(await p.send('nvml 0')).toBe(`ok ${total} ${free} ${total - free}`);
    expect(await p.send('nvml 1')).toBe(`ok ${GiB} ${GiB - RESERVED} ${RESERVED}`);
    await p.exit();
  });

  test('the device caps what the budget allows, and NVML figures that do not add up are made to', async () => {
    // A device fuller than the budget leaves (memory taken outside the group): free is the device's.
    const full = start('nvml', { ...budget('nvml-full', 64 * MiB), FAKE_NVML_USED: String(1000 * MiB) });
    expect(await mem(full)).toEqual({ total: 64 * MiB, free: 20 * MiB, used: 44 * MiB });
    expect(await mem2(full)).toEqual({ version: V2, total: 64 * MiB, reserved: 0, free: 20 * MiB, used: 44 * MiB });
    await full.exit();
    // A budget above the device: the device's total.
    const big = start('nvml', budget('nvml-big', 2 * GiB));
    expect(await mem(big)).toEqual({ total: GiB, free: GiB - RESERVED, used: RESERVED });
    await big.exit();
    // A free figure above the total (a driver's bad answer): cut to the total, nothing wraps.
    const odd = start('nvml', { ...budget('nvml-odd', 2 * GiB), FAKE_NVML_FREE: String(3 * GiB) });
    expect(await mem(odd)).toEqual({ total: GiB, free: GiB, used: 0 });
    expect(await mem2(odd)).toEqual({ version: V2, total: GiB, reserved: 0, free: GiB, used: 0 });
    await odd.exit();
  });

  test.each(routes)("%s: NULL figures or handle, and a wrong version: NVML's own errors, in a group and out", async (kind) => {
    for (const env of [{ CUDA_MEMORY_GROUP: '' }, budget(`nvml-null-${kind}`, 64 * MiB)]) {
      const n = start(kind, env);
      expect(await n.send('mem null')).toBe('err 2'); // NVML_ERROR_INVALID_ARGUMENT
      expect(await n.send('mem nohandle')).toBe('err 2');
      expect(await n.send('mem2 null')).toBe('err 2');
      expect(await n.send('mem2 nohandle')).toBe('err 2');
      expect(await n.send('mem2 oldversion')).toBe('err 25'); // NVML_ERROR_ARGUMENT_VERSION_MISMATCH
      expect(await n.send('mem 7')).toBe('err 2'); // no such device: a NULL handle
      expect(await n.exit()).toEqual({ code: 0, signal: null });
    }
  });

  test('no budget and no ledger, or a damaged ledger: NVML as it is', async () => {
    const unset = start('nvml', member('nvml-nobody'));
    expect(await mem(unset)).toEqual(device());
    await unset.exit();
    const name = 'nvml-damaged';
    const holder = start('static', budget(name, 64 * MiB));
    expect(await holder.send(`alloc malloc ${MiB}`)).toMatch(/^ok/);
    const file = damage(group(name).path);
    const late = start('nvml', budget(name, 64 * MiB));
    expect(await mem(late)).toEqual(device());
    expect(await mem2(late)).toEqual(device2());
    await late.exit();
    await holder.exit();
    fs.rmSync(file, { force: true });
  });
});

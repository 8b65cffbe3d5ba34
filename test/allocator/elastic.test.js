'use strict';
// Elastic sharing of a group budget by the library's allocators, on simulated devices with real
// child processes: guaranteed requests and the burst pool, requests that do not fit, budgets
// changed while members run, allocations that wait for room (granted when a holder frees,
// refused on timeout and when every holder waits), and pressure: a member's cache given back when
// another waits within its request or the budget is lowered below the charge.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { fork } = require('child_process');
const { cm, describeGpu, root } = require('../helpers');

const MiB = 2 ** 20;
const sim = { totalBytes: 80 * 2 ** 30 };
const waiter = path.join(__dirname, '..', 'fixtures', 'group-waiter.js');

const base = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
const dir = fs.mkdtempSync(path.join(base, 'cuda-memory-test-'));
process.env.CUDA_MEMORY_SHM_DIR = dir;
const children = new Set();
afterAll(() => {
  for (const c of children) c.kill('SIGKILL');
  fs.rmSync(dir, { recursive: true, force: true });
});

const member = (group, pid) => cm.groupStats(group, { simulated: true }).members.find((m) => m.pid === pid);

// A waiter process (test/fixtures/group-waiter.js) once it holds what it was asked to take.
async function startWaiter(group, waitMs, holdMiB, requestMiB = 0, where = 'simulated') {
  const c = fork(waiter, [root, group, String(waitMs), String(holdMiB), String(requestMiB), where], { env: process.env });
  children.add(c);
  c.on('exit', () => children.delete(c));
  await new Promise((r) => c.once('message', r));
  const next = () => new Promise((r) => c.once('message', r));
  return { c, alloc: (mib) => (c.send({ alloc: mib }), next()) };
}

// Polls until the member `pid` of `group` waits (its waitingBytes set), up to 5 s.
async function untilWaiting(group, pid) {
  for (let i = 0; i < 500; i++) {
    const m = member(group, pid);
    if (m && m.waitingBytes > 0) return m;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`pid ${pid} of ${group} did not wait within 5 s`);
}

// Group `group` of 64 MiB, 40 of them held by this process, and a waiter process with `waitMs`
// that holds nothing yet: an allocation of 40 MiB there waits for this process to free.
async function heldAgainstWaiter(group, waitMs) {
  const holder = cm.createAllocator({
    simulate: sim,
    allowGrowth: true,
    memoryLimit: 40 * MiB,
    shared: { name: group, memoryLimit: 64 * MiB },
  });
  const x = holder.alloc(40 * MiB);
  return { holder, x, w: await startWaiter(group, waitMs, 0) };
}

function refusal(fn) {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error('expected a refusal');
}

describe('guaranteed requests and the burst pool', () => {
  test('a member is never refused below its request while another borrows the rest; the borrower stops at the burst pool', () => {
    const guaranteed = cm.createAllocator({
      simulate: sim,
      allowGrowth: true,
      shared: { name: 'guaranteed', memoryLimit: 64 * MiB, request: 32 * MiB },
    });
    const borrower = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'guaranteed' } });
    const g = cm.groupStats('guaranteed', { simulated: true });
    expect(g.reservedBytes).toBe(32 * MiB);
    expect(g.members.map((m) => [m.requestBytes, m.memberLimitBytes, m.waitingBytes, m.waitingSince])).toEqual([
      [32 * MiB, 0, 0, null],
      [0, 0, 0, null],
    ]);
    // The borrower takes all it can: no more than the burst pool, the budget less the request.
    const borrowed = [];
    let err = null;
    while (!err) {
      try {
        borrowed.push(borrower.alloc(MiB));
      } catch (e) {
        err = e;
      }
    }
    expect(err).toBeInstanceOf(cm.OutOfMemoryError);
    expect([err.groupReason, err.groupWaitedMs]).toEqual(['neverFits', 0]); // it holds all it could ever have
    expect(borrower.stats().poolBytes).toBeLessThanOrEqual(32 * MiB);
    expect(borrowed.length).toBeGreaterThanOrEqual(24);
    // The guaranteed member gets its whole request, 1 MiB at a time, with the borrower still full.
    const mine = [];
    for (let i = 0; i < 32; i++) mine.push(guaranteed.alloc(MiB));
    expect(guaranteed.stats().requestedBytesInUse).toBe(32 * MiB);
    expect(cm.groupStats('guaranteed', { simulated: true }).chargedBytes).toBeLessThanOrEqual(64 * MiB);
    // Past its request it borrows from the burst pool too, which the borrower holds.
    expect(() => guaranteed.alloc(MiB)).toThrow(cm.OutOfMemoryError);
    for (const b of [...borrowed, ...mine]) b.free();
    guaranteed.close();
    borrower.close();
  });

  test('a join whose request does not fit beside the others’ is refused, naming the requests that hold the budget', () => {
    const a = cm.createAllocator({
      simulate: sim,
      allowGrowth: true,
      shared: { name: 'misfit', memoryLimit: 64 * MiB, request: 48 * MiB },
    });
    const e = refusal(() => cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'misfit', request: 32 * MiB } }));
    expect(e).toBeInstanceOf(cm.InterprocessError);
    expect(e.code).toBe('ERR_GROUP_REQUEST_TOO_LARGE');
    expect(e.message).toContain(String(process.pid));
    expect(e.message).toMatch(/48(\.00)? MiB/);
    expect(cm.groupStats('misfit', { simulated: true }).members).toHaveLength(1);
    // One that fits beside it joins.
    const b = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'misfit', request: 16 * MiB } });
    expect(cm.groupStats('misfit', { simulated: true }).reservedBytes).toBe(64 * MiB);
    b.close();
    a.close();
  });

  test('the terms are checked: sizes, request under the member limit, waitMs in 0..86400000', () => {
    const make = (shared) => () =>
      cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'terms', memoryLimit: 64 * MiB, ...shared } });
    expect(make({ request: -1 })).toThrow(/shared\.request/);
    expect(make({ request: '1GiB' })).toThrow(TypeError);
    expect(make({ memberLimit: 100 })).toThrow(/shared\.memberLimit/);
    expect(make({ request: 32 * MiB, memberLimit: 16 * MiB })).toThrow(
      /shared\.request \(32 MiB\) is above shared\.memberLimit \(16 MiB\)/,
    );
    expect(make({ waitMs: 1.5 })).toThrow(/shared\.waitMs/);
    expect(make({ waitMs: 86400001 })).toThrow(/0 to 86400000 for shared\.waitMs/);
    expect(make({ wait: 10 })).toThrow(/Unknown shared option "wait"/);
    const a = make({ request: 8 * MiB, memberLimit: 16 * MiB, waitMs: 86400000 })();
    expect(member('terms', process.pid)).toMatchObject({ requestBytes: 8 * MiB, memberLimitBytes: 16 * MiB });
    a.close();
  });
});

describe('budgets and requests changed while members run', () => {
  test('raising the budget lets a refused allocation through; lowering it below the charge refuses further charges until the charge falls under it', () => {
    const a = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'live', memoryLimit: 32 * MiB } });
    const x = a.alloc(24 * MiB);
    expect(() => a.alloc(16 * MiB)).toThrow(cm.OutOfMemoryError);
    const raised = cm.setGroupBudget('live', 64 * MiB, { simulated: true });
    expect(raised.budgetBytes).toBe(64 * MiB);
    expect(raised.budgetSource).toBe('limit 64 MiB, set while running');
    const y = a.alloc(16 * MiB);
    expect(a.limitBytes).toBe(64 * MiB); // the pool's limit follows the group's budget
    const charged = cm.groupStats('live', { simulated: true }).chargedBytes;
    expect(charged).toBeGreaterThan(16 * MiB);
    // Lowered below the charge: what is held stays, nothing more is charged.
    const lowered = cm.setGroupBudget('live', 16 * MiB, { simulated: true });
    expect([lowered.budgetBytes, lowered.chargedBytes]).toEqual([16 * MiB, charged]);
    expect(cm.groupStats('live', { simulated: true }).budgetBytes).toBe(16 * MiB);
    expect(() => a.alloc(32 * MiB)).toThrow(cm.OutOfMemoryError);
    x.free();
    y.free();
    a.emptyCache();
    a.alloc(8 * MiB).free(); // under the new budget again
    expect(cm.groupStats('live', { simulated: true }).chargedBytes).toBeLessThanOrEqual(16 * MiB);
    a.close();
  });

  test('a request changes the same way, never below what the member holds; the arguments are checked', () => {
    const a = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'request', memoryLimit: 64 * MiB } });
    const x = a.alloc(8 * MiB);
    const g = cm.setGroupRequest('request', process.pid, 16 * MiB, { simulated: true });
    expect(g.reservedBytes).toBe(16 * MiB);
    expect(g.members[0].requestBytes).toBe(16 * MiB);
    expect(refusal(() => cm.setGroupRequest('request', process.pid, MiB, { simulated: true })).code).toBe('ERR_GROUP_REQUEST_BELOW_HELD');
    expect(refusal(() => cm.setGroupRequest('request', process.pid, 128 * MiB, { simulated: true })).code).toBe(
      'ERR_GROUP_REQUEST_TOO_LARGE',
    );
    expect(refusal(() => cm.setGroupRequest('request', 0x7ffffffe, MiB, { simulated: true })).code).toBe('ERR_GROUP_MEMBER_NOT_FOUND');
    expect(refusal(() => cm.setGroupBudget('request', 8 * MiB, { simulated: true })).code).toBe('ERR_GROUP_BUDGET_BELOW_REQUESTS');
    expect(refusal(() => cm.setGroupBudget('nobody', 8 * MiB, { simulated: true })).code).toBe('ERR_GROUP_NOT_FOUND');
    expect(() => cm.setGroupRequest('request', 1.5, MiB, { simulated: true })).toThrow(RangeError);
    expect(() => cm.setGroupRequest('request', '1', MiB, { simulated: true })).toThrow(TypeError);
    expect(() => cm.setGroupBudget('request', 100, { simulated: true })).toThrow(/size/);
    x.free();
    a.close();
  });
});

describe('allocations that wait for room', () => {
  test('a waiting allocation in another process is granted when the holder frees, well under a second after', async () => {
    const { holder, x, w } = await heldAgainstWaiter('wait', 20000);
    const answer = w.alloc(40);
    const m = await untilWaiting('wait', w.c.pid);
    expect(m.waitingBytes).toBe(40 * MiB);
    expect(m.waitingSince).toBeGreaterThan(Date.now() - 5000);
    expect(cm.formatGroups(cm.listGroups())).toMatch(
      new RegExp(`request 0 B, limit the budget, charged 0 B, waiting 40 MiB since \\d+\\.\\ds`),
    );
    x.free();
    const freedAt = Date.now();
    holder.emptyCache();
    const got = await answer;
    expect(got.granted).toBe(true);
    expect(got.at - freedAt).toBeLessThan(500);
    const g = cm.groupStats('wait', { simulated: true });
    expect(g.waits).toBeGreaterThanOrEqual(1);
    expect(g.waitsGranted).toBeGreaterThanOrEqual(1);
    expect(g.waitMsTotal).toBeGreaterThan(0);
    expect(member('wait', w.c.pid).waitingBytes).toBe(0);
    w.c.kill('SIGKILL');
    holder.close();
  }, 30000);

  test('a wait that runs out is refused with the timeout as its reason', async () => {
    const { holder, x, w } = await heldAgainstWaiter('timeout', 300);
    const got = await w.alloc(40);
    expect(got).toMatchObject({ granted: false, name: 'OutOfMemoryError' });
    expect(got.waitedMs).toBeGreaterThanOrEqual(290);
    expect(got.waitedMs).toBeLessThan(3000);
    expect(got.message).toMatch(/waited \d+ ms/);
    expect(got.groupReason).toBe('timeout');
    expect(got.groupWaitedMs).toBeGreaterThanOrEqual(290);
    w.c.kill('SIGKILL');
    x.free();
    holder.close();
  }, 30000);

  test('when every member that holds memory waits, the newest waiter is refused at once, saying so', async () => {
    const holder = cm.createAllocator({
      simulate: sim,
      allowGrowth: true,
      shared: { name: 'deadlock', memoryLimit: 64 * MiB, waitMs: 20000 },
    });
    const w = await startWaiter('deadlock', 20000, 16); // holds a 16 MiB region
    const x = holder.alloc(32 * MiB); // 48 of 64 MiB charged
    const answer = w.alloc(24); // waits: 16 MiB free
    await untilWaiting('deadlock', w.c.pid);
    const t0 = Date.now();
    const e = refusal(() => holder.alloc(24 * MiB));
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(e).toBeInstanceOf(cm.OutOfMemoryError);
    expect(e.message).toContain('every member that holds memory is waiting');
    expect(e.groupReason).toBe('deadlock');
    // The older waiter gets the room the holder gives back.
    x.free();
    holder.emptyCache();
    expect((await answer).granted).toBe(true);
    w.c.kill('SIGKILL');
    holder.close();
  }, 30000);
});

describe('pressure: a member that holds cache gives it back, and is told', () => {
  // A holder in this process with 40 MiB of freed cache still charged (its pool keeps the region),
  // and 8 MiB in use in a region of its own.
  function cachedHolder(group, options = {}) {
    const events = [];
    const holder = cm.createAllocator({
      simulate: sim,
      allowGrowth: true,
      shared: { name: group, memoryLimit: 64 * MiB, onPressure: (e) => events.push(e), ...options },
    });
    const live = holder.alloc(8 * MiB);
    holder.alloc(40 * MiB).free();
    expect(cm.groupStats(group, { simulated: true }).chargedBytes).toBeGreaterThanOrEqual(48 * MiB);
    return { holder, live, events };
  }
  const until = async (what, fn) => {
    for (let i = 0; i < 300; i++) {
      if (fn()) return;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error(`${what} within 3 s`);
  };

  test('a member waiting within its request: the holder that borrows gives its free regions back, and the waiter is granted', async () => {
    const { holder, live, events } = cachedHolder('pressure-request');
    // It joins with a request of 32 MiB (the requests fit); only 16 MiB are free beside the cache.
    const w = await startWaiter('pressure-request', 5000, 0, 32);
    const answer = await w.alloc(32);
    expect(answer).toMatchObject({ granted: true });
    expect(events).toEqual([
      { reason: 'request', bytes: expect.any(Number), pids: [w.c.pid], group: 'pressure-request', releasedBytes: expect.any(Number) },
    ]);
    expect(events[0].bytes).toBeGreaterThanOrEqual(32 * MiB);
    expect(events[0].releasedBytes).toBeGreaterThanOrEqual(40 * MiB);
    expect(holder.stats().poolBytes).toBeLessThan(16 * MiB); // the live 8 MiB region stays
    w.c.kill();
    live.free();
    holder.close();
  });

  test('blocks freed after the pressure began go back at the next look while it lasts', async () => {
    const events = [];
    const holder = cm.createAllocator({
      simulate: sim,
      allowGrowth: true,
      shared: { name: 'pressure-later', memoryLimit: 64 * MiB, onPressure: (e) => events.push(e) },
    });
    const big = holder.alloc(40 * MiB);
    const w = await startWaiter('pressure-later', 5000, 0, 32);
    const answer = w.alloc(32);
    await until('a pressure event', () => events.length > 0);
    expect(events).toEqual([expect.objectContaining({ reason: 'request', pids: [w.c.pid], releasedBytes: 0 })]);
    // Freed into the pool: no counter moves, and the next look gives it back.
    big.free();
    expect(await answer).toMatchObject({ granted: true });
    expect(holder.stats().poolBytes).toBe(0);
    expect(events).toHaveLength(1);
    w.c.kill();
    holder.close();
  });

  test('releaseOnPressure false: told, nothing given back, and the waiter runs out of time', async () => {
    const { holder, live, events } = cachedHolder('pressure-kept', { releaseOnPressure: false });
    const w = await startWaiter('pressure-kept', 600, 0, 32);
    const answer = await w.alloc(32);
    expect(answer).toMatchObject({ granted: false, groupReason: 'timeout' });
    expect(events).toEqual([expect.objectContaining({ reason: 'request', pids: [w.c.pid], releasedBytes: 0 })]);
    expect(holder.stats().poolBytes).toBeGreaterThanOrEqual(48 * MiB);
    w.c.kill();
    live.free();
    holder.close();
  });

  test('a budget lowered below the charge: the holder gives its free regions back, is told once, and the group is under the budget again', async () => {
    const { holder, live, events } = cachedHolder('pressure-budget');
    const charged = cm.groupStats('pressure-budget', { simulated: true }).chargedBytes;
    cm.setGroupBudget('pressure-budget', 32 * MiB, { simulated: true });
    await until('a pressure event', () => events.length > 0);
    expect(events).toEqual([
      { reason: 'budget', bytes: charged - 32 * MiB, pids: [], group: 'pressure-budget', releasedBytes: expect.any(Number) },
    ]);
    expect(events[0].releasedBytes).toBeGreaterThanOrEqual(40 * MiB);
    expect(cm.groupStats('pressure-budget', { simulated: true }).chargedBytes).toBeLessThanOrEqual(32 * MiB);
    // Over: no second event while nothing begins again.
    await new Promise((r) => setTimeout(r, 200));
    expect(events).toHaveLength(1);
    live.free();
    holder.close();
  });

  test('no pressure, no release: a waiter beyond its request waits for what others free', async () => {
    const { holder, live, events } = cachedHolder('pressure-none');
    const w = await startWaiter('pressure-none', 400, 0, 0);
    expect(await w.alloc(32)).toMatchObject({ granted: false, groupReason: 'timeout' });
    expect(events).toEqual([]);
    expect(holder.stats().poolBytes).toBeGreaterThanOrEqual(48 * MiB);
    w.c.kill();
    live.free();
    holder.close();
  });

  test('the options are checked', () => {
    const make = (shared) => () =>
      cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'pressure-options', ...shared } });
    expect(make({ onPressure: 1 })).toThrow(/^Expected a function or undefined for shared.onPressure, but received number$/);
    expect(make({ releaseOnPressure: 'yes' })).toThrow(
      /^Expected a boolean or undefined for shared.releaseOnPressure, but received string$/,
    );
    expect(make({ onPresure: () => {} })).toThrow(/Unknown shared option "onPresure"; expected .*, onPressure or releaseOnPressure$/);
  });
});

describeGpu('pressure on the device: freed cudaMalloc regions go back to the driver', () => {
  test('a member waiting within its request is granted once the holder has freed its cached regions', async () => {
    const events = [];
    const holder = cm.createAllocator({
      device: 0,
      allowGrowth: true,
      shared: { name: 'pressure-device', memoryLimit: 256 * MiB, onPressure: (e) => events.push(e) },
    });
    const live = holder.alloc(8 * MiB);
    holder.alloc(160 * MiB).free();
    const cached = holder.stats();
    expect(cached.poolBytes).toBeGreaterThanOrEqual(168 * MiB);
    // 88 MiB are free beside the cache: a request of 128 MiB waits for the holder's cache.
    const w = await startWaiter('pressure-device', 10000, 0, 128, 'device');
    expect(await w.alloc(128)).toMatchObject({ granted: true });
    expect(events).toEqual([expect.objectContaining({ reason: 'request', pids: [w.c.pid], group: 'pressure-device' })]);
    expect(events[0].releasedBytes).toBeGreaterThanOrEqual(160 * MiB);
    const after = holder.stats();
    expect(after.regions).toBeLessThan(cached.regions);
    expect(after.poolBytes).toBeLessThan(cached.poolBytes - 150 * MiB);
    expect(cm.groupStats('pressure-device').chargedBytes).toBeLessThanOrEqual(256 * MiB);
    w.c.kill();
    live.free();
    holder.close();
  });
});

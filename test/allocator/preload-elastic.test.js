'use strict';
// Elastic sharing in the interposer, against the stand-in CUDA driver: an allocation past the
// budget waits for room (CUDA_MEMORY_GROUP_WAIT_MS) and is granted when another member frees, or
// refused with the API's out-of-memory error when its wait ends or no member could ever free
// enough; a guaranteed request (CUDA_MEMORY_GROUP_REQUEST) holds against a borrower, and a member
// limit (CUDA_MEMORY_GROUP_MEMBER_LIMIT) caps one member. The rules themselves are tested in the
// core (native/core/test/allocator/elastic_test.cc).
const { MiB, useHarness, start, stderrOf, budget, group } = require('./preload/harness');

useHarness();

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

describe('the interposer waits for room, keeps requests and member limits', () => {
  test('a waiting allocation is granted when another member frees; one whose wait ends is refused, saying so', async () => {
    const name = 'elastic-wait';
    const holder = start('dynamic', budget(name, 64 * MiB));
    const a = await holder.send(`alloc malloc ${60 * MiB}`);
    expect(a).toMatch(/^ok 0x/);
    const waiter = start('dynamic', { ...budget(name, 64 * MiB), CUDA_MEMORY_GROUP_WAIT_MS: '20000' });
    let answered = null;
    const pending = waiter.send(`alloc malloc ${30 * MiB}`).then((v) => (answered = v));
    await sleep(300);
    expect(answered).toBe(null); // still waiting: no refusal
    const freed = Date.now();
    expect(await holder.send(`free malloc ${a.split(' ')[1]}`)).toBe('ok');
    expect(await pending).toMatch(/^ok 0x/);
    // Within the waiter's 50 ms relook at the most; a release moves the ledger's change counter.
    expect(Date.now() - freed).toBeLessThan(5000);
    const g = group(name);
    expect(g.members.find((m) => m.pid === waiter.pid).poolBytes).toBeGreaterThanOrEqual(30 * MiB);

    // The holder takes the rest; a second waiter with a short wait is refused after it.
    expect(await holder.send(`alloc malloc ${30 * MiB}`)).toMatch(/^ok/);
    const short = start('dynamic', { ...budget(name, 64 * MiB), CUDA_MEMORY_GROUP_WAIT_MS: '200' });
    expect(await short.send(`alloc malloc ${30 * MiB}`)).toBe('err 2');
    expect(await stderrOf(short, /after waiting/)).toMatch(new RegExp(`group '${name}' refused .*after waiting \\d+ ms for room`));
    // Past what any member could ever free: refused at once, not after the wait.
    const t0 = Date.now();
    expect(await short.send(`alloc malloc ${65 * MiB}`)).toBe('err 2');
    expect(Date.now() - t0).toBeLessThan(150);
    for (const p of [holder, waiter, short]) expect(await p.exit()).toEqual({ code: 0, signal: null });
  });

  // A holder of `held` bytes and a waiter in group `name` (a minute's wait for room). The waiter
  // runs `setup`, whose answer is a "bg" command that waits for room in another of its threads,
  // then `meanwhile`, which answers while the wait goes on (each waited the whole minute when the
  // wait held one of the interposer's locks); the holder's free then grants the wait, whose "join"
  // answers as `joined` matches, and `after` checks what the grant left.
  async function waitWhileOthersGoOn(name, held, { setup, meanwhile, joined, after = async () => {} }) {
    const holder = start('dynamic', budget(name, 64 * MiB));
    const a = await holder.send(`alloc malloc ${held}`);
    expect(a).toMatch(/^ok 0x/);
    const waiter = start('dynamic', { ...budget(name, 64 * MiB), CUDA_MEMORY_GROUP_WAIT_MS: '60000' });
    expect(await waiter.send(await setup(waiter))).toBe('ok');
    await sleep(300);
    await meanwhile(waiter);
    expect(await holder.send(`free malloc ${a.split(' ')[1]}`)).toBe('ok');
    expect(await waiter.send('join')).toMatch(joined);
    await after(waiter);
    for (const p of [holder, waiter]) expect(await p.exit()).toEqual({ code: 0, signal: null });
  }

  test("a stream waiting for room holds up none of the process's other threads: their stream calls go on, and a free elsewhere grants it", async () => {
    // The whole budget in use: a stream's 576 KiB does not fit, and its thread waits. Another
    // thread's stream destroy and a context's end take the streams' lock.
    await waitWhileOthersGoOn('elastic-stream', 64 * MiB, {
      setup: async () => 'bg stream',
      meanwhile: async (waiter) => {
        expect(await waiter.send('stream destroy')).toBe('ok (nil)');
        expect(await waiter.send('ctx create')).toBe('ok');
        expect(await waiter.send('ctx destroy')).toBe('ok');
      },
      joined: /^ok 0x/,
    });
  }, 30000);

  test("a stream-ordered allocation waiting for room holds up none of the process's other threads: their frees into the pool go on", async () => {
    // 62 MiB in use: 32 MiB more waits, in another thread of the waiter, and the waiter's own free
    // into its pool (the pools' lock) answers meanwhile.
    let b;
    await waitWhileOthersGoOn('elastic-pool', 48 * MiB, {
      setup: async (waiter) => {
        b = (await waiter.send(`alloc async ${14 * MiB}`)).split(' ')[1];
        return `bg alloc async ${32 * MiB}`;
      },
      meanwhile: async (waiter) => expect(await waiter.send(`free async ${b}`)).toBe('ok'),
      joined: /^ok 0x/,
    });
  }, 30000);

  test("a graph's launch waiting for room holds up none of the process's other threads: their graph calls go on", async () => {
    // 48 MiB in use: the launch's 32 MiB of memory nodes waits, in another thread of the waiter,
    // and the waiter's own trim of graph memory (the graphs' lock) answers meanwhile.
    await waitWhileOthersGoOn('elastic-graph', 48 * MiB, {
      setup: async (waiter) => `bg launch ${(await waiter.send(`graph ${32 * MiB}`)).split(' ')[1]}`,
      meanwhile: async (waiter) => expect(await waiter.send('graph trim')).toBe('ok'),
      joined: /^ok$/,
      after: async (waiter) => expect(await waiter.send('graph reserved')).toBe(`ok ${32 * MiB}`),
    });
  }, 30000);

  test("a guaranteed request holds against a borrower, which borrows only what no request reserves; a member's own limit caps it", async () => {
    const name = 'elastic-request';
    const owner = start('dynamic', { ...budget(name, 64 * MiB), CUDA_MEMORY_GROUP_REQUEST: String(32 * MiB) });
    const first = await owner.send(`alloc malloc ${MiB}`); // joins, reserving 32 MiB
    expect(first).toMatch(/^ok/);
    const borrower = start('dynamic', budget(name, 64 * MiB));
    // cudaMemGetInfo leaves out what the owner's request reserves: 64 less its 32 MiB.
    expect(await borrower.send('meminfo')).toBe(`ok ${32 * MiB} ${64 * MiB}`);
    expect(await borrower.send(`alloc malloc ${40 * MiB}`)).toBe('err 2');
    expect(await stderrOf(borrower, /could never hold/)).toMatch(/could never hold that much beside the others' requests/);
    expect(await borrower.send(`alloc malloc ${30 * MiB}`)).toMatch(/^ok/);
    // The owner's request is there for it, whatever the borrower holds.
    expect(await owner.send(`alloc malloc ${30 * MiB}`)).toMatch(/^ok/);
    const g = group(name);
    expect(g.chargedBytes).toBeLessThanOrEqual(64 * MiB);
    const capped = start('dynamic', { ...budget(name, 64 * MiB), CUDA_MEMORY_GROUP_MEMBER_LIMIT: String(2 * MiB) });
    // Its limit is its total; its free, the least of that and what the group has left.
    const [, free, total] = (await capped.send('meminfo')).split(' ').map(Number);
    expect(total).toBe(2 * MiB);
    expect(free).toBe(Math.min(2 * MiB, 64 * MiB - 32 * MiB - group(name).members.find((m) => m.pid === borrower.pid).poolBytes));
    expect(await capped.send(`alloc malloc ${3 * MiB}`)).toBe('err 2');
    expect(await stderrOf(capped, /own limit/)).toMatch(/would pass this process's own limit/);
    // A request that does not fit beside the others' cannot join: its allocations go on
    // uncharged (the failed join said once), or are refused under strict.
    const greedy = start('dynamic', {
      ...budget(name, 64 * MiB),
      CUDA_MEMORY_GROUP_REQUEST: String(40 * MiB),
      CUDA_MEMORY_GROUP_STRICT: '1',
    });
    expect(await greedy.send(`alloc malloc ${MiB}`)).toBe('err 2');
    expect(await stderrOf(greedy, /REQUEST_TOO_LARGE/)).toMatch(/ERR_GROUP_REQUEST_TOO_LARGE: .*a request of 40.00 MiB does not fit/);
    for (const p of [owner, borrower, capped, greedy]) expect(await p.exit()).toEqual({ code: 0, signal: null });
  });

  test('a setting that does not parse is said, and the budget is not loosened by it', async () => {
    const p = start('dynamic', { ...budget('elastic-bad', 64 * MiB), CUDA_MEMORY_GROUP_WAIT_MS: 'soon', CUDA_MEMORY_GROUP_STRICT: '1' });
    expect(await p.send(`alloc malloc ${MiB}`)).toBe('err 2');
    expect(await stderrOf(p, /WAIT_MS/)).toMatch(/CUDA_MEMORY_GROUP_WAIT_MS is soon, not an integer from 0 to 86400000 \(ms\)/);
    expect(await p.exit()).toEqual({ code: 0, signal: null });
  });
});

'use strict';
// Where the interposer cannot keep a budget (native/allocator/preload/member.h): each case said on
// stderr, recorded beside the ledger for groupStats(), top and the gauges, and refused instead of
// let through under CUDA_MEMORY_GROUP_STRICT=1; the back-offs; exit() from a signal handler in
// the middle of a charge; several processes recording under one CUDA_MEMORY_TRACE. Against the
// stand-in driver (test/allocator/preload/harness.js).
const fs = require('fs');
const path = require('path');
const { spawn } = require('child_process');
const { cm } = require('../helpers');
const { MiB, DEV0, bin, children, useHarness, start, stderrOf, damage, member, budget, group, expectInUse } = require('./preload/harness');

useHarness();

const uncharged = (name) => {
  const list = cm.listGroups();
  const g = list.groups.find((x) => x.name === name);
  return g ? g.uncharged : (list.uncharged.find((x) => x.name === name)?.processes ?? []);
};

// Holds a ledger's lock as a hung member would, until released.
async function holdLock(file) {
  const holder = spawn(path.join(bin, 'holdlock'), [file], { stdio: ['pipe', 'pipe', 'inherit'] });
  children.add(holder);
  await new Promise((r) => holder.stdout.once('data', r));
  return async () => {
    holder.stdin.end();
    await new Promise((r) => holder.on('exit', r));
  };
}

describe('a budget that cannot be kept: said, recorded beside the ledger, and under strict refused', () => {
  test('no group to join: uncharged and recorded; under CUDA_MEMORY_GROUP_STRICT=1 refused with the API error', async () => {
    const open = start('static', member('strict-none'));
    expect(await open.send(`alloc malloc ${MiB}`)).toMatch(/^ok 0x/);
    expect(await open.send(`alloc malloc ${2 * MiB}`)).toMatch(/^ok 0x/);
    expect(await stderrOf(open, /ERR_GROUP_NOT_FOUND/)).toMatch(/cannot join group 'strict-none'.*not charged to any group/);
    expect(uncharged('strict-none')).toEqual([
      expect.objectContaining({
        pid: open.pid,
        code: 'ERR_GROUP_NOT_FOUND',
        strict: false,
        unchargedBytes: 3 * MiB,
        unchargedAllocations: 2,
      }),
    ]);
    const text = cm.formatGroups(cm.listGroups());
    expect(text).toMatch(new RegExp(`\\s${open.pid}\\s+UNCHARGED since .*ERR_GROUP_NOT_FOUND, 3 MiB in 2 allocations`));
    const strict = start('static', { ...member('strict-none'), CUDA_MEMORY_GROUP_STRICT: '1' });
    expect(await strict.send(`alloc malloc ${MiB}`)).toBe('err 2');
    expect(await strict.send('used 0')).toBe('ok 0'); // the driver never saw it
    expect(await strict.send('meminfo')).toBe(`ok 0 ${2 ** 30}`); // nothing may be allocated
    expect(await stderrOf(strict, /STRICT/)).toMatch(/ERR_GROUP_NOT_FOUND.*under CUDA_MEMORY_GROUP_STRICT=1 they are refused/);
    expect(uncharged('strict-none').map((p) => [p.pid, p.strict])).toEqual(
      expect.arrayContaining([
        [open.pid, false],
        [strict.pid, true],
      ]),
    );
    await open.exit();
    await strict.exit();
    expect(uncharged('strict-none')).toEqual([]); // gone with their processes
  });

  test('a ledger damaged mid-run: the process is recorded under the group, and under strict its next allocations are refused', async () => {
    for (const strict of [false, true]) {
      const name = `strict-damaged-${strict}`;
      const p = start('dynamic', { ...budget(name, 64 * MiB), ...(strict ? { CUDA_MEMORY_GROUP_STRICT: '1' } : {}) });
      const other = start('dynamic', budget(name, 64 * MiB));
      expect(await p.send(`alloc malloc ${MiB}`)).toMatch(/^ok/);
      expect(await other.send(`alloc malloc ${MiB}`)).toMatch(/^ok/);
      const file = group(name).path;
      const saved = fs.readFileSync(file);
      damage(file);
      expect(await p.send(`alloc malloc ${10 * MiB}`)).toEqual(strict ? 'err 2' : expect.stringMatching(/^ok/));
      expect(await stderrOf(p, /CORRUPT/)).toMatch(/ERR_GROUP_LEDGER_CORRUPT.*no longer charged/);
      // The ledger mended (as a test can): the group lists the process that went its own way.
      fs.writeFileSync(file, saved);
      expect(group(name).uncharged).toEqual([
        expect.objectContaining({ pid: p.pid, code: 'ERR_GROUP_LEDGER_CORRUPT', strict, unchargedBytes: 10 * MiB }),
      ]);
      await p.exit();
      await other.exit();
    }
  });

  test('a setting that does not parse, and a lock timeout of 0, are said and fail open (strict: refused)', async () => {
    const bad = start('static', { ...budget('strict-setting', 64 * MiB), CUDA_MEMORY_LOCK_TIMEOUT_MS: '0' });
    expect(await bad.send(`alloc malloc ${MiB}`)).toMatch(/^ok/);
    expect(await stderrOf(bad, /\n/)).toMatch(/CUDA_MEMORY_LOCK_TIMEOUT_MS is 0, not an integer from 1 to 86400000/);
    expect(uncharged('strict-setting')).toEqual([expect.objectContaining({ pid: bad.pid, code: 'ERR_PRELOAD_SETTING' })]);
    await bad.exit();
    for (const chunk of ['0', '32MiB', String(2 ** 30 + 1)]) {
      const p = start('static', { ...budget('chunk-setting', 64 * MiB), CUDA_MEMORY_POOL_CHUNK: chunk });
      expect(await p.send(`alloc async ${MiB}`)).toMatch(/^ok/);
      expect(await stderrOf(p, /\n/)).toContain(`CUDA_MEMORY_POOL_CHUNK is ${chunk}, not a number of bytes from 1 to 1073741824`);
      await p.exit();
    }
    const strict = start('static', { ...member('strict-setting'), CUDA_MEMORY_GROUP_BUDGET: '20GiB', CUDA_MEMORY_GROUP_STRICT: 'yes' });
    expect(await strict.send(`alloc malloc ${MiB}`)).toBe('err 2'); // any value but 0 is strict
    expect(await stderrOf(strict, /\n/)).toMatch(/CUDA_MEMORY_GROUP_BUDGET is 20GiB, not a number of bytes/);
    await strict.exit();
  });

  test('a lock not had in time while joining is a back-off, not detachment for life; the record goes once charged again', async () => {
    const name = 'join-backoff';
    const first = start('static', budget(name, 64 * MiB));
    expect(await first.send(`alloc malloc ${MiB}`)).toMatch(/^ok/);
    const release = await holdLock(group(name).path);
    const late = start('static', { ...budget(name, 64 * MiB), CUDA_MEMORY_LOCK_TIMEOUT_MS: '100' });
    expect(await late.send(`alloc malloc ${MiB}`)).toMatch(/^ok/); // waited 100 ms, went on uncharged
    expect(await stderrOf(late, /TIMEOUT/)).toMatch(/ERR_SHM_LOCK_TIMEOUT.*\(joining\) An allocation of 1.00 MiB went on uncharged/);
    await release();
    expect(uncharged(name)).toEqual([expect.objectContaining({ pid: late.pid, code: 'ERR_SHM_LOCK_TIMEOUT' })]);
    await new Promise((r) => setTimeout(r, 1100)); // the back-off: ten timeouts, at least a second
    // Joined now, and held to the budget.
    expect(await late.send(`alloc malloc ${MiB}`)).toMatch(/^ok/);
    await expectInUse(name, late.pid, MiB);
    expect(await late.send(`alloc malloc ${63 * MiB}`)).toBe('err 2');
    expect(uncharged(name)).toEqual([]);
    await late.exit();
    await first.exit();
  });
});

describe('the host is never harmed', () => {
  test('a signal handler that calls exit() while a charge waits for the ledger lock ends the program', async () => {
    const name = 'exit-in-charge';
    const first = start('static', budget(name, 64 * MiB));
    expect(await first.send(`alloc malloc ${MiB}`)).toMatch(/^ok/);
    const release = await holdLock(group(name).path);
    const p = start('static', { ...budget(name, 64 * MiB), CUDA_MEMORY_LOCK_TIMEOUT_MS: '60000' });
    expect(await p.send('alarm-exit 300')).toBe('ok');
    const t0 = Date.now();
    p.send(`alloc malloc ${MiB}`).catch(() => undefined); // waits for the lock; the signal ends it
    expect(await p.exited).toEqual({ code: 0, signal: null });
    expect(Date.now() - t0).toBeLessThan(20000); // the lock timeout is 60 s: it did not wait for it
    await release();
    await first.exit();
  });
});

describe('several processes under one CUDA_MEMORY_TRACE', () => {
  test("a launcher and its workers never destroy each other's trace: each file left loads", async () => {
    const file = path.join(bin, 'workers.trace.json');
    fs.writeFileSync(`${file}.stale`, 'x');
    const env = { ...budget('trace-workers', 256 * MiB), CUDA_MEMORY_TRACE: file };
    const ps = [start('static', env), start('dynamic', env), start('driver', env)];
    const sizes = [MiB, 2 * MiB, 4 * MiB];
    for (let i = 0; i < ps.length; i++) expect(await ps[i].send(`alloc malloc ${sizes[i]}`)).toMatch(/^ok/);
    // A forked child records in a file of its own too.
    expect(await ps[0].send(`fork ${8 * MiB}`)).toMatch(/^ok child \d+ ok$/);
    expect(await ps[0].send('release')).toBe('ok 0');
    for (const p of ps) await p.exit();
    const written = fs.readdirSync(bin).filter((f) => f.startsWith('workers.trace.json') && !f.endsWith('.stale'));
    expect(written.length).toBe(4);
    const seen = [];
    for (const f of written) {
      const stat = fs.statSync(path.join(bin, f));
      expect([f, stat.mode & 0o777]).toEqual([f, 0o600]);
      const t = cm.loadTrace(path.join(bin, f)); // throws on a file that does not parse
      seen.push(...t.events.filter((e) => e.action === 'alloc').map((e) => e.bytes));
    }
    expect(seen.sort((a, b) => a - b)).toEqual([MiB, 2 * MiB, 4 * MiB, 8 * MiB]);
    // The three processes that did not write the file named (the forked child among them) say
    // where they wrote.
    const said = ps.map((p) => p.stderr().match(/records in \S*workers\.trace\.json\.\d+/g) ?? []).flat();
    expect(said.length).toBe(3);
  });

  test('a link planted at the trace file is never followed; the process writes beside it', async () => {
    const target = path.join(bin, 'victim.txt');
    fs.writeFileSync(target, 'keep me');
    const file = path.join(bin, 'linked.trace.json');
    fs.symlinkSync(target, file);
    const p = start('static', { CUDA_MEMORY_GROUP: '', CUDA_MEMORY_GROUP_DEVICE: DEV0, CUDA_MEMORY_TRACE: file });
    expect(await p.send(`alloc malloc ${MiB}`)).toMatch(/^ok/);
    await p.exit();
    expect(fs.readFileSync(target, 'utf8')).toBe('keep me');
    expect(cm.loadTrace(`${file}.${p.pid}`).events[0]).toMatchObject({ action: 'alloc', bytes: MiB });
  });
});

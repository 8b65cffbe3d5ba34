'use strict';
// `cuda-memory group set` (a live group's budget and a member's request changed while it runs),
// `top`'s lines of elastic sharing, and `cuda-memory run --wait/--request/--member-limit` with
// programs under the interposer against the stand-in CUDA driver (test/allocator/preload/).
const path = require('path');
const { spawnSync } = require('child_process');
const { cm, root } = require('../helpers');
// The stand-in driver and its programs; its shared folder (CUDA_MEMORY_SHM_DIR) is this file's.
const harness = require('../allocator/preload/harness');

harness.useHarness();
const MiB = 2 ** 20;
const cli = path.join(root, 'dist', 'cli.js');
const sim = { totalBytes: 80 * 2 ** 30 };
const standIn = { FAKE_CUDA_TOTAL: String(1024 * MiB) };
const cuda = (args, env = {}) =>
  spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 60000, env: { ...process.env, ...env } });

describe('cuda-memory group set', () => {
  test('--limit changes the budget groupStats shows and prints the group; --request a member’s request', () => {
    const a = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'set', memoryLimit: 64 * MiB } });
    const x = a.alloc(8 * MiB);
    const r = cuda(['group', 'set', 'set', '--simulated', '--limit', '128MiB']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^group set on simulated: budget 128 MiB \(limit 128 MiB, set while running\), charged 8 MiB/);
    expect(cm.groupStats('set', { simulated: true }).budgetBytes).toBe(128 * MiB);
    const q = cuda(['group', 'set', 'set', '--simulated', '--request', `${process.pid}=16MiB`, '--json']);
    expect(q.status).toBe(0);
    expect(JSON.parse(q.stdout)).toMatchObject({
      budgetBytes: 128 * MiB,
      reservedBytes: 16 * MiB,
      members: [{ pid: process.pid, requestBytes: 16 * MiB }],
    });
    // top: the requests' share and the burst pool on the group's line, the member's terms under it.
    const top = cuda(['top']).stdout;
    expect(top).toContain(
      'group set on simulated: budget 128 MiB (limit 128 MiB, set while running), charged 8 MiB (6.3%), free 120 MiB, 1 member; requests reserve 16 MiB, burst pool 112 MiB',
    );
    expect(top).toMatch(new RegExp(`\\n\\s+${process.pid}\\s+8 MiB.*\\n\\s+request 16 MiB, limit the budget, charged 8 MiB\\n`));
    x.free();
    a.close();
  });

  test('errors exit 2 with the library’s message', () => {
    const a = cm.createAllocator({
      simulate: sim,
      allowGrowth: true,
      shared: { name: 'set-bad', memoryLimit: 64 * MiB, request: 32 * MiB },
    });
    const where = { simulated: true };
    // Each refusal of the ledger, with the call of the library that meets it.
    const refusals = [
      [['set-bad', '--limit', '16MiB'], 'ERR_GROUP_BUDGET_BELOW_REQUESTS', () => cm.setGroupBudget('set-bad', 16 * MiB, where)],
      [['nobody', '--limit', '16MiB'], 'ERR_GROUP_NOT_FOUND', () => cm.setGroupBudget('nobody', 16 * MiB, where)],
      [['set-bad', '--request', '1=1MiB'], 'ERR_GROUP_MEMBER_NOT_FOUND', () => cm.setGroupRequest('set-bad', 1, MiB, where)],
    ];
    for (const [args, code, call] of refusals) {
      const e = thrown(call);
      expect(e.code).toBe(code);
      const r = cuda(['group', 'set', ...args, '--simulated']);
      expect({ args, status: r.status, stdout: r.stdout, stderr: r.stderr }).toEqual({
        args,
        status: 2,
        stdout: '',
        stderr: `cuda-memory: group set: ${e.message}\n`,
      });
    }
    const usage = [
      [['set-bad'], /give --limit SIZE, --request PID=SIZE, or both/],
      [['set-bad', '--request', 'x=1MiB'], /--request <pid=size>' argument 'x=1MiB' is invalid\. Expected PID=SIZE/],
      [['set-bad', '--limit', '100'], /Expected an integer from 256 to 2\^53-1 for size but received number 100/],
    ];
    for (const [args, message] of usage) {
      const r = cuda(['group', 'set', ...args, '--simulated']);
      expect({ args, status: r.status, stdout: r.stdout }).toEqual({ args, status: 2, stdout: '' });
      expect(r.stderr).toMatch(message);
    }
    expect(cm.groupStats('set-bad', where).budgetBytes).toBe(64 * MiB);
    a.close();
  });
});

function thrown(fn) {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error('expected an error');
}

// A stand-in program (test/allocator/preload/program.c) under `cuda-memory run --simulate`, the
// interposer preloaded as LD_PRELOAD had it (run keeps it): under CUDA_MEMORY_GROUP_DEVICE
// "simulated" it charges the stand-in's device 0 to the group of simulated devices. send(line)
// resolves with its answer.
const runProgram = (args) =>
  harness.start([process.execPath, cli, 'run', '--simulate', '1GiB', ...args, '--', path.join(harness.bin, 'dynamic')], standIn);

describe('cuda-memory run with elastic sharing: programs under the interposer against the stand-in driver', () => {
  test('--wait: a second program waits for the first one’s memory instead of failing', async () => {
    const first = runProgram(['--group', 'waits', '--limit', '64MiB']);
    const held = await first.send(`alloc malloc ${48 * MiB}`);
    expect(held).toMatch(/^ok 0x/);
    const second = runProgram(['--group', 'waits', '--wait', '20s']);
    const answer = second.send(`alloc malloc ${32 * MiB}`).then((line) => ({ line, at: Date.now() }));
    // It waits: the ledger shows it, for the 32 MiB (and the grant it takes beside them).
    let waiter;
    for (let i = 0; i < 500 && !waiter; i++) {
      waiter = harness.group('waits')?.members.find((m) => m.waitingBytes > 0);
      if (!waiter) await new Promise((r) => setTimeout(r, 10));
    }
    expect(waiter?.waitingBytes).toBeGreaterThanOrEqual(32 * MiB);
    expect(await first.send(`free malloc ${held.split(' ')[1]}`)).toBe('ok');
    const freedAt = Date.now();
    const got = await answer;
    expect(got.line).toMatch(/^ok 0x/);
    expect(got.at - freedAt).toBeLessThan(1000);
    expect(await second.exit()).toEqual({ code: 0, signal: null });
    expect(await first.exit()).toEqual({ code: 0, signal: null });
    expect(second.stderr()).not.toMatch(/refused/);
  }, 60000);

  test('--request that does not fit beside the live members’ requests exits 2 before the program starts, naming them', async () => {
    const first = runProgram(['--group', 'requests', '--limit', '64MiB', '--request', '48MiB', '--member-limit', '64MiB']);
    expect(await first.send(`alloc malloc ${MiB}`)).toMatch(/^ok 0x/);
    const g = harness.group('requests');
    expect(g.members.map((m) => [m.requestBytes, m.memberLimitBytes])).toEqual([[48 * MiB, 64 * MiB]]);
    const r = cuda([
      'run',
      '--simulate',
      '1GiB',
      '--group',
      'requests',
      '--request',
      '32MiB',
      '--',
      process.execPath,
      '-e',
      'console.log("started")',
    ]);
    expect({ status: r.status, stdout: r.stdout }).toEqual({ status: 2, stdout: '' });
    expect(r.stderr).toContain(
      `run: the program could not join group requests on simulated: --request: a request of 32 MiB does not fit in the budget of 64 MiB beside the requests that hold 48 MiB of it (pid ${g.members[0].pid} 48 MiB), which leave 16 MiB`,
    );
    expect(await first.exit()).toEqual({ code: 0, signal: null });
  }, 60000);
});

describe('cuda-memory run: the options of elastic sharing', () => {
  const PRINT = `const o = {}; for (const k of Object.keys(process.env)) if (/^CUDA_MEMORY_GROUP_(REQUEST|MEMBER_LIMIT|WAIT_MS)$/.test(k)) o[k] = process.env[k]; console.log(JSON.stringify(o))`;
  test('--wait, --request and --member-limit reach the program’s environment; absent, none is inherited', () => {
    const sim80 = ['--group', 'terms-env', '--limit', '1GiB', '--simulate', '80GiB'];
    const r = cuda([
      'run',
      ...sim80,
      '--wait',
      '1.5s',
      '--request',
      '256MiB',
      '--member-limit',
      '512MiB',
      '--',
      process.execPath,
      '-e',
      PRINT,
    ]);
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toEqual({
      CUDA_MEMORY_GROUP_WAIT_MS: '1500',
      CUDA_MEMORY_GROUP_REQUEST: String(256 * MiB),
      CUDA_MEMORY_GROUP_MEMBER_LIMIT: String(512 * MiB),
    });
    for (const [wait, ms] of [
      ['500ms', '500'],
      ['2m', '120000'],
      ['1h', '3600000'],
    ])
      expect(JSON.parse(cuda(['run', ...sim80, '--wait', wait, '--', process.execPath, '-e', PRINT]).stdout)).toEqual({
        CUDA_MEMORY_GROUP_WAIT_MS: ms,
      });
    const inherited = cuda(['run', ...sim80, '--', process.execPath, '-e', PRINT], {
      CUDA_MEMORY_GROUP_REQUEST: '1',
      CUDA_MEMORY_GROUP_WAIT_MS: '5',
    });
    expect(JSON.parse(inherited.stdout)).toEqual({});
  });

  test('usage errors: a duration without its unit or past a day, a request above the member limit or the budget', () => {
    const sim = ['--group', 'terms-bad', '--limit', '64MiB', '--simulate', '1GiB'];
    const cases = [
      [['--wait', '60'], /--wait <duration>' argument '60' is invalid\. Expected a duration with its unit, such as 500ms, 60s or 2m/],
      [['--wait', '25h'], /of at most 24 h/],
      [['--request', '32MiB', '--member-limit', '16MiB'], /--request 32 MiB is above --member-limit 16 MiB/],
      [['--member-limit', '100'], /--member-limit 100 is below the least limit, 256 bytes/],
      [['--request', '128MiB'], /--request: a request of 128 MiB does not fit in the budget of 64 MiB$/m],
    ];
    for (const [args, message] of cases) {
      const r = cuda(['run', ...sim, ...args, '--', process.execPath, '-e', 'console.log("started")']);
      expect({ args, status: r.status, stdout: r.stdout }).toEqual({ args, status: 2, stdout: '' });
      expect(r.stderr).toMatch(message);
    }
  });
});

'use strict';
// Many processes, one GPU: group budgets (on simulated devices without a GPU, with real child
// processes), IPC handles and shared pinned memory. The GPU part runs the same checks the
// acceptance run does (scripts/interprocess-check.js), shorter.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync, spawnSync, fork } = require('child_process');
const { cm, root, describeGpu, gpu } = require('../helpers');

const MiB = 2 ** 20;
const script = path.join(root, 'scripts', 'interprocess-check.js');
const cli = path.join(root, 'dist', 'cli.js');
const sim = { totalBytes: 80 * 2 ** 30 };

// Every file this suite makes lives in a folder of its own, removed at the end.
const base = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
const dir = fs.mkdtempSync(path.join(base, 'cuda-memory-test-'));
process.env.CUDA_MEMORY_SHM_DIR = dir;
// This user's own folder in it, where the library keeps the files.
const files = path.join(dir, `cuda-memory-${process.geteuid()}`);
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function runCheck(args, timeout = 120000) {
  const r = spawnSync(process.execPath, [script, ...args], {
    encoding: 'utf8',
    timeout,
    env: { ...process.env, CUDA_MEMORY_PACKAGE: root },
  });
  let summary = null;
  try {
    summary = JSON.parse(r.stdout);
  } catch {
    throw new Error(`no JSON from ${args.join(' ')} (status ${r.status}): ${r.stdout}\n${r.stderr}`);
  }
  return { status: r.status, summary, stderr: r.stderr };
}

describe('group budgets on simulated devices', () => {
  test('a member without a limit of its own joins on a nearly full device, limited by the group budget', () => {
    const a = cm.createAllocator({
      simulate: { totalBytes: 16 * 2 ** 30, freeBytes: 1000 },
      allowGrowth: true,
      shared: { name: 'busy', memoryLimit: 2 ** 30 },
    });
    expect([a.limitBytes, a.limitSource]).toEqual([2 ** 30, "the budget of group 'busy'"]);
    expect(() => a.alloc(4096)).toThrow(expect.objectContaining({ name: 'OutOfMemoryError' }));
    a.close();
  });

  test('allocators in one process share the budget; the refusal says it was the group and lists the members', () => {
    const a = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'two', memoryLimit: 64 * MiB } });
    const b = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'two' } });
    expect(b.limitBytes).toBe(64 * MiB);
    expect(b.limitSource).toBe("the budget of group 'two'");
    const x = a.alloc(20 * MiB); // a 32 MiB region
    let err;
    try {
      b.alloc(40 * MiB);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(cm.OutOfMemoryError);
    expect(err.message).toContain("The group 'two' has a budget of 64.00 MiB (memoryLimit 64 MiB) and its 2 members hold 32.00 MiB");
    expect(err.message).toContain(`pid ${process.pid} pool 32.00 MiB, in use 32.00 MiB`);
    expect(err.message).toContain('(this allocator) pool 0 bytes');
    expect(err.group.budgetBytes).toBe(64 * MiB);
    expect(err.group.chargedBytes).toBe(32 * MiB);
    expect(err.group.members.map((m) => [m.poolBytes, m.bytesInUse, m.self])).toEqual([
      [32 * MiB, 32 * MiB, false],
      [0, 0, true],
    ]);
    const y = b.alloc(20 * MiB); // fits in the 32 MiB left, after backing off
    const g = cm.groupStats('two', { simulated: true });
    expect(g.chargedBytes).toBe(a.stats().poolBytes + b.stats().poolBytes);
    expect(g.chargedBytes).toBeLessThanOrEqual(64 * MiB);
    expect(g.freeBytes).toBe(64 * MiB - g.chargedBytes);
    expect(a.group().members.find((m) => m.self).poolBytes).toBe(a.stats().poolBytes);
    expect(a.memorySummary()).toMatch(/group two: budget 64 MiB \(memoryLimit 64 MiB\), 2 members hold/);
    // Freeing and emptying the cache gives the charge back to the group.
    x.free();
    expect(a.emptyCache()).toBe(32 * MiB);
    expect(cm.groupStats('two', { simulated: true }).chargedBytes).toBe(b.stats().poolBytes);
    y.free();
    a.close();
    expect(cm.groupStats('two', { simulated: true }).members).toHaveLength(1);
    b.close();
    // The last member removes the ledger.
    expect(fs.readdirSync(files).filter((f) => f.includes('group.two'))).toEqual([]);
    expect(() => cm.groupStats('two', { simulated: true })).toThrow(
      expect.objectContaining({ name: 'InterprocessError', code: 'ERR_GROUP_NOT_FOUND' }),
    );
  });

  test('preallocation must fit in the group', () => {
    const a = cm.createAllocator({ simulate: sim, memoryLimit: 48 * MiB, shared: { name: 'pre', memoryLimit: 64 * MiB } });
    expect(a.stats().poolBytes).toBe(48 * MiB);
    expect(() => cm.createAllocator({ simulate: sim, memoryLimit: 32 * MiB, shared: { name: 'pre' } })).toThrow(
      expect.objectContaining({ name: 'OutOfMemoryError', group: expect.objectContaining({ chargedBytes: 48 * MiB }) }),
    );
    const b = cm.createAllocator({ simulate: sim, memoryLimit: 16 * MiB, shared: { name: 'pre' } });
    expect(cm.groupStats('pre', { simulated: true }).chargedBytes).toBe(64 * MiB);
    a.close();
    b.close();
  });

  test('bad options and mismatched budgets are refused with reasons', () => {
    expect(() => cm.createAllocator({ simulate: sim, shared: { name: '../etc', memoryLimit: MiB } })).toThrow(TypeError);
    expect(() => cm.createAllocator({ simulate: sim, shared: { name: 'x', memoryLimit: MiB, memoryFraction: 0.5 } })).toThrow(/choose one/);
    expect(() => cm.createAllocator({ simulate: sim, shared: { name: 'x', memoryFraction: 1.5 } })).toThrow(RangeError);
    expect(() => cm.createAllocator({ simulate: sim, shared: { name: 'x', budget: 5 } })).toThrow(/Unknown shared option "budget"/);
    expect(() => cm.createAllocator({ backend: 'async', shared: { name: 'x', memoryLimit: MiB } })).toThrow(
      expect.objectContaining({ code: 'ERR_NOT_SUPPORTED' }),
    );
    expect(() => cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'nobody' } })).toThrow(
      expect.objectContaining({
        code: 'ERR_GROUP_NOT_FOUND',
        message: expect.stringMatching(
          /^there is no group 'nobody' on device simulated to join; give shared\.memoryLimit or shared\.memoryFraction to create it$/,
        ),
      }),
    );
    // What the message names is accepted.
    for (const shared of [
      { name: 'nobody', memoryLimit: MiB },
      { name: 'nobody', memoryFraction: 0.001 },
    ])
      cm.createAllocator({ simulate: sim, allowGrowth: true, shared }).close();
    const a = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'fixed', memoryFraction: 0.25 } });
    expect(a.group().budgetBytes).toBe(20 * 2 ** 30);
    expect(a.group().budgetSource).toBe('memoryFraction 0.25 of 80 GiB');
    let err;
    try {
      cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'fixed', memoryLimit: 10 * MiB } });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(cm.InterprocessError);
    expect(err.code).toBe('ERR_GROUP_BUDGET_MISMATCH');
    expect(err.message).toMatch(/already has a budget of 20.00 GiB \(memoryFraction 0.25 of 80 GiB\) and 1 live member/);
    a.close();
    // An empty group takes the budget of whoever comes next.
    const b = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'fixed', memoryLimit: 10 * MiB } });
    expect(b.group().budgetBytes).toBe(10 * MiB);
    b.close();
  });

  test('a foreign or damaged ledger is reported, never trusted, and top shows it', () => {
    fs.mkdirSync(files, { recursive: true, mode: 0o700 });
    const file = path.join(files, 'cuda-memory-group.junk.simulated');
    // Open to others (the umask's 0644): not even read.
    fs.writeFileSync(file, 'not a ledger at all, just some bytes', { mode: 0o644 });
    fs.chmodSync(file, 0o644);
    expect(() => cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'junk', memoryLimit: MiB } })).toThrow(
      expect.objectContaining({ code: 'ERR_SHM_UNTRUSTED', path: file, message: expect.stringContaining('mode 0644') }),
    );
    // This user's, 0600, but not a ledger: read, found foreign, left alone.
    fs.chmodSync(file, 0o600);
    expect(() => cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'junk', memoryLimit: MiB } })).toThrow(
      expect.objectContaining({ code: 'ERR_GROUP_LEDGER_FOREIGN', path: file }),
    );
    expect(fs.readFileSync(file, 'utf8')).toBe('not a ledger at all, just some bytes'); // untouched
    // A real ledger whose budget was overwritten: the header checksum catches it.
    const a = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'scribbled', memoryLimit: 64 * MiB } });
    const ledger = a.group().path;
    const fd = fs.openSync(ledger, 'r+');
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(2n ** 50n);
    fs.writeSync(fd, b, 0, 8, 24);
    fs.closeSync(fd);
    expect(() => a.alloc(MiB)).toThrow(expect.objectContaining({ code: 'ERR_GROUP_LEDGER_CORRUPT' }));
    const list = cm.listGroups();
    expect(list.unreadable.map((u) => u.code).sort()).toEqual(['ERR_GROUP_LEDGER_CORRUPT', 'ERR_GROUP_LEDGER_FOREIGN']);
    const top = spawnSync(process.execPath, [cli, 'top'], { encoding: 'utf8', env: process.env });
    expect(top.status).toBe(1);
    expect(top.stdout).toMatch(/unreadable .*cuda-memory-group\.junk\.simulated: ERR_GROUP_LEDGER_FOREIGN/);
    a.close();
    fs.rmSync(file);
    fs.rmSync(ledger, { force: true });
  });

  test('cuda-memory top shows every member of a live group, as a table and as JSON', () => {
    const a = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'shown', memoryLimit: 256 * MiB } });
    const x = a.alloc(3 * MiB);
    const out = execFileSync(process.execPath, [cli, 'top'], { encoding: 'utf8', env: process.env });
    expect(out).toContain('group shown on simulated: budget 256 MiB (memoryLimit 256 MiB), charged 4 MiB (1.6%), free 252 MiB, 1 member');
    // nvml used: none on a simulated device; then this process's command line.
    expect(out).toMatch(new RegExp(`\\n\\s+${process.pid}\\s+4 MiB\\s+4 MiB\\s+-\\s+4 MiB\\s+256 MiB\\s+\\d{4}-\\S+\\s+\\S*node`));
    const lines = execFileSync(process.execPath, [cli, 'top', '--json', '--watch', '0.1', '--count', '2'], {
      encoding: 'utf8',
      env: process.env,
    })
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines).toHaveLength(2);
    expect(lines[1].groups[0]).toMatchObject({
      name: 'shown',
      chargedBytes: 4 * MiB,
      members: [expect.objectContaining({ pid: process.pid, bytesInUse: 4 * MiB })],
    });
    const bad = spawnSync(process.execPath, [cli, 'top', '--watch', '0'], { encoding: 'utf8', env: process.env });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/--watch \[seconds\]' argument '0' is invalid/);
    x.free();
    a.close();
  });

  test('a SIGKILLed member gets its charge back at once', async () => {
    const a = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'killed', memoryLimit: 64 * MiB } });
    const c = fork(path.join(__dirname, '..', 'fixtures', 'group-holder.js'), [root, 'killed'], { env: process.env });
    await new Promise((r) => c.on('message', r));
    expect(() => a.alloc(40 * MiB)).toThrow(cm.OutOfMemoryError);
    expect(cm.groupStats('killed', { simulated: true }).members.map((m) => m.pid)).toContain(c.pid);
    c.kill('SIGKILL');
    await new Promise((r) => c.on('exit', r));
    const g = cm.groupStats('killed', { simulated: true });
    expect(g.reapedMembers).toBe(1);
    expect(g.members.map((m) => m.pid)).toEqual([process.pid]);
    a.alloc(40 * MiB).free();
    a.close();
  });

  test('4 processes growing at once under one budget never pass it, and a killed one frees its share', () => {
    const { status, summary } = runCheck(['group', '--processes', '4', '--seconds', '3', '--budget', '256MiB', '--simulate', '80GiB']);
    expect(summary.failures).toEqual([]);
    expect(status).toBe(0);
    expect(summary.samplesOverBudget).toBe(0);
    expect(summary.maxChargedBytes).toBeLessThanOrEqual(256 * MiB);
    expect(summary.samples).toBeGreaterThan(20);
    expect(summary.killed.reclaimedAfterMs).toBeLessThan(1000);
    expect(summary.survivorsMaxPoolBeforeKill).toBeLessThanOrEqual(256 * MiB - summary.killed.pool);
    expect(summary.survivorsMaxPoolAfterKill).toBeGreaterThan(256 * MiB - summary.killed.pool);
    for (const m of summary.members.slice(1)) {
      expect(m.exit).toEqual({ code: 0, signal: null });
      expect(m.mismatches).toBe(0);
      expect(m.ooms).toBeGreaterThan(0);
    }
  }, 60000);
});

test('examples/shared-gpu.js: two workers fit, the third is refused by the group and told who holds what', () => {
  const out = execFileSync(process.execPath, [path.join(root, 'examples', 'shared-gpu.js'), ...(gpu ? [] : ['--simulate'])], {
    encoding: 'utf8',
    env: process.env,
    timeout: 60000,
  });
  expect(out.match(/refused by its own limit/g)).toHaveLength(2);
  expect(out).toMatch(
    /refused by the group budget\n {2}CUDA out of memory\. Tried to allocate .* The group 'demo' has a budget of 1.00 GiB/,
  );
  expect(out).toMatch(/charged 1 GiB \(100.0%\), free 0 B, 4 members/);
  if (gpu) expect(out).toContain(`opened worker 0's block by IPC and read "hello from worker 0"`);
  expect(out).toContain('all workers left');
}, 60000);

describe('IPC handles without a GPU', () => {
  const good = {
    type: 'cuda-memory/ipc@1',
    record: 'cuda-memory-ipc.12345.0123456789abcdef',
    token: '0'.repeat(32),
    handle: '0'.repeat(128),
    device: 'GPU-00000000-0000-0000-0000-000000000000',
    offset: 0,
    byteLength: 1024,
    pid: 12345,
  };
  const code = (h) => {
    try {
      cm.DeviceBuffer.importIpc(h);
    } catch (e) {
      return `${e.name}:${e.code}`;
    }
    return 'opened';
  };

  test('malformed handles are refused by shape', () => {
    for (const h of [
      null,
      42,
      'not json',
      '[]',
      { ...good, type: 'x' },
      { ...good, handle: 'zz' },
      { ...good, token: 'abc' },
      { ...good, offset: -1 },
    ])
      expect(code(h)).toBe('InterprocessError:ERR_IPC_HANDLE_INVALID');
  });

  test('a handle whose record is missing, or whose record name leaves the folder, is refused before CUDA', () => {
    expect(code(good)).toBe('InterprocessError:ERR_IPC_EXPORT_GONE');
    expect(code(JSON.stringify(good))).toBe('InterprocessError:ERR_IPC_EXPORT_GONE');
    expect(code({ ...good, record: '../../etc/passwd' })).toBe('InterprocessError:ERR_IPC_HANDLE_INVALID');
  });

  test('the IPC paths wait for a record lock as long as lockTimeoutMs says, and refuse a bad CUDA_MEMORY_LOCK_TIMEOUT_MS as the groups do', async () => {
    fs.mkdirSync(files, { recursive: true, mode: 0o700 });
    const record = path.join(files, good.record);
    fs.writeFileSync(record, Buffer.alloc(720), { mode: 0o600 });
    const py = `
import fcntl, os, struct, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.fcntl(fd, getattr(fcntl, 'F_OFD_SETLK', 37), struct.pack('hhqqi4x', fcntl.F_WRLCK, 0, 1 << 20, 1, 0))
print('held', flush=True)
time.sleep(60)
`;
    const holder = require('child_process').spawn('python3', ['-c', py, record], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise((resolve) => holder.stdout.once('data', resolve));
    try {
      const t0 = Date.now();
      expect(() => cm.DeviceBuffer.importIpc(good, { lockTimeoutMs: 150 })).toThrow(
        expect.objectContaining({ code: 'ERR_SHM_LOCK_TIMEOUT', message: expect.stringContaining('waited 150 ms') }),
      );
      expect(Date.now() - t0).toBeLessThan(3000);
      // The variable, validated in JS and passed down (the native layer reads no variable).
      const run = (value) =>
        spawnSync(
          process.execPath,
          [
            '-e',
            `const cm = require('.'); try { cm.DeviceBuffer.importIpc(${JSON.stringify(good)}); } catch (e) { console.log(e.name, e.code, /waited (\\d+) ms/.exec(e.message)?.[1]); }`,
          ],
          { cwd: root, encoding: 'utf8', env: { ...process.env, CUDA_MEMORY_LOCK_TIMEOUT_MS: value } },
        ).stdout.trim();
      expect(run('120')).toBe('InterprocessError ERR_SHM_LOCK_TIMEOUT 120');
      expect(run('soon')).toBe('RangeError ERR_OUT_OF_RANGE undefined');
      expect(() => cm.DeviceBuffer.importIpc(good, { lockTimeoutMs: -1 })).toThrow(RangeError);
    } finally {
      holder.kill();
      fs.rmSync(record, { force: true });
    }
  });

  test('shared pinned names are checked, and unlinking a missing one says so', () => {
    expect(() => cm.createSharedPinned('a/b', 4096)).toThrow(TypeError);
    expect(cm.unlinkSharedPinned('never-made')).toBe(false);
    if (!gpu) expect(() => cm.createSharedPinned('ok', 4096)).toThrow(cm.CudaUnavailableError);
  });
});

describeGpu('many processes on one GPU', () => {
  test('IPC: 200 pooled blocks filled here, imported and checked byte for byte in another process; the refusals', () => {
    const { status, summary } = runCheck(['ipc', '--rounds', '200']);
    expect(summary.failures).toEqual([]);
    expect(status).toBe(0);
    expect(summary.freeWhileImported.code).toBe('ERR_IPC_IN_USE');
  }, 120000);

  test('IPC: a block of an async allocator is refused with the reason; a simulated block too', () => {
    const a = cm.createAllocator({ backend: 'async', allowGrowth: true, memoryLimit: 64 * MiB });
    const b = a.alloc(MiB);
    expect(() => b.exportIpc()).toThrow(expect.objectContaining({ code: 'ERR_NOT_SUPPORTED' }));
    b.free();
    a.close();
    const s = cm.createAllocator({ simulate: sim, allowGrowth: true });
    const sb = s.alloc(MiB);
    expect(() => sb.exportIpc()).toThrow(expect.objectContaining({ code: 'ERR_NOT_SUPPORTED' }));
    sb.free();
    s.close();
  });

  test('shared pinned memory: 256 MiB from one process GPU to another, the same bytes', () => {
    const { status, summary } = runCheck(['shared-pinned', '--bytes', '256MiB']);
    expect(summary.failures).toEqual([]);
    expect(status).toBe(0);
    expect(summary.producerD2hGBps).toBeGreaterThan(0);
  }, 120000);

  test('a group on the GPU: 3 processes, budget never passed (ledger and memGetInfo), killed share returns', () => {
    const { status, summary } = runCheck(['group', '--processes', '3', '--seconds', '4', '--budget', '2GiB']);
    expect(summary.failures).toEqual([]);
    expect(status).toBe(0);
    expect(summary.deviceSamplesOverBudget).toBe(0);
  }, 120000);

  test('shared pinned names: taken, missing', () => {
    const s = cm.createSharedPinned('dup', 4096);
    expect(() => cm.createSharedPinned('dup', 4096)).toThrow(expect.objectContaining({ code: 'ERR_SHM_EXISTS' }));
    const o = cm.openSharedPinned('dup');
    o.bytes[7] = 42;
    expect(s.bytes[7]).toBe(42); // one memory, two mappings
    expect(o.creator).toBe(false);
    o.free();
    s.free();
    expect(() => cm.openSharedPinned('dup')).toThrow(expect.objectContaining({ code: 'ERR_SHM_NOT_FOUND' }));
  });
});

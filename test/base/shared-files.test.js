'use strict';
// Processes that share a GPU cannot hurt each other through the files they share (no GPU needed:
// allocators on simulated devices, real child processes). Another user's ledger, one left open
// to others, a planted link, a lock held by a stopped process, and members joining while others
// leave. The checks about another user run as root (as CI does), with setpriv for the second uid.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync, spawn } = require('child_process');
const { cm, packageForOtherUsers, root } = require('../helpers');

const MiB = 2 ** 20;
const sim = { totalBytes: 80 * 2 ** 30 };
const cli = path.join(root, 'dist', 'cli.js');
const OTHER = 2001;

// A folder every user may write to, as /dev/shm is (sticky, 1777).
const base = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
const dir = fs.mkdtempSync(path.join(base, 'cuda-memory-files-'));
fs.chmodSync(dir, 0o1777);
process.env.CUDA_MEMORY_SHM_DIR = dir;
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

// This user's own folder in it, where the library keeps the files.
const mine = path.join(dir, `cuda-memory-${process.geteuid()}`);
const ledgerOf = (name) => path.join(mine, `cuda-memory-group.${name}.simulated`);
const canSwitchUser = process.getuid?.() === 0 && spawnSync('setpriv', ['--version']).status === 0;
// Named so that a skip says why.
const asOther = (name, fn) =>
  canSwitchUser ? test(name, fn) : test.skip(`${name} — skipped: needs root and setpriv to act as a second user`, fn);

// What the second user runs: a copy of the package that user can read (test/helpers.js), in this
// suite's folder.
const otherEnv = () => ({ ...process.env, CUDA_MEMORY_SHM_DIR: dir, ...packageForOtherUsers().env });
const packageForOther = () => packageForOtherUsers().root;

// Runs a snippet as the second user (setpriv), in the copy of the package, with this suite's folder.
function runAsOther(code) {
  return spawnSync('setpriv', ['--reuid', String(OTHER), '--regid', String(OTHER), '--clear-groups', process.execPath, '-e', code], {
    encoding: 'utf8',
    env: otherEnv(),
    cwd: packageForOther(),
    timeout: 30000,
  });
}

// Holds a byte lock on `file` from another process, as a stopped member holding the ledger's
// mutex would (an open-file-description lock, F_OFD_SETLK, on byte 2^20). Resolves once held.
function holdMutex(file) {
  const py = `
import fcntl, os, struct, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
F_OFD_SETLK = getattr(fcntl, 'F_OFD_SETLK', 37)
fcntl.fcntl(fd, F_OFD_SETLK, struct.pack('hhqqi4x', fcntl.F_WRLCK, 0, 1 << 20, 1, 0))
print('held', flush=True)
time.sleep(60)
`;
  const child = spawn('python3', ['-c', py, file], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    child.stdout.once('data', () => resolve(child));
    child.once('exit', (c) => reject(new Error(`lock holder exited with ${c}`)));
  });
}

describe('shared files: what another user or process cannot do', () => {
  asOther("another user's group of the same name is a group of its own: its files live in its own folder, never seen here", async () => {
    const child = spawn(
      'setpriv',
      [
        '--reuid',
        String(OTHER),
        '--regid',
        String(OTHER),
        '--clear-groups',
        process.execPath,
        '-e',
        `const cm = require('.');
         const a = cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true, shared: { name: 'planted', memoryLimit: 1 << 26 } });
         console.log(a.group().path); setTimeout(() => a.close(), 20000);`,
      ],
      { cwd: packageForOther(), env: otherEnv(), stdio: ['ignore', 'pipe', 'inherit'] },
    );
    // (A child that cannot start, e.g. when the second user cannot read the package, fails the
    // test at once rather than at the test's time limit.)
    const theirs = await new Promise((resolve, reject) => {
      child.stdout.once('data', (d) => resolve(String(d).trim()));
      child.once('exit', (c) => reject(new Error(`the second user's process exited with ${c} before printing its group's path`)));
    });
    try {
      expect(theirs).toBe(path.join(dir, `cuda-memory-${OTHER}`, 'cuda-memory-group.planted.simulated'));
      const st = fs.statSync(path.dirname(theirs));
      expect([st.uid, st.mode & 0o777]).toEqual([OTHER, 0o700]);
      // Another budget, no mismatch: the two groups never meet.
      const a = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'planted', memoryLimit: 32 * MiB } });
      expect(a.group()).toMatchObject({
        path: ledgerOf('planted'),
        budgetBytes: 32 * MiB,
        members: [expect.objectContaining({ self: true })],
      });
      expect(cm.listGroups().groups.map((g) => g.path)).toEqual([ledgerOf('planted')]);
      a.close();
    } finally {
      child.kill();
      await new Promise((resolve) => child.once('exit', resolve));
    }
  });

  asOther("another user can neither plant a name in this user's folder nor join its group", () => {
    const a = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'mine', memoryLimit: 64 * MiB } });
    try {
      const st = fs.lstatSync(mine);
      expect([st.isDirectory(), st.uid, st.mode & 0o777]).toEqual([true, process.geteuid(), 0o700]);
      const target = path.join(dir, 'precious');
      const r = runAsOther(`const fs = require('fs');
        for (const f of [() => fs.symlinkSync('/etc/passwd', ${JSON.stringify(ledgerOf('linked'))}),
                         () => fs.writeFileSync(${JSON.stringify(ledgerOf('planted2'))}, 'x'),
                         () => fs.openSync(${JSON.stringify(ledgerOf('mine'))}, 'r+'),
                         () => fs.renameSync(${JSON.stringify(mine)}, ${JSON.stringify(target)})])
          try { f(); console.log('done'); } catch (e) { console.log(e.code); }`);
      expect(r.stdout.trim().split('\n')).toEqual(['EACCES', 'EACCES', 'EACCES', 'EPERM']);
      expect(fs.readdirSync(mine)).toEqual(['cuda-memory-group.mine.simulated']);
    } finally {
      a.close();
    }
  });

  asOther("a folder squatted under this user's name is refused, saying whose it is and what to do; names print escaped", () => {
    // A base folder whose own name carries escape sequences (window title, screen clear).
    const evilBase = path.join(dir, 'base\x1b]0;owned\x07\x1b[2J');
    fs.mkdirSync(evilBase);
    fs.chmodSync(evilBase, 0o1777);
    const squat = path.join(evilBase, `cuda-memory-${process.geteuid()}`);
    const r = runAsOther(
      `require('fs').mkdirSync(${JSON.stringify(squat)}, { mode: 0o777 }); require('fs').chmodSync(${JSON.stringify(squat)}, 0o777); console.log('squatted');`,
    );
    expect(r.stdout.trim()).toBe('squatted');
    const env = { ...process.env, CUDA_MEMORY_SHM_DIR: evilBase };
    const out = spawnSync(
      process.execPath,
      [
        '-e',
        `const cm = require('.');
         try { cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true, shared: { name: 'g', memoryLimit: 1 << 26 } }); } catch (e) { console.log(JSON.stringify([e.code, e.message])); }`,
      ],
      { cwd: root, encoding: 'utf8', env },
    );
    const [code, message] = JSON.parse(out.stdout);
    expect(code).toBe('ERR_SHM_UNTRUSTED');
    expect(message).toContain(`owned by uid ${OTHER}`);
    expect(message).toContain('CUDA_MEMORY_SHM_DIR');
    expect(message).not.toMatch(/[\x00-\x1f]/);
    expect(message).toContain('base\\x1b]0;owned\\x07\\x1b[2J');
    // The folder is the squatter's: nothing was made in it.
    expect(fs.readdirSync(squat)).toEqual([]);
    fs.rmSync(evilBase, { recursive: true, force: true });
  });

  test("top skips names in this user's folder that are not the library's and prints no control character", () => {
    const a = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'shown', memoryLimit: 64 * MiB } });
    const planted = [
      'cuda-memory-group.\x1b]0;owned\x07.simulated',
      'cuda-memory-group.x\x1b[2J\x1b[H.simulated',
      'cuda-memory-group.y.simulated\n\x1b[32mgroup forged on simulated',
      'notes\x1b[31m',
    ];
    for (const f of planted) fs.writeFileSync(path.join(mine, f), 'junk', { mode: 0o600 });
    try {
      const top = spawnSync(process.execPath, [cli, 'top'], { encoding: 'utf8', env: process.env, timeout: 30000 });
      expect(top.stdout).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f]/);
      expect(top.stdout).toMatch(/^group shown on simulated/);
      expect(top.stdout).not.toMatch(/forged|owned/);
      expect(top.status).toBe(0);
      expect(cm.listGroups().unreadable).toEqual([]);
    } finally {
      for (const f of planted) fs.rmSync(path.join(mine, f), { force: true });
      a.close();
    }
  });

  test('a lock held by a stopped process: joining, stats, listings and top end within the wait and name the file', async () => {
    const a = cm.createAllocator({
      simulate: sim,
      allowGrowth: true,
      shared: { name: 'stuck', memoryLimit: 64 * MiB, lockTimeoutMs: 150 },
    });
    const b = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'fine', memoryLimit: 64 * MiB } });
    const file = ledgerOf('stuck');
    const holder = await holdMutex(file);
    try {
      let t0 = Date.now();
      expect(() => cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'stuck', lockTimeoutMs: 200 } })).toThrow(
        expect.objectContaining({
          code: 'ERR_SHM_LOCK_TIMEOUT',
          path: file,
          message: expect.stringContaining("while joining group 'stuck'"),
        }),
      );
      expect(Date.now() - t0).toBeLessThan(5000);
      expect(() => a.alloc(MiB)).toThrow(expect.objectContaining({ code: 'ERR_SHM_LOCK_TIMEOUT' }));
      expect(() => cm.groupStats('stuck', { simulated: true, lockTimeoutMs: 100 })).toThrow(
        expect.objectContaining({ code: 'ERR_SHM_LOCK_TIMEOUT' }),
      );
      // The listing reports the busy file and goes on to the others.
      const list = cm.listGroups({ lockTimeoutMs: 100 });
      expect(list.groups.map((g) => g.name)).toEqual(['fine']);
      expect(list.unreadable).toEqual([expect.objectContaining({ path: file, code: 'ERR_SHM_LOCK_TIMEOUT' })]);
      t0 = Date.now();
      const top = spawnSync(process.execPath, [cli, 'top'], { encoding: 'utf8', env: process.env, timeout: 30000 });
      expect(top.status).toBe(1);
      expect(top.stdout).toMatch(/group fine on simulated/);
      expect(top.stdout).toMatch(/cuda-memory-group\.stuck\.simulated: ERR_SHM_LOCK_TIMEOUT/);
      // The environment variable sets the default wait.
      const env = spawnSync(
        process.execPath,
        [
          '-e',
          `const cm = require('.'); try { cm.groupStats('stuck', { simulated: true }); } catch (e) { console.log(e.code, /waited 120 ms/.test(e.message)); }`,
        ],
        { cwd: root, encoding: 'utf8', env: { ...process.env, CUDA_MEMORY_LOCK_TIMEOUT_MS: '120' } },
      );
      expect(env.stdout.trim()).toBe('ERR_SHM_LOCK_TIMEOUT true');
    } finally {
      holder.kill();
    }
    // Free again: the allocator works, and the refused calls charged nothing.
    const block = a.alloc(MiB);
    block.free();
    a.close();
    b.close();
    expect(() => cm.createAllocator({ simulate: sim, shared: { name: 'x', memoryLimit: MiB, lockTimeoutMs: -1 } })).toThrow(RangeError);
  });

  test('workers restarting: 2 processes x 20,000 join/leave beside a third member, no refusal', () => {
    const keeper = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'restart', memoryLimit: 256 * MiB } });
    const code = `const cm = require('.');
      let refused = 0, first = '';
      for (let i = 0; i < 20000; i++) {
        try {
          const a = cm.createAllocator({ simulate: { totalBytes: 80 * 2 ** 30 }, allowGrowth: true, shared: { name: 'restart', memoryLimit: 256 * 2 ** 20 } });
          if (i % 16 === 0) a.alloc(2 ** 20).free();
          a.close();
        } catch (e) { if (!refused++) first = e.code + ': ' + e.message; }
      }
      console.log(JSON.stringify({ refused, first }));`;
    const kids = [0, 1].map(() =>
      spawn(process.execPath, ['-e', code], { cwd: root, env: process.env, stdio: ['ignore', 'pipe', 'inherit'] }),
    );
    return Promise.all(
      kids.map(
        (k) =>
          new Promise((resolve) => {
            let out = '';
            k.stdout.on('data', (d) => (out += d));
            k.on('exit', (status) => resolve({ status, out: JSON.parse(out) }));
          }),
      ),
    ).then((results) => {
      for (const r of results) expect(r).toEqual({ status: 0, out: { refused: 0, first: '' } });
      const g = keeper.group();
      expect(g.members.map((m) => m.self)).toEqual([true]);
      expect(g.chargedBytes).toBe(0);
      keeper.close();
      expect(fs.existsSync(ledgerOf('restart'))).toBe(false);
    });
  }, 300000);
});

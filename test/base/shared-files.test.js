'use strict';
// Processes that share a GPU cannot hurt each other through the files they share (no GPU needed:
// allocators on simulated devices, real child processes). Another user's ledger, one left open
// to others, a planted link, a lock held by a stopped process, and members joining while others
// leave. The checks about another user run as root (as CI does), with setpriv for the second uid.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync, spawn } = require('child_process');
const { cm, root } = require('../helpers');

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

const ledgerOf = (name) => path.join(dir, `cuda-memory-group.${name}.simulated`);
const canSwitchUser = process.getuid?.() === 0 && spawnSync('setpriv', ['--version']).status === 0;
// Named so that a skip says why.
const asOther = (name, fn) =>
  canSwitchUser ? test(name, fn) : test.skip(`${name} — skipped: needs root and setpriv to act as a second user`, fn);

// Runs a snippet as the second user (setpriv), with the package and this suite's folder.
function runAsOther(code) {
  return spawnSync('setpriv', ['--reuid', String(OTHER), '--regid', String(OTHER), '--clear-groups', process.execPath, '-e', code], {
    encoding: 'utf8',
    env: { ...process.env, CUDA_MEMORY_SHM_DIR: dir },
    cwd: root,
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
  asOther(
    'joining a group whose ledger another user made (and left writable by all) fails with ERR_SHM_UNTRUSTED naming the owner',
    async () => {
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
         require('fs').chmodSync(a.group().path, 0o666);
         console.log('ready'); setTimeout(() => a.close(), 20000);`,
        ],
        { cwd: root, env: { ...process.env, CUDA_MEMORY_SHM_DIR: dir }, stdio: ['ignore', 'pipe', 'inherit'] },
      );
      await new Promise((resolve) => child.stdout.once('data', resolve));
      try {
        const file = ledgerOf('planted');
        expect(fs.statSync(file).uid).toBe(OTHER);
        let err;
        try {
          cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'planted', memoryLimit: 64 * MiB } });
        } catch (e) {
          err = e;
        }
        expect(err).toMatchObject({ name: 'InterprocessError', code: 'ERR_SHM_UNTRUSTED', path: file });
        expect(err.message).toContain(`owned by uid ${OTHER}`);
        expect(err.message).toContain('mode 0666');
        expect(() => cm.groupStats('planted', { simulated: true })).toThrow(expect.objectContaining({ code: 'ERR_SHM_UNTRUSTED' }));
        // Listings skip it and say why.
        const list = cm.listGroups();
        expect(list.unreadable).toEqual([expect.objectContaining({ path: file, code: 'ERR_SHM_UNTRUSTED' })]);
      } finally {
        child.kill();
        await new Promise((resolve) => child.once('exit', resolve));
        fs.rmSync(ledgerOf('planted'), { force: true });
      }
    },
  );

  asOther("this user's ledger cannot be joined by another user, and a link planted by another user is not followed", () => {
    const a = cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'mine', memoryLimit: 64 * MiB } });
    try {
      const r = runAsOther(`const cm = require('.');
        try { cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true, shared: { name: 'mine', memoryLimit: 1 << 26 } }); console.log('joined'); }
        catch (e) { console.log(e.code); }`);
      expect(r.stdout.trim()).toBe('ERR_SHM_UNTRUSTED');
    } finally {
      a.close();
    }
    // The other user plants a link where this user's next group will be; joining refuses it and
    // the file it points at is not touched.
    const target = path.join(dir, 'precious');
    fs.writeFileSync(target, 'keep', { mode: 0o600 });
    const r = runAsOther(
      `require('fs').symlinkSync(${JSON.stringify(target)}, ${JSON.stringify(ledgerOf('linked'))}); console.log('planted');`,
    );
    expect(r.stdout.trim()).toBe('planted');
    expect(() => cm.createAllocator({ simulate: sim, allowGrowth: true, shared: { name: 'linked', memoryLimit: 64 * MiB } })).toThrow(
      expect.objectContaining({ code: 'ERR_SHM_UNTRUSTED', message: expect.stringContaining('symbolic link') }),
    );
    expect(fs.readFileSync(target, 'utf8')).toBe('keep');
    fs.rmSync(ledgerOf('linked'));
    fs.rmSync(target);
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

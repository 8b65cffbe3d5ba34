'use strict';
// Any program as a group member: where the interposer library is found (preloadLibraryPath), the
// environment a member is started with (memberEnvironment), and NVML's per-process used memory
// read through a stand-in libnvidia-ml.so.1 that this suite builds (no GPU needed).
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { cm, root } = require('../helpers');
const { findPreloadLibrary, preloadCandidates } = require(path.join(root, 'dist', 'allocator', 'member'));

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-preload-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
const UUID = 'GPU-01234567-89ab-cdef-0123-456789abcdef';

describe('preloadLibraryPath', () => {
  const pkg = path.join(tmp, 'pkg');
  const prebuilt = path.join(pkg, 'prebuilds', 'linux-x64', 'cuda_memory_preload.so');
  const built = path.join(pkg, 'build', 'Release', 'cuda_memory_preload.so');

  test('the order: CUDA_MEMORY_PRELOAD alone when set, else a source build, then the prebuilt copy (as the addon is found)', () => {
    expect(preloadCandidates(pkg, {})).toEqual({ forced: false, paths: [built, prebuilt] });
    expect(preloadCandidates(pkg, { CUDA_MEMORY_PRELOAD: 'rel/x.so' })).toEqual({ forced: true, paths: [path.resolve('rel/x.so')] });
  });

  test('finds the first that is a file; nothing found is ERR_PRELOAD_NOT_FOUND naming every place', () => {
    let err;
    try {
      findPreloadLibrary(pkg, {});
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(cm.CudaMemoryError);
    expect(err.code).toBe('ERR_PRELOAD_NOT_FOUND');
    expect(err.message).toContain(`looked for ${built} and ${prebuilt} (CUDA_MEMORY_PRELOAD is not set)`);
    fs.mkdirSync(path.dirname(prebuilt), { recursive: true });
    fs.writeFileSync(prebuilt, '');
    expect(findPreloadLibrary(pkg, {})).toBe(prebuilt);
    fs.mkdirSync(path.dirname(built), { recursive: true });
    fs.writeFileSync(built, '');
    expect(findPreloadLibrary(pkg, {})).toBe(built);
    // A forced path that is missing (or a folder) is an error, not a fall-back to the others.
    expect(() => findPreloadLibrary(pkg, { CUDA_MEMORY_PRELOAD: path.join(tmp, 'missing.so') })).toThrow(
      `CUDA_MEMORY_PRELOAD names ${path.join(tmp, 'missing.so')}, which is not a file`,
    );
    expect(() => findPreloadLibrary(pkg, { CUDA_MEMORY_PRELOAD: tmp })).toThrow(/which is not a file/);
    expect(findPreloadLibrary(pkg, { CUDA_MEMORY_PRELOAD: built })).toBe(built);
  });

  test('the exported function reads this package and CUDA_MEMORY_PRELOAD', () => {
    const lib = path.join(tmp, 'forced.so');
    fs.writeFileSync(lib, '');
    const r = spawnSync(process.execPath, ['-e', `console.log(require(${JSON.stringify(root)}).preloadLibraryPath())`], {
      encoding: 'utf8',
      env: { ...process.env, CUDA_MEMORY_PRELOAD: lib },
    });
    expect(r.stdout.trim()).toBe(lib);
  });
});

describe('memberEnvironment', () => {
  const GiB = 2 ** 30;

  test('the contract’s variables; the interposer first in LD_PRELOAD, once, before what was there', () => {
    const m = cm.memberEnvironment({
      group: 'train',
      deviceKey: UUID,
      totalBytes: 80 * GiB,
      memoryLimit: 20 * GiB,
      preload: '/opt/cm/cuda_memory_preload.so',
      trace: 'out/trace.json',
      env: { PATH: '/bin', LD_PRELOAD: 'libfoo.so /opt/cm/cuda_memory_preload.so:libbar.so', CUDA_MEMORY_GROUP_BUDGET_SOURCE: 'old' },
    });
    expect(m.budgetBytes).toBe(20 * GiB);
    expect(m.budgetSource).toBe('limit 20 GiB');
    expect(m.env).toEqual({
      PATH: '/bin',
      CUDA_MEMORY_GROUP: 'train',
      CUDA_MEMORY_GROUP_DEVICE: UUID,
      CUDA_MEMORY_GROUP_BUDGET: String(20 * GiB),
      CUDA_MEMORY_GROUP_BUDGET_SOURCE: 'limit 20 GiB',
      CUDA_MEMORY_TRACE: path.resolve('out/trace.json'),
      LD_PRELOAD: '/opt/cm/cuda_memory_preload.so:libfoo.so:libbar.so',
    });
  });

  test('a fraction is of the total, floored; no budget joins the group’s (0, no source)', () => {
    const f = cm.memberEnvironment({ group: 'g', deviceKey: 'simulated', totalBytes: 1000, memoryFraction: 0.3333, env: {} });
    expect([f.budgetBytes, f.budgetSource]).toEqual([333, 'fraction 0.3333 of 1000 B']);
    const j = cm.memberEnvironment({ group: 'g', deviceKey: 'simulated', totalBytes: 1000, env: { CUDA_MEMORY_GROUP_BUDGET_SOURCE: 'x' } });
    expect(j.env).toEqual({ CUDA_MEMORY_GROUP: 'g', CUDA_MEMORY_GROUP_DEVICE: 'simulated', CUDA_MEMORY_GROUP_BUDGET: '0' });
  });

  test('strict: CUDA_MEMORY_GROUP_STRICT=1 set, removed with false, left as inherited when absent', () => {
    const ok = { group: 'g', deviceKey: 'simulated', totalBytes: 1000, memoryLimit: 256 };
    expect(cm.memberEnvironment({ ...ok, strict: true, env: {} }).env.CUDA_MEMORY_GROUP_STRICT).toBe('1');
    expect(cm.memberEnvironment({ ...ok, strict: false, env: { CUDA_MEMORY_GROUP_STRICT: '1' } }).env).not.toHaveProperty(
      'CUDA_MEMORY_GROUP_STRICT',
    );
    expect(cm.memberEnvironment({ ...ok, env: { CUDA_MEMORY_GROUP_STRICT: '1' } }).env.CUDA_MEMORY_GROUP_STRICT).toBe('1');
    expect(cm.memberEnvironment({ ...ok, env: {} }).env).not.toHaveProperty('CUDA_MEMORY_GROUP_STRICT');
    expect(() => cm.memberEnvironment({ ...ok, strict: 1, env: {} })).toThrow(/Expected a boolean for strict but received number 1/);
  });

  test('budgetSource: a live group’s words carried with its budget', () => {
    const ok = { group: 'g', deviceKey: 'simulated', totalBytes: 2 ** 30, env: {} };
    const m = cm.memberEnvironment({ ...ok, memoryLimit: 2 ** 28, budgetSource: 'memoryLimit 256 MiB' });
    expect([m.budgetSource, m.env.CUDA_MEMORY_GROUP_BUDGET, m.env.CUDA_MEMORY_GROUP_BUDGET_SOURCE]).toEqual([
      'memoryLimit 256 MiB',
      String(2 ** 28),
      'memoryLimit 256 MiB',
    ]);
    expect(() => cm.memberEnvironment({ ...ok, budgetSource: 'x' })).toThrow(
      /Expected a string given with memoryLimit for budgetSource but received the string "x"/,
    );
    expect(() => cm.memberEnvironment({ ...ok, memoryLimit: 2 ** 28, budgetSource: 7 })).toThrow(/for budgetSource but received number 7/);
  });

  test('a fraction that rounds below the least budget is refused, not taken for "join the group’s" (0)', () => {
    expect(() => cm.memberEnvironment({ group: 'g', deviceKey: 'simulated', totalBytes: 1000, memoryFraction: 0.0001, env: {} })).toThrow(
      'memoryFraction 0.0001 of 1000 B is a budget of 0 bytes, below the least budget, 256 bytes',
    );
    expect(() => cm.createAllocator({ simulate: { totalBytes: 2 ** 20 }, shared: { name: 'tiny', memoryFraction: 0.0002 } })).toThrow(
      expect.objectContaining({
        code: 'ERR_OUT_OF_RANGE',
        message: 'shared.memoryFraction 0.0002 of 1 MiB is a budget of 209 bytes, below the least budget, 256 bytes',
      }),
    );
  });

  test('refusals name the argument and the value', () => {
    const ok = { group: 'g', deviceKey: 'simulated', totalBytes: 1000, env: {} };
    expect(() => cm.memberEnvironment({ ...ok, group: '../g' })).toThrow(/for group but received "..\/g"/);
    expect(() => cm.memberEnvironment({ ...ok, deviceKey: 'GPU-x' })).toThrow(
      /a GPU uuid .* for deviceKey but received the string "GPU-x"/,
    );
    expect(() => cm.memberEnvironment({ ...ok, memoryLimit: 1, memoryFraction: 0.5 })).toThrow(/both given/);
    expect(() => cm.memberEnvironment({ ...ok, memoryLimit: 100 })).toThrow(
      /an integer from 256 to 2\^53-1 for memoryLimit but received number 100/,
    );
    expect(() => cm.memberEnvironment({ ...ok, memoryFraction: 0 })).toThrow(
      /a number in \(0, 1\] for memoryFraction but received number 0/,
    );
  });

  test('an interposer whose path holds a space goes into LD_PRELOAD as a link in this user’s folder', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'with space '));
    const lib = path.join(dir, 'cuda_memory_preload.so');
    fs.writeFileSync(lib, 'x');
    const shm = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-shm-'));
    const saved = process.env.CUDA_MEMORY_SHM_DIR;
    process.env.CUDA_MEMORY_SHM_DIR = shm;
    try {
      const ok = { group: 'g', deviceKey: 'simulated', totalBytes: 1000, env: {} };
      const first = cm.memberEnvironment({ ...ok, preload: lib }).env.LD_PRELOAD;
      expect(first).not.toMatch(/[\s:]/);
      expect(path.dirname(first)).toBe(path.join(shm, `cuda-memory-${process.geteuid()}`));
      expect(fs.readlinkSync(first)).toBe(lib);
      expect((fs.statSync(path.dirname(first)).mode & 0o777).toString(8)).toBe('700');
      // The same link the next time; another file, another link.
      expect(cm.memberEnvironment({ ...ok, preload: lib }).env.LD_PRELOAD).toBe(first);
      // Nowhere to make one: refused, saying why.
      process.env.CUDA_MEMORY_SHM_DIR = lib;
      expect(() => cm.memberEnvironment({ ...ok, preload: lib })).toThrow(
        /holds a space or a colon, which LD_PRELOAD cannot carry, and no link to it could be made/,
      );
    } finally {
      if (saved === undefined) delete process.env.CUDA_MEMORY_SHM_DIR;
      else process.env.CUDA_MEMORY_SHM_DIR = saved;
      fs.rmSync(dir, { recursive: true, force: true });
      fs.rmSync(shm, { recursive: true, force: true });
    }
  });
});

// A stand-in NVML: one GPU of uuid UUID whose compute processes come from STANDIN_PROCS
// ("pid:bytes,pid:na"); the first sizing call reports one process fewer than the fill finds, as
// when a process starts between the two calls.
const STANDIN = `
#include <stdlib.h>
#include <string.h>
typedef struct { unsigned pid; unsigned long long used; unsigned gi, ci; } info_t;
static int calls;
int nvmlInit_v2(void) { return 0; }
int nvmlDeviceGetHandleByPciBusId_v2(const char* id, void** dev) { return 6; }
int nvmlDeviceGetHandleByUUID(const char* uuid, void** dev) {
  if (strcmp(uuid, "${UUID}")) return 6; /* NVML_ERROR_NOT_FOUND */
  *dev = (void*)1; return 0;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void* dev, unsigned* count, info_t* out) {
  info_t all[16]; unsigned n = 0;
  const char* s = getenv("STANDIN_PROCS");
  while (s && *s && n < 16) {
    all[n].pid = (unsigned)strtoul(s, (char**)&s, 10); s++;
    if (!strncmp(s, "na", 2)) { all[n].used = ~0ull; s += 2; } else all[n].used = strtoull(s, (char**)&s, 10);
    all[n].gi = all[n].ci = 0xffffffffu; n++;
    if (*s == ',') s++;
  }
  if (++calls == 1 && n > 0) { *count = n - 1; return 7; }
  if (*count < n) { *count = n; return 7; }
  memcpy(out, all, n * sizeof *out); *count = n; return 0;
}
`;

describe('NVML per-process used memory, through a stand-in libnvidia-ml.so.1', () => {
  let libdir = null;
  beforeAll(() => {
    libdir = path.join(tmp, 'nvml');
    fs.mkdirSync(libdir);
    fs.writeFileSync(path.join(libdir, 'standin.c'), STANDIN);
    const cc = spawnSync('cc', ['-shared', '-fPIC', '-o', path.join(libdir, 'libnvidia-ml.so.1'), path.join(libdir, 'standin.c')], {
      encoding: 'utf8',
    });
    if (cc.status !== 0) libdir = null;
  });

  const query = (uuid, procs) =>
    spawnSync(
      process.execPath,
      [
        '-e',
        `const { native } = require(${JSON.stringify(path.join(root, 'dist', 'binding', 'native'))}); console.log(JSON.stringify(native.deviceProcesses(${JSON.stringify(uuid)})))`,
      ],
      { encoding: 'utf8', env: { ...process.env, LD_LIBRARY_PATH: libdir, STANDIN_PROCS: procs } },
    );

  test('pids and bytes, "not available" as null, a count that grows between the calls, an unknown GPU as null', () => {
    if (!libdir || cm.status().available) return; // no C compiler; or a real NVML is loaded first
    const r = query(UUID, `4711:1073741824,4712:na,4713:524288`);
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toEqual([
      { pid: 4711, usedBytes: 2 ** 30 },
      { pid: 4712, usedBytes: null },
      { pid: 4713, usedBytes: 524288 },
    ]);
    expect(JSON.parse(query(UUID, '').stdout)).toEqual([]);
    expect(JSON.parse(query('GPU-ffffffff-ffff-ffff-ffff-ffffffffffff', '1:1').stdout)).toBeNull();
  });

  test('without NVML the answer is null', () => {
    const r = spawnSync(
      process.execPath,
      [
        '-e',
        `const { native } = require(${JSON.stringify(path.join(root, 'dist', 'binding', 'native'))}); console.log(JSON.stringify(native.deviceProcesses(${JSON.stringify(UUID)})))`,
      ],
      { encoding: 'utf8', env: { ...process.env, LD_LIBRARY_PATH: tmp } },
    );
    if (cm.status().available) return; // the driver's NVML answers here
    expect(r.stdout.trim()).toBe('null');
  });
});

// The interposer itself (built beside the addon) in a program of the stand-in CUDA driver that
// its own tests build (test/allocator/preload/): the member as the Node side sees it, NVML's
// figure included through the stand-in NVML above. Skipped where the interposer is not built.
describe('a preloaded program as the Node side sees it (stand-in driver and NVML)', () => {
  const so = path.join(root, 'build', 'Release', 'cuda_memory_preload.so');
  const fixtures = path.join(root, 'test', 'allocator', 'preload');
  const DEV = 'GPU-11111111-1111-1111-1111-111111111111'; // the stand-in driver's device 0
  const run = fs.existsSync(so) ? test : test.skip;

  run(
    `its pid, command, charge, bytes in use and NVML’s used memory in listGroups and top${fs.existsSync(so) ? '' : ` — skipped: ${so} is not built`}`,
    async () => {
      const bin = fs.mkdtempSync(path.join(tmp, 'bin-'));
      const shm = fs.mkdtempSync(path.join(tmp, 'shm-'));
      const cc = (args, cwd) => spawnSync('cc', ['-O1', ...args], { cwd, encoding: 'utf8' });
      expect(
        cc(['-shared', '-fPIC', 'fake_driver.c', '-o', `${bin}/libcuda.so.1`, '-Wl,-soname,libcuda.so.1', '-Wl,-Bsymbolic'], fixtures)
          .status,
      ).toBe(0);
      expect(cc(['program.c', 'fake_runtime.c', '-o', `${bin}/static`, '-ldl', '-lpthread'], fixtures).status).toBe(0);
      fs.writeFileSync(path.join(bin, 'nvml.c'), STANDIN.replace(UUID, DEV));
      expect(cc(['-shared', '-fPIC', 'nvml.c', '-o', `${bin}/libnvidia-ml.so.1`], bin).status).toBe(0);
      const env = { ...process.env, LD_LIBRARY_PATH: bin, CUDA_MEMORY_SHM_DIR: shm };
      const m = cm.memberEnvironment({
        group: 'standin',
        deviceKey: DEV,
        totalBytes: 2 ** 30,
        memoryLimit: 64 * 2 ** 20,
        preload: so,
        env,
      });
      const child = require('child_process').spawn(path.join(bin, 'static'), [], { env: m.env, stdio: ['pipe', 'pipe', 'pipe'] });
      try {
        child.stdin.write(`alloc malloc ${10 * 2 ** 20}\n`);
        const answer = await new Promise((r) => child.stdout.once('data', (d) => r(String(d))));
        expect(answer).toMatch(/^ok 0x/);
        const nvml = { ...env, STANDIN_PROCS: `${child.pid}:555745280,1:1` };
        let g = null;
        for (let i = 0; i < 100 && !(g && g.members[0] && g.members[0].bytesInUse); i++) {
          const top = spawnSync(process.execPath, [path.join(root, 'dist', 'cli.js'), 'top', '--json'], { encoding: 'utf8', env: nvml });
          g = JSON.parse(top.stdout).groups.find((x) => x.name === 'standin');
        }
        expect(g).toMatchObject({ device: DEV, budgetBytes: 64 * 2 ** 20, budgetSource: 'limit 64 MiB' });
        expect(g.members).toEqual([
          expect.objectContaining({
            pid: child.pid,
            command: path.join(bin, 'static'),
            bytesInUse: 10 * 2 ** 20,
            nvmlUsedBytes: 555745280,
            limitBytes: 64 * 2 ** 20, // a preloaded member's own limit is the group's budget
          }),
        ]);
        expect(g.members[0].poolBytes).toBeGreaterThanOrEqual(10 * 2 ** 20);
        const table = spawnSync(process.execPath, [path.join(root, 'dist', 'cli.js'), 'top'], { encoding: 'utf8', env: nvml }).stdout;
        expect(table).toContain('NVML: the members it lists use 530 MiB of the device (contexts and all)');
        expect(table).toMatch(
          new RegExp(`\\n\\s+${child.pid}\\s+\\S+ MiB\\s+10 MiB\\s+530 MiB\\s+\\S+ MiB\\s+64 MiB\\s+\\d{4}-\\S+\\s+${bin}/static\\n`),
        );
      } finally {
        child.kill('SIGKILL');
      }
    },
    60000,
  );
});

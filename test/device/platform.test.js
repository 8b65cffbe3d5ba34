'use strict';
// The platform's limits read from fixture trees and variables as each platform presents them
// (test/fixtures/platform: a Kubernetes pod's nested cgroups with dmem limits, a cgroup
// namespace, an MPS client's pipe directory, a host with cgroup v1 only), the allocator's limit
// and availableBytes() on simulated devices under them, and what info and doctor say. The plain
// case on a GPU is at the end.
const path = require('path');
const { spawnSync } = require('child_process');
const { cm, root, describeGpu } = require('../helpers');

const MiB = 2 ** 20;
const GiB = 2 ** 30;
const F = path.join(__dirname, '..', 'fixtures', 'platform');
const dev0 = { index: 0, pciBusId: '0000:03:00.0', uuid: 'GPU-aaaaaaaa-0000-0000-0000-000000000000' };
const dev1 = { index: 1, pciBusId: '0000:04:00.0', uuid: 'GPU-bbbbbbbb-0000-0000-0000-000000000000' };

describe('platformInfo() reads each platform as it presents itself', () => {
  test('a pod with nested dmem limits: the least max, where it is set, and the least headroom', () => {
    const p = cm.platformInfo({ root: path.join(F, 'dmem-k8s'), env: {}, devices: [dev0, dev1] });
    expect(p.cgroup.path).toBe('/kubepods.slice/pod1/ctr');
    expect(p.cgroup.dmem).toEqual([
      {
        region: 'drm/0000:03:00.0/vram0',
        maxBytes: 4 * GiB,
        limitedBy: '/kubepods.slice/pod1',
        currentBytes: GiB,
        headroomBytes: 512 * MiB,
      },
      { region: 'drm/0000:04:00.0/vram0', maxBytes: null, limitedBy: null, currentBytes: 0, headroomBytes: null },
    ]);
    expect(p.devices[0].limit).toEqual({
      kind: 'dmem',
      bytes: 4 * GiB,
      source: 'cgroup dmem.max drm/0000:03:00.0/vram0 4294967296 bytes in /kubepods.slice/pod1',
      headroomBytes: 512 * MiB,
    });
    expect(p.devices[1]).toEqual({ device: 1, limits: [], limit: null });
    expect(p.warnings).toEqual([]);
  });

  test('a cgroup namespace (the mount root is the container, its point has a space): the region without a PCI address is reported, not applied', () => {
    const p = cm.platformInfo({ root: path.join(F, 'namespace'), env: {}, devices: [dev0] });
    expect(p.cgroup.path).toBe('/');
    expect(p.cgroup.dir).toBe(path.join(F, 'namespace', 'sys/fs/cgroup v2'));
    expect(p.devices[0].limit.bytes).toBe(2 * GiB);
    expect(p.devices[0].limit.headroomBytes).toBe(1.5 * GiB);
    expect(p.warnings).toEqual(['dmem region drm/card1/vram0 names no PCI device, so no GPU could be matched to its limit']);
  });

  test('an MPS client: the pipe directory, its control pipe, the thread percentage and per-device pinned limits', () => {
    const env = {
      CUDA_MPS_PIPE_DIRECTORY: '/run/mps-pipes',
      CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: '0=1G,1=2048M',
      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: '25',
      PATH: '/usr/bin',
    };
    const p = cm.platformInfo({ root: path.join(F, 'mps'), env, devices: [dev0, dev1] });
    expect(p.mps).toEqual({
      pipeDirectory: '/run/mps-pipes',
      pipeDirectoryFromEnv: true,
      controlPipe: true,
      activeThreadPercentage: 25,
      pinnedDeviceMemLimit: '0=1G,1=2048M',
    });
    expect(p.variables).toEqual({
      CUDA_MPS_PIPE_DIRECTORY: '/run/mps-pipes',
      CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: '0=1G,1=2048M',
      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: '25',
    });
    expect(p.devices.map((d) => d.limit.bytes)).toEqual([GiB, 2 * GiB]);
    expect(p.devices[0].limit.source).toBe('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT 0=1073741824 bytes');
    // One size for all; no daemon in the default directory of a host without cgroup v2.
    const plain = cm.platformInfo({
      root: path.join(F, 'none'),
      env: { CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: '512MB' },
      devices: [dev0, dev1],
    });
    expect(plain.mps.controlPipe).toBe(false);
    expect(plain.cgroup).toEqual({ path: null, dir: null, dmem: [] });
    expect(plain.devices.map((d) => d.limit.bytes)).toEqual([512 * MiB, 512 * MiB]);
    expect(plain.devices[0].limit.source).toMatch(/no MPS control pipe in \/tmp\/nvidia-mps/);
  });

  test("HAMi's variables, and the smallest of several limits applies", () => {
    const env = {
      CUDA_DEVICE_MEMORY_LIMIT: '6g',
      CUDA_DEVICE_MEMORY_LIMIT_1: '3000m',
      CUDA_DEVICE_SM_LIMIT: '50',
      CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: '0=8G',
    };
    const p = cm.platformInfo({ root: path.join(F, 'dmem-k8s'), env, devices: [dev0, dev1] });
    expect(p.devices[0].limits.map((l) => [l.kind, l.bytes])).toEqual([
      ['mps', 8 * GiB],
      ['dmem', 4 * GiB],
      ['hami', 6 * GiB],
    ]);
    expect(p.devices[0].limit.kind).toBe('dmem');
    expect(p.devices[1].limit).toEqual({
      kind: 'hami',
      bytes: 3000 * MiB,
      source: 'CUDA_DEVICE_MEMORY_LIMIT_1=3000m (HAMi)',
      headroomBytes: null,
    });
    const bad = cm.platformInfo({
      root: path.join(F, 'none'),
      env: { CUDA_DEVICE_MEMORY_LIMIT: 'lots', CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: '0' },
      devices: [dev0],
    });
    expect(bad.devices[0].limit).toBeNull();
    expect(bad.warnings).toHaveLength(2);
  });

  test("the schedulers' variables: Slurm's shards and gpumem, KAI's share of the GPU and the NVIDIA toolkit's MiB", () => {
    const d = { ...dev0, totalMemory: 8 * GiB };
    const slurm = { SLURM_SHARDS_ON_NODE: '2', CUDA_MEMORY_SLURM_SHARDS_PER_GPU: '8' };
    const p = cm.platformInfo({ root: path.join(F, 'none'), env: slurm, devices: [d] });
    expect(p.devices[0].limit).toEqual({
      kind: 'slurm',
      bytes: 2 * GiB,
      source: 'SLURM_SHARDS_ON_NODE=2 of 8 shards per GPU (Slurm)',
      headroomBytes: null,
    });
    expect(p.variables).toMatchObject(slurm);
    const env = { CUDA_MEMORY_SLURM_GPUMEM: String(3 * GiB), GPU_PORTION: '0.125', NVIDIA_GPU_MEMORY_LIMIT: '1536' };
    const q = cm.platformInfo({ root: path.join(F, 'none'), env, devices: [d] });
    expect(q.devices[0].limits.map((l) => [l.kind, l.bytes, l.source])).toEqual([
      ['slurm', 3 * GiB, `CUDA_MEMORY_SLURM_GPUMEM=${3 * GiB} bytes (Slurm gpumem)`],
      ['kai', GiB, 'GPU_PORTION=0.125 of the GPU (KAI scheduler)'],
      ['nvidia', 1536 * MiB, 'NVIDIA_GPU_MEMORY_LIMIT=1536 (NVIDIA container toolkit)'],
    ]);
    expect(q.devices[0].limit.kind).toBe('kai');
    // Hostile values are warnings, and bind nothing.
    const bad = cm.platformInfo({
      root: path.join(F, 'none'),
      env: { SLURM_SHARDS_ON_NODE: '9', CUDA_MEMORY_SLURM_SHARDS_PER_GPU: '8', GPU_PORTION: '1.5', NVIDIA_GPU_MEMORY_LIMIT: '0' },
      devices: [d],
    });
    expect(bad.devices[0].limit).toBeNull();
    expect(bad.warnings).toHaveLength(3);
    // The default limit and availableBytes() of an allocator in such a job name the scheduler.
    const a = cm.createAllocator({
      allowGrowth: true,
      simulate: { totalBytes: 8 * GiB, platform: { root: path.join(F, 'none'), env: slurm } },
    });
    try {
      expect(a.limitBytes).toBe(2 * GiB);
      expect(a.limitSource).toMatch(/^the platform's slurm limit 2 GiB \(SLURM_SHARDS_ON_NODE=2 of 8 shards per GPU \(Slurm\)\)/);
      const av = a.availableBytes();
      expect(av.terms.find((t) => t.name === 'platform').detail).toMatch(/the slurm limit of 2 GiB/);
    } finally {
      a.close();
    }
  });

  test('CUDA_MEMORY_PLATFORM_ROOT moves the default root; bad options are refused', () => {
    const saved = process.env.CUDA_MEMORY_PLATFORM_ROOT;
    process.env.CUDA_MEMORY_PLATFORM_ROOT = path.join(F, 'dmem-k8s');
    try {
      expect(cm.platformInfo({ env: {}, devices: [dev0] }).devices[0].limit.bytes).toBe(4 * GiB);
    } finally {
      if (saved === undefined) delete process.env.CUDA_MEMORY_PLATFORM_ROOT;
      else process.env.CUDA_MEMORY_PLATFORM_ROOT = saved;
    }
    expect(() => cm.platformInfo({ root: '' })).toThrow(/options.root/);
    expect(() => cm.platformInfo({ devices: 'all' })).toThrow(/options.devices/);
  });

  test('a limit at or beyond the device binds nothing: 2^64 - 1, 8192T, a dmem.max of 2^64 - 1', () => {
    const huge = [
      { CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: '18446744073709551615' },
      { CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: '0=8192T' },
      { CUDA_DEVICE_MEMORY_LIMIT: '8192T' },
      { CUDA_DEVICE_MEMORY_LIMIT_0: '9007199254740992' },
    ];
    for (const env of huge) {
      const p = cm.platformInfo({ root: path.join(F, 'none'), env, devices: [dev0] });
      expect(p.devices[0]).toEqual({ device: 0, limits: [], limit: null });
      expect(p.warnings).toEqual([]);
    }
    // dmem-huge: the job's 2^64 - 1 reads as no limit, the top's 80 GiB binds a device larger
    // than that, and nothing on an 80 GiB device.
    const read = (totalMemory) => cm.platformInfo({ root: path.join(F, 'dmem-huge'), env: {}, devices: [{ ...dev0, totalMemory }] });
    expect(read(undefined).cgroup.dmem[0]).toMatchObject({ maxBytes: 80 * GiB, limitedBy: '/', currentBytes: GiB });
    expect(read(undefined).cgroup.dmem[1]).toMatchObject({ maxBytes: null });
    expect(read(94 * GiB).devices[0].limit.bytes).toBe(80 * GiB);
    expect(read(80 * GiB).devices[0].limit).toBeNull();
    expect(() => read(-1)).toThrow(
      expect.objectContaining({ code: 'ERR_OUT_OF_RANGE', message: expect.stringMatching(/options\.devices\[0\]\.totalMemory/) }),
    );
  });

  test('the cgroup is placed under a mount by path components: /a/bc is not under /a/b', () => {
    const p = cm.platformInfo({ root: path.join(F, 'prefix'), env: {}, devices: [dev0] });
    expect(p.cgroup.path).toBe('/a/bc');
    expect(p.cgroup.dir).toBe(path.join(F, 'prefix', 'mnt/a/bc'));
    expect(p.devices[0].limit.bytes).toBe(3 * GiB);
  });

  test('a FIFO, a directory or a huge file where a platform file should be is reported, never waited on (child process)', () => {
    const fs = require('fs');
    const os = require('os');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-platform-'));
    try {
      fs.mkdirSync(path.join(dir, 'proc', 'self'), { recursive: true });
      fs.mkdirSync(path.join(dir, 'cg'));
      fs.writeFileSync(path.join(dir, 'proc', 'self', 'cgroup'), '0::/\n');
      fs.writeFileSync(path.join(dir, 'proc', 'self', 'mountinfo'), '35 24 0:30 / /cg rw - cgroup2 cgroup2 rw\n');
      expect(spawnSync('mkfifo', [path.join(dir, 'cg', 'dmem.max')]).status).toBe(0);
      fs.mkdirSync(path.join(dir, 'cg', 'dmem.current'));
      const script = `const cm = require(${JSON.stringify(root)}); console.log(JSON.stringify(cm.status().platform.warnings));`;
      const r = spawnSync(process.execPath, ['-e', script], {
        encoding: 'utf8',
        env: { ...process.env, CUDA_MEMORY_PLATFORM_ROOT: dir },
        timeout: 30000,
      });
      expect(r.signal).toBeNull();
      expect(r.status).toBe(0);
      const warnings = JSON.parse(r.stdout);
      expect(warnings).toEqual(
        expect.arrayContaining([
          `${path.join(dir, 'cg', 'dmem.max')}: not a regular file; ignored`,
          `${path.join(dir, 'cg', 'dmem.current')}: not a regular file; ignored`,
        ]),
      );
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('status() carries the platform in brief and never throws', () => {
    const st = cm.status();
    expect(typeof st.platform.limited).toBe('boolean');
    expect(typeof st.platform.mpsClient).toBe('boolean');
    expect(Array.isArray(st.platform.limits) && Array.isArray(st.platform.warnings)).toBe(true);
    expect(st.platform.limited).toBe(st.platform.limits.length > 0);
  });
});

describe('the allocator under a platform limit (simulated device)', () => {
  const sim = (opts, platform) => cm.createAllocator({ ...opts, simulate: { totalBytes: 80 * GiB, platform } });
  const mps4g = { env: { CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: '0=4G' }, root: path.join(F, 'none') };
  const dmem = { root: path.join(F, 'dmem-k8s'), env: {}, pciBusId: '0000:03:00.0' };

  test('the default limit takes the platform limit when smaller, and limitSource names it', () => {
    const a = sim({ allowGrowth: true }, mps4g);
    expect(a.limitBytes).toBe(4 * GiB);
    expect(a.limitSource).toMatch(
      /^the platform's mps limit 4 GiB \(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT 0=4294967296 bytes.*\) \(below the 80\.00 GiB free minus the 1\.76 GiB reserve/,
    );
    expect(a.platformLimits().limit.kind).toBe('mps');
    a.close();
    // dmem says what is still free under its limit: the default takes that.
    const b = sim({ allowGrowth: true }, dmem);
    expect(b.limitBytes).toBe(512 * MiB);
    expect(b.limitSource).toMatch(/^the platform's dmem limit 4 GiB with 512 MiB still free under it/);
    b.close();
    // Without simulate.platform a simulated device has no platform limit.
    const c = sim({ allowGrowth: true });
    expect(c.limitBytes).toBe(80 * GiB - 1800 * MiB);
    expect(c.platformLimits()).toEqual({ device: 0, limits: [], limit: null });
    c.close();
  });

  test('an explicit limit above the platform limit is refused, naming it; at or below it stands', () => {
    const refused = (opts) => {
      try {
        sim(opts, mps4g);
      } catch (e) {
        return e;
      }
      throw new Error('not refused');
    };
    const e = refused({ memoryLimit: 4 * GiB + 256 });
    expect(e.name).toBe('RangeError');
    expect(e.code).toBe('ERR_OUT_OF_RANGE');
    expect(e.message).toMatch(
      /^memoryLimit \(4\.00 GiB\) is above the platform's limit of 4\.00 GiB on this device \(mps: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT/,
    );
    expect(e.message).toMatch(/refused rather than cut; ask for at most 4294967296 bytes/);
    expect(refused({ memoryFraction: 0.1 }).message).toMatch(
      /^memoryFraction 0\.1 of 80\.00 GiB total \(8\.00 GiB\) is above the platform's limit/,
    );
    const a = sim({ allowGrowth: true, memoryLimit: 4 * GiB }, mps4g);
    expect(a.limitBytes).toBe(4 * GiB);
    expect(() => a.setMemoryFraction(0.5)).toThrow(/fraction 0\.5 of 80 GiB is above the platform's limit of 4 GiB on this device \(mps:/);
    expect(a.setMemoryFraction(0.025)).toBe(2 * GiB);
    a.close();
  });

  test('a platform limit of 2^53 bytes or more leaves createAllocator as it was (memoryLimit stands)', () => {
    const platforms = [
      { root: path.join(F, 'none'), env: { CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: '18446744073709551615' } },
      { root: path.join(F, 'none'), env: { CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: '0=8192T' } },
      { root: path.join(F, 'none'), env: { CUDA_DEVICE_MEMORY_LIMIT: '8192T' } },
      { root: path.join(F, 'dmem-huge'), env: {}, pciBusId: '0000:04:00.0' },
      // 80 GiB at the top of dmem-huge, on this 80 GiB device: at its size, so no limit.
      { root: path.join(F, 'dmem-huge'), env: {}, pciBusId: '0000:03:00.0' },
    ];
    for (const platform of platforms) {
      const a = sim({ allowGrowth: true, memoryLimit: GiB }, platform);
      expect(a.limitBytes).toBe(GiB);
      expect(a.platformLimits().limit).toBeNull();
      expect(a.availableBytes().terms.map((t) => t.name)).toEqual(['device', 'allocator']);
      a.close();
      const d = sim({ allowGrowth: true }, platform);
      expect(d.limitBytes).toBe(80 * GiB - 1800 * MiB);
      d.close();
    }
  });

  test('availableBytes(): each term, and the least binds', () => {
    const a = sim({ allowGrowth: true, memoryLimit: 3 * GiB }, mps4g);
    const b = a.alloc(MiB); // a 2 MiB region, 1 MiB of it in use
    let av = a.availableBytes();
    expect(av.terms.map((t) => [t.name, t.bytes])).toEqual([
      ['device', 80 * GiB - 2 * MiB + MiB],
      ['allocator', 3 * GiB - MiB],
      ['platform', 4 * GiB - 2 * MiB + MiB],
    ]);
    expect(av).toMatchObject({ device: 0, simulated: true, availableBytes: 3 * GiB - MiB, limitedBy: 'allocator' });
    expect(av.terms[2].detail).toMatch(/the mps limit of 4 GiB .* less 2 MiB this process's allocators hold, plus 1 MiB free in the pool/);
    b.free();
    a.close();
    // Under dmem the platform's own headroom binds.
    const d = sim({ allowGrowth: true, memoryLimit: 3 * GiB }, dmem);
    const x = d.alloc(MiB);
    av = d.availableBytes();
    expect(av.limitedBy).toBe('platform');
    expect(av.availableBytes).toBe(512 * MiB + MiB);
    expect(av.terms.find((t) => t.name === 'platform').detail).toMatch(/^512 MiB still free under the dmem limit of 4 GiB/);
    x.free();
    d.close();
  });

  test('availableBytes() with a group budget adds the group term', () => {
    const a = sim({ allowGrowth: true, shared: { name: `platform-test-${process.pid}`, memoryLimit: 64 * MiB } }, mps4g);
    const b = a.alloc(MiB);
    const av = a.availableBytes();
    expect(av.terms.find((t) => t.name === 'group')).toMatchObject({ bytes: 64 * MiB - 2 * MiB + MiB });
    expect(av.limitedBy).toBe('allocator'); // its own limit is the group budget: 64 MiB - 1 MiB in use
    expect(av.availableBytes).toBe(64 * MiB - MiB);
    b.free();
    a.close();
  });
});

describe('info and doctor say which limit applies and where it came from', () => {
  const cli = path.join(root, 'dist', 'cli.js');
  const env = {
    ...process.env,
    CUDA_MEMORY_PLATFORM_ROOT: path.join(F, 'mps'),
    CUDA_MPS_PIPE_DIRECTORY: '/run/mps-pipes',
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: '25',
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: '0=1G',
  };
  test('cuda-memory info prints the platform, and --json carries it', () => {
    const r = spawnSync(process.execPath, [cli, 'info'], { encoding: 'utf8', env, timeout: 60000 });
    expect(r.stdout).toMatch(
      /^platform: MPS client \(control pipe in \/run\/mps-pipes, 25% of the SMs, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G\); cgroup \/user\.slice\/user-1000\.slice\/session-1\.scope, no dmem limit$/m,
    );
    if (cm.status().available) {
      // On a GPU, per device: a HAMi variable (which only HAMi's preloaded shim would act on).
      const hami = { ...process.env, CUDA_MEMORY_PLATFORM_ROOT: path.join(F, 'none'), CUDA_DEVICE_MEMORY_LIMIT_0: '1g' };
      const g = spawnSync(process.execPath, [cli, 'info'], { encoding: 'utf8', env: hami, timeout: 60000 });
      expect(g.stdout).toMatch(/^ {2}platform limit: 1 GiB from hami \(CUDA_DEVICE_MEMORY_LIMIT_0=1g \(HAMi\)\)$/m);
    }
    const j = spawnSync(process.execPath, [cli, 'info', '--json'], { encoding: 'utf8', env, timeout: 60000 });
    const out = JSON.parse(j.stdout);
    expect(out.platform.mps).toMatchObject({ controlPipe: true, activeThreadPercentage: 25 });
  });

  test("doctor's platform check names the limit, or says there is none and why", () => {
    const { platformCheck } = require(path.join(root, 'dist', 'bench', 'doctor.js'));
    const saved = { ...process.env };
    Object.assign(process.env, { CUDA_MEMORY_PLATFORM_ROOT: path.join(F, 'none') });
    try {
      const c = platformCheck(0);
      expect(c.status).toBe('pass');
      if (!cm.status().available)
        expect(c.detail).toMatch(
          /^no platform limit: not a MIG instance, no MPS pinned-memory limit, no dmem.max in cgroup \(no cgroup v2\), no HAMi limit/,
        );
    } finally {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    }
  });
});

describeGpu('the platform on a GPU (the plain case)', () => {
  test('devices() says MIG and the platform limit; availableBytes(0) reports the device term', () => {
    const [d] = cm.devices();
    expect(d.mig === null || typeof d.mig.enabled === 'boolean').toBe(true);
    if (d.mig && !d.mig.instance) expect(d.mig.parentUuid.toLowerCase()).toBe(d.uuid.toLowerCase());
    const st = cm.status();
    expect(st.platform.limited).toBe(st.platform.limits.length > 0);
    const av = cm.availableBytes(0);
    expect(av.terms[0].name).toBe('device');
    expect(av.availableBytes).toBeGreaterThan(0);
    expect(av.availableBytes).toBeLessThanOrEqual(av.terms[0].bytes);
    expect(av.availableBytes).toBeLessThanOrEqual(cm.memGetInfo(0).total);
    console.log(`platform on this GPU: ${JSON.stringify(st.platform)}; availableBytes(0): ${av.availableBytes} (${av.limitedBy})`);
  });

  test('an allocator on the GPU: its own limit binds, to the byte', () => {
    const a = cm.createAllocator({ allowGrowth: true, memoryLimit: 64 * MiB });
    const b = a.alloc(MiB);
    const av = a.availableBytes();
    expect(av.simulated).toBe(false);
    expect(av.limitedBy).toBe('allocator');
    expect(av.availableBytes).toBe(63 * MiB);
    b.free();
    a.close();
    const { platformFamilies } = require(path.join(root, 'dist', 'metrics', 'families.js'));
    const [limits, available] = platformFamilies(true);
    expect(limits.name).toBe('cuda_memory_platform_limit_bytes');
    expect(available.samples[0].value).toBeGreaterThan(0);
  });
});

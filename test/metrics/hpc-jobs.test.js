'use strict';
// dcgm-exporter's labels: the HPC job mapping files a group's members are written as
// (lib/metrics/hpc-jobs.ts), and the gpu/UUID labels on gauges and textfiles.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { cm, metrics, root, describeGpu, thrown: code } = require('../helpers');
const { hpcJobMapping, writeHpcJobMapping } = metrics;
const { dcgmLabels } = require(path.join(root, 'dist', 'metrics', 'families'));

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-memory-hpc-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
const index = { 'GPU-aaa': 0, 'GPU-bbb': 3 };
const indexOf = (uuid) => index[uuid] ?? null;

test('one file per GPU, named by its NVML index, a group per line; simulated and unknown GPUs left out', () => {
  const groups = [
    { name: 'train', device: 'GPU-aaa' },
    { name: 'eval', device: 'GPU-aaa' },
    { name: 'serve', device: 'GPU-bbb' },
    { name: 'ci', device: 'simulated' },
    { name: 'elsewhere', device: 'GPU-zzz' },
  ];
  const { files, skipped } = hpcJobMapping(groups, indexOf);
  expect([...files]).toEqual([
    ['0', ['eval', 'train']],
    ['3', ['serve']],
  ]);
  expect(skipped).toEqual(['ci on simulated', 'elsewhere on GPU-zzz']);
});

test("a scheduler job's group is written as the job's id, as Slurm names it", () => {
  const job = { scheduler: 'slurm', id: '4711', uid: 1000, user: 'alice' };
  const { files } = hpcJobMapping(
    [
      { name: 'slurm-4711', device: 'GPU-aaa', job },
      { name: 'train', device: 'GPU-aaa', job: null },
      { name: 'odd', device: 'GPU-bbb', job: { id: '1\n2' } },
    ],
    indexOf,
  );
  expect([...files]).toEqual([
    ['0', ['4711', 'train']],
    ['3', ['odd']],
  ]);
});

test('writes the files whole, and removes the file of a GPU whose groups are gone', () => {
  const dir = path.join(tmp, 'map');
  const first = writeHpcJobMapping(
    dir,
    [
      { name: 'train', device: 'GPU-aaa' },
      { name: 'serve', device: 'GPU-bbb' },
    ],
    indexOf,
    [0, 3],
  );
  expect(first.written.map((f) => path.basename(f)).sort()).toEqual(['0', '3']);
  expect(fs.readFileSync(path.join(dir, '0'), 'utf8')).toBe('train\n');
  expect(fs.readFileSync(path.join(dir, '3'), 'utf8')).toBe('serve\n');
  const second = writeHpcJobMapping(dir, [{ name: 'serve', device: 'GPU-bbb' }], indexOf, [0, 3]);
  expect(second.removed).toEqual([path.join(dir, '0')]);
  expect(fs.readdirSync(dir).sort()).toEqual(['3']);
});

test("dcgm-exporter's labels: gpu is NVML's index, UUID the uuid; none without a uuid", () => {
  expect(dcgmLabels('GPU-aaa', 2)).toEqual({ gpu: '2', UUID: 'GPU-aaa' });
  expect(dcgmLabels('GPU-aaa', null)).toEqual({ UUID: 'GPU-aaa' });
  expect(dcgmLabels(undefined, 2)).toEqual({});
});

test('cuda-memory top --hpc-job-mapping-dir: a folder that cannot be made is a usage error naming it', () => {
  const blocker = path.join(tmp, 'file');
  fs.writeFileSync(blocker, 'x');
  const r = spawnSync(process.execPath, [path.join(root, 'dist', 'cli.js'), 'top', '--hpc-job-mapping-dir', path.join(blocker, 'dir')], {
    encoding: 'utf8',
    env: { ...process.env, CUDA_MEMORY_SHM_DIR: tmp },
  });
  expect(r.status).toBe(2);
  expect(r.stderr).toContain(
    `cannot write the HPC job mapping in ${path.join(blocker, 'dir')}: a part of its path is not a folder (ENOTDIR); check the path`,
  );
});

describeGpu("dcgm-exporter's labels on this machine's GPUs", () => {
  test('device gauges and the doctor textfile carry gpu (NVML index) and UUID', () => {
    const d = cm.devices()[0];
    const text = metrics.metricsText({ devices: [0] });
    expect(text).toContain(`gpu="${d.nvmlIndex}",UUID="${d.uuid}"`);
    const file = path.join(tmp, 'doctor.prom');
    spawnSync(process.execPath, [path.join(root, 'dist', 'cli.js'), 'doctor', '--prometheus', file, '--bytes', '64MiB'], {
      encoding: 'utf8',
    });
    expect(fs.readFileSync(file, 'utf8')).toContain(`gpu="${d.nvmlIndex}",UUID="${d.uuid}"`);
  });

  test('a group on the GPU is written under its NVML index', () => {
    const shm = fs.mkdtempSync(path.join(tmp, 'shm-'));
    const dir = path.join(tmp, 'gpu-map');
    const holder = `
      const cm = require(${JSON.stringify(root)});
      const a = cm.createAllocator({ allowGrowth: true, shared: { name: 'hpc-map-test', memoryLimit: 2 ** 28 } });
      a.alloc(1024);
      process.stdout.write('ready\\n');
      setTimeout(() => {}, 60000);`;
    const child = require('child_process').spawn(process.execPath, ['-e', holder], { env: { ...process.env, CUDA_MEMORY_SHM_DIR: shm } });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error('the group member did not start within 60 s'));
      }, 60000);
      child.once('exit', (code) => reject(new Error(`the group member exited (${code}) before it was ready`)));
      child.stdout.once('data', () => {
        clearTimeout(timer);
        try {
          const r = spawnSync(process.execPath, [path.join(root, 'dist', 'cli.js'), 'top', '--hpc-job-mapping-dir', dir], {
            encoding: 'utf8',
            env: { ...process.env, CUDA_MEMORY_SHM_DIR: shm },
          });
          expect(r.status).toBe(0);
          expect(fs.readFileSync(path.join(dir, String(cm.devices()[0].nvmlIndex)), 'utf8')).toBe('hpc-map-test\n');
          resolve();
        } catch (e) {
          reject(e);
        } finally {
          child.kill('SIGKILL');
        }
      });
    });
  });
});

test("several GPUs' textfile: gpu and UUID from the report's NVML indices, each GPU's versions and clocks", () => {
  const { multiBenchFamilies } = require(path.join(root, 'dist', 'metrics', 'families'));
  const { formatExposition } = require(path.join(root, 'dist', 'metrics', 'exposition'));
  const state = (sm) => ({
    nvidiaDriverVersion: '550.54.15',
    cudaDriverVersion: '12.4',
    runtimeVersion: '13.0',
    library: '0.1.0',
    clocks: { smClockMHz: sm, smClockMaxMHz: 1980, memoryClockMHz: 2619, memoryClockMaxMHz: 2619, eventReasons: 0, reasons: [] },
    processes: [],
    gpuNumaNode: -1,
  });
  const environment = {
    gpus: [0, 1].map((i) => ({
      index: i,
      name: 'Test GPU',
      uuid: `GPU-${i}`,
      pciBusId: '',
      nvmlIndex: i + 2,
      numaNode: -1,
      state: state(1000 + i),
    })),
  };
  const text = formatExposition(multiBenchFamilies({ environment, results: [], aggregate: [], options: {} }, undefined, [], 1));
  expect(text).toContain(
    'cuda_memory_bench_clock_hertz{device="1",uuid="GPU-1",gpu="3",UUID="GPU-1",clock="sm",state="current"} 1001000000',
  );
  expect(text.match(/cuda_memory_bench_versions_info\{/g)).toHaveLength(2);
  expect(text).toContain('cuda_memory_bench_versions_info{device="0",uuid="GPU-0",gpu="2",UUID="GPU-0",nvidia_driver="550.54.15"');
});

test('groups, indexOf, dir and gpuIndices that are not what they should be are refused with coded errors naming them', () => {
  expect(code(() => hpcJobMapping(null, indexOf))).toMatch(/^ERR_INVALID_ARG_TYPE: .* for groups but received null/);
  expect(code(() => hpcJobMapping([{ name: Symbol('g'), device: 'GPU-aaa' }], indexOf))).toMatch(
    /for groups\[0\]\.name but received a symbol/,
  );
  expect(code(() => hpcJobMapping([{ name: 'a\nb', device: 'GPU-aaa' }], indexOf))).toMatch(/for groups\[0\]\.name but received/);
  expect(code(() => hpcJobMapping([{ name: 'a', device: 5 }], indexOf))).toMatch(/for groups\[0\]\.device but received number 5/);
  expect(code(() => hpcJobMapping([{ name: 'a', device: 'GPU-aaa' }], 'x'))).toMatch(/^ERR_INVALID_ARG_TYPE: .* for indexOf /);
  expect(code(() => hpcJobMapping([{ name: 'a', device: 'GPU-aaa' }], () => -1))).toMatch(
    /^ERR_OUT_OF_RANGE: .* for indexOf\("GPU-aaa"\) but received number -1/,
  );
  expect(code(() => writeHpcJobMapping(3, [], indexOf, []))).toMatch(/^ERR_INVALID_ARG_TYPE: .* for dir but received number 3/);
  expect(code(() => writeHpcJobMapping(path.join(tmp, 'bad'), [], indexOf, [0, , 1]))).toMatch(/for gpuIndices /); // eslint-disable-line no-sparse-arrays
  expect(fs.existsSync(path.join(tmp, 'bad'))).toBe(false);
});

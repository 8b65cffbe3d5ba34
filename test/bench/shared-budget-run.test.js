'use strict';
// scripts/shared-budget-run.js without a GPU: what it judges (the NVML samples, the checks of a
// finished run, M ± 5%), its plan (--dry-run), the Node member on a simulated device, and the
// PyTorch script's syntax. The run itself needs the GPU machine (docs/processes.md says how).
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { root, expectEachFaultFailsItsCheck } = require('../helpers');

const script = path.join(root, 'scripts', 'shared-budget-run.js');
const { judgeSamples, checksOf, replayBudgets, lastJson } = require(script);
const GiB = 2 ** 30;

// A finished run whose every check passes; each test breaks one thing.
function passing() {
  return {
    budgetBytes: 20 * GiB,
    thresholdBytes: 22 * GiB,
    nvml: judgeSamples(
      [
        { t: 0, totalBytes: 1 * GiB },
        { t: 100, totalBytes: 22 * GiB },
      ],
      22 * GiB,
    ),
    ledger: { samples: 2, maxChargedBytes: 20 * GiB },
    members: {
      node: { exitCode: 0, errorName: 'OutOfMemoryError', result: { allocs: 10, refusals: 2 } },
      torch: { exitCode: 0, errorName: 'torch.OutOfMemoryError', result: { allocs: 10, refusals: 1 } },
      cpp: { exitCode: 0, errorName: 'cudaErrorMemoryAllocation', result: { allocs: 10, refusals: 5 } },
      victim: { exitCode: 137, errorName: 'killed', result: null },
    },
    kill: { pid: 42, chargedBytes: GiB, reclaimedAfterMs: 80 },
    replay: {
      smallestBudgetBytes: 4 * GiB,
      over: { budgetBytes: 4.2 * GiB, survived: true },
      under: { budgetBytes: 3.8 * GiB, survived: false, refusedAs: 'torch.OutOfMemoryError' },
    },
  };
}

test('the NVML samples: the most, when, how many above the threshold, the margin', () => {
  const j = judgeSamples(
    [
      { t: 0, totalBytes: 5 },
      { t: 100, totalBytes: 12 },
      { t: 200, totalBytes: 11 },
      { t: 300, totalBytes: 9 },
    ],
    10,
  );
  expect(j).toEqual({
    samples: 4,
    maxSumBytes: 12,
    maxSumAtMs: 100,
    samplesOverThreshold: 2,
    samplesOverWhileKilledListed: 0,
    marginBytes: -2,
  });
});

test('a sample above the threshold after a kill, while NVML still lists the killed process, is counted apart', () => {
  const samples = [
    { t: 0, totalBytes: 9, processes: [{ pid: 7 }, { pid: 8 }] },
    { t: 100, totalBytes: 12, processes: [{ pid: 7 }, { pid: 8 }] }, // before the kill: over
    { t: 200, totalBytes: 12, processes: [{ pid: 7 }, { pid: 8 }] }, // after, 7 still listed
    { t: 300, totalBytes: 11, processes: [{ pid: 8 }] }, // after, 7 gone: over
  ];
  const j = judgeSamples(samples, 10, { pid: 7, atMs: 150 });
  expect(j).toMatchObject({ samplesOverThreshold: 2, samplesOverWhileKilledListed: 1 });
  expect(judgeSamples(samples, 10)).toMatchObject({ samplesOverThreshold: 3, samplesOverWhileKilledListed: 0 });
});

test('a run that meets the issue passes every check; each fault fails its own check only', () => {
  expect(checksOf(passing())).toHaveLength(7);
  const cases = [
    [(r) => (r.nvml = judgeSamples([{ t: 0, totalBytes: 22 * GiB + 1 }], r.thresholdBytes)), /^NVML/],
    [(r) => (r.nvml = judgeSamples([], r.thresholdBytes)), /^NVML/],
    [(r) => (r.ledger.maxChargedBytes = 20 * GiB + 1), /^ledger/],
    [(r) => (r.members.torch.exitCode = 1), /^torch:/],
    [(r) => (r.members.cpp.result.refusals = 0), /^cpp:/],
    [(r) => (r.members.node.result = null), /^node:/],
    [(r) => (r.kill.reclaimedAfterMs = 1000), /SIGKILL/],
    [(r) => (r.kill.reclaimedAfterMs = null), /SIGKILL/],
    [(r) => (r.replay.over.survived = false), /^replay/],
    [(r) => (r.replay.under.survived = true), /^replay/],
    [(r) => (r.replay.under.refusedAs = 'builtins.RuntimeError'), /^replay/],
  ];
  expectEachFaultFailsItsCheck(passing, checksOf, cases);
});

test('M ± 5% in whole bytes; the last JSON line of a program’s output', () => {
  expect(replayBudgets(1000)).toEqual({ over: 1050, under: 950 });
  expect(replayBudgets(4 * GiB + 7)).toEqual({ over: Math.floor((4 * GiB + 7) * 1.05), under: Math.floor((4 * GiB + 7) * 0.95) });
  expect(lastJson('ready\n{"allocs": 3}\nnoise\n')).toEqual({ allocs: 3 });
  expect(lastJson('no json here')).toBeNull();
});

test('--dry-run: the plan, every member under cuda-memory run with the budget, the C++ program twice', () => {
  const r = spawnSync(process.execPath, [script, '--dry-run', '--budget', '20GiB', '--seconds', '120'], { encoding: 'utf8' });
  expect(r.status).toBe(0);
  const p = JSON.parse(r.stdout);
  const budget = String(20 * GiB);
  for (const k of ['torch', 'cpp', 'victim']) {
    const cmd = p.shared[k];
    expect(cmd.slice(1, 7)).toEqual([path.join(root, 'dist', 'cli.js'), 'run', '--group', p.shared.node[4], '--limit', budget]);
    expect(cmd).toContain('--');
  }
  expect(p.shared.node).toEqual(expect.arrayContaining(['member', '--budget', budget]));
  expect(p.shared.killVictimAfterSeconds).toBe(60);
  expect(p.replay.record).toEqual(expect.arrayContaining(['--trace', '--mode', 'replay', '--seed', '7']));
  expect(p.replay.smallest).toEqual(expect.arrayContaining(['replay', '--smallest-budget', '--json']));
  // PyTorch's context is measured with the allocator settings it runs with.
  const conf = spawnSync(process.execPath, [script, '--dry-run', '--torch-alloc-conf', 'backend:cudaMallocAsync'], { encoding: 'utf8' });
  const withConf = JSON.parse(conf.stdout);
  expect(withConf.overhead.torchEnv).toEqual({ PYTORCH_CUDA_ALLOC_CONF: 'backend:cudaMallocAsync' });
  expect(withConf.shared.torchEnv).toEqual(withConf.overhead.torchEnv);
  expect(p.overhead.torchEnv).toEqual({});
  const usage = spawnSync(process.execPath, [script], { encoding: 'utf8' });
  expect(usage.status).toBe(2);
  expect(usage.stderr).toMatch(/^usage: node scripts\/shared-budget-run.js --out DIR/);
});

test('the Node member on a simulated device: refusals caught as OutOfMemoryError, one JSON line', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-shared-run-'));
  try {
    const r = spawnSync(
      process.execPath,
      [script, 'member', '--group', 'member', '--budget', String(GiB), '--seconds', '1', '--seed', '3', '--simulate', '80GiB'],
      { encoding: 'utf8', timeout: 60000, env: { ...process.env, CUDA_MEMORY_SHM_DIR: dir } },
    );
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const j = lastJson(r.stdout);
    expect(j.refusals).toBeGreaterThan(0);
    expect(j).toMatchObject({ refusedAs: 'OutOfMemoryError' });
    expect(j.peakPoolBytes).toBeLessThanOrEqual(GiB);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('scripts/preload/torch-churn.py is valid Python', () => {
  const py = spawnSync(
    'python3',
    ['-c', 'import ast, sys; ast.parse(open(sys.argv[1]).read())', path.join(root, 'scripts', 'preload', 'torch-churn.py')],
    {
      encoding: 'utf8',
    },
  );
  if (py.error) return; // no python3 here
  expect(py.stderr).toBe('');
  expect(py.status).toBe(0);
});

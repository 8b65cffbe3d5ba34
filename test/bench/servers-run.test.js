'use strict';
// scripts/servers-run.js without a GPU: what it judges (the samples of a step, the checks of a
// finished run, each broken in turn), its plan (--dry-run), where it looks for the CUDA libraries,
// the GGUF file scripts/servers/gguf.js writes (read back here), and the Python helpers' syntax.
// The run itself needs the GPU machine (docs/processes.md says how).
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { root, expectEachFaultFailsItsCheck } = require('../helpers');

const script = path.join(root, 'scripts', 'servers-run.js');
const { judgeSamples, checksOf, lastJson, findLibraries, step, overheadOf, plan, prologExports, slurmProlog } = require(script);
const gguf = require(path.join(root, 'scripts', 'servers', 'gguf.js'));
const GiB = 2 ** 30;
const MiB = 2 ** 20;

// A step whose samples are [phase, nvmlBytes, chargedBytes] triples.
function stepOf(budgetBytes, thresholdBytes, rows, result, exitCode = 0) {
  const samples = rows.map(([phase, nvmlBytes, chargedBytes], i) => ({ t: i * 100, phase, nvmlBytes, chargedBytes }));
  return { exitCode, budgetBytes, thresholdBytes, result, judged: judgeSamples(samples, thresholdBytes, budgetBytes) };
}

// A finished run whose every check passes; each case below breaks one thing.
function passing() {
  const total = 140 * GiB;
  const ctx = 500 * MiB;
  const B8 = 8 * GiB;
  const jaxAlone = stepOf(null, total + ctx, [['prealloc', 105 * GiB + ctx, null]], { prealloc: { bytes_limit: 0.75 * total } });
  const jaxBudget = stepOf(
    B8,
    B8 + ctx,
    [
      ['prealloc', 6 * GiB + ctx, 6 * GiB],
      ['array', 6 * GiB + ctx, 6 * GiB],
      ['refused', 6 * GiB + ctx, 6 * GiB],
    ],
    {
      prealloc: { bytes_limit: 6 * GiB },
      array: { ok: true, bytes: 4 * GiB },
      tooBig: {
        refused: true,
        resourceExhausted: true,
        refusedAs: 'jaxlib.xla_extension.XlaRuntimeError',
        message: 'RESOURCE_EXHAUSTED: Out of memory',
      },
      afterRefusal: 2048,
    },
  );
  const jaxFraction = stepOf(B8, B8 + ctx, [['prealloc', 4 * GiB + ctx, 4 * GiB]], { prealloc: { bytes_limit: 4 * GiB } });
  const vllm = [10, 40, 120].map((n) => {
    const B = n * GiB;
    const peak = 4.5 * GiB;
    const kv = 0.9 * B - peak;
    return stepOf(B, B + ctx, [['filled', 4 * GiB + kv + ctx, 4 * GiB + kv]], {
      utilization: 0.9,
      started: true,
      totalBytes: B,
      freeAtStartBytes: B,
      modelBytes: 4 * GiB,
      peakBytes: peak,
      kvAllocatedBytes: kv,
    });
  });
  const refusal = (lib, refusedAs, message) =>
    stepOf(4 * GiB, 4 * GiB + ctx, [['full', 4 * GiB + ctx, 4 * GiB]], {
      lib,
      refused: true,
      refusedAs,
      message,
      chunks: 8,
      chunkBytes: 512 * MiB,
      allocatedBytes: 4 * GiB,
      recovered: true,
    });
  const llama = (gpuLayers, extra = {}) => ({
    loaded: true,
    gpuLayers,
    totalLayers: 21,
    tokens: 16,
    vram: { total: 4 * GiB, free: 4 * GiB },
    ...extra,
  });
  const refused = (name) => ({ loaded: false, error: { name, message: 'Not enough VRAM to fit the model with the specified settings' } });
  const B4 = 4 * GiB;
  const shards = Math.floor((total * 2) / 8);
  return {
    gpu: { totalMemory: total },
    overheads: { jax: ctx, torch: ctx },
    jax: { alone: jaxAlone, budget: jaxBudget, fraction: jaxFraction },
    vllm,
    cupy: refusal('cupy', 'cupy.cuda.memory.OutOfMemoryError', 'Out of memory allocating 536,870,912 bytes'),
    numba: refusal('numba', 'numba.cuda.cudadrv.driver.CudaAPIError', '[2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY'),
    llama: {
      alone: stepOf(total, total + ctx, [['generated', 9 * GiB, 8.5 * GiB]], llama(21)),
      auto: stepOf(B4, B4 + ctx, [['generated', 4 * GiB, 3.8 * GiB]], llama(8)),
      forced: stepOf(B4, B4 + ctx, [['ready', ctx, 0]], refused('InsufficientMemoryError')),
      forcedUnsafe: stepOf(B4, B4 + ctx, [['ready', 4 * GiB, 3.9 * GiB]], refused('Error')),
      shared: {
        ...stepOf(12 * GiB, 12 * GiB + 3 * ctx, [['loaded+loaded', 12 * GiB, 12 * GiB]], null),
        members: {
          llama1: { exitCode: 0, result: llama(21) },
          llama2: { exitCode: 0, result: llama(6) },
          torch: { exitCode: 0, result: { allocs: 100, refusals: 20 } },
        },
      },
    },
    slurm: {
      prologExit: 0,
      exports: {
        CUDA_MEMORY_GROUP: 'slurm-4242',
        CUDA_MEMORY_GROUP_BUDGET: String(shards),
        LD_PRELOAD: '/p/prebuilds/linux-x64/cuda_memory_preload.so',
      },
      task: stepOf(shards, shards + ctx, [['full', 34 * GiB + ctx, 34 * GiB]], {
        lib: 'torch',
        refused: true,
        refusedAs: 'torch.OutOfMemoryError',
        chunks: 139,
        chunkBytes: 256 * MiB,
        allocatedBytes: 139 * 256 * MiB,
        recovered: true,
      }),
      epilogExit: 0,
      groupLeft: false,
    },
  };
}
const failed = (r) =>
  checksOf(r)
    .filter((c) => !c.pass)
    .map((c) => c.name);

test('a step’s samples: the most of NVML and of the ledger, how many above, per phase', () => {
  const s = [
    { phase: null, nvmlBytes: 5, chargedBytes: null },
    { phase: 'a', nvmlBytes: 12, chargedBytes: 9 },
    { phase: 'a', nvmlBytes: 9, chargedBytes: 11 },
    { phase: 'b', nvmlBytes: 3, chargedBytes: 2 },
  ];
  expect(judgeSamples(s, 10, 10)).toEqual({
    samples: 4,
    maxNvmlBytes: 12,
    maxChargedBytes: 11,
    nvmlOver: 1,
    chargedOver: 1,
    phases: {
      start: { samples: 1, maxNvmlBytes: 5, maxChargedBytes: 0 },
      a: { samples: 2, maxNvmlBytes: 12, maxChargedBytes: 11 },
      b: { samples: 1, maxNvmlBytes: 3, maxChargedBytes: 2 },
    },
  });
  // Without a budget (a step alone), the ledger is not judged.
  expect(judgeSamples(s, 100, null)).toMatchObject({ nvmlOver: 0, chargedOver: 0 });
});

test('a run that shows every point passes every check; each fault fails its own check only', () => {
  expect(checksOf(passing())).toHaveLength(30);
  const cases = [
    [(r) => (r.jax.alone.result.prealloc.bytes_limit = 0.5 * r.gpu.totalMemory), /^jax alone/],
    // 75% of the card under a budget: what the budget is there to stop.
    [(r) => (r.jax.budget.result.prealloc.bytes_limit = 0.75 * r.gpu.totalMemory), /^jax under 8 GiB: XLA preallocates/],
    [(r) => (r.jax.budget.judged.phases.prealloc.maxNvmlBytes = 5 * GiB), /^jax under 8 GiB: XLA preallocates/],
    [(r) => (r.jax.budget.result.array = undefined), /a 4 GiB array/],
    [(r) => (r.jax.budget.result.tooBig.resourceExhausted = false), /a 10 GiB array/],
    [(r) => delete r.jax.budget.result.afterRefusal, /a 10 GiB array/],
    [(r) => (r.jax.budget.judged.chargedOver = 1), /^jax under 8 GiB: the ledger/],
    [(r) => (r.jax.fraction.result.prealloc.bytes_limit = 6 * GiB), /MEM_FRACTION=0.5: XLA takes half/],
    [(r) => (r.vllm[0].result.started = false), /^vllm-shaped under 10.00 GiB: starts/],
    [(r) => (r.vllm[1].judged.phases.filled.maxChargedBytes = 20 * GiB), /^vllm-shaped under 40.00 GiB: starts/],
    [(r) => (r.vllm[2].result.totalBytes = 140 * GiB), /^vllm-shaped under 120.00 GiB: starts/],
    [(r) => (r.vllm[2].judged.nvmlOver = 3), /^vllm-shaped under 120.00 GiB: the ledger/],
    [(r) => (r.cupy.result.refusedAs = 'builtins.MemoryError'), /^cupy: refused/],
    [(r) => (r.cupy.result.allocatedBytes = 4 * GiB + 1), /^cupy: refused/],
    [(r) => (r.numba.result.allocatedBytes = 2 * GiB), /^numba: refused/], // refused well below the budget
    [(r) => (r.numba.result.message = 'CUDA_ERROR_INVALID_VALUE'), /^numba: refused/],
    [(r) => (r.numba.exitCode = 1), /^numba: refused/],
    [(r) => (r.llama.alone.result.gpuLayers = 20), /^llama alone/],
    [(r) => (r.llama.auto.result.gpuLayers = 21), /^llama under 4 GiB: gpuLayers auto/],
    [(r) => (r.llama.auto.result.tokens = 0), /^llama under 4 GiB: gpuLayers auto/],
    [(r) => (r.llama.forced.result.error.name = 'Error'), /every layer forced: node-llama-cpp refuses/],
    [(r) => (r.llama.forcedUnsafe.timedOut = true), /its estimate skipped/],
    [(r) => (r.llama.forcedUnsafe.result.loaded = true), /its estimate skipped/],
    [(r) => (r.llama.shared.members.llama2.exitCode = null), /^llama shared 12 GiB: two/],
    [(r) => (r.llama.shared.judged.nvmlOver = 1), /^llama shared 12 GiB: the ledger/],
    [(r) => (r.slurm.exports.CUDA_MEMORY_GROUP_BUDGET = String(r.gpu.totalMemory / 4 + 2 ** 20)), /^slurm: the task prolog/],
    [(r) => delete r.slurm.exports.LD_PRELOAD, /^slurm: the task prolog/],
    [(r) => (r.slurm.prologExit = 1), /^slurm: the task prolog/],
    [(r) => (r.slurm.task.result.refusedAs = 'builtins.RuntimeError'), /^slurm: PyTorch in the task/],
    [(r) => (r.slurm.task.result.allocatedBytes = r.slurm.task.budgetBytes + 1), /^slurm: PyTorch in the task/],
    [(r) => (r.slurm.task.judged.nvmlOver = 2), /^slurm 2 of 8 shards: the ledger/],
    [(r) => (r.slurm.groupLeft = true), /^slurm: the epilog/],
  ];
  expectEachFaultFailsItsCheck(passing, checksOf, cases);
  // A section left out has no checks; node-llama-cpp missing is one failed check that says why.
  const r = passing();
  delete r.vllm;
  r.llama = { error: 'node-llama-cpp’s CUDA prebuilt needs libcublas.so.13' };
  expect(checksOf(r)).toHaveLength(30 - 6 - 9 + 1);
  expect(failed(r)).toEqual(['llama: node-llama-cpp ran']);
});

test("the slurm section: the task prolog on the recorded job (2 of 8 shards) prints the job's group at 2/8 of the GPU", () => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-servers-slurm-'));
  try {
    const p = plan({ out, python: 'python3', only: ['slurm'], id: 1, seconds: 1 }).slurm;
    expect(p.prolog.cmd.slice(1, 6)).toEqual([path.join(root, 'dist', 'cli.js'), 'slurm', 'task-prolog', '--shards', '8']);
    expect(p.task.cmd.slice(1)).toEqual([path.join(root, 'scripts', 'servers', 'refuse.py'), '--lib', 'torch', '--chunk-mib', '256']);
    // The GPU's memory given, as a node without a GPU here would: the rest is the hook as on the GPU.
    const s = slurmProlog(p, ['--gpu-memory', '8GiB']);
    expect(s.prologStderr).toBe('');
    expect(s.prologExit).toBe(0);
    expect(s.exports).toMatchObject({
      CUDA_MEMORY_GROUP: 'slurm-4242',
      CUDA_MEMORY_GROUP_BUDGET: String(2 * GiB),
      CUDA_MEMORY_SLURM_SHARDS_PER_GPU: '8',
    });
    expect(s.exports.CUDA_MEMORY_GROUP_BUDGET_SOURCE).toMatch(/^slurm job 4242: 2 of 8 shards/);
    // The interposer itself, or in a clone whose path has a space, the link run makes to it.
    expect(s.exports.LD_PRELOAD).toMatch(/cuda_memory_preload(\.[0-9a-f]+)?\.so/);
    expect(prologExports('export A=1\nprint hello\nexport B=x y\n')).toEqual({ A: '1', B: 'x y' });
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
  }
});

test('the CUDA libraries are found in a toolkit folder or in the Python packages’ nvidia/*/lib', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-servers-libs-'));
  try {
    const site = path.join(dir, 'site-packages');
    for (const [d, f] of [
      ['nvidia/cuda_runtime/lib', 'libcudart.so.13'],
      ['nvidia/cu13/lib', 'libcublas.so.13'],
      ['nvidia/cu13/lib', 'libcublasLt.so.13'],
    ]) {
      fs.mkdirSync(path.join(site, d), { recursive: true });
      fs.writeFileSync(path.join(site, d, f), '');
    }
    const names = ['libcudart.so.13', 'libcublas.so.13', 'libcublasLt.so.13'];
    expect(findLibraries(names, [path.join(dir, 'nothing'), site])).toEqual({
      dirs: [path.join(site, 'nvidia/cu13/lib'), path.join(site, 'nvidia/cuda_runtime/lib')], // in name order
      missing: [],
    });
    // A root that holds the library itself comes first; a missing one is named.
    fs.writeFileSync(path.join(dir, 'libcudart.so.13'), '');
    expect(findLibraries([...names, 'libnone.so.1'], [dir, site])).toEqual({
      dirs: [dir, path.join(site, 'nvidia/cu13/lib')],
      missing: ['libnone.so.1'],
    });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('--dry-run: every step in a group of its own, under its budget; usage errors exit 2', () => {
  const r = spawnSync(process.execPath, [script, '--dry-run'], { encoding: 'utf8' });
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  const p = JSON.parse(r.stdout);
  const under = (s, bytes) => {
    expect(s.cmd.slice(1, 3)).toEqual([path.join(root, 'dist', 'cli.js'), 'run']);
    expect(s.cmd.slice(3, 7)).toEqual(['--group', s.group, '--limit', String(bytes)]);
    expect(s.budgetBytes).toBe(bytes);
  };
  under(p.jax.budget, 8 * GiB);
  under(p.jax.fraction, 8 * GiB);
  expect(p.jax.fraction.env).toEqual({ XLA_PYTHON_CLIENT_MEM_FRACTION: '0.5' });
  expect(p.jax.budget.cmd).toEqual(expect.arrayContaining(['--array-gib', '4', '--too-big-gib', '10']));
  expect(p.jax.alone.cmd[1]).toMatch(/jax-fit\.py$/); // alone: not under run
  expect(p.vllm.map((s) => s.budgetBytes)).toEqual([10 * GiB, 40 * GiB, 120 * GiB]);
  for (const s of p.vllm) under(s, s.budgetBytes);
  under(p.cupy, 4 * GiB);
  under(p.numba, 4 * GiB);
  for (const k of ['auto', 'forced', 'forcedUnsafe']) under(p.llama[k], 4 * GiB);
  // The context overhead measured twice, idle: as kernels load (lazily) and with all of them loaded.
  expect(p.llama.overhead.cmd).toEqual(expect.arrayContaining(['--idle']));
  expect(p.llama.overhead.env.CUDA_MODULE_LOADING).toBeUndefined();
  expect(p.llama.overheadEager).toEqual({ cmd: p.llama.overhead.cmd, env: { ...p.llama.overhead.env, CUDA_MODULE_LOADING: 'EAGER' } });
  expect(p.llama.forced.cmd).toEqual(expect.arrayContaining(['--gpu-layers', 'max']));
  expect(p.llama.forcedUnsafe.cmd).toEqual(expect.arrayContaining(['--gpu-layers', 'max', '--ignore-safety']));
  for (const m of Object.values(p.llama.shared.members))
    expect(m.slice(3, 7)).toEqual(['--group', p.llama.shared.group, '--limit', String(12 * GiB)]);
  const groups = [
    p.jax.budget,
    p.jax.fraction,
    ...p.vllm,
    p.cupy,
    p.numba,
    p.llama.auto,
    p.llama.forced,
    p.llama.forcedUnsafe,
    p.llama.shared,
  ].map((s) => s.group);
  expect(new Set(groups).size).toBe(groups.length);
  const one = JSON.parse(spawnSync(process.execPath, [script, '--dry-run', '--only', 'cupy'], { encoding: 'utf8' }).stdout);
  expect(Object.keys(one)).toEqual(['overheads', 'cupy']);
  for (const bad of [[], ['--only', 'tensorflow'], ['--out', 'x', '--seconds', '0'], ['--nope']]) {
    const u = spawnSync(process.execPath, [script, ...bad], { encoding: 'utf8' });
    expect(u.status).toBe(2);
    expect(u.stderr).toMatch(/usage: node scripts\/servers-run.js --out DIR/);
  }
  expect(lastJson('phase a\n{"x": 1}\nnoise')).toEqual({ x: 1 });
});

test('a step: its samples filed under the phase the program printed, NVML and the ledger side by side, a hung program killed', async () => {
  // A fake GPU: the program's pid appears in NVML's list with 100 bytes per phase reached; its group's charge is 10 less.
  let procs = [{ pid: 1, usedBytes: 7 }]; // there before the step: not counted
  const ctx = {
    totalMemory: 1000,
    processes: () => procs,
    cm: { groupStats: () => ({ chargedBytes: procs.length > 1 ? procs[1].usedBytes - 10 : 0, members: [] }) },
  };
  const prog = `
    const phases = ['one', 'two'];
    let i = 0;
    const t = setInterval(() => {
      if (i === phases.length) { clearInterval(t); console.log(JSON.stringify({ done: true })); return; }
      console.log('phase ' + phases[i++]);
    }, 400);`;
  let pid = 2;
  const watch = setInterval(() => {
    const seen = procs.length > 1 ? procs[1].usedBytes : 0;
    procs = [procs[0], { pid, usedBytes: seen + 1 }];
  }, 50);
  try {
    const r = await step(ctx, { group: 'g', budgetBytes: 500, cmd: [process.execPath, '-e', prog] }, 20);
    expect(r).toMatchObject({ exitCode: 0, timedOut: false, result: { done: true }, budgetBytes: 500, thresholdBytes: 500 + 20 + 2 * MiB });
    expect(Object.keys(r.judged.phases)).toEqual(['start', 'one', 'two']);
    expect(r.judged.phases.two.maxNvmlBytes).toBeGreaterThan(r.judged.phases.one.maxNvmlBytes);
    expect(r.judged.maxChargedBytes).toBe(r.judged.maxNvmlBytes - 10);
    expect(r.maxUnchargedBytes).toBe(10);
    const hung = await step(ctx, { cmd: [process.execPath, '-e', 'setInterval(() => {}, 1000)'] }, 0, 500);
    expect(hung).toMatchObject({ timedOut: true, signal: 'SIGKILL', budgetBytes: null, thresholdBytes: 1000 + 2 * MiB });
    // The overhead: the most NVML lists for processes new since it started.
    procs = [procs[0]];
    pid = 3;
    expect(await overheadOf(ctx, { cmd: [process.execPath, '-e', 'setTimeout(() => {}, 300)'] })).toBeGreaterThan(0);
  } finally {
    clearInterval(watch);
  }
});

// A GGUF reader for what the writer writes: the header, the metadata and the tensor infos.
function readGguf(file) {
  const b = fs.readFileSync(file);
  let at = 0;
  const u32 = () => ((at += 4), b.readUInt32LE(at - 4));
  const u64 = () => ((at += 8), Number(b.readBigUInt64LE(at - 8)));
  const str = () => {
    const n = u64();
    at += n;
    return b.toString('utf8', at - n, at);
  };
  const value = (t) => {
    if (t === 4) return u32();
    if (t === 5) return ((at += 4), b.readInt32LE(at - 4));
    if (t === 6) return ((at += 4), b.readFloatLE(at - 4));
    if (t === 8) return str();
    if (t === 9) {
      const et = u32();
      return Array.from({ length: u64() }, () => value(et));
    }
    throw new Error(`type ${t}`);
  };
  expect(b.toString('latin1', 0, 4)).toBe('GGUF');
  at = 4;
  const version = u32();
  const nt = u64();
  const nkv = u64();
  const kv = {};
  for (let i = 0; i < nkv; i++) {
    const k = str();
    kv[k] = value(u32());
  }
  const tensors = [];
  for (let i = 0; i < nt; i++) {
    const name = str();
    const shape = Array.from({ length: u32() }, () => u64());
    tensors.push({ name, shape, type: u32(), offset: u64() });
  }
  return { b, version, kv, tensors, dataStart: Math.ceil(at / 32) * 32 };
}

test('gguf.js: a llama model llama.cpp can load, read back: metadata, vocabulary, tensors, f16 weights in range', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-gguf-'));
  try {
    const file = path.join(dir, 'tiny.gguf');
    const w = gguf.writeGguf(file, { layers: 2, embd: 256, ff: 512, heads: 4, vocab: 1000 });
    const g = readGguf(file);
    expect(g.version).toBe(3);
    expect(fs.statSync(file).size).toBe(w.bytes);
    expect(g.kv).toMatchObject({
      'general.architecture': 'llama',
      'general.alignment': 32,
      'llama.block_count': 2,
      'llama.embedding_length': 256,
      'llama.feed_forward_length': 512,
      'llama.attention.head_count': 4,
      'llama.attention.head_count_kv': 4,
      'llama.rope.dimension_count': 64,
      'tokenizer.ggml.model': 'llama',
      'tokenizer.ggml.bos_token_id': 1,
      'tokenizer.ggml.eos_token_id': 2,
    });
    const tokens = g.kv['tokenizer.ggml.tokens'];
    expect(tokens).toHaveLength(1000);
    expect(new Set(tokens).size).toBe(1000);
    expect(tokens.slice(0, 4)).toEqual(['<unk>', '<s>', '</s>', '<0x00>']);
    expect(tokens[258]).toBe('<0xFF>');
    expect(g.kv['tokenizer.ggml.scores']).toHaveLength(1000);
    expect(g.kv['tokenizer.ggml.token_type'].slice(0, 4)).toEqual([2, 3, 3, 6]);
    // Every tensor llama.cpp's llama architecture asks for, at aligned offsets, ending at the file's end.
    expect(g.tensors.map((t) => t.name)).toEqual(
      expect.arrayContaining(['token_embd.weight', 'output_norm.weight', 'output.weight', 'blk.1.ffn_down.weight']),
    );
    expect(g.tensors).toHaveLength(3 + 2 * 9);
    const down = g.tensors.find((t) => t.name === 'blk.0.ffn_down.weight');
    expect(down).toMatchObject({ shape: [512, 256], type: 1 });
    expect(g.tensors.find((t) => t.name === 'token_embd.weight').shape).toEqual([256, 1000]);
    for (const t of g.tensors) expect(t.offset % 32).toBe(0);
    const last = g.tensors[g.tensors.length - 1];
    expect(g.dataStart + last.offset + 256 * 1000 * 2).toBe(w.bytes);
    // Norms are ones; matrices are finite f16 values within ±0.02, not all alike.
    const norm = g.tensors.find((t) => t.name === 'blk.0.attn_norm.weight');
    expect(g.b.readFloatLE(g.dataStart + norm.offset)).toBe(1);
    const q = g.tensors.find((t) => t.name === 'blk.0.attn_q.weight');
    const seen = new Set();
    for (let i = 0; i < 4096; i++) {
      const h = g.b.readUInt16LE(g.dataStart + q.offset + 2 * i);
      const e = (h >> 10) & 31;
      expect(e).toBeLessThan(31); // no NaN or infinity
      const v = e === 0 ? 0 : 2 ** (e - 15) * (1 + (h & 1023) / 1024);
      expect(v).toBeLessThanOrEqual(0.02 + 1e-4);
      seen.add(h);
    }
    expect(seen.size).toBeGreaterThan(1000);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('gguf.js: the default model is 8.0 GiB of f16 weights; bad shapes are refused', () => {
  const d = gguf.dims();
  const weights = gguf.tensors(d).reduce((s, t) => s + t.bytes, 0);
  expect(weights / GiB).toBeCloseTo(8.0, 1);
  expect(gguf.f16(0.01)).toBe(0x211f);
  expect(gguf.f16(-0.5)).toBe(0xb800);
  expect(gguf.f16(1e-6)).toBe(0); // below f16's normal range
  expect(() => gguf.dims({ embd: 100, heads: 3 })).toThrow(/multiple of heads/);
  expect(() => gguf.dims({ layers: 0 })).toThrow(/layers must be a positive integer/);
  expect(() => gguf.dims({ vocab: 300 })).toThrow(/vocab must be at least/);
});

test('the Python helpers are valid Python', () => {
  const files = ['jax-fit.py', 'vllm-profile.py', 'refuse.py'].map((f) => path.join(root, 'scripts', 'servers', f));
  const py = spawnSync('python3', ['-c', 'import ast, sys\nfor f in sys.argv[1:]: ast.parse(open(f).read(), f)', ...files], {
    encoding: 'utf8',
  });
  if (py.error) return; // no python3 here
  expect(py.stderr).toBe('');
  expect(py.status).toBe(0);
});

#!/usr/bin/env node
'use strict';
// Real servers sizing themselves to a group budget, shown in one call on a GPU machine:
//
//   node scripts/servers-run.js --out DIR [--python python3] [--only jax,vllm,cupy,numba,llama,slurm]
//                               [--llama-bundle FILE | --llama-modules DIR] [--model FILE] [--seconds 20]
//   node scripts/servers-run.js --dry-run [...]     the plan as JSON, without a GPU
//
// Each step runs alone on the GPU, its programs under `cuda-memory run --group G --limit L` (a
// group of its own), while every 100 ms NVML's per-process used memory of its processes is summed
// and the group's ledger read (its charge, and each member's nvmlUsedBytes beside it). A program
// prints `phase NAME` as it reaches a step, and every sample is filed under the phase it was taken
// in. First each runtime's context overhead, alone (NVML, no allocation kept), for the thresholds.
//
//   jax     scripts/servers/jax-fit.py: alone, XLA's allocator takes 75% of the card; under 8 GiB,
//           75% of 8 GiB; a 4 GiB array works; a 10 GiB one is refused with RESOURCE_EXHAUSTED,
//           caught; with XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 it takes half the budget.
//   vllm    scripts/servers/vllm-profile.py (vLLM's start-up profile in PyTorch) under 10, 40 and
//           120 GiB: it starts (its free >= utilisation x total check passes) and fills its share.
//   cupy    scripts/servers/refuse.py --lib cupy under 4 GiB: refused with
//           cupy.cuda.memory.OutOfMemoryError at the budget, caught.
//   numba   the same with numba's device arrays: CudaAPIError (CUDA_ERROR_OUT_OF_MEMORY).
//   llama   node-llama-cpp (scripts/servers/llama-member.js) with its CUDA prebuilt, on a GGUF
//           llama model of random f16 weights written here (scripts/servers/gguf.js, 8.0 GiB):
//           gpuLayers 'auto' alone (every layer fits) and under 4 GiB (fewer, loads, generates);
//           every layer forced under 4 GiB (node-llama-cpp's InsufficientMemoryError, and with its
//           estimate skipped, the allocation refused: its failed load), caught; then two 'auto'
//           members generating and a PyTorch trainer (scripts/preload/torch-churn.py) in one
//           12 GiB group. It needs node-llama-cpp: --llama-modules (a node_modules folder) or
//           --llama-bundle (a .tar.xz of one, unpacked into DIR), and the CUDA 13 runtime and
//           cuBLAS, found in the CUDA toolkit or the Python packages (nvidia/*/lib).
//   slurm   Slurm's hook on a recorded job (no Slurm here: its scontrol answers as Slurm did for
//           job 4242 given 2 of the GPU's 8 shards): `cuda-memory slurm task-prolog --shards 8`
//           reads the GPU and prints the task's exports; PyTorch (scripts/servers/refuse.py --lib
//           torch) runs in that environment, as Slurm starts a task, and is refused at 2/8 of the
//           GPU with torch.OutOfMemoryError, caught; then `slurm epilog` removes the job's group.
//
// The summary (DIR/summary.json, also on stdout) holds every figure and the checks. Exit 1 if a
// check failed, 2 for a usage error.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { parseArgs } = require('util');
const { lastJson, start, finished, sampler, judgeSamples, overheadOf } = require('./lib/gpu-steps');

const root = path.join(__dirname, '..');
const cli = path.join(root, 'dist', 'cli.js');
const servers = path.join(__dirname, 'servers');
const torchChurn = path.join(__dirname, 'preload', 'torch-churn.py');
const GiB = 2 ** 30;
const MiB = 2 ** 20;
const SECTIONS = ['jax', 'vllm', 'cupy', 'numba', 'llama', 'slurm'];
// The recorded job of the slurm section: what `scontrol show job -d 4242` printed on a node whose
// gres.conf cuts GPU 0 into 8 shards, for a job given 2 of them, and what its task saw.
const SLURM_JOB = {
  id: '4242',
  node: 'gpu01',
  shards: 2,
  of: 8,
  scontrol: ['JobId=4242 JobName=train', '   JOB_GRES=shard:2', '     Nodes=gpu01 CPU_IDs=0-3 Mem=0 GRES=shard:2(IDX:0)'].join('\n'),
  env: { SLURM_JOB_ID: '4242', SLURMD_NODENAME: 'gpu01', SLURM_SHARDS_ON_NODE: '2', CUDA_VISIBLE_DEVICES: '0' },
};

function args(argv) {
  const text = ['out', 'python', 'only', 'llama-bundle', 'llama-modules', 'model', 'seconds'];
  const options = Object.fromEntries([...text.map((k) => [k, { type: 'string' }]), ['dry-run', { type: 'boolean' }]]);
  return parseArgs({ args: argv, options }).values;
}

// ---- what is judged (no GPU needed: test/bench/servers-run.test.js) --------------------------

/** Whether `x` is within `tolerance` (a fraction of `of`) of `want`. */
const near = (x, want, of, tolerance) => typeof x === 'number' && Math.abs(x - want) <= tolerance * of;
const gib = (b) => (typeof b === 'number' ? `${(b / GiB).toFixed(2)} GiB` : String(b));

// A step that held its budget: every sample within it and the threshold, and at least one taken.
function held(add, name, s) {
  add(
    `${name}: the ledger never above the budget, NVML's per-process sum never above the budget plus the context overhead`,
    s.judged.samples > 0 && s.judged.chargedOver === 0 && s.judged.nvmlOver === 0,
    `${s.judged.samples} samples; ledger at most ${gib(s.judged.maxChargedBytes)} of ${gib(s.budgetBytes)}; NVML at most ${gib(s.judged.maxNvmlBytes)}, threshold ${gib(s.thresholdBytes)}`,
  );
}

/** The checks of a finished run, each with what it saw. */
function checksOf(r) {
  const checks = [];
  const add = (name, pass, detail) => checks.push({ name, pass: Boolean(pass), detail });
  const j = r.jax;
  if (j) {
    const a = j.alone;
    const ap = (a.result || {}).prealloc || {};
    add(
      'jax alone: XLA preallocates 75% of the card',
      a.exitCode === 0 && near(ap.bytes_limit, 0.75 * r.gpu.totalMemory, r.gpu.totalMemory, 0.01),
      `bytes_limit ${gib(ap.bytes_limit)} of ${gib(r.gpu.totalMemory)}`,
    );
    const d = j.budget;
    const res = d.result || {};
    const pre = res.prealloc || {};
    const nvPre = (d.judged.phases.prealloc || {}).maxNvmlBytes;
    add(
      'jax under 8 GiB: XLA preallocates 75% of the budget (its bytes_limit), and NVML and the ledger show it taken',
      d.exitCode === 0 &&
        near(pre.bytes_limit, 0.75 * d.budgetBytes, d.budgetBytes, 0.01) &&
        nvPre >= pre.bytes_limit &&
        (d.judged.phases.prealloc || {}).maxChargedBytes >= pre.bytes_limit,
      `bytes_limit ${gib(pre.bytes_limit)}; at prealloc NVML ${gib(nvPre)} (the JAX context alone ${gib(r.overheads.jax)}), ledger ${gib((d.judged.phases.prealloc || {}).maxChargedBytes)}`,
    );
    add(
      'jax under 8 GiB: a 4 GiB array works',
      res.array && res.array.ok && res.array.bytes === 4 * GiB,
      res.array ? `${gib(res.array.bytes)} made` : 'no array',
    );
    const tb = res.tooBig || {};
    add(
      'jax under 8 GiB: a 10 GiB array fails with RESOURCE_EXHAUSTED, caught; the process goes on and ends normally',
      d.exitCode === 0 && tb.refused && tb.resourceExhausted && typeof res.afterRefusal === 'number',
      tb.refused ? `${tb.refusedAs}: ${String(tb.message).split('\n')[0]}` : `exit ${d.exitCode}, not refused`,
    );
    held(add, 'jax under 8 GiB', d);
    const f = j.fraction;
    const fp = ((f.result || {}).prealloc || {}).bytes_limit;
    add(
      'jax under 8 GiB with XLA_PYTHON_CLIENT_MEM_FRACTION=0.5: XLA takes half the budget',
      f.exitCode === 0 && near(fp, 0.5 * f.budgetBytes, f.budgetBytes, 0.01),
      `bytes_limit ${gib(fp)}`,
    );
    held(add, 'jax with MEM_FRACTION=0.5', f);
  }
  for (const v of r.vllm || []) {
    const res = v.result || {};
    const util = res.utilization || 0.9;
    const filled = (v.judged.phases.filled || {}).maxChargedBytes || 0;
    // What is live at the end: the weights and the cache, the share less the profile's activations.
    const want = util * v.budgetBytes - (res.peakBytes || 0) + (res.modelBytes || 0);
    add(
      `vllm-shaped under ${gib(v.budgetBytes)}: starts (free >= utilisation x total), and fills its share`,
      v.exitCode === 0 &&
        res.started &&
        res.totalBytes === v.budgetBytes &&
        res.kvAllocatedBytes > 0 &&
        filled >= want - 0.02 * v.budgetBytes,
      res.started
        ? `total ${gib(res.totalBytes)}, free at start ${gib(res.freeAtStartBytes)}; weights ${gib(res.modelBytes)}, KV cache ${gib(res.kvAllocatedBytes)}; charged when filled ${gib(filled)}`
        : `exit ${v.exitCode}: ${res.error || 'no result line'}`,
    );
    held(add, `vllm-shaped under ${gib(v.budgetBytes)}`, v);
  }
  const own = { cupy: /^cupy\.cuda\.memory\.OutOfMemoryError$/, numba: /CudaAPIError$/ };
  for (const lib of ['cupy', 'numba']) {
    const s = r[lib];
    if (!s) continue;
    const res = s.result || {};
    add(
      `${lib}: refused at the budget with its own error, caught, exit 0`,
      s.exitCode === 0 &&
        res.refused &&
        own[lib].test(res.refusedAs || '') &&
        (lib !== 'numba' || /OUT_OF_MEMORY/.test(res.message || '')) &&
        res.allocatedBytes <= s.budgetBytes &&
        res.allocatedBytes + 2 * res.chunkBytes > s.budgetBytes &&
        res.recovered,
      res.refused
        ? `${res.chunks} blocks of ${gib(res.chunkBytes)} (${gib(res.allocatedBytes)}), then ${res.refusedAs}: ${String(res.message).split('\n')[0]}`
        : `exit ${s.exitCode}, not refused`,
    );
    held(add, lib, s);
  }
  const l = r.llama;
  if (l && l.error) add('llama: node-llama-cpp ran', false, l.error);
  else if (l) {
    const alone = l.alone.result || {};
    const auto = l.auto.result || {};
    add(
      'llama alone: gpuLayers auto offloads every layer',
      l.alone.exitCode === 0 && alone.loaded && alone.gpuLayers === alone.totalLayers && alone.tokens > 0,
      `${alone.gpuLayers} of ${alone.totalLayers} layers, ${alone.tokens} tokens`,
    );
    add(
      'llama under 4 GiB: gpuLayers auto offloads fewer layers, loads and generates tokens',
      l.auto.exitCode === 0 && auto.loaded && auto.gpuLayers > 0 && auto.gpuLayers < alone.gpuLayers && auto.tokens > 0,
      `${auto.gpuLayers} of ${auto.totalLayers} layers, ${auto.tokens} tokens; node-llama-cpp saw total ${gib((auto.vram || {}).total)}, free ${gib((auto.vram || {}).free)}`,
    );
    held(add, 'llama under 4 GiB', l.auto);
    for (const [k, what] of [
      ['forced', 'every layer forced: node-llama-cpp refuses with InsufficientMemoryError'],
      ['forcedUnsafe', 'every layer forced, its estimate skipped: the load fails with its own error'],
    ]) {
      const f = l[k].result || {};
      add(
        `llama under 4 GiB, ${what}, caught, exit 0`,
        l[k].exitCode === 0 && !l[k].timedOut && !f.loaded && f.error && (k !== 'forced' || f.error.name === 'InsufficientMemoryError'),
        f.error
          ? `${f.error.name}: ${f.error.message.split('\n')[0]}`
          : `exit ${l[k].exitCode}${l[k].timedOut ? ', timed out' : ''}, loaded: ${f.loaded}`,
      );
      held(add, `llama under 4 GiB, ${k}`, l[k]);
    }
    const sh = l.shared;
    const ok = Object.values(sh.members).every((m) => m.exitCode === 0 && m.result);
    add(
      'llama shared 12 GiB: two node-llama-cpp members loaded and generated beside a PyTorch trainer, every program ended normally',
      ok && sh.members.llama1.result.loaded && sh.members.llama2.result.loaded && sh.members.torch.result.allocs > 0,
      Object.entries(sh.members)
        .map(
          ([k, m]) =>
            `${k}: exit ${m.exitCode}` +
            (m.result && m.result.gpuLayers !== undefined ? `, ${m.result.gpuLayers} layers, ${m.result.tokens} tokens` : '') +
            (m.result && m.result.refusals !== undefined ? `, ${m.result.allocs} allocations, ${m.result.refusals} refusals` : ''),
        )
        .join('; '),
    );
    held(add, 'llama shared 12 GiB', sh);
  }
  const sl = r.slurm;
  if (sl) {
    const x = sl.exports || {};
    const want = Math.floor((r.gpu.totalMemory * SLURM_JOB.shards) / SLURM_JOB.of);
    add(
      `slurm: the task prolog turns ${SLURM_JOB.shards} of ${SLURM_JOB.of} shards into the job's group at ${SLURM_JOB.shards}/${SLURM_JOB.of} of the GPU, the interposer preloaded`,
      sl.prologExit === 0 &&
        x.CUDA_MEMORY_GROUP === `slurm-${SLURM_JOB.id}` &&
        Number(x.CUDA_MEMORY_GROUP_BUDGET) === want &&
        /cuda_memory_preload(\.[0-9a-f]+)?\.so/.test(x.LD_PRELOAD || ''),
      sl.prologExit === 0
        ? `group ${x.CUDA_MEMORY_GROUP}, budget ${x.CUDA_MEMORY_GROUP_BUDGET} (want ${want}), ${x.CUDA_MEMORY_GROUP_BUDGET_SOURCE}`
        : `exit ${sl.prologExit}: ${sl.prologStderr}`,
    );
    const t = sl.task;
    if (t) {
      const res = t.result || {};
      add(
        'slurm: PyTorch in the task is refused at the budget with torch.OutOfMemoryError, caught, exit 0',
        t.exitCode === 0 &&
          res.refused &&
          /^torch(\.cuda)?\.OutOfMemoryError$/.test(res.refusedAs || '') &&
          res.allocatedBytes <= t.budgetBytes &&
          res.allocatedBytes + 2 * res.chunkBytes > t.budgetBytes &&
          res.recovered,
        res.refused
          ? `${res.chunks} blocks of ${gib(res.chunkBytes)} (${gib(res.allocatedBytes)} of ${gib(t.budgetBytes)}), then ${res.refusedAs}`
          : `exit ${t.exitCode}, not refused`,
      );
      held(add, 'slurm 2 of 8 shards', t);
    }
    add(
      "slurm: the epilog removes the job's group",
      sl.epilogExit === 0 && sl.groupLeft === false,
      `epilog exit ${sl.epilogExit}; group left after it: ${sl.groupLeft}`,
    );
  }
  return checks;
}

/** The folders that hold the given libraries, looked for under `roots` (two levels of nvidia/x/lib). */
function findLibraries(names, roots) {
  const found = {};
  const dirs = [];
  for (const r of roots) {
    let subs = [r];
    try {
      const nv = path.join(r, 'nvidia');
      subs = subs.concat(
        fs
          .readdirSync(nv)
          .sort()
          .flatMap((d) => [path.join(nv, d, 'lib'), path.join(nv, d, 'lib64')]),
      );
    } catch {
      // no nvidia packages here
    }
    for (const d of subs)
      for (const n of names)
        if (!found[n] && fs.existsSync(path.join(d, n))) {
          found[n] = d;
          if (!dirs.includes(d)) dirs.push(d);
        }
  }
  return { dirs, missing: names.filter((n) => !found[n]) };
}

// ---- the plan -----------------------------------------------------------------------------------

function plan(o) {
  const py = o.python;
  const run = (group, limit, ...cmd) => [process.execPath, cli, 'run', '--group', group, '--limit', String(limit), '--', ...cmd];
  const g = (name) => `servers-${name}-${o.id}`;
  const p = {};
  p.overheads = {
    // The JAX context with XLA's allocator but nothing preallocated.
    jax: {
      cmd: [py, path.join(servers, 'jax-fit.py'), '--array-gib', '0', '--too-big-gib', '0', '--hold', '1.5'],
      env: { XLA_PYTHON_CLIENT_PREALLOCATE: 'false' },
    },
    torch: { cmd: [py, torchChurn, '--mode', 'idle', '--seconds', '3'] },
  };
  for (const lib of ['cupy', 'numba'])
    if (o.only.includes(lib)) p.overheads[lib] = { cmd: [py, path.join(servers, 'refuse.py'), '--lib', lib, '--idle', '--hold', '1.5'] };
  if (o.only.includes('jax')) {
    const fit = [py, path.join(servers, 'jax-fit.py')];
    p.jax = {
      alone: { cmd: [...fit, '--array-gib', '0', '--too-big-gib', '0'] },
      budget: { group: g('jax'), budgetBytes: 8 * GiB, cmd: run(g('jax'), 8 * GiB, ...fit, '--array-gib', '4', '--too-big-gib', '10') },
      fraction: {
        group: g('jax-fraction'),
        budgetBytes: 8 * GiB,
        cmd: run(g('jax-fraction'), 8 * GiB, ...fit, '--array-gib', '0', '--too-big-gib', '0'),
        env: { XLA_PYTHON_CLIENT_MEM_FRACTION: '0.5' },
      },
    };
  }
  if (o.only.includes('vllm'))
    p.vllm = [10, 40, 120].map((n) => ({
      group: g(`vllm-${n}`),
      budgetBytes: n * GiB,
      cmd: run(g(`vllm-${n}`), n * GiB, py, path.join(servers, 'vllm-profile.py'), '--utilization', '0.9', '--model-gib', '4'),
    }));
  for (const lib of ['cupy', 'numba'])
    if (o.only.includes(lib))
      p[lib] = {
        group: g(lib),
        budgetBytes: 4 * GiB,
        cmd: run(g(lib), 4 * GiB, py, path.join(servers, 'refuse.py'), '--lib', lib, '--chunk-mib', '512'),
      };
  if (o.only.includes('llama')) {
    const m = [process.execPath, path.join(servers, 'llama-member.js'), '--modules', o.llamaModules, '--model', o.model];
    const env = { LD_LIBRARY_PATH: o.ldLibraryPath };
    const idle = [...m, '--idle', '--hold', '1.5'];
    p.llama = {
      model: { file: o.model, layers: 20, embd: 4096, ff: 11008, heads: 32, vocab: 32000 },
      overhead: { cmd: idle, env },
      // A context grows as kernels load on first use (CUDA's lazy module loading): with every
      // kernel of the library loaded at once, idle, it is as large as it gets.
      overheadEager: { cmd: idle, env: { ...env, CUDA_MODULE_LOADING: 'EAGER' } },
      // Alone: a group whose budget is the whole device, so that its charge is known beside NVML.
      alone: { group: g('llama-alone'), budgetBytes: 'DEVICE', cmd: run(g('llama-alone'), 'DEVICE', ...m, '--gpu-layers', 'auto'), env },
      auto: { group: g('llama'), budgetBytes: 4 * GiB, cmd: run(g('llama'), 4 * GiB, ...m, '--gpu-layers', 'auto'), env },
      forced: { group: g('llama-max'), budgetBytes: 4 * GiB, cmd: run(g('llama-max'), 4 * GiB, ...m, '--gpu-layers', 'max'), env },
      forcedUnsafe: {
        group: g('llama-unsafe'),
        budgetBytes: 4 * GiB,
        cmd: run(g('llama-unsafe'), 4 * GiB, ...m, '--gpu-layers', 'max', '--ignore-safety'),
        env,
      },
      shared: {
        group: g('llama-shared'),
        budgetBytes: 12 * GiB,
        // One after the other: each llama member starts once the one before has loaded, so that each
        // sizes itself by what the group has left; the trainer churns in what remains.
        members: {
          llama1: run(g('llama-shared'), 12 * GiB, ...m, '--gpu-layers', 'auto', '--seconds', String(o.seconds)),
          llama2: run(g('llama-shared'), 12 * GiB, ...m, '--gpu-layers', 'auto', '--seconds', String(o.seconds)),
          torch: run(
            g('llama-shared'),
            12 * GiB,
            py,
            torchChurn,
            '--mode',
            'shared',
            '--seconds',
            String(o.seconds),
            '--max-bytes',
            String(256 * MiB),
          ),
        },
        env,
      },
    };
  }
  if (o.only.includes('slurm'))
    p.slurm = {
      job: SLURM_JOB,
      scontrol: path.join(o.out || '<out>', 'scontrol'),
      prolog: {
        cmd: [
          process.execPath,
          cli,
          'slurm',
          'task-prolog',
          '--shards',
          String(SLURM_JOB.of),
          '--scontrol',
          path.join(o.out || '<out>', 'scontrol'),
        ],
        env: SLURM_JOB.env,
      },
      task: { cmd: [py, path.join(servers, 'refuse.py'), '--lib', 'torch', '--chunk-mib', '256'] },
      epilog: {
        cmd: [process.execPath, cli, 'slurm', 'epilog'],
        env: { SLURM_JOB_ID: SLURM_JOB.id, SLURM_JOB_UID: String(process.getuid()) },
      },
    };
  return p;
}

// ---- the run ----------------------------------------------------------------------------------

// One program to its end (killed after timeoutMs), sampled; NVML threshold = budget + overhead + 2 MiB.
async function step(ctx, s, overheadBytes, timeoutMs = 300000) {
  const p = start(s.cmd, s.env);
  const smp = sampler(ctx, s.group, () => [p]);
  const timer = setTimeout(() => p.child.kill('SIGKILL'), timeoutMs);
  await p.exited;
  clearTimeout(timer);
  smp.stop();
  const budgetBytes = s.budgetBytes ?? null;
  const thresholdBytes = (budgetBytes ?? ctx.totalMemory) + overheadBytes + 2 * MiB;
  const r = { ...finished(p, p.signal === 'SIGKILL'), budgetBytes, thresholdBytes, cmd: s.cmd, env: s.env || {} };
  r.judged = judgeSamples(smp.samples, thresholdBytes, budgetBytes);
  r.membersAtMost = (smp.samples.find((x) => x.chargedBytes === r.judged.maxChargedBytes) || {}).members || null;
  // What NVML saw above the ledger's charge, sample by sample (the contexts, which no allocation takes).
  r.maxUnchargedBytes = Math.max(0, ...smp.samples.filter((x) => x.chargedBytes !== null).map((x) => x.nvmlBytes - x.chargedBytes));
  return r;
}

function unpackBundle(bundle, into, python) {
  fs.mkdirSync(into, { recursive: true });
  // xz is not on every machine; python3's lzma is.
  const code = 'import lzma, sys, tarfile\nt = tarfile.open(fileobj=lzma.open(sys.argv[1]))\nt.extractall(sys.argv[2])\n';
  const r = spawnSync(python, ['-c', code, bundle, into], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`could not unpack ${bundle}: ${r.stderr}`);
  return path.join(into, 'node_modules');
}

// The CUDA 13 runtime and cuBLAS node-llama-cpp's prebuilt links to: the toolkit's, or Python's packages'.
function cudaLibraryPath(python) {
  const site = spawnSync(
    python,
    ['-c', 'import site, sys; print("\\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))'],
    {
      encoding: 'utf8',
    },
  );
  const roots = [
    '/usr/local/cuda/lib64',
    '/usr/local/cuda/targets/x86_64-linux/lib',
    ...String(site.stdout || '')
      .split('\n')
      .filter(Boolean),
  ];
  const f = findLibraries(['libcudart.so.13', 'libcublas.so.13', 'libcublasLt.so.13'], roots);
  if (f.missing.length)
    throw new Error(`node-llama-cpp's CUDA prebuilt needs ${f.missing.join(', ')}: not found under ${roots.join(', ')}`);
  return [...f.dirs, process.env.LD_LIBRARY_PATH].filter(Boolean).join(':');
}

async function llamaSection(ctx, p, o) {
  const l = {};
  if (!fs.existsSync(o.model)) {
    const { writeGguf } = require(path.join(servers, 'gguf.js'));
    const m = p.model;
    l.written = writeGguf(o.model, { layers: m.layers, embd: m.embd, ff: m.ff, heads: m.heads, vocab: m.vocab });
  }
  l.modelBytes = fs.statSync(o.model).size;
  l.idleOverheadBytes = await overheadOf(ctx, p.overhead);
  l.eagerOverheadBytes = await overheadOf(ctx, p.overheadEager);
  // Its context once loaded and generating holds the kernels it ran (cuBLAS's, llama.cpp's), more
  // than idle; never more than with all of them loaded.
  l.overheadBytes = Math.max(l.idleOverheadBytes, l.eagerOverheadBytes);
  const alone = { ...p.alone, budgetBytes: ctx.totalMemory, cmd: p.alone.cmd.map((a) => (a === 'DEVICE' ? String(ctx.totalMemory) : a)) };
  l.alone = await step(ctx, alone, l.overheadBytes);
  const ov = l.overheadBytes;
  l.auto = await step(ctx, p.auto, ov);
  l.forced = await step(ctx, p.forced, ov, 120000);
  l.forcedUnsafe = await step(ctx, p.forcedUnsafe, ov, 180000);

  // Two llama members and a trainer in one group, sampled together.
  const sh = p.shared;
  const members = {};
  const smp = sampler(ctx, sh.group, () => Object.values(members));
  members.llama1 = start(sh.members.llama1, sh.env);
  await members.llama1.reached('loaded');
  members.llama2 = start(sh.members.llama2, sh.env);
  await members.llama2.reached('loaded');
  members.torch = start(sh.members.torch);
  const timer = setTimeout(() => Object.values(members).forEach((m) => m.child.kill('SIGKILL')), (o.seconds + 240) * 1000);
  await Promise.all(Object.values(members).map((m) => m.exited));
  clearTimeout(timer);
  smp.stop();
  const threshold = sh.budgetBytes + 2 * ov + ctx.overheads.torch + 3 * 2 * MiB;
  l.shared = { budgetBytes: sh.budgetBytes, thresholdBytes: threshold, members: {} };
  for (const [k, m] of Object.entries(members)) l.shared.members[k] = finished(m, m.signal === 'SIGKILL');
  l.shared.judged = judgeSamples(smp.samples, threshold, sh.budgetBytes);
  fs.writeFileSync(path.join(o.out, 'llama-shared-samples.json'), JSON.stringify(smp.samples));
  return l;
}

/** The `export NAME=value` lines of a task prolog, as the environment Slurm gives the task. */
function prologExports(text) {
  const env = {};
  for (const m of String(text).matchAll(/^export ([A-Za-z_][A-Za-z0-9_]*)=(.*)$/gm)) env[m[1]] = m[2];
  return env;
}

/** The task prolog of the plan's slurm section, with its recorded scontrol written first; `extra` adds arguments. */
function slurmProlog(p, extra = []) {
  fs.writeFileSync(p.scontrol, `#!/bin/sh\ncat <<'EOF'\n${p.job.scontrol}\nEOF\n`, { mode: 0o755 });
  const cmd = [...p.prolog.cmd, ...extra];
  const r = spawnSync(cmd[0], cmd.slice(1), { env: { ...process.env, ...p.prolog.env }, encoding: 'utf8' });
  return { prologExit: r.status, prologStderr: String(r.stderr).slice(-2000), exports: prologExports(r.stdout) };
}

async function slurmSection(ctx, p) {
  const s = slurmProlog(p);
  const x = s.exports;
  if (s.prologExit === 0 && x.CUDA_MEMORY_GROUP) {
    const budgetBytes = Number(x.CUDA_MEMORY_GROUP_BUDGET);
    s.task = await step(
      ctx,
      { group: x.CUDA_MEMORY_GROUP, budgetBytes, cmd: p.task.cmd, env: { ...p.job.env, ...x } },
      ctx.overheads.torch,
    );
  }
  const e = spawnSync(p.epilog.cmd[0], p.epilog.cmd.slice(1), { env: { ...process.env, ...p.epilog.env }, encoding: 'utf8' });
  s.epilogExit = e.status;
  s.epilogOutput = `${e.stdout}${e.stderr}`.slice(-2000);
  s.groupLeft = ctx.cm.listGroups().groups.some((g) => g.name === `slurm-${p.job.id}`);
  return s;
}

async function runAll(o) {
  const { native } = require(path.join(root, 'dist', 'binding', 'native'));
  const cm = require(root);
  const dev = cm.devices()[0];
  cm.memGetInfo(0); // this process's own context first, so that no step's sum counts it
  const ctx = { cm, totalMemory: dev.totalMemory, processes: () => native.deviceProcesses(dev.uuid) || [] };
  const r = { gpu: { name: dev.name, uuid: dev.uuid, totalMemory: dev.totalMemory }, sections: o.only };
  if (o.only.includes('llama')) {
    try {
      if (!o.llamaModules) o.llamaModules = unpackBundle(o.llamaBundle, path.join(o.out, 'llama'), o.python);
      o.ldLibraryPath = cudaLibraryPath(o.python);
    } catch (e) {
      r.llama = { error: e.message };
      o.only = o.only.filter((s) => s !== 'llama');
    }
  }
  const p = plan(o);
  r.plan = p;
  r.overheads = { jax: await overheadOf(ctx, p.overheads.jax), torch: await overheadOf(ctx, p.overheads.torch) };
  if (p.jax) {
    r.jax = {};
    for (const k of ['alone', 'budget', 'fraction']) r.jax[k] = await step(ctx, p.jax[k], r.overheads.jax);
  }
  if (p.vllm) {
    r.vllm = [];
    for (const s of p.vllm) r.vllm.push(await step(ctx, s, r.overheads.torch));
  }
  for (const lib of ['cupy', 'numba'])
    if (p[lib]) r[lib] = await step(ctx, p[lib], (r.overheads[lib] = await overheadOf(ctx, p.overheads[lib])));
  ctx.overheads = r.overheads;
  if (p.llama) r.llama = await llamaSection(ctx, p.llama, o);
  if (p.slurm) r.slurm = await slurmSection(ctx, p.slurm);
  r.checks = checksOf(r);
  r.ok = r.checks.every((c) => c.pass);
  return r;
}

const USAGE =
  'usage: node scripts/servers-run.js --out DIR [--python python3] [--only jax,vllm,cupy,numba,llama,slurm] [--llama-bundle FILE | --llama-modules DIR] [--model FILE] [--seconds 20]\n';

async function main() {
  let a;
  try {
    a = args(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`servers-run: ${e.message}\n${USAGE}`);
    return 2;
  }
  const only = a.only ? a.only.split(',') : SECTIONS;
  const bad = only.filter((s) => !SECTIONS.includes(s));
  const o = {
    out: a.out,
    python: a.python || 'python3',
    only,
    id: process.pid,
    seconds: Number(a.seconds || 20),
    llamaBundle: a['llama-bundle'] || path.join(root, '.llama', 'node-llama-cpp.tar.xz'),
    llamaModules: a['llama-modules'],
    model: a.model || path.join(a.out || os.tmpdir(), 'random-llama-8g.gguf'),
  };
  if (bad.length || !(o.seconds > 0)) {
    process.stderr.write(`servers-run: ${bad.length ? `unknown section ${bad.join(', ')}` : '--seconds must be above 0'}\n${USAGE}`);
    return 2;
  }
  if (a['dry-run']) {
    o.llamaModules ??= '<out>/llama/node_modules';
    o.ldLibraryPath = '<the folders of libcudart.so.13, libcublas.so.13, libcublasLt.so.13>';
    process.stdout.write(JSON.stringify(plan(o), null, 2) + '\n');
    return 0;
  }
  if (!o.out) {
    process.stderr.write(USAGE);
    return 2;
  }
  fs.mkdirSync(o.out, { recursive: true });
  const r = await runAll(o);
  const text = JSON.stringify(r, null, 2);
  fs.writeFileSync(path.join(o.out, 'summary.json'), text + '\n');
  process.stdout.write(JSON.stringify({ ok: r.ok, checks: r.checks }, null, 2) + '\n');
  return r.ok ? 0 : 1;
}

if (require.main === module)
  main().then(
    (code) => process.exit(code || 0),
    (e) => {
      process.stderr.write(`servers-run: ${e.stack || e.message}\n`);
      process.exit(1);
    },
  );

module.exports = { judgeSamples, checksOf, lastJson, findLibraries, plan, step, overheadOf, prologExports, slurmProlog };

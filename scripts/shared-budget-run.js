#!/usr/bin/env node
'use strict';
// One GPU budget for every process on the GPU, shown in one call on a GPU machine:
//
//   node scripts/shared-budget-run.js --out DIR [--budget 20GiB] [--seconds 120] [--python python3] [--nvcc nvcc]
//                                     [--torch-alloc-conf CONF] [--no-replay]
//   node scripts/shared-budget-run.js --dry-run      the plan as JSON, without a GPU
//   node scripts/shared-budget-run.js member --group G --budget BYTES --seconds S [--seed N] [--simulate SIZE]
//                                                    the Node member alone
//
// 1. Context overhead of each runtime, alone: a process that initialises CUDA and keeps nothing
//    (Node with this library, PyTorch with its fill kernel loaded and the run's allocator settings,
//    the C++ program), its per-process used memory as NVML reports it.
// 2. The shared run: a Node process (an allocator of this library in the group), a PyTorch process
//    (scripts/preload/torch-churn.py) and the C++ program scripts/preload/alloc-churn.cu (built
//    here with nvcc's default, the static runtime), the last two under `cuda-memory run`, share
//    one budget for --seconds, once each has set itself up (--go: its context and streams made
//    while the budget is free); a second C++ member is SIGKILLed halfway. Every 100 ms NVML's
//    per-process used memory of the run's processes is summed, and the ledger read.
//    --torch-alloc-conf runs the PyTorch member with that PYTORCH_CUDA_ALLOC_CONF
//    (backend:cudaMallocAsync, expandable_segments:True): its allocator's other routes to the
//    driver, the stream-ordered pool and virtual memory, under the same budget.
// 3. Record and plan: a seeded PyTorch run recorded (cuda-memory run --trace), replayed for its
//    smallest budget M (replay --smallest-budget), then run again under M + 5% and M - 5%
//    (left out with --no-replay).
//
// The summary (DIR/summary.json, also on stdout) holds every figure and the checks: the NVML sum
// never above the budget plus the processes' measured overhead and 2 MiB each (the driver's last
// chunk of small allocations, which a charge of what each asked for does not see); the ledger never above the
// budget; every program caught its refusals as its own error and ended normally; the killed
// member's share back within a second; the run survives under M + 5% and fails under M - 5% with
// torch.OutOfMemoryError. Exit 1 if a check failed, 2 for a usage error.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn, spawnSync } = require('child_process');
const { parseArgs } = require('util');

const root = path.join(__dirname, '..');
const cli = path.join(root, 'dist', 'cli.js');
const torchScript = path.join(root, 'scripts', 'preload', 'torch-churn.py');
const churnSource = path.join(root, 'scripts', 'preload', 'alloc-churn.cu');
const GiB = 2 ** 30;
const MiB = 2 ** 20;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The options, and the words between them (`member`).
function args(argv) {
  const text = ['out', 'budget', 'seconds', 'python', 'nvcc', 'group', 'seed', 'simulate', 'torch-alloc-conf', 'go'];
  const flags = ['dry-run', 'no-replay'];
  const options = Object.fromEntries([...text.map((k) => [k, { type: 'string' }]), ...flags.map((k) => [k, { type: 'boolean' }])]);
  const { values, positionals } = parseArgs({ args: argv, options, allowPositionals: true });
  return { ...values, _: positionals };
}

// ---- what is judged (no GPU needed: test/bench/shared-budget-run.test.js) -----------------------

/**
 * The NVML samples judged against the budget plus the measured overheads: each sample the sum of
 * the used memory of the run's processes. `killed` ({pid, atMs}): a member SIGKILLed at atMs; a
 * sample above the threshold taken after that while NVML still lists it is counted apart
 * (samplesOverWhileKilledListed): its share is back in the ledger at once (the kernel drops its
 * lock as it closes its files), the driver's account of its memory follows a little later.
 */
function judgeSamples(samples, thresholdBytes, killed = null) {
  let max = 0;
  let maxAt = null;
  let over = 0;
  let dying = 0;
  for (const s of samples) {
    if (s.totalBytes > max) {
      max = s.totalBytes;
      maxAt = s.t;
    }
    if (s.totalBytes <= thresholdBytes) continue;
    const listed = killed && killed.atMs !== null && s.t >= killed.atMs && (s.processes || []).some((q) => q.pid === killed.pid);
    if (listed) dying++;
    else over++;
  }
  return {
    samples: samples.length,
    maxSumBytes: max,
    maxSumAtMs: maxAt,
    samplesOverThreshold: over,
    samplesOverWhileKilledListed: dying,
    marginBytes: thresholdBytes - max,
  };
}

/** The checks of a finished run's results, each with what it saw. */
function checksOf(r) {
  const checks = [];
  const add = (name, pass, detail) => checks.push({ name, pass: Boolean(pass), detail });
  const nv = r.nvml;
  add(
    'NVML: the summed per-process used memory never above the budget plus the processes’ context overhead',
    nv.samples > 0 && nv.samplesOverThreshold === 0,
    `${nv.samples} samples every 100 ms, ${nv.samplesOverThreshold} above ${r.thresholdBytes} bytes; the most ${nv.maxSumBytes} bytes` +
      (nv.samplesOverWhileKilledListed
        ? `; ${nv.samplesOverWhileKilledListed} more above it just after the kill, while NVML still listed the killed process`
        : ''),
  );
  add(
    'ledger: the group’s charge never above the budget',
    r.ledger.samples > 0 && r.ledger.maxChargedBytes <= r.budgetBytes,
    `${r.ledger.samples} reads, the most ${r.ledger.maxChargedBytes} of ${r.budgetBytes} bytes`,
  );
  for (const [name, m] of Object.entries(r.members)) {
    if (name === 'victim') continue;
    const ok = m.exitCode === 0 && m.result && m.result.refusals > 0;
    add(
      `${name}: every refusal caught as its own error (${m.errorName}), the program ended normally`,
      ok,
      m.result ? `exit ${m.exitCode}, ${m.result.allocs} allocations, ${m.result.refusals} refusals` : `exit ${m.exitCode}, no result line`,
    );
  }
  add(
    'a member killed with SIGKILL gives its share back within a second',
    r.kill.chargedBytes > 0 && r.kill.reclaimedAfterMs !== null && r.kill.reclaimedAfterMs < 1000,
    `it held ${r.kill.chargedBytes} bytes; gone from the ledger ${r.kill.reclaimedAfterMs} ms after the kill`,
  );
  const rp = r.replay;
  if (!rp) return checks; // --no-replay
  add(
    'replay: the recorded PyTorch run survives under M + 5% and fails under M - 5% (torch.OutOfMemoryError)',
    rp.smallestBudgetBytes > 0 && rp.over.survived && !rp.under.survived && rp.under.refusedAs === 'torch.OutOfMemoryError',
    `M = ${rp.smallestBudgetBytes} bytes; under ${rp.over.budgetBytes}: ${rp.over.survived ? 'survived' : 'failed'}; under ${rp.under.budgetBytes}: ${rp.under.survived ? 'survived' : `failed (${rp.under.refusedAs})`}`,
  );
  return checks;
}

/** The budgets of the replay check: M ± 5%, floored to whole bytes. */
function replayBudgets(m) {
  return { over: Math.floor(m * 1.05), under: Math.floor(m * 0.95) };
}

/** The last JSON line a program printed, or null. */
function lastJson(text) {
  const lines = String(text).trim().split('\n').reverse();
  for (const l of lines) {
    try {
      const v = JSON.parse(l);
      if (v && typeof v === 'object') return v;
    } catch {
      // not a JSON line
    }
  }
  return null;
}

const sleepSync = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

// ---- the Node member ------------------------------------------------------------------------

// An allocator of this library in the group: log-uniform sizes from 1 MiB to 1 GiB, a random live
// block freed about half the time, and on an OutOfMemoryError (the library's, caught) half the
// live blocks freed. Its pool gives its free regions back to the group now and then (emptyCache,
// as the PyTorch member empties its cache): a pool that only grows would take its peak once and
// never ask the group again. One JSON line at the end.
function nodeMember(o) {
  const cm = require(root);
  // --simulate SIZE: on a simulated device (to try the member without a GPU).
  const simulate = o.simulate ? { simulate: { totalBytes: cm.parseSize(o.simulate) } } : {};
  const a = cm.createAllocator({ ...simulate, allowGrowth: true, shared: { name: o.group, memoryLimit: Number(o.budget) } });
  process.stdout.write('joined\n');
  // --go FILE: the time starts once FILE exists (every member has set itself up).
  for (const until = Date.now() + 120000; o.go && !fs.existsSync(o.go) && Date.now() < until;) sleepSync(1);
  let seed = Number(o.seed) >>> 0 || 1;
  const rand = () => {
    seed ^= seed << 13;
    seed >>>= 0;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    seed >>>= 0;
    return seed / 4294967296;
  };
  const live = [];
  const r = { pid: process.pid, allocs: 0, frees: 0, refusals: 0, refusedAs: null };
  const deadline = Date.now() + Number(o.seconds) * 1000;
  while (Date.now() < deadline) {
    if (live.length && (live.length >= 32 || rand() < 0.45)) {
      live.splice(Math.floor(rand() * live.length), 1)[0].free();
      r.frees++;
      if (rand() < 0.1) a.emptyCache();
      continue;
    }
    const bytes = Math.max(1, Math.floor(Math.exp(Math.log(MiB) + rand() * (Math.log(GiB) - Math.log(MiB))) / MiB)) * MiB;
    try {
      live.push(a.alloc(bytes));
      r.allocs++;
    } catch (e) {
      if (!(e instanceof cm.OutOfMemoryError)) throw e;
      r.refusals++;
      r.refusedAs = e.name;
      for (const b of live.splice(0, live.length >> 1)) b.free();
    }
  }
  r.peakPoolBytes = a.stats().peakPoolBytes;
  for (const b of live) b.free();
  a.close();
  process.stdout.write(JSON.stringify(r) + '\n');
}

// ---- the run ----------------------------------------------------------------------------------

// A child with its output kept; `ready` resolves at the first line that says so (or at exit).
function start(cmd, argv, env = process.env) {
  const c = spawn(cmd, argv, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const p = { child: c, pid: c.pid, stdout: '', stderr: '', exitCode: null, signal: null };
  p.exited = new Promise((resolve) =>
    c.on('exit', (code, signal) => {
      p.exitCode = code;
      p.signal = signal;
      resolve();
    }),
  );
  c.on('error', (e) => (p.stderr += `${e.message}\n`));
  p.ready = new Promise((resolve) => {
    c.stdout.on('data', (d) => {
      p.stdout += d;
      if (/^(ready|joined)$/m.test(p.stdout)) resolve();
    });
    p.exited.then(resolve);
  });
  c.stderr.on('data', (d) => (p.stderr += d));
  return p;
}

// The PyTorch member's environment beyond this one's: its allocator's settings.
const torchEnv = (o) => (o.torchAllocConf ? { PYTORCH_CUDA_ALLOC_CONF: o.torchAllocConf } : {});

// The plan: every command the run starts, for --dry-run and the summary.
function plan(o) {
  const budget = o.budgetBytes;
  const run = (group, limit, extra, ...cmd) => [
    process.execPath,
    cli,
    'run',
    '--group',
    group,
    '--limit',
    String(limit),
    ...extra,
    '--',
    ...cmd,
  ];
  const churn = o.churnBinary;
  const half = Math.max(1, Math.round(o.seconds / 2));
  return {
    overhead: {
      node: [process.execPath, '-e', `require(${JSON.stringify(root)}).memGetInfo(0); console.log('ready'); setTimeout(() => {}, 4000)`],
      torch: [o.python, torchScript, '--mode', 'idle', '--seconds', '4'],
      // PyTorch idle with the shared run's allocator settings: its cudaMallocAsync backend makes
      // the context 70 MiB larger on an H200 (680 MiB against 610).
      torchEnv: torchEnv(o),
      // alloc-churn keeps one allocation live at a time here, of 512 bytes (inside the driver's
      // first 2 MiB page): its context, its stream and that page.
      cpp: [churn, '--seconds', '4', '--min-bytes', '512', '--max-bytes', '512', '--max-live-bytes', '0'],
    },
    shared: {
      node: [
        process.execPath,
        __filename,
        'member',
        '--group',
        o.group,
        '--budget',
        String(budget),
        '--seconds',
        String(o.seconds),
        '--seed',
        '1',
        '--go',
        o.goFile,
      ],
      torch: run(
        o.group,
        budget,
        [],
        o.python,
        torchScript,
        '--mode',
        'shared',
        '--seconds',
        String(o.seconds),
        '--seed',
        '2',
        '--go',
        o.goFile,
      ),
      // PyTorch reads its allocator's settings from the environment (run passes it on).
      torchEnv: torchEnv(o),
      cpp: run(o.group, budget, [], churn, '--seconds', String(o.seconds), '--seed', '3', '--go', o.goFile),
      victim: run(o.group, budget, [], churn, '--seconds', String(o.seconds), '--seed', '4', '--go', o.goFile),
      killVictimAfterSeconds: half,
    },
    replay:
      o.replay === false
        ? null
        : {
            record: run(
              `${o.group}-rec`,
              'TOTAL',
              ['--trace', o.trace],
              o.python,
              torchScript,
              '--mode',
              'replay',
              '--steps',
              '300',
              '--seed',
              '7',
            ),
            smallest: [process.execPath, cli, 'replay', o.trace, '--smallest-budget', '--json'],
            over: run(`${o.group}-over`, 'M+5%', [], o.python, torchScript, '--mode', 'replay', '--steps', '300', '--seed', '7'),
            under: run(`${o.group}-under`, 'M-5%', [], o.python, torchScript, '--mode', 'replay', '--steps', '300', '--seed', '7'),
          },
  };
}

function gpuProcesses(native, uuid) {
  return native.deviceProcesses(uuid) || [];
}

// The most NVML says a program uses while it sits idle: five samples 100 ms apart, a second
// after it said it was ready (or 1.5 s after its start, for a program that does not say). Its
// processes are those NVML lists that it did not list before, so the figure holds where NVML's
// pids are another pid namespace's (a container's host).
async function overheadOf(native, uuid, cmd, env = {}) {
  const before = new Set(gpuProcesses(native, uuid).map((q) => q.pid));
  const p = start(cmd[0], cmd.slice(1), { ...process.env, ...env });
  await Promise.race([p.ready, sleep(cmd.includes('--max-live-bytes') ? 1500 : 120000)]);
  await sleep(1000);
  let most = 0;
  for (let i = 0; i < 5; i++) {
    const sum = gpuProcesses(native, uuid)
      .filter((q) => !before.has(q.pid))
      .reduce((t, q) => t + (q.usedBytes || 0), 0);
    most = Math.max(most, sum);
    await sleep(100);
  }
  p.child.kill('SIGKILL');
  await p.exited;
  return most;
}

async function runAll(o) {
  const { native } = require(path.join(root, 'dist', 'binding', 'native'));
  const cm = require(root);
  const dev = cm.devices()[0];
  cm.memGetInfo(0); // this process's own context, made first, so that every baseline holds it
  const uuid = dev.uuid;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'shared-budget-'));
  o.churnBinary = path.join(tmp, 'alloc-churn');
  o.goFile = path.join(tmp, 'go');
  o.trace = path.join(o.out, 'torch-trace.json');
  const build = spawnSync(o.nvcc, ['-O2', '-o', o.churnBinary, churnSource], { encoding: 'utf8' });
  if (build.status !== 0) throw new Error(`nvcc could not build ${churnSource}: ${build.stderr}`);
  const p = plan(o);
  const r = { gpu: { name: dev.name, uuid, totalMemory: dev.totalMemory }, budgetBytes: o.budgetBytes, seconds: o.seconds, plan: p };

  // 1. Each runtime's context overhead, alone.
  r.overheads = {};
  for (const k of ['node', 'torch', 'cpp'])
    r.overheads[k] = await overheadOf(native, uuid, p.overhead[k], k === 'torch' ? p.overhead.torchEnv : {});
  // Four processes share the budget: the C++ program runs twice (the second is the one killed).
  // Each may have a last 2 MiB chunk of small allocations partly used, which is not charged.
  r.torchAllocConf = o.torchAllocConf || null;
  r.thresholdBytes = o.budgetBytes + r.overheads.node + r.overheads.torch + 2 * r.overheads.cpp + 4 * 2 * MiB;

  // 2. The shared run, sampled every 100 ms.
  // What NVML lists now (this process's own context included) is not the run's.
  const before = new Set(gpuProcesses(native, uuid).map((q) => q.pid));
  const members = {};
  members.node = start(p.shared.node[0], p.shared.node.slice(1));
  await members.node.ready; // the first member sets the budget
  for (const k of ['torch', 'cpp', 'victim'])
    members[k] = start(p.shared[k][0], p.shared[k].slice(1), k === 'torch' ? { ...process.env, ...p.shared.torchEnv } : process.env);
  // Each sets itself up (its context, its streams) while the budget is free, then all start
  // together: a member that came late would find the budget taken by the first, and its streams
  // (charged under run) refused before it could churn.
  await Promise.all(Object.values(members).map((m) => m.ready));
  fs.writeFileSync(o.goFile, '');
  const samples = [];
  const ledger = { samples: 0, maxChargedBytes: 0 };
  const t0 = Date.now();
  const sampler = setInterval(() => {
    const procs = gpuProcesses(native, uuid).filter((q) => !before.has(q.pid));
    samples.push({ t: Date.now() - t0, totalBytes: procs.reduce((s, q) => s + (q.usedBytes || 0), 0), processes: procs });
    try {
      const g = cm.groupStats(o.group);
      ledger.samples++;
      ledger.maxChargedBytes = Math.max(ledger.maxChargedBytes, g.chargedBytes);
    } catch {
      // between members
    }
  }, 100);
  // Halfway, SIGKILL the victim's program (the ledger's member, a child of `cuda-memory run`).
  await sleep(p.shared.killVictimAfterSeconds * 1000);
  const g = cm.groupStats(o.group);
  const victim = g.members.find((m) => m.command && m.command.includes(o.churnBinary) && m.command.includes('--seed 4'));
  r.kill = { pid: victim ? victim.pid : null, chargedBytes: victim ? victim.poolBytes : 0, reclaimedAfterMs: null, atMs: null };
  if (victim) {
    const killedAt = process.hrtime.bigint();
    r.kill.atMs = Date.now() - t0;
    process.kill(victim.pid, 'SIGKILL');
    for (let i = 0; i < 500; i++) {
      if (!cm.groupStats(o.group).members.some((m) => m.pid === victim.pid)) {
        r.kill.reclaimedAfterMs = Number(process.hrtime.bigint() - killedAt) / 1e6;
        break;
      }
      await sleep(2);
    }
  }
  await Promise.all(Object.values(members).map((m) => m.exited));
  clearInterval(sampler);
  r.nvml = judgeSamples(samples, r.thresholdBytes, r.kill);
  // How long NVML went on listing the killed process after the kill.
  const listedAfter = samples.filter((x) => r.kill.atMs !== null && x.t >= r.kill.atMs && x.processes.some((q) => q.pid === r.kill.pid));
  r.kill.nvmlListedForMs = listedAfter.length ? listedAfter[listedAfter.length - 1].t - r.kill.atMs : 0;
  // The processes at the most, to see where a sum above the threshold came from.
  r.nvml.atMost = (samples.find((x) => x.t === r.nvml.maxSumAtMs) || { processes: [] }).processes;
  r.ledger = ledger;
  const errorNames = { node: 'OutOfMemoryError', torch: 'torch.OutOfMemoryError', cpp: 'cudaErrorMemoryAllocation' };
  r.members = {};
  for (const [k, m] of Object.entries(members))
    r.members[k] = {
      exitCode: m.exitCode,
      signal: m.signal,
      errorName: errorNames[k] || 'killed',
      result: lastJson(m.stdout),
      stderr: m.stderr.slice(-2000),
    };
  fs.writeFileSync(path.join(o.out, 'nvml-samples.json'), JSON.stringify(samples));

  // 3. Record, find M, run under M ± 5%.
  if (!p.replay) {
    fs.rmSync(tmp, { recursive: true, force: true });
    r.checks = checksOf(r);
    r.ok = r.checks.every((c) => c.pass);
    return r;
  }
  const runTo = async (cmd) => {
    const q = start(cmd[0], cmd.slice(1));
    await q.exited;
    return { exitCode: q.exitCode, ...(lastJson(q.stdout) || {}), stderr: q.stderr.slice(-2000) };
  };
  const rec = await runTo(p.replay.record.map((a) => (a === 'TOTAL' ? String(dev.totalMemory) : a)));
  const found = spawnSync(p.replay.smallest[0], p.replay.smallest.slice(1), { encoding: 'utf8' });
  let smallest = {};
  try {
    smallest = JSON.parse(found.stdout).smallestBudget[0];
  } catch {
    smallest = { error: `replay --smallest-budget gave no answer (exit ${found.status}): ${found.stderr.slice(-2000)}` };
  }
  const m = smallest.budgetBytes || 0;
  const b = replayBudgets(m);
  r.replay = { recorded: rec, smallestBudgetBytes: m, policy: smallest.policy, error: smallest.error, trace: o.trace };
  r.replay.over = { budgetBytes: b.over, ...(await runTo(p.replay.over.map((a) => (a === 'M+5%' ? String(b.over) : a)))) };
  r.replay.under = { budgetBytes: b.under, ...(await runTo(p.replay.under.map((a) => (a === 'M-5%' ? String(b.under) : a)))) };
  fs.rmSync(tmp, { recursive: true, force: true });

  r.checks = checksOf(r);
  r.ok = r.checks.every((c) => c.pass);
  return r;
}

const USAGE =
  'usage: node scripts/shared-budget-run.js --out DIR [--budget 20GiB] [--seconds 120] [--python python3] [--nvcc nvcc] [--torch-alloc-conf CONF] [--no-replay]\n';

async function main() {
  let o;
  try {
    o = args(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`shared-budget-run: ${e.message}\n${USAGE}`);
    return 2;
  }
  if (o._[0] === 'member') return nodeMember(o);
  const { parseSize } = require(root);
  const opts = {
    out: o.out,
    budgetBytes: parseSize(o.budget || '20GiB'),
    seconds: Number(o.seconds || 120),
    python: o.python || 'python3',
    nvcc: o.nvcc || 'nvcc',
    group: `shared-budget-${process.pid}`,
    torchAllocConf: o['torch-alloc-conf'],
    replay: !o['no-replay'],
  };
  if (o['dry-run']) {
    opts.churnBinary = '<tmp>/alloc-churn';
    opts.goFile = '<tmp>/go';
    opts.trace = path.join(opts.out || '<out>', 'torch-trace.json');
    process.stdout.write(JSON.stringify(plan(opts), null, 2) + '\n');
    return 0;
  }
  if (!opts.out || !(opts.seconds > 0)) {
    process.stderr.write(USAGE);
    return 2;
  }
  fs.mkdirSync(opts.out, { recursive: true });
  const r = await runAll(opts);
  const text = JSON.stringify(r, null, 2);
  fs.writeFileSync(path.join(opts.out, 'summary.json'), text + '\n');
  process.stdout.write(text + '\n');
  return r.ok ? 0 : 1;
}

if (require.main === module)
  main().then(
    (code) => process.exit(code || 0),
    (e) => {
      process.stderr.write(`shared-budget-run: ${e.stack || e.message}\n`);
      process.exit(1);
    },
  );

module.exports = { judgeSamples, checksOf, replayBudgets, lastJson, plan };

#!/usr/bin/env node
'use strict';
// Elastic sharing (docs/processes.md, "Waiting, guarantees and live budgets") shown on a GPU
// machine in one call:
//
//   node scripts/elastic-run.js --out DIR [--python python3] [--nvcc nvcc] [--only turns,guaranteed,live]
//   node scripts/elastic-run.js --dry-run [...]     the plan as JSON, without a GPU
//
//   turns       two PyTorch processes (scripts/preload/torch-elastic.py turns) under one 20 GiB
//               budget with `run --wait 60s`, each taking 12 GiB in turns for ten rounds: neither is
//               refused; every grant that waited came within 1 s of the other's free.
//   guaranteed  a PyTorch member with `run --request 8GiB` (torch-elastic.py guaranteed: 1,000 cycles,
//               always within its request) beside a C++ borrower without a request
//               (scripts/preload/alloc-churn.cu, built with nvcc) in a 16 GiB budget: PyTorch is never
//               refused; the borrower is refused only where it would hold more than the burst pool
//               (the budget less the request).
//   live        three members (PyTorch's scripts/preload/torch-churn.py, the C++ alloc-churn and a
//               Node allocator of this library, scripts/shared-budget-run.js's member) in a group of
//               8 GiB, raised to 16 GiB with `cuda-memory group set` and lowered back to 8 GiB: the
//               ledger holds each budget at once, the charge rises above 8 GiB after the raise, falls
//               without rising after the lowering until it is under 8 GiB and stays there, and
//               cudaMemGetInfo in the group (scripts/preload/mem-info.cu under `run`) reports each
//               budget.
//
// Every 100 ms NVML's per-process used memory of the section's processes is summed and the group's
// ledger read (scripts/lib/gpu-steps.js); the ledger is never above the budget in force and NVML's
// sum never above it plus each process's context overhead (measured alone first) and 2 MiB each.
// DIR/summary.json (also on stdout) holds every figure and the checks; DIR/live-samples.json the
// live section's samples, each member's charge beside its NVML figure. Exit 1 if a check failed,
// 2 for a usage error.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { parseArgs } = require('util');
const { SAMPLE_MS, lastJson, start, finished, sampler, judgeSamples, overheadOf } = require('./lib/gpu-steps');

const root = path.join(__dirname, '..');
const cli = path.join(root, 'dist', 'cli.js');
const preload = path.join(__dirname, 'preload');
const GiB = 2 ** 30;
const MiB = 2 ** 20;
const SECTIONS = ['turns', 'guaranteed', 'live'];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const gib = (b) => (typeof b === 'number' ? `${(b / GiB).toFixed(2)} GiB` : String(b));

// ---- what is judged (no GPU needed: test/bench/elastic-run.test.js) --------------------------

/** Every JSON line a program printed, in order. */
function jsonLines(text) {
  const out = [];
  for (const l of String(text).split('\n'))
    try {
      const v = JSON.parse(l);
      if (v && typeof v === 'object') out.push(v);
    } catch {
      // not a JSON line
    }
  return out;
}

/**
 * Each grant of one member that came while the other member was freeing, or after: for every
 * `got` event, the last `free` of the other that began before the grant and ended after the ask.
 * afterFreeS is the time from that free's start to the grant.
 */
function handoversOf(events) {
  const out = [];
  events.forEach((mine, i) => {
    const frees = events
      .filter((_, j) => j !== i)
      .flat()
      .filter((e) => e.event === 'free');
    for (const g of mine.filter((e) => e.event === 'got')) {
      const f = frees
        .filter((x) => x.from <= g.got && x.to >= g.asked)
        .sort((a, b) => a.from - b.from)
        .pop();
      if (f) out.push({ member: i, round: g.round, waitedS: g.waitedS, afterFreeS: g.got - f.from });
    }
  });
  return out;
}

/**
 * The live section's samples cut at the budget changes (`marks`: [{fromMs, atMs, budgetBytes}]:
 * `group set` ran from fromMs to atMs; the first mark is at 0): for each phase, the ledger's and
 * NVML's most, the budgets the ledger held once the change was made, and after a lowering, when
 * the charge first came under the new budget, whether it rose before that, and its most after.
 * While `group set` runs either budget may be in force; until the charge is under a lowered
 * budget, the earlier one bounds what is held. `probes` ([{fromMs, toMs}]) are the windows in
 * which the cudaMemGetInfo probe ran, a process of the group with a context of its own: NVML's
 * bound holds `probeBytes` more within them (and one sampling interval either side).
 */
function livePhases(samples, marks, overheadBytes, probes = [], probeBytes = 0) {
  const probing = (x) => probes.some((q) => x.t >= q.fromMs - SAMPLE_MS && x.t <= q.toMs + SAMPLE_MS);
  return marks.map((m, i) => {
    const end = i + 1 < marks.length ? marks[i + 1].fromMs : Infinity;
    const s = samples.filter((x) => x.t >= m.fromMs && x.t < end && x.chargedBytes !== null);
    const prev = i > 0 ? marks[i - 1].budgetBytes : m.budgetBytes;
    const lowered = m.budgetBytes < prev;
    const settled = s.filter((x) => x.t >= m.atMs);
    const p = {
      budgetBytes: m.budgetBytes,
      samples: s.length,
      ledgerBudgets: [...new Set(settled.map((x) => x.budgetBytes))],
      maxChargedBytes: Math.max(0, ...s.map((x) => x.chargedBytes)),
      maxNvmlBytes: Math.max(0, ...s.map((x) => x.nvmlBytes)),
    };
    const under = lowered ? s.findIndex((x) => x.t >= m.atMs && x.chargedBytes <= m.budgetBytes) : 0;
    const bound = (x, k) => (x.t < m.atMs || (lowered && (under < 0 || k < under)) ? Math.max(prev, m.budgetBytes) : m.budgetBytes);
    p.nvmlOver = s.filter((x, k) => x.nvmlBytes > bound(x, k) + overheadBytes + (probing(x) ? probeBytes : 0)).length;
    p.chargedOver = s.filter((x, k) => x.chargedBytes > bound(x, k)).length;
    if (lowered) {
      const after = s.filter((x) => x.t >= m.atMs);
      const u = after.findIndex((x) => x.chargedBytes <= m.budgetBytes);
      p.underAfterMs = u < 0 ? null : after[u].t - m.atMs;
      p.roseBeforeUnder = after.slice(0, u < 0 ? after.length : u + 1).some((x, k) => k > 0 && x.chargedBytes > after[k - 1].chargedBytes);
      p.maxChargedAfterUnderBytes = u < 0 ? null : Math.max(...after.slice(u).map((x) => x.chargedBytes));
    }
    return p;
  });
}

/** The checks of a finished run, each with what it saw. */
function checksOf(r) {
  const checks = [];
  const add = (name, pass, detail) => checks.push({ name, pass: Boolean(pass), detail });
  const held = (name, s) =>
    add(
      `${name}: the ledger never above the budget, NVML's per-process sum never above it plus the context overheads`,
      s.judged.samples > 0 && s.judged.chargedOver === 0 && s.judged.nvmlOver === 0,
      `${s.judged.samples} samples; ledger at most ${gib(s.judged.maxChargedBytes)} of ${gib(s.budgetBytes)}; NVML at most ${gib(s.judged.maxNvmlBytes)}, threshold ${gib(s.thresholdBytes)}`,
    );
  if (r.turns) {
    const t = r.turns;
    const res = t.members.map((m) => m.result || {});
    add(
      'turns: both members ran every round and neither was refused',
      t.members.every((m) => m.exitCode === 0) && res.every((x) => x.grants === t.rounds && x.refusals === 0),
      t.members.map((m, i) => `member ${i}: exit ${m.exitCode}, ${res[i].grants} grants, ${res[i].refusals} refusals`).join('; '),
    );
    const late = t.handovers.filter((h) => h.afterFreeS > 1);
    add(
      'turns: each grant that waited came within 1 s of the other member freeing',
      t.handovers.length >= t.rounds && late.length === 0,
      `${t.handovers.length} hand-overs, at most ${Math.max(0, ...t.handovers.map((h) => h.afterFreeS)).toFixed(4)} s after the free; longest wait ${Math.max(0, ...t.handovers.map((h) => h.waitedS)).toFixed(3)} s`,
    );
    held('turns', t);
  }
  if (r.guaranteed) {
    const g = r.guaranteed;
    const tr = g.torch.result || {};
    add(
      `guaranteed: the PyTorch member (request ${gib(g.requestBytes)}) was never refused within its request`,
      g.torch.exitCode === 0 && tr.allocs >= g.cycles / 4 && tr.refusals === 0,
      `exit ${g.torch.exitCode}; ${tr.allocs} allocations over ${g.cycles} cycles, ${tr.refusals} refusals, PyTorch reserved at most ${gib(tr.peakReservedBytes)}`,
    );
    const br = g.borrower.result || {};
    add(
      `guaranteed: the borrower was refused, and only beyond the burst pool (${gib(g.burstBytes)})`,
      br.refusals > 0 && br.leastRefusedBytes > g.burstBytes,
      `${br.allocs} allocations, ${br.refusals} refusals; the least it would have held at a refusal ${gib(br.leastRefusedBytes)}; it held at most ${gib(br.peakBytes)}`,
    );
    held('guaranteed', g);
  }
  if (r.live) {
    const l = r.live;
    add(
      'live: every member ended normally, its refusals its own errors',
      l.members.every((m) => m.exitCode === 0),
      l.members.map((m) => `${m.name}: exit ${m.exitCode}, ${(m.result || {}).refusals} refusals`).join('; '),
    );
    add(
      'live: the ledger held each budget from the change on',
      l.phases.every((p) => p.ledgerBudgets.length === 1 && p.ledgerBudgets[0] === p.budgetBytes),
      l.phases.map((p) => `${gib(p.budgetBytes)}: ${p.ledgerBudgets.map(gib).join(', ')}`).join('; '),
    );
    add(
      'live: cudaMemGetInfo in the group reported each budget',
      l.memInfo.every((m) => m.total === m.budgetBytes),
      l.memInfo.map((m) => `${gib(m.budgetBytes)}: total ${gib(m.total)}, free ${gib(m.free)}`).join('; '),
    );
    const [, up, down] = l.phases;
    add(
      'live: after the raise the members took more than the old budget',
      up && up.maxChargedBytes > l.phases[0].budgetBytes,
      up ? `at most ${gib(up.maxChargedBytes)} under ${gib(up.budgetBytes)}` : 'no phase',
    );
    add(
      'live: after the lowering the charge fell without rising until under the new budget, and stayed under it',
      down && down.underAfterMs !== null && !down.roseBeforeUnder && down.maxChargedAfterUnderBytes <= down.budgetBytes,
      down
        ? `under ${gib(down.budgetBytes)} after ${down.underAfterMs} ms; rose before: ${down.roseBeforeUnder}; at most ${gib(down.maxChargedAfterUnderBytes)} after`
        : 'no phase',
    );
    add(
      'live: the ledger never above the budget in force, NVML never above it plus the overheads',
      l.phases.every((p) => p.samples > 0 && p.chargedOver === 0 && p.nvmlOver === 0),
      l.phases
        .map((p) => `${gib(p.budgetBytes)}: ${p.samples} samples, ledger at most ${gib(p.maxChargedBytes)}, NVML ${gib(p.maxNvmlBytes)}`)
        .join('; '),
    );
  }
  return checks;
}

// ---- the plan ----------------------------------------------------------------------------------

function plan(o) {
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
  const elastic = path.join(preload, 'torch-elastic.py');
  const churnPy = path.join(preload, 'torch-churn.py');
  const g = (s) => `elastic-${s}-${o.id}`;
  const p = {
    overheads: {
      torch: { cmd: [o.python, churnPy, '--mode', 'idle', '--seconds', '4'] },
      cpp: { cmd: [o.churn, '--seconds', '4', '--min-bytes', '512', '--max-bytes', '512', '--max-live-bytes', '0'] },
      node: { cmd: [process.execPath, '-e', `require(${JSON.stringify(root)}).memGetInfo(0); setTimeout(() => {}, 4000)`] },
    },
  };
  if (o.only.includes('turns')) {
    const budget = 20 * GiB;
    const member = () =>
      run(g('turns'), budget, ['--wait', '60s'], o.python, elastic, 'turns', '--rounds', '10', '--bytes', String(12 * GiB), '--hold', '1');
    p.turns = { group: g('turns'), budgetBytes: budget, rounds: 10, members: [member(), member()] };
  }
  if (o.only.includes('guaranteed')) {
    const budget = 16 * GiB;
    const request = 8 * GiB;
    p.guaranteed = {
      group: g('guaranteed'),
      budgetBytes: budget,
      requestBytes: request,
      burstBytes: budget - request,
      cycles: 1000,
      // It waits 3 s once ready, so that the borrower has taken the burst pool before its cycles.
      torch: run(
        g('guaranteed'),
        budget,
        ['--request', String(request)],
        o.python,
        elastic,
        'guaranteed',
        '--cycles',
        '1000',
        '--request',
        String(request),
        '--delay',
        '3',
      ),
      borrower: run(g('guaranteed'), budget, [], o.churn, '--seconds', '300', '--seed', '5'),
    };
  }
  if (o.only.includes('live')) {
    const budgets = [8 * GiB, 16 * GiB, 8 * GiB];
    const phaseMs = 8000;
    const seconds = String((budgets.length * phaseMs) / 1000 + 6);
    const group = g('live');
    p.live = {
      group,
      budgets,
      phaseMs,
      members: {
        node: [
          process.execPath,
          path.join(__dirname, 'shared-budget-run.js'),
          'member',
          '--group',
          group,
          '--budget',
          String(budgets[0]),
          '--seconds',
          seconds,
          '--seed',
          '1',
        ],
        torch: run(group, budgets[0], [], o.python, churnPy, '--mode', 'shared', '--seconds', seconds, '--seed', '2'),
        cpp: run(group, budgets[0], [], o.churn, '--seconds', seconds, '--seed', '3'),
      },
      set: (bytes) => [process.execPath, cli, 'group', 'set', group, '--limit', String(bytes)],
      // Asks, allocating nothing (cudaMalloc of 0 bytes): what a member is told.
      memInfo: [process.execPath, cli, 'run', '--group', group, '--', o.memInfo, '--bytes', '0'],
    };
  }
  return p;
}

// ---- the sections -------------------------------------------------------------------------------

// Programs to their ends (killed after timeoutMs), sampled together.
// `before`: what was on the GPU before the programs started.
async function together(ctx, before, group, programs, timeoutMs, during = async () => {}) {
  const smp = sampler(ctx, group, () => programs, before);
  const timer = setTimeout(() => programs.forEach((p) => p.child.kill('SIGKILL')), timeoutMs);
  await during(smp);
  await Promise.all(programs.map((p) => p.exited));
  clearTimeout(timer);
  smp.stop();
  return smp.samples;
}

async function turnsSection(ctx, s) {
  const before = onGpu(ctx);
  const members = s.members.map((cmd) => start(cmd));
  const samples = await together(ctx, before, s.group, members, 240000);
  const thresholdBytes = s.budgetBytes + 2 * (ctx.overheads.torch + 2 * MiB);
  return {
    group: s.group,
    budgetBytes: s.budgetBytes,
    rounds: s.rounds,
    thresholdBytes,
    members: members.map((m) => finished(m, m.signal === 'SIGKILL')),
    handovers: handoversOf(members.map((m) => jsonLines(m.stdout))),
    judged: judgeSamples(samples, thresholdBytes, s.budgetBytes),
  };
}

async function guaranteedSection(ctx, s) {
  const before = onGpu(ctx);
  const torch = start(s.torch);
  let borrower = null;
  const samples = await together(ctx, before, s.group, [torch], 300000, async () => {
    await torch.reached('ready');
    borrower = start(s.borrower);
  });
  if (!borrower) throw new Error(`the PyTorch member ended before it was ready: ${torch.stderr.slice(-2000)}`);
  borrower.child.kill('SIGTERM'); // forwarded by run: the loop ends and prints its summary
  const kill = setTimeout(() => borrower.child.kill('SIGKILL'), 30000);
  await borrower.exited;
  clearTimeout(kill);
  const thresholdBytes = s.budgetBytes + ctx.overheads.torch + ctx.overheads.cpp + 2 * 2 * MiB;
  return {
    ...Object.fromEntries(['group', 'budgetBytes', 'requestBytes', 'burstBytes', 'cycles'].map((k) => [k, s[k]])),
    thresholdBytes,
    torch: finished(torch),
    borrower: finished(borrower),
    judged: judgeSamples(samples, thresholdBytes, s.budgetBytes),
  };
}

// The pids on the GPU now.
const onGpu = (ctx) => new Set(ctx.processes().map((q) => q.pid));

// A program to its end, its output kept (the event loop, and so the sampler, runs meanwhile).
async function runTo(cmd) {
  const p = start(cmd);
  await p.exited;
  return p;
}

// Resolves when a program has printed a line matching `re`, or has ended.
async function until(p, re) {
  while (!re.test(p.stdout) && p.exitCode === null && !p.signal) await sleep(20);
}

async function liveSection(ctx, s, out) {
  const before = onGpu(ctx);
  const names = Object.keys(s.members);
  const node = start(s.members.node);
  await until(node, /^joined$/m); // the first member sets the budget
  const members = [node, ...names.slice(1).map((k) => start(s.members[k]))];
  const marks = [];
  const memInfo = [];
  const probes = [];
  const samples = await together(ctx, before, s.group, members, 120000, async () => {
    const t0 = Date.now(); // the sampler's start, within a millisecond
    for (const [i, b] of s.budgets.entries()) {
      const fromMs = Date.now() - t0;
      if (i > 0) {
        const set = await runTo(s.set(b));
        if (set.exitCode !== 0) throw new Error(`group set ${gib(b)} failed (exit ${set.exitCode}): ${set.stderr}`);
      }
      marks.push({ fromMs: i === 0 ? 0 : fromMs, atMs: i === 0 ? 0 : Date.now() - t0, budgetBytes: b });
      await sleep(s.phaseMs / 2);
      const probe = { fromMs: Date.now() - t0 };
      const q = await runTo(s.memInfo);
      probe.toMs = Date.now() - t0;
      probes.push(probe);
      memInfo.push({ budgetBytes: b, exitCode: q.exitCode, ...((lastJson(q.stdout) || {}).before || {}), stderr: q.stderr.slice(-1000) });
      await sleep(s.phaseMs / 2);
    }
  });
  const overheadBytes = ctx.overheads.node + ctx.overheads.torch + ctx.overheads.cpp + 3 * 2 * MiB;
  // The probe is a static-runtime C++ program too: its context is the C++ member's.
  const probeBytes = ctx.overheads.cpp + 2 * MiB;
  // Every sample, with each member's charge beside its NVML figure: what a context holds above it.
  fs.writeFileSync(path.join(out, 'live-samples.json'), JSON.stringify({ names, pids: members.map((m) => m.pid), marks, probes, samples }));
  return {
    group: s.group,
    overheadBytes,
    probeBytes,
    marks,
    probes,
    memInfo,
    phases: livePhases(samples, marks, overheadBytes, probes, probeBytes),
    members: members.map((m, i) => ({ name: names[i], ...finished(m) })),
  };
}

async function runAll(o) {
  const { native } = require(path.join(root, 'dist', 'binding', 'native'));
  const cm = require(root);
  const dev = cm.devices()[0];
  cm.memGetInfo(0); // this process's own context first, so that no sum counts it
  const ctx = { cm, processes: () => native.deviceProcesses(dev.uuid) || [] };
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'elastic-run-'));
  for (const [k, src] of [
    ['churn', 'alloc-churn.cu'],
    ['memInfo', 'mem-info.cu'],
  ]) {
    o[k] = path.join(tmp, path.basename(src, '.cu'));
    const b = spawnSync(o.nvcc, ['-O2', '-o', o[k], path.join(preload, src)], { encoding: 'utf8' });
    if (b.status !== 0) throw new Error(`nvcc could not build ${src}: ${b.stderr}`);
  }
  const p = plan(o);
  const r = {
    gpu: { name: dev.name, uuid: dev.uuid, totalMemory: dev.totalMemory },
    sections: o.only,
    plan: { ...p, live: p.live && { ...p.live, set: undefined } },
  };
  r.overheads = {};
  for (const [k, s] of Object.entries(p.overheads)) r.overheads[k] = await overheadOf(ctx, s);
  ctx.overheads = r.overheads;
  if (p.turns) r.turns = await turnsSection(ctx, p.turns);
  if (p.guaranteed) r.guaranteed = await guaranteedSection(ctx, p.guaranteed);
  if (p.live) r.live = await liveSection(ctx, p.live, o.out);
  fs.rmSync(tmp, { recursive: true, force: true });
  r.checks = checksOf(r);
  r.ok = r.checks.every((c) => c.pass);
  return r;
}

const USAGE = 'usage: node scripts/elastic-run.js --out DIR [--python python3] [--nvcc nvcc] [--only turns,guaranteed,live] [--dry-run]\n';

async function main() {
  let a;
  try {
    a = parseArgs({
      args: process.argv.slice(2),
      options: {
        out: { type: 'string' },
        python: { type: 'string' },
        nvcc: { type: 'string' },
        only: { type: 'string' },
        'dry-run': { type: 'boolean' },
      },
    }).values;
  } catch (e) {
    process.stderr.write(`elastic-run: ${e.message}\n${USAGE}`);
    return 2;
  }
  const only = a.only ? a.only.split(',') : SECTIONS;
  const bad = only.filter((s) => !SECTIONS.includes(s));
  if (bad.length) {
    process.stderr.write(`elastic-run: --only: unknown section ${bad.join(', ')}; expected ${SECTIONS.join(', ')}\n${USAGE}`);
    return 2;
  }
  const o = {
    only,
    python: a.python || 'python3',
    nvcc: a.nvcc || 'nvcc',
    id: process.pid,
    churn: '<tmp>/alloc-churn',
    memInfo: '<tmp>/mem-info',
  };
  if (a['dry-run']) {
    const p = plan(o);
    if (p.live) p.live.set = p.live.set('SIZE');
    process.stdout.write(JSON.stringify(p, null, 2) + '\n');
    return 0;
  }
  if (!a.out) {
    process.stderr.write(`elastic-run: --out DIR is required\n${USAGE}`);
    return 2;
  }
  fs.mkdirSync(a.out, { recursive: true });
  const r = await runAll({ ...o, out: a.out });
  const text = JSON.stringify(r, null, 2);
  fs.writeFileSync(path.join(a.out, 'summary.json'), text + '\n');
  process.stdout.write(text + '\n');
  return r.ok ? 0 : 1;
}

if (require.main === module)
  main().then(
    (code) => (process.exitCode = code),
    (e) => {
      process.stderr.write(`elastic-run: ${e.stack || e.message}\n`);
      process.exitCode = 1;
    },
  );

module.exports = { jsonLines, handoversOf, livePhases, checksOf, plan };

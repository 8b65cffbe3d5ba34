#!/usr/bin/env node
'use strict';
// Every route to device memory under a budget, on a GPU, in the repository (run it in a clone):
//
//   node scripts/preload/routes-run.js --out DIR [--budget 2GiB] [--nvcc nvcc]
//
// Builds scripts/preload/routes.cu the three ways programs reach the driver (the runtime compiled
// in, libcudart.so, the driver's symbols with no runtime), runs each under `cuda-memory run
// --limit BUDGET`, and after each of its steps reads the group's ledger (the program's charge) and
// NVML's per-process used memory (what the device says the process holds, context included), side
// by side. DIR/routes.json holds every row; a table per way is printed. Exit 1 if a program did not
// end normally, 2 for a usage error.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn, spawnSync } = require('child_process');
const { parseArgs } = require('util');

const root = path.join(__dirname, '..', '..');
const cli = path.join(root, 'dist', 'cli.js');
const MiB = 2 ** 20;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const mib = (b) => (b === null || b === undefined ? '-' : (b / MiB).toFixed(1));

// nvcc's arguments for each way: before the source (how to read it) and after it.
const WAYS = {
  static: [[], []],
  dynamic: [[], ['-cudart', 'shared']],
  // As C++, so that nvcc registers no device code, which needs the runtime.
  driver: [
    ['-x', 'c++'],
    ['-DROUTES_DRIVER', '-cudart', 'none', '-lcuda'],
  ],
};

// One way: the program under run, a row per step.
async function runWay(cm, way, binary, budget) {
  const group = `routes-${way}-${process.pid}`;
  const child = spawn(
    process.execPath,
    [cli, 'run', '--group', group, '--limit', String(budget), '--', binary, '--refuse', String(budget + MiB)],
    {
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  let out = '';
  let err = '';
  const rows = [];
  const lines = [];
  let wake = null;
  child.stdout.on('data', (d) => {
    out += d;
    let i;
    while ((i = out.indexOf('\n')) >= 0) {
      lines.push(out.slice(0, i));
      out = out.slice(i + 1);
      if (wake) wake();
    }
  });
  child.stderr.on('data', (d) => (err += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  for (;;) {
    while (!lines.length) {
      const r = await Promise.race([new Promise((resolve) => (wake = resolve)), exited.then(() => 'exit')]);
      if (r === 'exit' && !lines.length) return { rows, exit: await exited, stderr: err };
    }
    const line = lines.shift();
    const m = /^step (.*?) (\{.*\})$/.exec(line);
    if (!m) continue;
    await sleep(200); // the member publishes what it uses within milliseconds; NVML catches up
    let g = null;
    try {
      g = cm.groupStats(group);
    } catch {
      // not joined yet (nothing charged), or gone
    }
    const member = g ? g.members.find((x) => x.command && x.command.includes(binary)) : undefined;
    const nvml = member ? member.nvmlUsedBytes : null;
    rows.push({
      step: m[1],
      results: JSON.parse(m[2]).results,
      chargedBytes: g ? g.chargedBytes : 0,
      inUseBytes: member ? member.bytesInUse : 0,
      nvmlUsedBytes: nvml,
      uncharged: g ? g.uncharged : [],
    });
    child.stdin.write('next\n');
  }
}

function table(way, r) {
  // The context alone: the first step at which NVML lists the process with nothing charged.
  const base = r.rows.find((x) => x.nvmlUsedBytes !== null && x.inUseBytes === 0);
  const ctx = base ? base.nvmlUsedBytes : null;
  const lines = [
    `${way}: exit ${r.exit.code}${r.exit.signal ? ` (${r.exit.signal})` : ''}`,
    '| step | results | ledger: in use (MiB) | NVML: used (MiB) | NVML above the context (MiB) |',
    '|---|---|---|---|---|',
  ];
  for (const x of r.rows)
    lines.push(
      `| ${x.step} | ${x.results.join(' ')} | ${mib(x.inUseBytes)} | ${mib(x.nvmlUsedBytes)} | ${x.nvmlUsedBytes !== null && ctx !== null ? mib(x.nvmlUsedBytes - ctx) : '-'} |`,
    );
  return lines.join('\n');
}

async function main() {
  const { values: o } = parseArgs({ options: { out: { type: 'string' }, budget: { type: 'string' }, nvcc: { type: 'string' } } });
  if (!o.out) {
    process.stderr.write('usage: node scripts/preload/routes-run.js --out DIR [--budget 2GiB] [--nvcc nvcc]\n');
    return 2;
  }
  const cm = require(root);
  const budget = cm.parseSize(o.budget || '2GiB');
  fs.mkdirSync(o.out, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'routes-'));
  const summary = { gpu: cm.devices()[0].name, budgetBytes: budget, ways: {} };
  let ok = true;
  for (const [way, [before, after]] of Object.entries(WAYS)) {
    const binary = path.join(tmp, `routes-${way}`);
    const b = spawnSync(o.nvcc || 'nvcc', ['-O2', ...before, '-o', binary, path.join(__dirname, 'routes.cu'), ...after], {
      encoding: 'utf8',
    });
    if (b.status !== 0) {
      summary.ways[way] = { error: `nvcc: ${b.stderr.slice(-2000)}` };
      ok = false;
      continue;
    }
    const r = await runWay(cm, way, binary, budget);
    summary.ways[way] = r;
    ok = ok && r.exit.code === 0;
    process.stdout.write(table(way, r) + '\n\n');
  }
  fs.writeFileSync(path.join(o.out, 'routes.json'), JSON.stringify(summary, null, 2) + '\n');
  fs.rmSync(tmp, { recursive: true, force: true });
  return ok ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`routes-run: ${e.stack || e.message}\n`);
    process.exit(1);
  },
);

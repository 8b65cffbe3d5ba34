#!/usr/bin/env node
'use strict';
// What every tenant is told about the GPU inside a group and outside one, on a GPU, in the
// repository (run it in a clone):
//
//   node scripts/preload/tenant-view.js --out DIR [--budget 20GiB] [--hold 2GiB] [--nvcc nvcc] [--python python3]
//
// A holder (PyTorch, holding --hold bytes) is started under `cuda-memory run --limit BUDGET`; then,
// in the same group and then outside any group, each of: `nvidia-smi --query-gpu=memory.total,
// memory.used`, a Python process that holds 1 GiB through PyTorch and asks pynvml
// (nvmlDeviceGetMemoryInfo, _v2, nvmlDeviceGetComputeRunningProcesses) and PyTorch
// (torch.cuda.mem_get_info(), get_device_properties(0).total_memory), and device-totals.cu built
// with nvcc's static runtime (cudaGetDeviceProperties().totalGlobalMem, cuDeviceTotalMem,
// cudaMemGetInfo). DIR/tenant-view.json holds every answer, the group's ledger as the holder left
// it, and the checks; the checks are printed. Exit 1 if a check failed, 2 for a usage error.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn, spawnSync } = require('child_process');
const { parseArgs } = require('util');

const root = path.join(__dirname, '..', '..');
const cli = path.join(root, 'dist', 'cli.js');
const MiB = 2 ** 20;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const PYTHON = String.raw`
import json, sys
import torch, pynvml
torch.cuda.set_device(0)
held = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
free, total = torch.cuda.mem_get_info()
props = torch.cuda.get_device_properties(0)
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
m = pynvml.nvmlDeviceGetMemoryInfo(h)
out = {
    "torch": {"free": free, "total": total, "totalMemory": props.total_memory},
    "nvml": {"total": m.total, "free": m.free, "used": m.used},
    "pid": __import__("os").getpid(),
}
try:
    m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    out["nvmlV2"] = {"total": m2.total, "reserved": m2.reserved, "free": m2.free, "used": m2.used}
except Exception as e:
    out["nvmlV2"] = {"error": str(e)}
out["processes"] = [{"pid": p.pid, "usedGpuMemory": p.usedGpuMemory} for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
print(json.dumps(out), flush=True)
`;

// `argv` under cuda-memory run in `group`, as node's arguments.
const underRun = (group, budget, argv) => [cli, 'run', '--group', group, '--limit', String(budget), '--', ...argv];

// A command's stdout, run inside group `group` (null: outside any group).
function run(group, budget, argv) {
  const r = group
    ? spawnSync(process.execPath, underRun(group, budget, argv), { encoding: 'utf8' })
    : spawnSync(argv[0], argv.slice(1), { encoding: 'utf8' });
  return { status: r.status, stdout: r.stdout || '', stderr: (r.stderr || '').slice(-2000), error: r.error ? r.error.message : undefined };
}

// Every query once, in `group` or outside.
function views(group, budget, tools) {
  const smi = run(group, budget, ['nvidia-smi', '-i', '0', '--query-gpu=memory.total,memory.used', '--format=csv,noheader,nounits']);
  const [smiTotal, smiUsed] = smi.stdout
    .trim()
    .split(',')
    .map((x) => Number(x.trim()));
  const py = run(group, budget, [tools.python, '-c', PYTHON]);
  const totals = run(group, budget, [tools.totals]);
  const json = (r) => {
    try {
      return JSON.parse(r.stdout.trim().split('\n').pop());
    } catch {
      return { error: `exit ${r.status}: ${r.error || r.stderr}` };
    }
  };
  return {
    nvidiaSmi: smi.status === 0 ? { totalMiB: smiTotal, usedMiB: smiUsed } : { error: `exit ${smi.status}: ${smi.error || smi.stderr}` },
    python: json(py),
    deviceTotals: json(totals),
  };
}

async function main() {
  const { values: o } = parseArgs({
    options: {
      out: { type: 'string' },
      budget: { type: 'string' },
      hold: { type: 'string' },
      nvcc: { type: 'string' },
      python: { type: 'string' },
    },
  });
  if (!o.out) {
    process.stderr.write(
      'usage: node scripts/preload/tenant-view.js --out DIR [--budget 20GiB] [--hold 2GiB] [--nvcc nvcc] [--python python3]\n',
    );
    return 2;
  }
  const cm = require(root);
  const budget = cm.parseSize(o.budget || '20GiB');
  const hold = cm.parseSize(o.hold || '2GiB');
  const python = o.python || 'python3';
  fs.mkdirSync(o.out, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tenant-view-'));
  const totals = path.join(tmp, 'device-totals');
  const b = spawnSync(o.nvcc || 'nvcc', ['-O2', '-o', totals, path.join(__dirname, 'device-totals.cu')], { encoding: 'utf8' });
  if (b.status !== 0) throw new Error(`nvcc: ${b.stderr.slice(-2000)}`);
  const tools = { python, totals };
  const card = cm.devices()[0];

  // The holder: a member with memory charged, so that the others see a group in use.
  const group = `tenant-view-${process.pid}`;
  const keep = `import torch, sys\nx = torch.empty(${hold}, dtype=torch.uint8, device="cuda")\nprint("held", flush=True)\nsys.stdin.read()\n`;
  const holder = spawn(process.execPath, underRun(group, budget, [python, '-c', keep]), { stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise((resolve, reject) => {
    holder.stdout.on('data', (d) => String(d).includes('held') && resolve());
    holder.on('exit', (code) => reject(new Error(`the holder exited (${code}) before it held its memory`)));
  });
  await sleep(300); // its published bytes reach the ledger
  const ledgerBefore = cm.groupStats(group);
  const inside = views(group, budget, tools);
  const ledgerAfter = cm.groupStats(group);
  holder.stdin.end();
  await new Promise((resolve) => holder.on('exit', resolve));
  const outside = views(null, budget, tools);

  // The checks: inside, every query answers the budget; outside, the card.
  const within = (a, b, tol) => typeof a === 'number' && typeof b === 'number' && Math.abs(a - b) <= tol;
  const budgetMiB = Math.floor(Math.min(budget, card.totalMemory) / MiB);
  const expectTotal = Math.min(budget, card.totalMemory);
  const i = inside;
  const u = outside;
  const checks = {
    'nvidia-smi inside: memory.total is the budget': within(i.nvidiaSmi.totalMiB, budgetMiB, 1),
    "nvidia-smi inside: memory.used is the group's charge": within(i.nvidiaSmi.usedMiB * MiB, ledgerBefore.chargedBytes, 2 * MiB),
    'pynvml inside: total is the budget': i.python.nvml?.total === expectTotal,
    'pynvml inside: free + used = total': i.python.nvml && i.python.nvml.free + i.python.nvml.used === i.python.nvml.total,
    'pynvml inside: free within 2 MiB of torch.cuda.mem_get_info()': within(i.python.nvml?.free, i.python.torch?.free, 2 * MiB),
    'pynvml v2 inside: reserved 0, free + used = total':
      i.python.nvmlV2?.reserved === 0 && i.python.nvmlV2.free + i.python.nvmlV2.used === i.python.nvmlV2.total,
    'torch inside: mem_get_info total is the budget': i.python.torch?.total === expectTotal,
    'torch inside: get_device_properties(0).total_memory is the budget': i.python.torch?.totalMemory === expectTotal,
    'device-totals inside: totalGlobalMem is the budget': i.deviceTotals.totalGlobalMem === expectTotal,
    'device-totals inside: cuDeviceTotalMem is the budget': i.deviceTotals.cuDeviceTotalMem === expectTotal,
    "nvidia-smi outside: memory.total is the card's": typeof u.nvidiaSmi.totalMiB === 'number' && u.nvidiaSmi.totalMiB > budgetMiB,
    "torch outside: total_memory is the card's (devices().totalMemory)": u.python.torch?.totalMemory === card.totalMemory,
    "device-totals outside: totalGlobalMem and cuDeviceTotalMem are the card's":
      u.deviceTotals.totalGlobalMem === card.totalMemory && u.deviceTotals.cuDeviceTotalMem === card.totalMemory,
  };
  const summary = {
    gpu: card.name,
    cardTotalBytes: card.totalMemory,
    budgetBytes: budget,
    holdBytes: hold,
    ledger: { before: ledgerBefore, after: ledgerAfter },
    inside,
    outside,
    checks,
  };
  fs.writeFileSync(path.join(o.out, 'tenant-view.json'), JSON.stringify(summary, null, 2) + '\n');
  fs.rmSync(tmp, { recursive: true, force: true });
  for (const [k, v] of Object.entries(checks)) process.stdout.write(`${v ? 'pass' : 'FAIL'}  ${k}\n`);
  process.stdout.write(
    `${JSON.stringify({ inside, outside, chargedBytes: ledgerBefore.chargedBytes, processesInside: inside.python.processes })}\n`,
  );
  return Object.values(checks).every(Boolean) ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`tenant-view: ${e.stack || e.message}\n`);
    process.exit(1);
  },
);

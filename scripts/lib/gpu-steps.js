'use strict';
// What the GPU-machine scripts (scripts/servers-run.js, scripts/elastic-run.js) share: programs
// started with their output kept and their `phase NAME` lines followed, NVML's per-process use and a
// group's ledger sampled every 100 ms, and the samples judged against a threshold.
const { spawn } = require('child_process');

/** The last JSON line a program printed, or null. */
function lastJson(text) {
  for (const l of String(text).trim().split('\n').reverse()) {
    try {
      const v = JSON.parse(l);
      if (v && typeof v === 'object') return v;
    } catch {
      // not a JSON line
    }
  }
  return null;
}

// A child with its output kept; `phase` is the last `phase NAME` it printed; `reached(name)`
// resolves when it prints that phase (or exits).
function start(cmd, env = {}) {
  const c = spawn(cmd[0], cmd.slice(1), { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const p = { child: c, pid: c.pid, stdout: '', stderr: '', exitCode: null, signal: null, phase: null, waits: [] };
  p.exited = new Promise((resolve) =>
    c.on('exit', (code, signal) => {
      p.exitCode = code;
      p.signal = signal;
      for (const w of p.waits) w.resolve();
      resolve();
    }),
  );
  c.on('error', (e) => (p.stderr += `${e.message}\n`));
  c.stdout.on('data', (d) => {
    p.stdout += d;
    const m = String(p.stdout).match(/^phase (\S+)$/gm);
    if (m) p.phase = m[m.length - 1].slice(6);
    for (const w of p.waits) if (m && m.includes(`phase ${w.name}`)) w.resolve();
  });
  c.stderr.on('data', (d) => (p.stderr += d));
  p.reached = (name) => new Promise((resolve) => (p.exitCode !== null || p.signal ? resolve() : p.waits.push({ name, resolve })));
  return p;
}

function finished(p, timedOut = false) {
  return { exitCode: p.exitCode, signal: p.signal, timedOut, result: lastJson(p.stdout), stderr: p.stderr.slice(-3000) };
}

/** How often a sampler reads NVML and the ledger, in milliseconds. */
const SAMPLE_MS = 100;

// Every SAMPLE_MS: NVML's used memory of the processes that were not on the GPU before the step,
// summed, and the group's ledger. `before`: the pids to leave out, taken before the step's programs
// started (by default, those on the GPU now).
function sampler(ctx, group, procsOf, before = new Set(ctx.processes().map((q) => q.pid))) {
  const samples = [];
  const t0 = Date.now();
  const timer = setInterval(() => {
    const procs = ctx.processes().filter((q) => !before.has(q.pid));
    let g = null;
    if (group)
      try {
        g = ctx.cm.groupStats(group);
      } catch {
        // no member yet, or between members
      }
    samples.push({
      t: Date.now() - t0,
      phase:
        procsOf()
          .map((p) => p.phase)
          .filter(Boolean)
          .join('+') || null,
      nvmlBytes: procs.reduce((s, q) => s + (q.usedBytes || 0), 0),
      chargedBytes: g ? g.chargedBytes : null,
      budgetBytes: g ? g.budgetBytes : null,
      members: g
        ? g.members.map((m) => ({ pid: m.pid, poolBytes: m.poolBytes, nvmlUsedBytes: m.nvmlUsedBytes, waitingBytes: m.waitingBytes }))
        : null,
    });
  }, SAMPLE_MS);
  return { samples, stop: () => clearInterval(timer) };
}

/**
 * A step's samples judged against its NVML threshold: the most NVML's per-process figures summed
 * to, the ledger's most, how many samples went above each, and the same for each phase.
 */
function judgeSamples(samples, thresholdBytes, budgetBytes) {
  const j = { samples: samples.length, maxNvmlBytes: 0, maxChargedBytes: 0, nvmlOver: 0, chargedOver: 0, phases: {} };
  for (const s of samples) {
    j.maxNvmlBytes = Math.max(j.maxNvmlBytes, s.nvmlBytes);
    if (s.nvmlBytes > thresholdBytes) j.nvmlOver++;
    if (s.chargedBytes !== null) {
      j.maxChargedBytes = Math.max(j.maxChargedBytes, s.chargedBytes);
      if (budgetBytes !== null && s.chargedBytes > budgetBytes) j.chargedOver++;
    }
    const p = (j.phases[s.phase || 'start'] ??= { samples: 0, maxNvmlBytes: 0, maxChargedBytes: 0 });
    p.samples++;
    p.maxNvmlBytes = Math.max(p.maxNvmlBytes, s.nvmlBytes);
    p.maxChargedBytes = Math.max(p.maxChargedBytes, s.chargedBytes || 0);
  }
  return j;
}

// The most NVML lists for a program once it says `phase ready`/`prealloc` or ends its idle wait.
async function overheadOf(ctx, s) {
  const p = start(s.cmd, s.env);
  const smp = sampler(ctx, null, () => [p]);
  await p.exited;
  smp.stop();
  return Math.max(0, ...smp.samples.map((x) => x.nvmlBytes));
}

module.exports = { SAMPLE_MS, lastJson, start, finished, sampler, judgeSamples, overheadOf };

#!/usr/bin/env node
// Tunes the staged path on this machine.
//
// 1. With --sweep: every combination of --chunks, --first (the last chunk the same size) and
//    --threads is measured at the --at sizes (staged against pinned, both directions); the best
//    is the one with the highest geometric mean of staged/pinned.
// 2. Always: strategy 'auto' thresholds. For each direction, the driver's pageable cudaMemcpy and
//    the staged path (with the settings from step 1, or those in force) are timed side by side at
//    --sizes; the threshold is the smallest size from which staged is at least as fast as the
//    driver at that size and every larger one measured.
// 3. With --save: the result is written where every later load of the package reads it
//    (CUDA_MEMORY_STAGING_FILE, else ~/.config/cuda-memory/staging.json).
//
// Usage: node scripts/tune-staging.js [--sizes 64KiB..8MiB] [--sweep] [--chunks 4MiB,8MiB,16MiB]
//          [--first 128KiB,256KiB,512KiB] [--threads 8,12] [--at 4MiB,64MiB,1GiB]
//          [--iterations 15] [--device 0] [--save] [--json]
'use strict';
const cm = require('..');
const bench = require('../dist/bench');
const os = require('os');

function parseArgs(argv) {
  const o = {
    sizes: '64KiB..8MiB',
    sweep: false,
    chunks: '4MiB,8MiB,16MiB',
    first: '128KiB,256KiB,512KiB',
    threads: '',
    at: '4MiB,64MiB,1GiB',
    iterations: 15,
    device: 0,
    save: false,
    json: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const key = a.replace(/^--/, '');
    if (a === '--sweep' || a === '--save' || a === '--json') o[key] = true;
    else if (a.startsWith('--') && key in o && i + 1 < argv.length) o[key] = argv[++i];
    else {
      console.error(`tune-staging: unknown argument ${JSON.stringify(a)} (see the comment at the top of the script)`);
      process.exit(2);
    }
  }
  o.iterations = Number(o.iterations);
  o.device = Number(o.device);
  return o;
}

const rateOf = (report, mode, direction, bytes) =>
  report.results.find((r) => r.mode === mode && r.direction === direction && r.bytes === bytes).gbps.median;

async function measure(o, sizes, modes, staging) {
  return bench.runTransferBenchmark({
    sizes,
    modes,
    directions: ['h2d', 'd2h'],
    iterations: o.iterations,
    warmup: 3,
    device: o.device,
    baseline: false,
    hostcopy: false,
    eventLoopProbe: false,
    staging,
  });
}

async function sweep(o, log) {
  const at = cm.parseSizeList(o.at);
  const chunks = cm.parseSizeList(o.chunks);
  const firsts = cm.parseSizeList(o.first);
  const threads = o.threads ? o.threads.split(',').map(Number) : [cm.configureStaging().threads];
  const pinned = await measure(o, at, ['pinned']);
  const rows = [];
  for (const chunkBytes of chunks)
    for (const firstChunkBytes of firsts.filter((f) => f <= chunkBytes))
      for (const t of threads) {
        // The last chunk as small as the first: both ends of a copy are left uncovered alike.
        const r = await measure(o, at, ['staged'], { chunkBytes, firstChunkBytes, lastChunkBytes: firstChunkBytes, threads: t });
        const shares = [];
        const cells = [];
        for (const n of at)
          for (const d of ['h2d', 'd2h']) {
            const s = rateOf(r, 'staged', d, n);
            shares.push(s / rateOf(pinned, 'pinned', d, n));
            cells.push(`${d} ${cm.formatBytes(n)} ${s.toFixed(2)}`);
          }
        const score = Math.exp(shares.reduce((a, x) => a + Math.log(x), 0) / shares.length);
        rows.push({ chunkBytes, firstChunkBytes, threads: t, score, cells });
        log(
          `chunk ${cm.formatBytes(chunkBytes)}, first ${cm.formatBytes(firstChunkBytes)}, ${t} threads: ${(score * 100).toFixed(1)}% of pinned (geometric mean) | ${cells.join(', ')}`,
        );
      }
  rows.sort((a, b) => b.score - a.score);
  return rows[0];
}

async function thresholds(o, staging, log) {
  const sizes = cm.parseSizeList(o.sizes).sort((a, b) => a - b);
  const r = await measure(o, sizes, ['pageable', 'staged'], staging);
  const out = {};
  for (const d of ['h2d', 'd2h']) {
    let threshold = Infinity;
    for (let i = sizes.length - 1; i >= 0; i--) {
      const staged = rateOf(r, 'staged', d, sizes[i]);
      const driver = rateOf(r, 'pageable', d, sizes[i]);
      log(
        `${d} ${cm.formatBytes(sizes[i]).padStart(9)}: driver ${driver.toFixed(2).padStart(6)} GB/s, staged ${staged.toFixed(2).padStart(6)} GB/s`,
      );
      if (staged < driver) break;
      threshold = sizes[i];
    }
    // Staged never won: keep the driver up to twice the largest size measured.
    out[d] = Number.isFinite(threshold) ? threshold : 2 * sizes[sizes.length - 1];
  }
  return out;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  if (!cm.status().available) {
    console.error(`tune-staging: CUDA is not available: ${cm.status().message}`);
    process.exit(2);
  }
  const log = o.json ? () => {} : (line) => console.log(line);
  const settings = {};
  if (o.sweep) {
    const best = await sweep(o, log);
    Object.assign(settings, {
      chunkBytes: best.chunkBytes,
      firstChunkBytes: best.firstChunkBytes,
      lastChunkBytes: best.firstChunkBytes,
      threads: best.threads,
    });
    log(`best: chunk ${cm.formatBytes(best.chunkBytes)}, first ${cm.formatBytes(best.firstChunkBytes)}, ${best.threads} threads`);
  }
  settings.autoThreshold = await thresholds(o, settings, log);
  log(`auto thresholds: h2d from ${cm.formatBytes(settings.autoThreshold.h2d)}, d2h from ${cm.formatBytes(settings.autoThreshold.d2h)}`);
  let file;
  if (o.save) {
    const gpu = cm.devices()[o.device];
    file = cm.saveStagingSettings(settings, {
      date: new Date().toISOString(),
      gpu: gpu.name,
      cpu: os.cpus()[0]?.model ?? 'unknown',
      cpus: os.cpus().length,
      hostname: os.hostname(),
    });
    cm.loadStagingSettings(file);
    log(`saved to ${file}; later loads of cuda-memory apply it`);
  }
  if (o.json) console.log(JSON.stringify({ settings, savedTo: file ?? null, inForce: cm.configureStaging() }, null, 2));
}

main().catch((e) => {
  console.error(`tune-staging: ${e.stack || e}`);
  process.exit(1);
});

#!/usr/bin/env node
// The performance rows of docs/performance.md, each beside its reference, in one run on a GPU
// machine: medians of repeats, a compact table on stdout, every report as JSON under OUTDIR.
//
//   staged h2d and d2h at 4, 16 and 64 MiB, as a share of pinned memory's rate in the same report,
//     beside the staged path's own chunk schedule moved from pinned memory with no CPU copy
//     (staged-dma, the most it can reach) and the share of its limit (shareOfLimit)
//   staged both ways (bidir) at 256 MiB and 1 GiB, as a share of pinned, beside its host half
//     alone (the hostcopy rows) and the share of the lower of the two (shareOfLimit)
//   a pooled alloc+free of a cached 1 MiB block, in µs, beside CuPy's and PyTorch's pools
//     (scripts/compare-torch-alloc.py, run in the same repeat) and two empty addon calls (the
//     floor of any pair on this host)
//   a managed prefetch to the device and to the host at 64 MiB and 1 GiB, as a share of the raw
//     cudaMemPrefetchAsync timed in C++ (managed against managed-raw) and of the raw call handed
//     to a second thread and back (managed-raw-handoff), the 64 MiB gap in µs, and
//     what any awaited call pays on this host (a 4 KiB copyAsync against copy())
//   the event loop's worst delay during 1 GiB copyAsync both ways (the bench's probe)
//   a 4 KiB copy() from JavaScript against cudaMemcpy from C++ (pinned-call against baseline),
//     the time ratio, each run's and the worst; beside it, in turns of their own, the bare addon
//     call that copies the same way and does nothing else (the floor of any call from JavaScript)
//   with --two-gpus, where two GPUs are visible: staged, pinned and the staged path's host half
//     alone (hostcopy) h2d at 1 GiB on GPUs 0 and 1, each alone and both at once (each GPU's rate
//     together over its rate alone)
//
//   with --bounds, where nvcc is on the PATH, once per repeat (they do not depend on the checkout):
//     the DMA engine's share of its rate to the device with the host's writes held at 46 GB/s,
//     85% of pinned (scripts/dma-under-host-copy.cc --write-gbps 46), with each checkout's staged
//     h2d as a share of the bound it gives (its staged-dma share times the engine's), and an
//     awaited prefetch's least cost, one thread woken (scripts/awaited-call-wakeups.cc)
//
// Usage: node scripts/perf-rows.js OUTDIR [--baseline DIR] [--repeats 3] [--two-gpus] [--bounds]
//          [--python python3] [--skip-python]
//
// --baseline DIR: a second checkout of the package with its dist/ and build/ built (the library
// before a change); both are measured in every repeat, in turn, and shown side by side. Its
// node_modules may be left out: modules it lacks are taken from this checkout's.
// Each measurement runs in a child process of its own, so neither library sees the other's state.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const MiB = 2 ** 20;
const GiB = 2 ** 30;

function parseArgs(argv) {
  const o = { out: undefined, baseline: undefined, repeats: 3, twoGpus: false, bounds: false, python: 'python3', skipPython: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--baseline') o.baseline = path.resolve(value());
    else if (a === '--repeats') o.repeats = Number(value());
    else if (a === '--two-gpus') o.twoGpus = true;
    else if (a === '--bounds') o.bounds = true;
    else if (a === '--python') o.python = value();
    else if (a === '--skip-python') o.skipPython = true;
    else if (a.startsWith('--')) throw new Error(`unknown option ${a}`);
    else if (o.out === undefined) o.out = path.resolve(a);
    else throw new Error(`one OUTDIR only, got ${a} too`);
  }
  if (o.out === undefined)
    throw new Error('usage: node scripts/perf-rows.js OUTDIR [--baseline DIR] [--repeats 3] [--two-gpus] [--bounds]');
  if (!Number.isInteger(o.repeats) || o.repeats < 1 || o.repeats > 20)
    throw new Error(`--repeats must be an integer from 1 to 20, got ${o.repeats}`);
  return o;
}

// Microseconds per call of f: the median of 200 batches of 1000 calls, after 100,000 warm-up.
function perCall(f) {
  for (let i = 0; i < 100_000; i++) f();
  const us = [];
  for (let b = 0; b < 200; b++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < 1000; i++) f();
    us.push(Number(process.hrtime.bigint() - t0) / 1e3 / 1000);
  }
  return { median: median(us), samples: us };
}

// The pooled pair, run in a child process against one checkout (argv: --alloc-pair ROOT OUT):
// batches of 1000 cached 1 MiB pairs after 100,000 warm-up, as bench-alloc times them. Beside it,
// the floor of any pair on this host: two calls into the addon that do nothing (liveCount), the
// least a JavaScript alloc() and free() each crossing into native code can cost.
function allocPair(root, out) {
  const cm = require(path.join(root, 'dist', 'index.js'));
  const addon = require(path.join(root, 'build', 'Release', 'cuda_memory.node'));
  const pool = cm.createAllocator({ allowGrowth: true, memoryLimit: GiB });
  const pair = perCall(() => pool.alloc(MiB).free());
  pool.close();
  const floor = perCall(() => {
    addon.liveCount();
    addon.liveCount();
  });
  fs.writeFileSync(out, JSON.stringify({ microseconds: pair.median, samples: pair.samples, twoEmptyCalls: floor.median }));
}

// The floor of a 4 KiB copy() (argv: --call-floor ROOT OUT): per direction, in four turns of 500
// calls each, copy() between the library's PinnedBuffer and DeviceBuffer, the addon call that
// copies memory of its own the same way and does nothing else (pinnedCallFloor: the least any
// copy() from JavaScript can cost), each call timed as the benchmark times pinned-call, and
// cudaMemcpy from C++ (timeRawPinned), after 20,000 warm-up calls of each. Medians in µs; nothing
// where the checkout has no pinnedCallFloor.
function callFloor(root, out) {
  const cm = require(path.join(root, 'dist', 'index.js'));
  const addon = require(path.join(root, 'build', 'Release', 'cuda_memory.node'));
  const result = {};
  if (typeof addon.pinnedCallFloor === 'function') {
    const pin = cm.PinnedBuffer.alloc(4096);
    const dev = cm.DeviceBuffer.alloc(4096);
    const timed = (f, into) => {
      for (let i = 0; i < 500; i++) {
        const t0 = process.hrtime.bigint();
        f();
        into.push(Number(process.hrtime.bigint() - t0) / 1e3);
      }
    };
    for (const [direction, dst, src] of [
      ['h2d', dev, pin],
      ['d2h', pin, dev],
    ]) {
      addon.pinnedCallFloorSetup(4096, direction, 0);
      const copyOnce = () => cm.copy(dst, src);
      for (let i = 0; i < 20_000; i++) {
        copyOnce();
        addon.pinnedCallFloor();
      }
      const copies = [];
      const floors = [];
      const raw = [];
      for (let b = 0; b < 4; b++) {
        timed(copyOnce, copies);
        timed(addon.pinnedCallFloor, floors);
        for (const x of addon.timeRawPinned(4096, 100, 500, direction, 0)) raw.push(x * 1e6);
      }
      addon.pinnedCallFloorSetup(0);
      result[direction] = { copy: median(copies), floor: median(floors), raw: median(raw) };
    }
    pin.free();
    dev.free();
  }
  fs.writeFileSync(out, JSON.stringify(result));
}

// What an awaited call costs on this host beyond the work (argv: --async-hop ROOT OUT): a 4 KiB
// copyAsync against the same copy() taken in turn, 300 of each after 50 of each; the difference of
// the medians is the two thread hand-offs of any promise the addon settles (a libuv worker woken,
// then the event loop), which every awaited prefetch() pays too.
async function asyncHop(root, out) {
  const cm = require(path.join(root, 'dist', 'index.js'));
  const pin = cm.PinnedBuffer.alloc(4096);
  const dev = cm.DeviceBuffer.alloc(4096);
  const sync = [];
  const awaited = [];
  for (let i = 0; i < 350; i++) {
    let t0 = process.hrtime.bigint();
    cm.copy(dev, pin);
    const s = Number(process.hrtime.bigint() - t0) / 1e3;
    t0 = process.hrtime.bigint();
    await cm.copyAsync(dev, pin);
    const a = Number(process.hrtime.bigint() - t0) / 1e3;
    if (i >= 50) {
      sync.push(s);
      awaited.push(a);
    }
  }
  pin.free();
  dev.free();
  fs.writeFileSync(out, JSON.stringify({ copyMicroseconds: median(sync), copyAsyncMicroseconds: median(awaited) }));
}

function median(xs) {
  const s = xs.filter((x) => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return undefined;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

// A baseline checkout may have no node_modules of its own: its children also look in this one's.
const NODE_PATH = [path.resolve(__dirname, '..', 'node_modules'), process.env.NODE_PATH].filter(Boolean).join(path.delimiter);

// Runs a child to its end, logging its time and, where it fails, its status and stderr's end. Returns
// its stdout where `output` asks for it, else '' (undefined where it failed).
function run(cmd, args, log, { output = false } = {}) {
  const t0 = Date.now();
  try {
    const out = execFileSync(cmd, args, {
      stdio: ['ignore', output ? 'pipe' : 'ignore', 'pipe'],
      encoding: 'utf8',
      maxBuffer: 64 * MiB,
      timeout: 240_000,
      env: { ...process.env, NODE_PATH },
    });
    return out ?? '';
  } catch (e) {
    process.stderr.write(`${log}: failed (${e.status ?? e.signal}): ${String(e.stderr ?? e.message).slice(-2000)}\n`);
    return undefined;
  } finally {
    process.stderr.write(`${log}: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  }
}

function readJson(file) {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch {
    return undefined;
  }
}

const find = (report, mode, direction, bytes) =>
  report?.results?.find((r) => r.mode === mode && r.direction === direction && r.bytes === bytes);
const gbps = (r) => r?.gbps?.median;
const ratio = (a, b) => (a !== undefined && b !== undefined && b > 0 ? a / b : undefined);

// One repeat of one checkout: every measurement into OUTDIR/<label>-r<k>-<what>.json, and the
// rows read from them.
function measure(o, label, root, k, host = {}) {
  const cli = path.join(root, 'dist', 'cli.js');
  const file = (what) => path.join(o.out, `${label}-r${k}-${what}.json`);
  const bench = (what, args) => run(process.execPath, [cli, 'bench', ...args, '--json', '--out', file(what)], `${label} r${k} ${what}`);
  bench('transfer', [
    '--sizes',
    '4MiB,16MiB,64MiB,256MiB,1GiB',
    '--modes',
    'pinned,staged',
    '--directions',
    'h2d,d2h,bidir',
    '--iterations',
    '20',
  ]);
  bench('call', ['--sizes', '4KiB', '--modes', 'pinned,pinned-call', '--directions', 'h2d,d2h', '--iterations', '2000', '--no-event-loop']);
  bench('managed', ['--sizes', '64MiB,1GiB', '--modes', 'managed', '--directions', 'h2d,d2h', '--iterations', '15', '--no-event-loop']);
  run(process.execPath, [__filename, '--alloc-pair', root, file('alloc')], `${label} r${k} alloc`);
  run(process.execPath, [__filename, '--async-hop', root, file('hop')], `${label} r${k} hop`);
  run(process.execPath, [__filename, '--call-floor', root, file('floor')], `${label} r${k} floor`);
  // The staged path's host half alone (hostcopy) where the checkout's several-GPU benchmark has it.
  const twoGpuModes = require(path.join(root, 'dist', 'bench', 'devices')).DEVICES_MODES.includes('hostcopy')
    ? 'pinned,staged,hostcopy'
    : 'pinned,staged';
  if (o.twoGpus)
    run(
      process.execPath,
      [
        cli,
        'bench',
        '--devices',
        '0,1',
        '--modes',
        twoGpuModes,
        '--sizes',
        '1GiB',
        '--directions',
        'h2d',
        '--iterations',
        '15',
        '--json',
        '--out',
        file('two-gpus'),
      ],
      `${label} r${k} two-gpus`,
    );

  const t = readJson(file('transfer'));
  const c = readJson(file('call'));
  const m = readJson(file('managed'));
  const a = readJson(file('alloc'));
  const h = readJson(file('hop'));
  const fl = readJson(file('floor'));
  const g = o.twoGpus ? readJson(file('two-gpus')) : undefined;
  const rows = {};
  for (const n of [4 * MiB, 16 * MiB, 64 * MiB])
    for (const d of ['h2d', 'd2h']) {
      const staged = find(t, 'staged', d, n);
      rows[`staged ${d} ${n / MiB} MiB / pinned`] = ratio(gbps(staged), gbps(find(t, 'pinned', d, n)));
      // The staged path's own chunks moved from pinned memory with no CPU copy (staged-dma): the
      // most it can reach at this size.
      rows[`staged-dma ${d} ${n / MiB} MiB / pinned`] = ratio(gbps(find(t, 'staged-dma', d, n)), gbps(find(t, 'pinned', d, n)));
      rows[`host copy ${d} ${n / MiB} MiB / pinned`] = ratio(gbps(find(t, 'hostcopy', d, n)), gbps(find(t, 'pinned', d, n)));
      rows[`staged ${d} ${n / MiB} MiB / its limit (pinned, host copy or staged-dma)`] = staged?.shareOfLimit;
      // With --bounds: the most a staged copy whose team keeps pace with the engine can reach (its
      // own schedule's share times the engine's share with the host writing at 85% of its rate).
      const engine = host[`${DMA_UNDER_WRITES} ${n / MiB} MiB`];
      if (d === 'h2d' && engine !== undefined)
        rows[`staged h2d ${n / MiB} MiB / its bound (staged-dma share x DMA share under 46 GB/s of writes)`] = ratio(
          rows[`staged ${d} ${n / MiB} MiB / pinned`],
          rows[`staged-dma ${d} ${n / MiB} MiB / pinned`] * engine,
        );
    }
  for (const n of [256 * MiB, GiB]) {
    const name = n === GiB ? '1 GiB' : `${n / MiB} MiB`;
    const staged = find(t, 'staged', 'bidir', n);
    rows[`staged bidir ${name} / pinned`] = ratio(gbps(staged), gbps(find(t, 'pinned', 'bidir', n)));
    rows[`staged bidir ${name} / its limit (pinned or host copy)`] = staged?.shareOfLimit;
    rows[`host copy bidir ${name}, GB/s`] = gbps(find(t, 'hostcopy', 'bidir', n));
  }
  rows['pooled alloc+free cached 1 MiB, µs'] = a?.microseconds;
  rows['two empty addon calls (the floor of a pair), µs'] = a?.twoEmptyCalls;
  for (const n of [64 * MiB, GiB])
    for (const d of ['h2d', 'd2h']) {
      const name = `prefetch ${d === 'h2d' ? 'to device' : 'to host'} ${n === GiB ? '1 GiB' : '64 MiB'}`;
      rows[`${name} / raw`] = ratio(gbps(find(m, 'managed', d, n)), gbps(find(m, 'managed-raw', d, n)));
      // The raw call handed to a second thread and back: the most a call that keeps the JavaScript
      // thread free can reach.
      rows[`${name}, raw handed to a thread and back / raw`] = ratio(
        gbps(find(m, 'managed-raw-handoff', d, n)),
        gbps(find(m, 'managed-raw', d, n)),
      );
      rows[`${name} / raw handed to a thread and back`] = ratio(gbps(find(m, 'managed', d, n)), gbps(find(m, 'managed-raw-handoff', d, n)));
    }
  const seconds = (r) => r?.seconds?.median;
  for (const d of ['h2d', 'd2h']) {
    const lib = seconds(find(m, 'managed', d, 64 * MiB));
    const raw = seconds(find(m, 'managed-raw', d, 64 * MiB));
    rows[`prefetch ${d === 'h2d' ? 'to device' : 'to host'} 64 MiB: awaited - raw, µs`] =
      lib !== undefined && raw !== undefined ? (lib - raw) * 1e6 : undefined;
  }
  rows['awaited 4 KiB copyAsync - copy(), µs (two thread hand-offs)'] = h && h.copyAsyncMicroseconds - h.copyMicroseconds;
  rows['event loop worst delay, 1 GiB copyAsync, ms'] = t?.eventLoop?.worstDelayMs;
  rows['event loop: longest GC pause in the window, ms'] = t?.eventLoop?.longestGcMs;
  rows['event loop: times the JS thread was preempted in the window'] = t?.eventLoop?.preemptions;
  for (const d of ['h2d', 'd2h']) {
    const js = find(c, 'pinned-call', d, 4096)?.seconds?.median;
    const cpp = find(c, 'baseline', d, 4096)?.seconds?.median;
    rows[`4 KiB copy() ${d} / cudaMemcpy from C++ (time)`] = ratio(js, cpp);
    // In turns of their own (callFloor): the bare addon call against C++, and copy() against it.
    const f = fl?.[d];
    rows[`4 KiB bare addon call ${d} / cudaMemcpy from C++ (the floor of any call)`] = ratio(f?.floor, f?.raw);
    rows[`4 KiB copy() ${d} / bare addon call (the library's own share)`] = ratio(f?.copy, f?.floor);
  }
  if (g)
    for (const mode of ['pinned', 'staged', 'hostcopy'])
      for (const dev of [0, 1])
        rows[`two GPUs ${mode} h2d 1 GiB, GPU ${dev} together / alone`] = g.results?.find(
          (r) => r.scope === 'together' && r.mode === mode && r.direction === 'h2d' && r.device === dev,
        )?.shareOfAlone;
  return rows;
}

const DMA_UNDER_WRITES = 'DMA to the device with 46 GB/s of host writes / alone,';

// The programs --bounds runs, built once with nvcc into OUTDIR; undefined where they cannot be.
function buildBounds(o) {
  const root = path.resolve(__dirname, '..');
  const bin = (name) => path.join(o.out, name);
  const cc = (name, extra) =>
    run(
      'nvcc',
      ['-O2', '-std=c++17', '-I', path.join(root, 'native'), '-o', bin(name), path.join(__dirname, `${name}.cc`), ...extra],
      `build ${name}`,
    );
  const team = ['native/core/transfer/copy_team.cc', 'native/core/device/numa.cc'].map((f) => path.join(root, f));
  return cc('dma-under-host-copy', team) !== undefined && cc('awaited-call-wakeups', []) !== undefined ? bin : undefined;
}

// What the host allows, once per repeat (see --bounds above).
function bounds(bin, k) {
  const json = (name, args) => {
    const out = run(bin(name), args, `${name} r${k}`, { output: true });
    try {
      return out === undefined ? undefined : JSON.parse(out);
    } catch {
      process.stderr.write(`${name} r${k}: printed no JSON: ${out.slice(-2000)}\n`);
      return undefined;
    }
  };
  const rows = {};
  const dma = json('dma-under-host-copy', ['--write-gbps', '46', '--reps', '15'])?.rows?.[0];
  for (const n of [4, 16, 64]) rows[`${DMA_UNDER_WRITES} ${n} MiB`] = dma?.[`${n}MiB`]?.share;
  rows['host writes held at 46 GB/s: the rate reached, GB/s'] = dma?.hostCopyGbps;
  const wake = json('awaited-call-wakeups', [])?.rows?.find((r) => r.bytes === 64 * MiB && r.to === 'device');
  rows['prefetch to device 64 MiB: one thread woken / raw (the least an awaited call pays)'] = wake?.['one-wake']?.share;
  rows['prefetch to device 64 MiB: two threads woken / raw'] = wake?.['two-wakes']?.share;
  return rows;
}

// CuPy's and PyTorch's pools, once per repeat (they do not depend on the checkout).
function peers(o, k) {
  if (o.skipPython) return {};
  const out = path.join(o.out, `peers-r${k}.json`);
  const script = path.join(__dirname, 'compare-torch-alloc.py');
  run(o.python, [script, '--only-cached', '--json', out], `peers r${k}`);
  const p = readJson(out) ?? [];
  const rows = {};
  for (const r of p) rows[`${r.library} pool alloc+free cached 1 MiB, µs`] = r.median;
  return rows;
}

const fmt = (v) => (v === undefined ? 'n/a' : Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(3));

function main() {
  const o = parseArgs(process.argv.slice(2));
  fs.mkdirSync(o.out, { recursive: true });
  const libs = [['new', path.resolve(__dirname, '..')]];
  if (o.baseline) libs.push(['baseline', o.baseline]);
  for (const [, root] of libs)
    for (const need of ['dist/cli.js', 'dist/index.js'])
      if (!fs.existsSync(path.join(root, need))) throw new Error(`${root} has no ${need}: build it first`);
  if (o.twoGpus) {
    const count = require(path.join(libs[0][1], 'dist', 'index.js')).status().deviceCount;
    if (count < 2) {
      process.stderr.write(`--two-gpus: ${count} GPU(s) visible, so the two-GPU row is left out\n`);
      o.twoGpus = false;
    }
  }
  const runs = Object.fromEntries(libs.map(([label]) => [label, []]));
  runs.peers = [];
  runs.host = [];
  const boundsBin = o.bounds ? buildBounds(o) : undefined;
  if (o.bounds && !boundsBin) process.stderr.write('--bounds: the programs could not be built with nvcc, so their rows are left out\n');
  const t0 = Date.now();
  for (let k = 1; k <= o.repeats; k++) {
    const host = boundsBin ? bounds(boundsBin, k) : {};
    runs.host.push(host);
    // In turn, the order flipped each repeat, so neither library always meets a warmer machine.
    const order = k % 2 ? libs : [...libs].reverse();
    for (const [label, root] of order) runs[label].push(measure(o, label, root, k, host));
    runs.peers.push(peers(o, k));
  }
  const names = [...new Set(Object.values(runs).flatMap((rs) => rs.flatMap((r) => Object.keys(r))))];
  const summary = { date: new Date().toISOString(), repeats: o.repeats, seconds: (Date.now() - t0) / 1000, rows: {} };
  const lines = [];
  const columns = [...libs.map(([l]) => l), 'peers', 'host'];
  lines.push(['row', ...columns.map((c) => `${c} (median; each run)`)].join(' | '));
  for (const name of names) {
    const cells = [name];
    summary.rows[name] = {};
    for (const c of columns) {
      const each = runs[c].map((r) => r[name]);
      if (each.every((v) => v === undefined)) {
        cells.push('');
        continue;
      }
      const med = median(each);
      summary.rows[name][c] = { median: med, each };
      cells.push(`${fmt(med)} (${each.map(fmt).join(', ')})`);
    }
    lines.push(cells.join(' | '));
  }
  fs.writeFileSync(path.join(o.out, 'summary.json'), JSON.stringify(summary, null, 2) + '\n');
  process.stdout.write(
    lines.join('\n') + `\n\n${o.repeats} repeats in ${summary.seconds.toFixed(0)} s; reports and summary.json in ${o.out}\n`,
  );
}

if (process.argv[2] === '--alloc-pair') allocPair(process.argv[3], process.argv[4]);
else if (process.argv[2] === '--call-floor') callFloor(process.argv[3], process.argv[4]);
else if (process.argv[2] === '--async-hop')
  asyncHop(process.argv[3], process.argv[4]).catch((e) => {
    process.stderr.write(`${e.stack ?? e}\n`);
    process.exit(1);
  });
else main();

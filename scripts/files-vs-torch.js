#!/usr/bin/env node
'use strict';
// A safetensors checkpoint of a few GiB onto the GPU, in one run: written with random data into
// the folder named, then loaded cold (page cache dropped before each pass) and warm by the
// library (loadSafetensors, and through an allocator that reuses memory between passes), by PyTorch (safetensors.torch.load_file(path, device='cuda'), through
// scripts/files-vs-torch.py) and by the naive Node path (the file into a Node buffer, then
// copy()), beside the storage's own read rate (readFileStorage: the library's path without the
// GPU) and the link (copy() from pinned memory). The loaders take turns round by round (PyTorch
// in a co-process that runs one pass per request), and every pass of every loader is checked byte
// for byte. Prints one table and the JSON report (also written to $OUT/files-vs-torch.json when OUT
// is set). Exit status 1 when any data did not arrive intact.
//
// usage: node scripts/files-vs-torch.js --dir DIR [--gib 3] [--passes 3] [--keep] [--no-torch]
//        [--host]   (no GPU: host memory instead of device memory, to check the script itself)
// PYTHON names the interpreter (default python3); FILES_VS_TORCH_ANSWER_SECONDS bounds the wait for
// each of PyTorch's answers (default 600).
const fs = require('fs');
const os = require('os');
const path = require('path');
const crypto = require('crypto');
const { execFileSync, spawn } = require('child_process');
const readline = require('readline');

const cm = require(path.join(__dirname, '..'));
const { readWhole } = require(path.join(__dirname, '..', 'dist', 'bench', 'files'));

function args(argv) {
  const o = { gib: 3, passes: 3, keep: false, torch: true, host: false, python: process.env.PYTHON || 'python3' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--dir') o.dir = argv[++i];
    else if (a === '--gib') o.gib = Number(argv[++i]);
    else if (a === '--passes') o.passes = Number(argv[++i]);
    else if (a === '--keep') o.keep = true;
    else if (a === '--no-torch') o.torch = false;
    else if (a === '--host') o.host = true;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!o.dir) throw new Error('--dir DIR is required (a folder on the storage to measure)');
  if (!(o.gib > 0) || !Number.isInteger(o.passes) || o.passes < 1)
    throw new Error('--gib must be above 0 and --passes an integer of at least 1');
  return o;
}

const o = args(process.argv.slice(2));
const gpu = !o.host;
if (gpu && !cm.status().available) {
  console.error(`files-vs-torch: CUDA is not available (${cm.status().message}); --host checks the script without a GPU`);
  process.exit(2);
}

// Tensors in several dtypes and shapes, about `total` bytes together: eight large weights and a
// small bias after each.
function layout(total) {
  const dtypes = ['F32', 'BF16', 'F16', 'F32', 'I64', 'U8', 'F32', 'BF16'];
  const list = [];
  const each = Math.floor(total / dtypes.length);
  dtypes.forEach((dtype, i) => {
    const size = cm.DTYPE_BYTES[dtype];
    const cols = 4096;
    const rows = Math.max(1, Math.floor(each / size / cols));
    list.push({ name: `layers.${i}.weight`, dtype, shape: [rows, cols], bytes: rows * cols * size });
    list.push({ name: `layers.${i}.bias`, dtype, shape: [cols + i], bytes: (cols + i) * size });
  });
  return list;
}

function drop(file) {
  return cm.fileCache(file, true).resident;
}

function seconds(fn) {
  const t0 = process.hrtime.bigint();
  const r = fn();
  return [Number(process.hrtime.bigint() - t0) / 1e9, r];
}

function summary(samples, bytes) {
  const s = [...samples].sort((a, b) => a - b);
  const med = s[Math.floor((s.length - 1) / 2)] / 2 + s[Math.ceil((s.length - 1) / 2)] / 2;
  return { seconds: samples, medianSeconds: med, gbps: bytes / med / 1e9, bestGbps: bytes / s[0] / 1e9 };
}

const ANSWER_SECONDS = Number(process.env.FILES_VS_TORCH_ANSWER_SECONDS) || 600;

// Starts scripts/files-vs-torch.py: { versions, ask(request) -> its JSON answer, stop() }, or
// { error } where PyTorch could not be started (the last lines it printed).
async function startTorch(file, digestsFile) {
  const child = spawn(o.python, [path.join(__dirname, 'files-vs-torch.py'), file, digestsFile], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr = (stderr + d).slice(-4096)));
  child.on('error', (e) => (stderr += String(e.message)));
  child.stdin.on('error', () => {}); // a child that died is reported by the next answer
  const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const lastWords = () => stderr.trim().split('\n').slice(-3).join(' | ') || 'PyTorch exited';
  // Each answer within ANSWER_SECONDS (a pass, its check and PyTorch's start take seconds), so a
  // co-process that hangs ends the run instead of holding it.
  const next = async () => {
    let timer;
    const late = new Promise((resolve) => {
      timer = setTimeout(() => resolve({ done: true, late: true }), ANSWER_SECONDS * 1000);
    });
    const { value, done, late: wasLate } = await Promise.race([lines.next(), late]);
    clearTimeout(timer);
    if (wasLate) {
      child.kill('SIGKILL');
      return { error: `PyTorch gave no answer within ${ANSWER_SECONDS} s` };
    }
    if (done) return { error: lastWords() };
    try {
      return JSON.parse(value);
    } catch {
      return { error: `unexpected output: ${value.slice(0, 200)}` };
    }
  };
  const ready = await next();
  if (ready.error) {
    child.kill();
    return { error: ready.error };
  }
  return {
    versions: { torch: ready.torch, safetensors: ready.safetensors },
    ask(request) {
      child.stdin.write(request + '\n');
      return next();
    },
    stop() {
      child.stdin.end();
    },
  };
}

const dir = fs.mkdtempSync(path.join(o.dir, 'files-vs-torch-'));
const file = path.join(dir, 'checkpoint.safetensors');
const digestsFile = path.join(dir, 'checkpoint.sha256.json');
const report = {
  schema: 'cuda-memory/files-vs-torch@1',
  date: new Date().toISOString(),
  dir: path.resolve(o.dir),
  fileSystem: (() => {
    try {
      return execFileSync('stat', ['-f', '-c', '%T', o.dir], { encoding: 'utf8' }).trim();
    } catch {
      return 'unknown';
    }
  })(),
  gpu: gpu ? cm.devices()[0].name : 'none (--host)',
  host: { cpu: os.cpus()[0]?.model, cpus: os.cpus().length, memoryBytes: os.totalmem(), kernel: os.release() },
  node: process.version,
  passes: o.passes,
  rows: [],
  goals: [],
};
let failed = false;
let pool; // the allocator of the pooled rows (with a GPU)

async function main() {
  try {
    // The checkpoint: random bytes, written by the library's writer from host memory.
    const tensors = layout(Math.round(o.gib * 2 ** 30));
    const total = tensors.reduce((s, t) => s + t.bytes, 0);
    const data = Buffer.allocUnsafe(total);
    // randomFillSync takes offsets below 2^31 only: fill through views of at most 1 GiB.
    for (let at = 0; at < total; at += 1 << 30) crypto.randomFillSync(data.subarray(at, Math.min(at + (1 << 30), total)));
    const sources = {};
    const digests = {};
    let at = 0;
    for (const t of tensors) {
      sources[t.name] = { dtype: t.dtype, shape: t.shape, buffer: data, byteOffset: at };
      digests[t.name] = crypto
        .createHash('sha256')
        .update(data.subarray(at, at + t.bytes))
        .digest('hex');
      t.offset = at;
      at += t.bytes;
    }
    const [writeSeconds, fileBytes] = seconds(() => cm.saveSafetensors(file, sources, { fsync: true }));
    fs.writeFileSync(digestsFile, JSON.stringify(digests));
    report.checkpoint = { bytes: fileBytes, dataBytes: total, tensors: tensors.length, writeSeconds };

    // Each loaded tensor against the bytes it was written from.
    const backOf = (view) => {
      const out = Buffer.allocUnsafe(view.byteLength);
      cm.copy(out, view.buffer, { srcOffset: view.byteOffset, byteLength: view.byteLength });
      return out;
    };
    const verify = (views) =>
      tensors.every((t) => {
        const v = views.get(t.name);
        return v !== undefined && v.byteLength === t.bytes && backOf(v).equals(data.subarray(t.offset, t.offset + t.bytes));
      });
    const alloc = gpu ? undefined : (n) => Buffer.allocUnsafe(n);
    pool = gpu ? cm.createAllocator({ allowGrowth: true }) : undefined;

    const loaders = {
      storage: (cache) => {
        const r = cm.readFileStorage(file, { direct: cache === 'cold' ? 'auto' : false });
        return { verified: r.bytes === fileBytes, direct: r.direct };
      },
      library: (cache) => {
        const l = cm.loadSafetensors(file, { alloc, direct: cache === 'cold' ? 'auto' : false });
        return { loaded: l };
      },
      // Through an allocator: memory reused from pass to pass, as PyTorch's caching allocator
      // reuses it for load_file.
      ...(pool && {
        pooled: (cache) => {
          const l = cm.loadSafetensors(file, { alloc: (n) => pool.alloc(n), direct: cache === 'cold' ? 'auto' : false });
          return { loaded: l };
        },
      }),
      naive: () => {
        const buf = readWhole(file);
        const h = cm.parseSafetensorsHeader(buf, buf.length);
        const span = buf.length - h.dataOffset;
        const mem = gpu ? cm.DeviceBuffer.alloc(span) : Buffer.allocUnsafe(span);
        cm.copy(mem, buf, { srcOffset: h.dataOffset, byteLength: span });
        const views = new Map(
          h.tensors.map((t) => [t.name, { ...t, buffer: mem, byteOffset: t.begin - h.dataOffset, byteLength: t.end - t.begin }]),
        );
        return { loaded: { tensors: views, free: () => mem.free?.() } };
      },
    };

    // PyTorch in a co-process that runs one pass per request, so its passes take turns with ours.
    const torch = o.torch ? await startTorch(file, digestsFile) : undefined;
    if (torch?.error) {
      for (const cache of ['cold', 'warm']) report.rows.push({ loader: 'torch', cache, error: torch.error, verified: false });
      failed = true;
    } else if (torch) {
      loaders.torch = async (cache) => {
        const t = await torch.ask(cache);
        if (t.error) throw new Error(t.error);
        return { seconds: t.seconds, verified: t.mismatched.length === 0, mismatched: t.mismatched };
      };
    }

    // O_DIRECT's measurement at the first large read of this file system, untimed.
    drop(file);
    cm.readFileStorage(file, { direct: 'auto' });
    try {
      for (const cache of ['cold', 'warm']) {
        const names = Object.keys(loaders);
        const rows = names.map((loader) => ({ loader, cache, samples: [], residentBefore: [], verified: true, mismatched: [] }));
        if (cache === 'warm')
          for (const name of names) {
            if (name === 'torch') await torch.ask('warmup');
            else (await loaders[name](cache)).loaded?.free();
          }
        // Round i runs every loader once, starting at loader i (mod their count): drift in the
        // machine, the disk or a cache below this one reaches each loader alike.
        for (let i = 0; i < o.passes; i++)
          for (let j = 0; j < names.length; j++) {
            const k = (i + j) % names.length;
            const row = rows[k];
            // PyTorch's side drops the pages itself before a cold pass and reports no residency.
            if (names[k] !== 'torch') row.residentBefore.push(cache === 'cold' ? drop(file) : cm.fileCache(file).resident);
            const t0 = process.hrtime.bigint();
            const r = await loaders[names[k]](cache);
            row.samples.push(r.seconds ?? Number(process.hrtime.bigint() - t0) / 1e9);
            if (r.loaded) {
              row.verified = verify(r.loaded.tensors) && row.verified;
              r.loaded.free();
            } else row.verified = r.verified && row.verified;
            if (r.mismatched) row.mismatched.push(...r.mismatched);
            // The library's loads say what each read did; the naive and torch rows cannot.
            if (r.loaded?.reads) row.direct = r.loaded.reads.some((x) => x.direct);
            if (r.direct !== undefined) row.direct = r.direct;
          }
        for (const row of rows) {
          const { samples, mismatched, ...rest } = row;
          report.rows.push({
            ...rest,
            bytes: fileBytes,
            ...summary(samples, fileBytes),
            ...(row.loader === 'torch'
              ? { residentBefore: undefined, mismatched: [...new Set(mismatched)], versions: torch.versions }
              : {}),
          });
          failed = failed || !row.verified;
        }
      }
    } finally {
      torch?.stop?.();
    }
    if (gpu) {
      // The transfer rates a load cannot beat, in turns: `link`, pinned memory to the device (1 GiB,
      // or the checkpoint if smaller), and `staged`, copy() from the checkpoint's own Node buffer
      // (the library's staged path for pageable memory), at the checkpoint's size.
      const n = Math.min(1 << 30, total);
      const pinned = cm.PinnedBuffer.alloc(n);
      const dev = cm.DeviceBuffer.alloc(total);
      try {
        pinned.bytes.set(data.subarray(0, n));
        const rates = {
          link: { bytes: n, pass: () => cm.copy(dev, pinned), expect: data.subarray(0, n), samples: [], verified: true },
          staged: { bytes: total, pass: () => cm.copy(dev, data), expect: data, samples: [], verified: true },
        };
        const names = Object.keys(rates);
        const back = Buffer.allocUnsafe(total);
        for (const name of names) rates[name].pass();
        for (let i = 0; i < o.passes; i++)
          for (let j = 0; j < names.length; j++) {
            const r = rates[names[(i + j) % names.length]];
            cm.memset(dev, 0);
            r.samples.push(seconds(r.pass)[0]);
            cm.copy(back, dev, { byteLength: r.bytes });
            r.verified = r.verified && back.subarray(0, r.bytes).equals(r.expect);
          }
        for (const name of names) {
          const r = rates[name];
          report.rows.push({ loader: name, cache: '-', bytes: r.bytes, ...summary(r.samples, r.bytes), verified: r.verified });
          failed = failed || !r.verified;
        }
      } finally {
        pinned.free();
        dev.free();
      }
    }

    // The goals: the library at 90% of the slower of the storage and the transfer (the staged
    // path's rate, as the goal is set, and the pinned link's, which is stricter), and twice PyTorch.
    const find = (loader, cache) => report.rows.find((r) => r.loader === loader && r.cache === cache && r.gbps !== undefined);
    for (const cache of ['cold', 'warm'])
      for (const loader of ['library', 'pooled']) {
        const lib = find(loader, cache);
        const storage = find('storage', cache);
        const torch = find('torch', cache);
        for (const transfer of ['staged', 'link']) {
          if (!lib || !storage) break;
          const t = find(transfer, '-');
          const limit = Math.min(storage.gbps, t ? t.gbps : Infinity);
          report.goals.push({
            goal: `${cache}: ${loader} >= 90% of min(storage, ${transfer})`,
            value: lib.gbps / limit,
            pass: lib.gbps >= 0.9 * limit,
          });
        }
        if (lib && torch)
          report.goals.push({ goal: `${cache}: ${loader} >= 2x torch`, value: lib.gbps / torch.gbps, pass: lib.gbps >= 2 * torch.gbps });
      }
  } finally {
    pool?.close();
    if (!o.keep) fs.rmSync(dir, { recursive: true, force: true });
  }

  const pad = (s, n) => String(s).padEnd(n);
  const lines = [
    `checkpoint ${cm.formatBytes(report.checkpoint.bytes)} in ${report.checkpoint.tensors} tensors, in ${report.dir} (${report.fileSystem}); GPU ${report.gpu}; median of ${o.passes} passes; decimal GB/s`,
    '',
    `${pad('loader', 8)}  ${pad('cache', 5)}  ${'median'.padStart(7)}  ${'best'.padStart(7)}  ${pad('verified', 8)}  note`,
  ];
  for (const r of report.rows)
    lines.push(
      `${pad(r.loader, 8)}  ${pad(r.cache, 5)}  ${(r.gbps === undefined ? '-' : r.gbps.toFixed(2)).padStart(7)}  ${(r.bestGbps === undefined ? '-' : r.bestGbps.toFixed(2)).padStart(7)}  ${pad(r.verified ? 'yes' : 'NO', 8)}  ${[
        r.error ? `error: ${r.error}` : '',
        r.direct === true ? 'O_DIRECT' : r.direct === false ? 'buffered' : '',
        r.residentBefore ? `cached before ${r.residentBefore.map((x) => (x * 100).toFixed(0) + '%').join('/')}` : '',
        r.versions ? `torch ${r.versions.torch}, safetensors ${r.versions.safetensors}` : '',
      ]
        .filter(Boolean)
        .join('; ')}`,
    );
  lines.push('');
  for (const g of report.goals) lines.push(`${g.pass ? 'PASS' : 'MISS'} ${g.goal}: ${g.value.toFixed(2)}`);
  console.log(lines.join('\n'));
  const json = JSON.stringify(report, null, 2);
  console.log(json);
  if (process.env.OUT) fs.writeFileSync(path.join(process.env.OUT, 'files-vs-torch.json'), json + '\n');
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

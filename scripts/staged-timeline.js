#!/usr/bin/env node
// Where a staged copy's time goes: the median timeline of its chunks.
//
// Runs staged copies of each size and direction in a child process with CUDA_MEMORY_STAGING_TRACE
// set (the addon then prints every staged copy's timeline on stderr; docs/transfers.md), and
// prints, per chunk, the median of when its transfer was issued, when a thread saw it land and
// when its first and last pieces were copied, in microseconds from the start of the copy; then
// what bounds the copy at its two ends:
//   to the device: when the first chunk was in the ring and when the call that issued it
//   returned (nothing moves before the call), and how long the copy ran after the last chunk's
//   issue returned;
//   from the device: when the first chunk landed (no thread copies before), how long after the
//   last chunk landed every piece had left the ring, and how long the copy took to return after.
// Recording the trace costs little within a copy; printing it comes after the copy's last
// timestamp but within its copy() call, so time copies with `bench`, not this.
//
// Usage: node scripts/staged-timeline.js [--sizes 4MiB,16MiB] [--directions d2h,h2d]
//          [--copies 200] [--warmup 20] [--first-chunk SIZE] [--last-chunk SIZE]
//          [--chunk SIZE] [--threads N] [--device 0] [--json]
'use strict';
const path = require('path');
const { spawnSync } = require('child_process');
const cm = require('..');

// The child's lines around each timed run on stderr (warm-up copies and other runs outside them).
const BEGIN = 'staged-timeline: begin ';
const END = 'staged-timeline: end';

function usage(message) {
  console.error(`staged-timeline: ${message} (see the comment at the top of the script)`);
  process.exit(2);
}

function parseArgs(argv) {
  const o = { sizes: '4MiB,16MiB', directions: 'd2h,h2d', copies: '200', warmup: '20', device: '0', json: false };
  const valued = ['sizes', 'directions', 'copies', 'warmup', 'first-chunk', 'last-chunk', 'chunk', 'threads', 'device'];
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i].replace(/^--/, '');
    if (argv[i] === '--json') o.json = true;
    else if (argv[i].startsWith('--') && valued.includes(key)) {
      if (i + 1 >= argv.length || argv[i + 1].startsWith('--')) usage(`${argv[i]} needs a value`);
      o[key] = argv[++i];
    } else usage(`unknown argument ${JSON.stringify(argv[i])}`);
  }
  const count = (name, lo, hi) => {
    const n = Number(o[name]);
    if (!Number.isInteger(n) || n < lo || n > hi) usage(`--${name} must be an integer from ${lo} to ${hi}, got ${JSON.stringify(o[name])}`);
    return n;
  };
  const directions = o.directions.split(',');
  for (const d of directions) if (d !== 'h2d' && d !== 'd2h') usage(`--directions takes h2d and d2h, got ${JSON.stringify(d)}`);
  if (new Set(directions).size !== directions.length) usage(`--directions names a direction twice: ${o.directions}`);
  const size = (name, text) => {
    try {
      return cm.parseSize(text);
    } catch (e) {
      return usage(`--${name}: ${e.message}`);
    }
  };
  let sizes;
  try {
    sizes = cm.parseSizeList(o.sizes);
  } catch (e) {
    usage(`--sizes: ${e.message}`);
  }
  const staging = {};
  if (o['first-chunk'] !== undefined) staging.firstChunkBytes = size('first-chunk', o['first-chunk']);
  if (o['last-chunk'] !== undefined) staging.lastChunkBytes = size('last-chunk', o['last-chunk']);
  if (o.chunk !== undefined) staging.chunkBytes = size('chunk', o.chunk);
  return {
    sizes,
    directions,
    copies: count('copies', 1, 100_000),
    warmup: count('warmup', 0, 100_000),
    device: count('device', 0, 1 << 20),
    staging: o.threads === undefined ? staging : { ...staging, threads: count('threads', 1, 1024) },
    json: o.json,
  };
}

// One staged copy's trace, as the addon prints it:
//   cuda-memory staged d2h: 5 chunks, 99.0 us
//     chunk 0 (524288 bytes): issue 0.9..2.6, wait 2.7..17.4, pieces 17.5..26.4
// A time printed as -1.0 (or, for a first piece, as a huge number) never happened: null here.
const HEAD = /^cuda-memory staged (h2d|d2h): (\d+) chunks, ([-\d.]+) us$/;
const CHUNK = /^\s+chunk (\d+) \((\d+) bytes\): issue ([-\d.]+)\.\.([-\d.]+), wait ([-\d.]+)\.\.([-\d.]+), pieces ([-\d.]+)\.\.([-\d.]+)$/;

function parseTimelines(text) {
  const copies = [];
  let current = null;
  const time = (s) => {
    const t = Number(s);
    return t < 0 || t > 1e12 ? null : t;
  };
  for (const line of text.split('\n')) {
    let m = HEAD.exec(line);
    if (m) {
      current = { direction: m[1], total: Number(m[3]), chunks: [], expected: Number(m[2]) };
      copies.push(current);
      continue;
    }
    m = CHUNK.exec(line);
    if (m && current && Number(m[1]) === current.chunks.length) {
      const [issuing, issued, waiting, landed, firstPiece, lastPiece] = m.slice(3).map(time);
      current.chunks.push({ bytes: Number(m[2]), issuing, issued, waiting, landed, firstPiece, lastPiece });
    }
  }
  // A copy whose lines were cut short (another writer on stderr, say) is left out.
  return copies.filter((c) => c.chunks.length === c.expected).map(({ expected, ...c }) => c);
}

function median(values) {
  const v = values.filter((x) => x !== null).sort((a, b) => a - b);
  return v.length === 0 ? null : v[(v.length - 1) >> 1];
}

// The medians of copies that share one plan (the same chunk lengths); copies of another plan
// (a ring position that moved a chunk, say) are counted apart and left out.
function summarize(copies) {
  if (copies.length === 0) return null;
  const key = (c) => c.chunks.map((k) => k.bytes).join(',');
  const counts = new Map();
  for (const c of copies) counts.set(key(c), (counts.get(key(c)) ?? 0) + 1);
  const plan = [...counts].sort((a, b) => b[1] - a[1])[0][0];
  const same = copies.filter((c) => key(c) === plan);
  const at = (f) => median(same.map(f));
  const chunks = same[0].chunks.map((k, i) => {
    const of = (field) => at((c) => c.chunks[i][field]);
    return {
      bytes: k.bytes,
      issuing: of('issuing'),
      issued: of('issued'),
      waiting: of('waiting'),
      landed: of('landed'),
      firstPiece: of('firstPiece'),
      lastPiece: of('lastPiece'),
    };
  });
  const last = (c) => c.chunks[c.chunks.length - 1];
  const gap = (f) => at((c) => (f(c).some((x) => x === null) ? null : f(c)[1] - f(c)[0]));
  const out = {
    direction: same[0].direction,
    copies: same.length,
    otherPlans: copies.length - same.length,
    total: at((c) => c.total),
    chunks,
  };
  if (out.direction === 'h2d') {
    out.firstInRing = at((c) => c.chunks[0].lastPiece);
    out.firstIssued = at((c) => c.chunks[0].issued);
    out.lastIssued = at((c) => last(c).issued);
    out.afterLastIssue = gap((c) => [last(c).issued, c.total]);
  } else {
    out.firstLanded = at((c) => c.chunks[0].landed);
    out.lastLanded = at((c) => last(c).landed);
    // Out of the ring: the last piece of any chunk (the last chunk's as a rule).
    const out_ = (c) => (c.chunks.some((k) => k.lastPiece === null) ? null : Math.max(...c.chunks.map((k) => k.lastPiece)));
    out.allOut = at(out_);
    out.allOutAfterLastLanding = gap((c) => [last(c).landed, out_(c)]);
    out.returnAfterAllOut = gap((c) => [out_(c), c.total]);
  }
  return out;
}

const fmt = (t) => (t === null ? '-' : t.toFixed(1));
const span = (a, b) => (a === null && b === null ? '-' : `${fmt(a)}..${fmt(b)}`);

function render(label, s) {
  const kib = (n) => (n % 1024 === 0 ? `${n / 1024} KiB` : `${n} B`);
  const lines = [
    `${label}: ${s.chunks.length} chunks, ${fmt(s.total)} us (median of ${s.copies} copies${s.otherPlans ? `; ${s.otherPlans} of another plan left out` : ''})`,
  ];
  lines.push('  chunk  bytes         issued         landed   pieces');
  for (const [i, c] of s.chunks.entries())
    lines.push(
      `  ${String(i).padEnd(5)}  ${kib(c.bytes).padEnd(12)}  ${span(c.issuing, c.issued).padEnd(13)}  ${fmt(c.landed).padStart(7)}   ${span(c.firstPiece, c.lastPiece)}`,
    );
  if (s.direction === 'h2d')
    lines.push(
      `  first chunk in the ring ${fmt(s.firstInRing)}, its issue returned ${fmt(s.firstIssued)}; the last chunk's ${fmt(s.lastIssued)}, the copy done ${fmt(s.afterLastIssue)} later`,
    );
  else
    lines.push(
      `  first chunk landed ${fmt(s.firstLanded)}; last landed ${fmt(s.lastLanded)}, all out of the ring ${fmt(s.allOutAfterLastLanding)} later, the copy done ${fmt(s.returnAfterAllOut)} after that`,
    );
  return lines.join('\n');
}

// The child: the copies, each timed run between a begin and an end line on stderr; the settings
// they ran with on stdout.
function child(o) {
  const settings = Object.keys(o.staging).length ? cm.configureStaging(o.staging) : cm.configureStaging();
  process.stdout.write(JSON.stringify(settings));
  for (const n of o.sizes) {
    const dev = cm.DeviceBuffer.alloc(n, { device: o.device });
    const host = Buffer.alloc(n, 0x5a);
    try {
      for (const d of o.directions) {
        const once = d === 'h2d' ? () => cm.copy(dev, host, { strategy: 'staged' }) : () => cm.copy(host, dev, { strategy: 'staged' });
        for (let i = 0; i < o.warmup; i++) once();
        process.stderr.write(`${BEGIN}${d} ${n}\n`);
        for (let i = 0; i < o.copies; i++) once();
        process.stderr.write(`${END}\n`);
      }
    } finally {
      dev.free();
    }
  }
}

// The child's stderr cut into its timed runs: [{ direction, bytes, text }], in order.
function splitRuns(stderr) {
  const runs = [];
  for (const part of stderr.split(BEGIN).slice(1)) {
    const eol = part.indexOf('\n');
    const [direction, bytes] = part.slice(0, eol).split(' ');
    const end = part.indexOf(`${END}\n`, eol);
    runs.push({ direction, bytes: Number(bytes), text: end < 0 ? '' : part.slice(eol + 1, end) });
  }
  return runs;
}

function main() {
  if (process.argv[2] === '--child') return child(JSON.parse(process.argv[3]));
  const o = parseArgs(process.argv.slice(2));
  if (!cm.status().available) usage(`CUDA is not available: ${cm.status().message}`);
  const r = spawnSync(process.execPath, [__filename, '--child', JSON.stringify(o)], {
    env: { ...process.env, CUDA_MEMORY_STAGING_TRACE: '1' },
    encoding: 'utf8',
    maxBuffer: 1 << 30,
  });
  if (r.error || r.status !== 0) {
    console.error(
      `staged-timeline: the copies failed (${r.error ? r.error.message : `exit ${r.status ?? r.signal}`}):\n${(r.stderr ?? '').slice(-4000)}`,
    );
    process.exit(1);
  }
  const settings = JSON.parse(r.stdout);
  const out = [];
  for (const run of splitRuns(r.stderr)) {
    const s = summarize(parseTimelines(run.text).filter((c) => c.direction === run.direction));
    out.push({ direction: run.direction, bytes: run.bytes, ...s });
    if (!o.json)
      console.log(
        s
          ? render(`${run.direction} ${cm.formatBytes(run.bytes)}`, s)
          : `${run.direction} ${cm.formatBytes(run.bytes)}: no timeline was printed`,
      );
  }
  if (o.json) console.log(JSON.stringify({ settings, timelines: out }, null, 2));
  else
    console.log(
      `settings: chunks ${cm.formatBytes(settings.firstChunkBytes)} first, up to ${cm.formatBytes(settings.chunkBytes)}, ${cm.formatBytes(settings.lastChunkBytes)} last; ${settings.slots} slots; ${settings.threads} threads`,
    );
}

if (require.main === module) main();
module.exports = { parseTimelines, summarize, render, splitRuns };

#!/usr/bin/env node
// Where a staged copy's time goes: the median timeline of its chunks.
//
// Runs staged copies of each size and direction in a child process with CUDA_MEMORY_STAGING_TRACE
// set (the addon then prints every staged copy's timeline on stderr; docs/transfers.md), and
// prints, per chunk, the median of when its transfer was issued, when a thread saw it land and
// when its first and last pieces were copied, in microseconds from the start of the copy; then
// what bounds the copy at its two ends:
//   to the device: when the first chunk was in the ring and when it was issued (nothing moves
//   before), and how long the copy ran after its last chunk was issued;
//   from the device: when the first chunk landed (no thread copies before), and how long the
//   last chunk's pieces took to leave the ring after it landed, and the copy to return after.
// Printing the trace costs time between copies, not within them; time copies with `bench`.
//
// Usage: node scripts/staged-timeline.js [--sizes 4MiB,16MiB] [--directions d2h,h2d]
//          [--copies 200] [--warmup 20] [--first-chunk SIZE] [--last-chunk SIZE]
//          [--chunk SIZE] [--threads N] [--device 0] [--json]
'use strict';
const path = require('path');
const { spawnSync } = require('child_process');

const MARK = 'staged-timeline: timed ';

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
    else if (argv[i].startsWith('--') && valued.includes(key) && i + 1 < argv.length) o[key] = argv[++i];
    else usage(`unknown argument ${JSON.stringify(argv[i])}`);
  }
  const count = (name, lo, hi) => {
    const n = Number(o[name]);
    if (!Number.isInteger(n) || n < lo || n > hi) usage(`--${name} must be an integer from ${lo} to ${hi}, got ${JSON.stringify(o[name])}`);
    return n;
  };
  const directions = o.directions.split(',');
  for (const d of directions) if (d !== 'h2d' && d !== 'd2h') usage(`--directions takes h2d and d2h, got ${JSON.stringify(d)}`);
  return {
    sizes: o.sizes,
    directions,
    copies: count('copies', 1, 100_000),
    warmup: count('warmup', 0, 100_000),
    device: count('device', 0, 1 << 20),
    threads: o.threads === undefined ? undefined : count('threads', 1, 1024),
    firstChunk: o['first-chunk'],
    lastChunk: o['last-chunk'],
    chunk: o.chunk,
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
    out.lastOut = at((c) => last(c).lastPiece);
    out.lastOutAfterLanding = gap((c) => [last(c).landed, last(c).lastPiece]);
    out.returnAfterLastOut = gap((c) => [last(c).lastPiece, c.total]);
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
      `  first chunk in the ring ${fmt(s.firstInRing)}, issued ${fmt(s.firstIssued)}; last chunk issued ${fmt(s.lastIssued)}, the copy done ${fmt(s.afterLastIssue)} later`,
    );
  else
    lines.push(
      `  first chunk landed ${fmt(s.firstLanded)}; last landed ${fmt(s.lastLanded)}, out of the ring ${fmt(s.lastOutAfterLanding)} later, the copy done ${fmt(s.returnAfterLastOut)} after that`,
    );
  return lines.join('\n');
}

// The child: the copies, with a line on stderr before each timed run.
function child(o) {
  const cm = require('..');
  const staging = {};
  if (o.firstChunk) staging.firstChunkBytes = cm.parseSize(o.firstChunk);
  if (o.lastChunk) staging.lastChunkBytes = cm.parseSize(o.lastChunk);
  if (o.chunk) staging.chunkBytes = cm.parseSize(o.chunk);
  if (o.threads) staging.threads = o.threads;
  // The settings the copies ran with, for the parent's report.
  process.stdout.write(JSON.stringify(Object.keys(staging).length ? cm.configureStaging(staging) : cm.configureStaging()));
  for (const n of cm.parseSizeList(o.sizes)) {
    const dev = cm.DeviceBuffer.alloc(n, { device: o.device });
    const host = Buffer.alloc(n, 0x5a);
    try {
      for (const d of o.directions) {
        const once = d === 'h2d' ? () => cm.copy(dev, host, { strategy: 'staged' }) : () => cm.copy(host, dev, { strategy: 'staged' });
        for (let i = 0; i < o.warmup; i++) once();
        process.stderr.write(`${MARK}${d} ${n}\n`);
        for (let i = 0; i < o.copies; i++) once();
      }
    } finally {
      dev.free();
    }
  }
}

function main() {
  if (process.argv[2] === '--child') return child(JSON.parse(process.argv[3]));
  const o = parseArgs(process.argv.slice(2));
  const cm = require('..');
  if (!cm.status().available) usage(`CUDA is not available: ${cm.status().message}`);
  const sizes = cm.parseSizeList(o.sizes);
  const r = spawnSync(process.execPath, [__filename, '--child', JSON.stringify(o)], {
    env: { ...process.env, CUDA_MEMORY_STAGING_TRACE: '1' },
    encoding: 'utf8',
    maxBuffer: 1 << 30,
  });
  if (r.status !== 0) {
    console.error(`staged-timeline: the copies failed (exit ${r.status ?? r.signal}):\n${r.stderr.slice(-4000)}`);
    process.exit(1);
  }
  const runs = r.stderr.split(MARK).slice(1);
  const out = [];
  for (const [i, text] of runs.entries()) {
    const d = o.directions[i % o.directions.length];
    const n = sizes[Math.floor(i / o.directions.length)];
    const s = summarize(parseTimelines(text.slice(text.indexOf('\n') + 1)).filter((c) => c.direction === d));
    out.push({ direction: d, bytes: n, ...s });
    if (!o.json) console.log(s ? render(`${d} ${cm.formatBytes(n)}`, s) : `${d} ${cm.formatBytes(n)}: no timeline was printed`);
  }
  if (o.json) console.log(JSON.stringify({ settings: JSON.parse(r.stdout), timelines: out }, null, 2));
}

if (require.main === module) main();
module.exports = { parseTimelines, summarize, render };

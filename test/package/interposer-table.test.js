'use strict';
// docs/internals.md's tables of what the interposer charges and what fails open are kept true:
// every entry point it wraps (native/allocator/preload/hooks.h, the driver's and NVML's) is in a
// row of the first and every
// row's entry points are wrapped; the second lists exactly the codes the interposer and the ledger
// code under it can fail with; and every test a row names exists in the interposer's test files.
const fs = require('fs');
const path = require('path');

const root = path.join(__dirname, '..', '..');
const read = (f) => fs.readFileSync(path.join(root, f), 'utf8');

// The rows of the markdown table that follows `heading`, as arrays of cells.
function table(text, heading) {
  const at = text.indexOf(heading);
  expect(at).toBeGreaterThan(-1);
  const lines = text.slice(at).split('\n');
  const first = lines.findIndex((l) => l.startsWith('|'));
  const rows = [];
  for (const line of lines.slice(first + 2)) {
    if (!line.startsWith('|')) break;
    rows.push(
      line
        .slice(1, -1)
        .split('|')
        .map((c) => c.trim()),
    );
  }
  return rows;
}
const spans = (cell) => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]);

// The titles of the interposer's tests (test.each's %s left out: a row names the rest).
const titles = ['preload.test.js', 'preload-routes.test.js', 'preload-failopen.test.js', 'preload-nvml.test.js', 'preload-elastic.test.js']
  .map((f) => read(path.join('test', 'allocator', f)))
  .flatMap((t) =>
    [...t.matchAll(/(?:test|describe|describeGpu)(?:\.each\([\s\S]*?\))?\(\s*(['"`])((?:\\.|(?!\1).)*)\1/g)].map((m) => m[2]),
  );
const tested = (name) => name === '' || titles.some((t) => t.replace(/\\(.)/g, '$1').includes(name));

const internals = read('docs/internals.md');

test('every entry point the interposer wraps is in the table of what it charges, and no other', () => {
  const wrapped = new Set(
    [
      ...read('native/allocator/preload/hooks.h')
        .split('#define CM_CALLED')[0]
        .matchAll(/X\(\w+, (\w+),/g),
    ].map((m) => m[1]),
  );
  expect(wrapped.size).toBeGreaterThan(40);
  const rows = table(internals, '### What is charged, and what is not');
  const listed = new Set(rows.flatMap((r) => spans(r[1])));
  expect({
    unlisted: [...wrapped].filter((s) => !listed.has(s)).sort(),
    unwrapped: [...listed].filter((s) => !wrapped.has(s)).sort(),
  }).toEqual({
    unlisted: [],
    unwrapped: [],
  });
  // The export map exports them all, and the lookups that hand them out.
  const exported = new Set([...read('native/allocator/preload/exports.map').matchAll(/^\s+(\w+);$/gm)].map((m) => m[1]));
  expect([...exported].sort()).toEqual([...wrapped, 'dlmopen', 'dlopen', 'dlsym'].sort());
  for (const r of rows) expect([r[0], tested(r[3])]).toEqual([r[0], true]);
});

test('the table of what fails open lists exactly the codes the interposer can fail open with, each with its test', () => {
  const sources = [
    'native/core/base/shm.cc',
    'native/core/allocator/ledger.cc',
    'native/core/allocator/uncharged.cc',
    ...fs.readdirSync(path.join(root, 'native/allocator/preload')).map((f) => `native/allocator/preload/${f}`),
  ];
  const codes = new Set(sources.flatMap((f) => [...read(f).matchAll(/"(ERR_[A-Z_]+)"/g)].map((m) => m[1])));
  const rows = table(internals, '### What fails open');
  const listed = new Set(rows.flatMap((r) => spans(r[0])));
  expect({ unlisted: [...codes].filter((c) => !listed.has(c)).sort(), stale: [...listed].filter((c) => !codes.has(c)).sort() }).toEqual({
    unlisted: [],
    stale: [],
  });
  for (const r of rows) expect([r[0], tested(r[3])]).toEqual([r[0], true]);
});

test('the built interposer exports what the list says, and nothing else', () => {
  const so = path.join(root, 'build', 'Release', 'cuda_memory_preload.so');
  const { execFileSync } = require('child_process');
  const names = execFileSync('nm', ['-D', '--defined-only', so], { encoding: 'utf8' })
    .split('\n')
    .map((l) => l.trim().split(/\s+/)[2])
    .filter(Boolean);
  const exported = [...read('native/allocator/preload/exports.map').matchAll(/^\s+(\w+);$/gm)].map((m) => m[1]);
  expect(names.sort()).toEqual(exported.sort());
});

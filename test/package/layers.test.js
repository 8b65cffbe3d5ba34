'use strict';
// The layering, kept true: every import in lib/ and every #include "..." in native/ points to
// its own concern's layer or a lower one, type imports included; and the concern folders carry
// the same names in lib/, native/, native/core/ and test/. docs/internals.md draws the map.
const fs = require('fs');
const path = require('path');
const { root } = require('../helpers');

// Lowest first.
const LAYERS = ['base', 'binding', 'device', 'memory', 'transfer', 'allocator', 'testing', 'bench', 'report', 'metrics', 'cli'];
// Entry points above every layer: they may name anything.
const TOPS = new Set(['lib/index.ts', 'native/addon.cc']);

function walk(dir) {
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]));
}
const rel = (f) => path.relative(root, f).split(path.sep).join('/');

// The concern of a file: lib/<c>/..., native/<c>/..., native/core/<c>/..., native/core/test/<c>/...;
// lib/cli.ts is the cli layer's entry, native/core/test/*.h the core tests' own helpers (base).
function concern(file) {
  const parts = file.split('/');
  if (file === 'lib/cli.ts') return 'cli';
  if (parts[1] === 'core' && parts[2] === 'test') return parts.length > 4 ? parts[3] : 'base';
  if (parts[1] === 'core') return parts[2];
  return parts[1];
}
const layerOf = (file) => LAYERS.indexOf(concern(file));

// Every edge: [from, to], both relative to the repository root.
function libEdges() {
  const out = [];
  for (const f of walk(path.join(root, 'lib')).filter((f) => f.endsWith('.ts'))) {
    const src = fs.readFileSync(f, 'utf8');
    const re = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"](\.{1,2}\/[^'"]+)['"]/g;
    for (let m; (m = re.exec(src));) {
      let to = rel(path.resolve(path.dirname(f), m[1]));
      to = fs.existsSync(path.join(root, to + '.ts')) ? to + '.ts' : `${to}/index.ts`;
      out.push([rel(f), to]);
    }
  }
  return out;
}
function nativeEdges() {
  const out = [];
  for (const f of walk(path.join(root, 'native')).filter((f) => /\.(h|cc)$/.test(f))) {
    const src = fs.readFileSync(f, 'utf8');
    for (const m of src.matchAll(/^\s*#\s*include\s+"([^"]+)"/gm)) {
      // Written from native/, or beside the file.
      const beside = rel(path.resolve(path.dirname(f), m[1]));
      out.push([rel(f), fs.existsSync(path.join(root, beside)) ? beside : `native/${m[1]}`]);
    }
  }
  return out;
}

const upward = (edges) =>
  edges.filter(([from, to]) => !TOPS.has(from) && layerOf(to) > layerOf(from)).map(([from, to]) => `${from} -> ${to}`);

test('every file sits in a concern folder that is a layer', () => {
  const files = [...walk(path.join(root, 'lib')), ...walk(path.join(root, 'native'))]
    .map(rel)
    .filter((f) => /\.(ts|h|cc)$/.test(f) && !TOPS.has(f));
  expect(files.filter((f) => layerOf(f) < 0)).toEqual([]);
});

test('every import and include in lib/ and native/ resolves', () => {
  const missing = [...libEdges(), ...nativeEdges()].filter(([, to]) => !fs.existsSync(path.join(root, to)));
  expect(missing).toEqual([]);
});

test('lib/ imports point to the same layer or lower, type imports included', () => {
  expect(upward(libEdges())).toEqual([]);
});

test('native/ includes point to the same layer or lower', () => {
  expect(upward(nativeEdges())).toEqual([]);
});

test('native/core/ includes only native/core/ (no Node-API, no CUDA)', () => {
  const out = nativeEdges().filter(([from, to]) => from.startsWith('native/core/') && !to.startsWith('native/core/'));
  expect(out).toEqual([]);
  for (const f of walk(path.join(root, 'native', 'core')))
    expect([rel(f), /#\s*include\s*<(napi|node_api|cuda|nvml)[^>]*>/.test(fs.readFileSync(f, 'utf8'))]).toEqual([rel(f), false]);
});

// The interposer is loaded into programs that are not Node and may not use this library's CUDA
// runtime: it includes only native/core/ and its own folder, and no Node-API, CUDA or NVML header
// (it declares the driver ABI it forwards to in cuda_abi.h).
test('native/allocator/preload/ includes only native/core/ and itself (no Node-API, no CUDA)', () => {
  const preload = 'native/allocator/preload/';
  const out = nativeEdges().filter(([from, to]) => from.startsWith(preload) && !to.startsWith(preload) && !to.startsWith('native/core/'));
  expect(out).toEqual([]);
  const files = walk(path.join(root, preload)).filter((f) => /\.(h|cc)$/.test(f));
  expect(files.length).toBeGreaterThan(5);
  for (const f of files)
    expect([rel(f), /#\s*include\s*<(napi|node_api|cuda|nvml)[^>]*>/.test(fs.readFileSync(f, 'utf8'))]).toEqual([rel(f), false]);
});

test('lib/, native/, native/core/ and test/ name their concern folders alike', () => {
  // A folder with no file below it is no concern (git keeps no empty folders; a move leaves them).
  const hasFiles = (dir) =>
    fs.readdirSync(dir, { withFileTypes: true }).some((e) => e.isFile() || (e.isDirectory() && hasFiles(path.join(dir, e.name))));
  const dirs = (d, skip = []) =>
    fs
      .readdirSync(path.join(root, d), { withFileTypes: true })
      .filter((e) => e.isDirectory() && !skip.includes(e.name) && hasFiles(path.join(root, d, e.name)))
      .map((e) => e.name);
  const notLayers = (d, skip) => dirs(d, skip).filter((c) => !LAYERS.includes(c));
  expect(notLayers('lib')).toEqual([]);
  expect(notLayers('native', ['core'])).toEqual([]);
  expect(notLayers('native/core', ['test'])).toEqual([]);
  expect(notLayers('native/core/test')).toEqual([]);
  // test/ holds the concerns, the package's own checks, the shared fixtures and the reporter.
  expect(notLayers('test', ['package', 'fixtures', 'reporters'])).toEqual([]);
});

// Strongly connected groups of files with more than one member (Tarjan's algorithm): import
// circles, which a layer may hide inside itself.
function circles(edges) {
  const next = new Map();
  for (const [from, to] of edges) {
    if (!next.has(from)) next.set(from, []);
    next.get(from).push(to);
  }
  let counter = 0;
  const index = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const out = [];
  const visit = (v) => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
    }
    if (low.get(v) === index.get(v)) {
      const group = [];
      let w;
      do {
        w = stack.pop();
        onStack.delete(w);
        group.push(w);
      } while (w !== v);
      if (group.length > 1) out.push(group.sort().join(' <-> '));
    }
  };
  for (const v of next.keys()) if (!index.has(v)) visit(v);
  return out.sort();
}

// A C++ module is its header and its source together: foo.h and foo.cc are one node, so that a
// circle closed through a .cc (a.h <- b.cc, b.h <- a.cc) counts as one.
const moduleOf = (file) => file.replace(/\.(h|cc)$/, '');
const moduleEdges = (edges) => edges.map(([from, to]) => [moduleOf(from), moduleOf(to)]).filter(([from, to]) => from !== to);

test('no import or include circle, inside a layer either; a .h and its .cc are one module', () => {
  expect(circles(libEdges())).toEqual([]);
  expect(circles(moduleEdges(nativeEdges()))).toEqual([]);
  // A .cc that includes another module's header whose .cc includes its own header is a circle.
  expect(
    circles(
      moduleEdges([
        ['x/a.cc', 'x/a.h'],
        ['x/a.cc', 'x/b.h'],
        ['x/b.cc', 'x/b.h'],
        ['x/b.cc', 'x/a.h'],
      ]),
    ),
  ).toEqual(['x/a <-> x/b']);
  // The check sees a circle when there is one.
  expect(
    circles([
      ['a', 'b'],
      ['b', 'c'],
      ['c', 'a'],
      ['c', 'd'],
    ]),
  ).toEqual(['a <-> b <-> c']);
});

// Which native file registers each export the addon offers: the entries { "name", function } of
// its Register(env, exports, { ... }) tables (native/binding/exports.h).
function nativeExports() {
  const out = new Map();
  for (const f of walk(path.join(root, 'native')).filter((f) => f.endsWith('.cc'))) {
    const src = fs.readFileSync(f, 'utf8');
    for (const table of src.matchAll(/\bRegister\(\s*env,\s*exports,\s*\{([\s\S]*?)\}\);/g)) {
      for (const m of table[1].matchAll(/\{\s*"([A-Za-z0-9_]+)",/g)) out.set(m[1], rel(f));
    }
  }
  return out;
}

// Read from the source, so that it holds where the addon is not built too (the loader's stand-in
// then answers every declared name, and the load test compares the list with itself).
test("the addon's Register tables name exactly the exports lib/binding/types.ts declares", () => {
  const { NATIVE_EXPORTS } = require('../../dist/binding/types');
  expect([...nativeExports().keys()].sort()).toEqual([...NATIVE_EXPORTS].sort());
});

// Calls still to be moved down; the list only shrinks, and is empty now.
const KNOWN_UPWARD_CALLS = new Set([]);

test('lib/ calls only native exports of its own layer or lower', () => {
  const exports = nativeExports();
  const calls = [];
  for (const f of walk(path.join(root, 'lib')).filter((f) => f.endsWith('.ts'))) {
    for (const m of fs.readFileSync(f, 'utf8').matchAll(/\bnative\.([A-Za-z0-9_]+)/g)) calls.push([rel(f), m[1]]);
  }
  // Every call names an export the test can place (else the check below would miss it).
  expect(calls.filter(([, name]) => !exports.has(name)).map(([f, name]) => `${f}: native.${name}`)).toEqual([]);
  const upwardCalls = calls
    .filter(([from, name]) => !TOPS.has(from) && layerOf(exports.get(name)) > layerOf(from))
    .map(([from, name]) => `${from} -> native.${name} (${exports.get(name)})`);
  expect([...new Set(upwardCalls)].filter((c) => !KNOWN_UPWARD_CALLS.has(c))).toEqual([]);
  expect([...KNOWN_UPWARD_CALLS].filter((c) => !upwardCalls.includes(c))).toEqual([]);
});

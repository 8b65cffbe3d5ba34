'use strict';
// Every function in lib/ stays short: a long one is a list of labelled steps, each a function of
// its own (validate the arguments, interpret them into a plan, then act). A function's lines are
// counted from its first line to its closing brace, nested functions included.
const fs = require('fs');
const path = require('path');
const ts = require('typescript');
const { root } = require('../helpers');

const MAX_LINES = 80;

function walk(dir) {
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]));
}

// What a reader calls the function: its own name, or the name it is assigned to; a method or
// constructor with its class's name.
function nameOf(node) {
  const own =
    node.name ??
    (node.parent && (ts.isVariableDeclaration(node.parent) || ts.isPropertyAssignment(node.parent)) ? node.parent.name : undefined);
  const name = ts.isConstructorDeclaration(node) ? 'constructor' : own ? own.getText() : '<anonymous>';
  const owner = ts.isClassLike(node.parent) && node.parent.name ? `${node.parent.name.getText()}.` : '';
  return owner + name;
}

// `file:line name (N lines)` for every function with a body longer than `max` lines.
function longFunctions(file, text, max = MAX_LINES) {
  const src = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const out = [];
  const visit = (node) => {
    if (ts.isFunctionLike(node) && node.body) {
      const first = src.getLineAndCharacterOfPosition(node.getStart(src)).line;
      const last = src.getLineAndCharacterOfPosition(node.end).line;
      if (last - first + 1 > max) out.push(`${file}:${first + 1} ${nameOf(node)} (${last - first + 1} lines)`);
    }
    ts.forEachChild(node, visit);
  };
  visit(src);
  return out;
}

test(`no function in lib/ is over ${MAX_LINES} lines`, () => {
  const files = walk(path.join(root, 'lib')).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'));
  expect(files.length).toBeGreaterThan(10);
  const long = files.flatMap((f) => longFunctions(path.relative(root, f).split(path.sep).join('/'), fs.readFileSync(f, 'utf8')));
  expect(long).toEqual([]);
});

test('the count sees every kind of function, names it, and counts from its first line to its last', () => {
  const body = (n) => Array.from({ length: n - 2 }, (_, i) => `  x += ${i};`).join('\n');
  const text = [
    `function fits(x) {\n${body(80)}\n}`,
    `export async function tooLong(x) {\n${body(81)}\n}`,
    `const arrow = (x) => {\n${body(81)}\n};`,
    `class Pool {\n  constructor(x) {\n${body(81)}\n  }\n  alloc(x) {\n${body(81)}\n  }\n}`,
    `const table = { read: function (x) {\n${body(81)}\n} };`,
  ].join('\n');
  expect(longFunctions('t.ts', text).map((l) => l.replace(/^t\.ts:\d+ /, ''))).toEqual([
    'tooLong (81 lines)',
    'arrow (81 lines)',
    'Pool.constructor (81 lines)',
    'Pool.alloc (81 lines)',
    'read (81 lines)',
  ]);
  expect(longFunctions('t.ts', text)[0]).toBe('t.ts:81 tooLong (81 lines)');
});

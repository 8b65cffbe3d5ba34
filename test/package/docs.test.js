'use strict';
// The README and the guides as a newcomer meets them: the README's first example runs without a
// GPU, the README stays short, every relative link in the Markdown files leads to a file, the
// scripts the library names ship, and troubleshooting.md lists exactly the codes it can throw.
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { root, describeGpu } = require('../helpers');

const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
const markdown = [
  'README.md',
  'CHANGELOG.md',
  ...fs
    .readdirSync(path.join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

test('the README is short enough to read top to bottom', () => {
  expect(readme.split('\n').length).toBeLessThanOrEqual(200);
});

test("the README's first example runs without a GPU, as written", () => {
  const first = /```js\n([\s\S]*?)```/.exec(readme)[1];
  expect(first).toContain('simulate');
  const r = spawnSync(process.execPath, ['-e', first], { cwd: root, encoding: 'utf8' });
  expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: '' });
  expect(r.stdout).toMatch(/no CUDA|CUDA is here/);
});

test('every relative link in the Markdown files leads to a file', () => {
  const broken = [];
  for (const file of markdown) {
    const text = fs.readFileSync(path.join(root, file), 'utf8');
    for (const [, target] of text.matchAll(/\]\(([^)#\s]+)(#[^)]*)?\)/g)) {
      if (/^[a-z]+:/.test(target)) continue; // http:, https:, mailto:
      if (target.startsWith('docs/api/') || target.startsWith('api/')) continue; // made by npm run docs
      if (!fs.existsSync(path.join(root, path.dirname(file), target))) broken.push(`${file}: ${target}`);
    }
  }
  expect(broken).toEqual([]);
});

describeGpu("the README's GPU example", () => {
  test('runs as written and prints the byte that went there and back', () => {
    const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
    const gpuExample = blocks.find((b) => b.includes('DeviceBuffer.alloc'));
    const r = spawnSync(process.execPath, ['-e', gpuExample], { cwd: root, encoding: 'utf8', timeout: 60000 });
    expect({ status: r.status, stderr: r.stderr, stdout: r.stdout.trim() }).toEqual({ status: 0, stderr: '', stdout: '7' });
  });
});

test('every script the library names (messages, API reference) ships in the package', () => {
  // Named in the API reference as the other side of a comparison that runs from a clone.
  const cloneOnly = new Set(['scripts/compare-torch-alloc.py']);
  const files = new Set(require(path.join(root, 'package.json')).files);
  const named = new Set();
  const walk = (dir) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.ts'))
        for (const m of fs.readFileSync(p, 'utf8').matchAll(/scripts\/[\w.-]+\.(?:py|js|sh)/g)) named.add(m[0]);
    }
  };
  walk(path.join(__dirname, '..', '..', 'lib'));
  expect(named.size).toBeGreaterThan(0);
  expect([...named].filter((s) => !files.has(s) && !cloneOnly.has(s)).sort()).toEqual([]);
});

test('every script the README and the guides name ships in the package, or they say it runs in a clone', () => {
  // A guide that names only scripts of the repository says so once, in this sentence; elsewhere the
  // paragraph that names a script the package lacks says "in a clone".
  const whole = 'The scripts this guide names are in the repository, not in the package: run them in a clone.';
  const files = new Set(require(path.join(root, 'package.json')).files);
  const unsaid = [];
  for (const file of markdown.filter((f) => f !== 'CHANGELOG.md')) {
    const text = fs.readFileSync(path.join(root, file), 'utf8');
    if (text.includes(whole)) continue;
    for (const paragraph of text.split(/\n\s*\n/))
      for (const [script] of paragraph.matchAll(/scripts\/[\w./-]+\.(?:py|js|sh|cc|cu|mjs)/g))
        if (!files.has(script) && !/in a clone/i.test(paragraph.replace(/\s+/g, ' '))) unsaid.push(`${file}: ${script}`);
  }
  expect([...new Set(unsaid)].sort()).toEqual([]);
});

test('troubleshooting.md lists every error code the library can throw, and no other', () => {
  // The codes in the sources: every quoted 'ERR_...' of lib/ and native/ (the core's tests aside).
  const repo = path.join(__dirname, '..', '..');
  const thrown = new Map();
  const walk = (dir) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) {
        if (p !== path.join(repo, 'native', 'core', 'test')) walk(p);
      } else if (/\.(ts|cc|h)$/.test(e.name))
        for (const m of fs.readFileSync(p, 'utf8').matchAll(/['"](ERR_[A-Z0-9_]+)['"]/g))
          if (!thrown.has(m[1])) thrown.set(m[1], path.relative(repo, p));
    }
  };
  walk(path.join(repo, 'lib'));
  walk(path.join(repo, 'native'));
  const listed = new Set(
    [...fs.readFileSync(path.join(root, 'docs', 'troubleshooting.md'), 'utf8').matchAll(/`(ERR_[A-Z0-9_]+)`/g)].map((m) => m[1]),
  );
  expect(thrown.size).toBeGreaterThan(40);
  const missing = [...thrown].filter(([code]) => !listed.has(code)).map(([code, file]) => `${code} (${file})`);
  const stale = [...listed].filter((code) => !thrown.has(code));
  expect({ missing: missing.sort(), stale: stale.sort() }).toEqual({ missing: [], stale: [] });
});

test('the API reference renders every guide as a page of its own (typedoc.json projectDocuments)', () => {
  // Otherwise TypeDoc copies a linked guide as raw Markdown and the reference links that copy.
  const repo = path.join(__dirname, '..', '..');
  const { readme, projectDocuments } = JSON.parse(fs.readFileSync(path.join(repo, 'typedoc.json'), 'utf8'));
  const guides = fs
    .readdirSync(path.join(repo, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`)
    .filter((f) => f !== readme);
  expect([...(projectDocuments ?? [])].sort()).toEqual(guides.sort());
});

describe("the README's command line", () => {
  const cli = path.join(root, 'dist', 'cli.js');
  const help = (...args) => spawnSync(process.execPath, [cli, ...args, '--help'], { encoding: 'utf8' }).stdout;
  const section = /## The command line\n([\s\S]*?)\n## /.exec(readme)[1];
  const prose = section.replace(/```[\s\S]*?```/g, '');
  const commands = [...help().matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]).filter((c) => c !== 'help');

  test('every option it names for a command is one that command takes', () => {
    // Each clause (up to a ';' or a full stop) names its commands in backquotes, then their options.
    const refused = [];
    for (const clause of prose.split(/;|\.\s/)) {
      const named = [...clause.matchAll(/`([a-z][a-z-]*)`/g)].map((m) => m[1]).filter((c) => commands.includes(c));
      const options = [...clause.matchAll(/`(--[a-z][a-z0-9-]*)/g)].map((m) => m[1]).filter((o) => o !== '--help');
      for (const command of named) {
        const text = help(command);
        for (const option of options) if (!new RegExp(`^\\s+(-\\w, )?${option}\\b`, 'm').test(text)) refused.push(`${command} ${option}`);
      }
    }
    expect(refused).toEqual([]);
  });

  test('what it says --help lists is what --help lists', () => {
    const claim = /`npx cuda-memory --help` lists ([^.]+)\./.exec(prose.replace(/\s+/g, ' '))[1];
    const root = help();
    if (/every option/.test(claim)) {
      const missing = commands
        .flatMap((c) => [...help(c).matchAll(/^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)/gm)].map((m) => m[1]))
        .filter((o) => !root.includes(o));
      expect(missing).toEqual([]);
    }
    expect(claim).toMatch(/the commands/);
    for (const c of commands) expect(root).toMatch(new RegExp(`^ {2}${c}\\b`, 'm'));
  });
});

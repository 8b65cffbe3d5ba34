#!/usr/bin/env node
// Fails if any C++ file differs from clang-format's output (the npm package's binary).
'use strict';
const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const root = path.join(__dirname, '..');
const bin = path.join(root, 'node_modules', '.bin', 'clang-format');
const files = [];
(function walk(dir) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p);
    else if (/\.(cc|h)$/.test(e.name)) files.push(p);
  }
})(path.join(root, 'native'));
if (process.argv.includes('--fix')) {
  execFileSync(bin, ['--style=file', '-i', ...files], { cwd: root });
  console.log(`clang-format: formatted ${files.length} files`);
  process.exit(0);
}
const bad = files.filter((f) => execFileSync(bin, ['--style=file', f], { cwd: root, encoding: 'utf8' }) !== fs.readFileSync(f, 'utf8'));
if (bad.length) {
  console.error(
    `clang-format: ${bad.length} file(s) need formatting (npm run format):\n  ${bad.map((f) => path.relative(root, f)).join('\n  ')}`,
  );
  process.exit(1);
}
console.log(`clang-format: ${files.length} files formatted`);

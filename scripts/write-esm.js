#!/usr/bin/env node
// Finishes the entry points tsc wrote, every one that package.json's `exports` gives an `import`
// condition (".", "./bench", "./metrics", "./testing"): its CommonJS file (dist/index.js,
// dist/bench/index.js, ...) gets a `default` export that is the module itself, and an ES module
// beside it (dist/index.mjs, ...) re-exports the CommonJS build, so `import` and `require` share
// one copy of the addon and its state, and `import cm from 'cuda-memory'` is the package from every
// kind of output.
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.join(__dirname, '..');
const { exports: map } = require(path.join(root, 'package.json'));

const entries = Object.entries(map).filter(([, e]) => e && typeof e === 'object' && e.import);
for (const [subpath, entry] of entries) {
  const cjsFile = path.join(root, entry.require.default);
  const dtsFile = path.join(root, entry.require.types);
  const mjsFile = path.join(root, entry.import.default);
  const dmtsFile = path.join(root, entry.import.types);
  const base = `./${path.basename(cjsFile)}`;
  const names = Object.keys(require(cjsFile)).filter((n) => n !== 'default' && n !== '__esModule');
  const what = subpath === '.' ? 'cuda-memory' : `cuda-memory/${subpath.slice(2)}`;
  const id = what.replace(/[-/](\w)/g, (_, c) => c.toUpperCase()); // cudaMemory, cudaMemoryBench

  // Code compiled to CommonJS (tsc with esModuleInterop, esbuild --format=cjs, Babel) reads a
  // default import as `.default` of a module marked __esModule, as tsc marks these files. Not
  // enumerable, so that Object.keys() and `export *` see only the API.
  const marker = '// write-esm: the default export';
  const cjs = fs.readFileSync(cjsFile, 'utf8');
  if (!cjs.includes(marker))
    fs.writeFileSync(cjsFile, `${cjs}\n${marker}\nObject.defineProperty(exports, 'default', { value: exports, enumerable: false });\n`);
  const dts = fs.readFileSync(dtsFile, 'utf8');
  if (!dts.includes(marker))
    fs.writeFileSync(
      dtsFile,
      `${dts}\n${marker}\n/** The module itself: \`import m from '${what}'\`. */\ndeclare const ${id}: typeof import('${base.replace(/\.js$/, '')}');\nexport default ${id};\n`,
    );

  const body = [
    // A static import rather than createRequire(): bundlers follow it (createRequire's argument
    // they cannot), so a bundle that inlines the package gets the code and can say what is missing.
    `import lib from '${base}';`,
    'export default lib;',
    `export const { ${names.join(', ')} } = lib;`,
    '',
  ].join('\n');
  fs.writeFileSync(mjsFile, body);
  fs.writeFileSync(dmtsFile, `export * from '${base}';\nimport lib = require('${base}');\nexport default lib;\n`);
}

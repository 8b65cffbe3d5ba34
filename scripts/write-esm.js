#!/usr/bin/env node
// Finishes the entry points tsc wrote: dist/index.js gets a `default` export that is the package
// itself, and dist/index.mjs re-exports the CommonJS build as an ES module, so `import` and
// `require` share one copy of the addon and its state, and `import cm from 'cuda-memory'` is the
// package from every kind of output.
'use strict';
const fs = require('fs');
const path = require('path');
const dist = path.join(__dirname, '..', 'dist');
const names = Object.keys(require(path.join(dist, 'index.js'))).filter((n) => n !== 'default' && n !== '__esModule');

// Code compiled to CommonJS (tsc with esModuleInterop, esbuild --format=cjs, Babel) reads a default
// import as `.default` of a module marked __esModule, as tsc marks dist/index.js. Not enumerable,
// so that Object.keys() and `export *` see only the API.
const marker = '// write-esm: the default export';
const cjs = fs.readFileSync(path.join(dist, 'index.js'), 'utf8');
if (!cjs.includes(marker))
  fs.writeFileSync(
    path.join(dist, 'index.js'),
    `${cjs}\n${marker}\nObject.defineProperty(exports, 'default', { value: exports, enumerable: false });\n`,
  );
const dts = fs.readFileSync(path.join(dist, 'index.d.ts'), 'utf8');
if (!dts.includes(marker))
  fs.writeFileSync(
    path.join(dist, 'index.d.ts'),
    `${dts}\n${marker}\n/** The package itself: \`import cm from 'cuda-memory'\`. */\ndeclare const cudaMemory: typeof import('./index');\nexport default cudaMemory;\n`,
  );

const body = [
  // A static import rather than createRequire(): bundlers follow it (createRequire's argument
  // they cannot), so a bundle that inlines the package gets the code and can say what is missing.
  "import lib from './index.js';",
  'export default lib;',
  `export const { ${names.join(', ')} } = lib;`,
  '',
].join('\n');
fs.writeFileSync(path.join(dist, 'index.mjs'), body);
fs.writeFileSync(path.join(dist, 'index.d.mts'), "export * from './index.js';\nimport lib = require('./index.js');\nexport default lib;\n");

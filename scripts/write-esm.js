#!/usr/bin/env node
// Writes dist/index.mjs: an ES module that re-exports the CommonJS build, so `import` and
// `require` share one copy of the addon and its state.
'use strict';
const fs = require('fs');
const path = require('path');
const dist = path.join(__dirname, '..', 'dist');
const names = Object.keys(require(path.join(dist, 'index.js'))).filter((n) => n !== 'default' && n !== '__esModule');
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

#!/usr/bin/env node
// Re-renders a benchmark HTML report from the JSON report inside it (or from a --out/--json file),
// with gates evaluated again: for reports written by an older version of the renderer.
//   node scripts/render-report.js IN.html|IN.json OUT.html [--expect GATE]...
'use strict';
const fs = require('fs');
const { renderHtml } = require('../dist/bench/report');
const { evaluateGates, parseGate } = require('../dist/bench/gates');
const { gateSource } = require('../dist/bench/transfer');

const [input, output, ...rest] = process.argv.slice(2);
if (!input || !output) {
  console.error('usage: render-report.js IN.html|IN.json OUT.html [--expect GATE]...');
  process.exit(2);
}
const text = fs.readFileSync(input, 'utf8');
const embedded = /<script type="application\/json" id="report">(.*)<\/script>/s.exec(text);
const report = JSON.parse(embedded ? embedded[1] : text);
const gates = [];
for (let i = 0; i < rest.length; i++) if (rest[i] === '--expect') gates.push(parseGate(rest[++i]));
const results = evaluateGates(gates, gateSource(report));
fs.writeFileSync(output, renderHtml(report, results));
for (const r of results) console.log(r.message);

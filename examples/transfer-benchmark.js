// The transfer benchmark from a script: pageable vs staged vs pinned, host to device and back,
// with a gate a CI job could enforce. The CLI does the same: npx cuda-memory bench.
// Run: node examples/transfer-benchmark.js
'use strict';
const cm = require('cuda-memory');
const bench = require('cuda-memory/bench');

async function main() {
  if (!cm.status().available) {
    console.log(`no GPU here (${cm.status().reason}): ${cm.status().message}`);
    // What runs without a GPU: the gates themselves, against a made-up result.
    const gate = bench.parseGate('h2d.pinned>=48GB/s');
    console.log(`what a gate checks: ${JSON.stringify(gate)}`);
    console.log(
      'On a GPU this example runs the benchmark (pageable, staged and pinned, both directions) and\n' +
        'checks such gates; the H100 reference figures are in docs/performance.md, "Transfers".',
    );
    return;
  }
  const MiB = 2 ** 20;
  const report = await bench.runTransferBenchmark({
    sizes: [MiB, 16 * MiB, 256 * MiB],
    modes: ['pageable', 'staged', 'pinned'],
    directions: ['h2d', 'd2h'],
    onProgress: (done, total) => process.stderr.write(`\r${done}/${total}`),
  });
  process.stderr.write('\n');
  for (const r of report.results)
    console.log(
      `${r.direction} ${r.mode.padEnd(9)} ${cm.formatBytes(r.bytes).padStart(8)}: ${cm.formatRate(r.gbps.median)} (p10 ${r.gbps.p10.toFixed(2)}, p90 ${r.gbps.p90.toFixed(2)})${r.verified ? '' : ' DATA MISMATCH'}`,
    );
  const gates = bench.evaluateGates(
    [bench.parseGate('h2d.pinned>=20GB/s'), bench.parseGate('h2d.staged/h2d.pageable>=2')],
    bench.gateSource(report),
  );
  for (const g of gates) console.log(g.message);
  process.exitCode = gates.every((g) => g.pass) ? 0 : 1;
}
main();

'use strict';
// The file benchmark without a GPU runs its storage rows; the GPU rows run under describeGpu.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { cm, root, describeGpu } = require('../helpers');
const { formatFilesTable, formatFilesCsv, filesJunit } = require(path.join(root, 'dist/report/files'));

const MiB = 1024 * 1024;

function run(opts = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-bench-files-'));
  return cm
    .runFilesBenchmark({ dir, bytes: 8 * MiB + 5, iterations: 2, ...opts })
    .finally(() => fs.rmSync(dir, { recursive: true, force: true }));
}

describe('bench-files', () => {
  test('storage rows cold and warm, verified, with statistics, gates and every format; the folder is left clean', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-bench-files-'));
    const report = await cm.runFilesBenchmark({ dir, bytes: 8 * MiB + 5, iterations: 3 });
    expect(fs.readdirSync(dir)).toEqual([]);
    fs.rmSync(dir, { recursive: true });
    expect(report.schema).toBe('cuda-memory/files-benchmark@1');
    const modes = report.results.map((r) => `${r.direction} ${r.mode}`);
    expect(modes).toEqual(expect.arrayContaining(['read storage-cold', 'read storage-warm', 'write storage']));
    for (const r of report.results) {
      expect(r.verified).toBe(true);
      expect(r.samples).toHaveLength(3);
      expect(r.gbps.median).toBeGreaterThan(0);
      expect(r.bytes).toBe(8 * MiB + 5);
    }
    expect(report.results.find((r) => r.mode === 'storage-warm').resident).toBeGreaterThan(0.9);
    const gates = cm.evaluateGates(
      [cm.parseGate('read.storage-warm>=0.001GB/s'), cm.parseGate('read.storage-warm/read.storage-cold>=0.0001')],
      cm.filesGateSource(report),
    );
    expect(gates.map((g) => g.pass)).toEqual([true, true]);
    expect(cm.evaluateGates([cm.parseGate('read.nothing>=1GB/s')], cm.filesGateSource(report))[0].pass).toBe(false);
    expect(formatFilesTable(report)).toMatch(/read\s+storage-cold\s+8\.00 MiB/);
    expect(formatFilesCsv(report).split('\n')[0]).toMatch(/^direction,mode,bytes,timing,median_gbps/);
    expect(filesJunit(report, gates)).toContain('files.gates');
    if (!cm.status().available) expect(report.skipped[0]).toMatch(/no GPU/);
  });

  test('arguments are checked', async () => {
    await expect(cm.runFilesBenchmark({ dir: '/nonexistent-folder' })).rejects.toThrow(TypeError);
    await expect(run({ iterations: 0 })).rejects.toThrow(RangeError);
  });

  test('the command prints the table and exits 0; a failing gate exits 1', () => {
    const { spawnSync } = require('child_process');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-bench-files-'));
    const cli = path.join(root, 'dist', 'cli.js');
    const ok = spawnSync(process.execPath, [cli, 'bench-files', '--dir', dir, '--size', '4MiB', '--iterations', '1', '--csv'], {
      encoding: 'utf8',
    });
    expect(ok.status).toBe(0);
    expect(ok.stdout).toMatch(/^direction,mode/);
    const bad = spawnSync(
      process.execPath,
      [cli, 'bench-files', '--dir', dir, '--size', '4MiB', '--iterations', '1', '--expect', 'read.storage-warm>=1000TB/s'],
      {
        encoding: 'utf8',
      },
    );
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/FAIL read.storage-warm/);
    fs.rmSync(dir, { recursive: true });
  });
});

describeGpu('bench-files with a GPU', () => {
  test('library, naive and link rows, verified, with the limit beside the library rows', async () => {
    const report = await run();
    const modes = report.results.map((r) => `${r.direction} ${r.mode}`);
    expect(modes).toEqual(
      expect.arrayContaining([
        'read library-cold',
        'read library-warm',
        'read naive-cold',
        'read naive-warm',
        'read link',
        'write library',
        'write naive',
      ]),
    );
    for (const r of report.results) expect(r.verified).toBe(true);
    expect(report.results.find((r) => r.mode === 'library-warm').limitGbps).toBeGreaterThan(0);
  });
});

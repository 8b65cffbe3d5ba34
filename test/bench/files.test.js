'use strict';
// The file benchmark without a GPU runs its storage rows; the GPU rows run under describeGpu.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { cm, bench, root, describeGpu, inPrivateMounts, privateMountsWork } = require('../helpers');
const { formatFilesTable, formatFilesCsv, renderFilesHtml, filesJunit } = require(path.join(root, 'dist/report/files'));
const { filesFamilies } = require(path.join(root, 'dist/metrics/families'));
const { formatExposition } = require(path.join(root, 'dist/metrics/exposition'));

const MiB = 1024 * 1024;

function run(opts = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-bench-files-'));
  return bench
    .runFilesBenchmark({ dir, bytes: 8 * MiB + 5, iterations: 2, ...opts })
    .finally(() => fs.rmSync(dir, { recursive: true, force: true }));
}

describe('bench-files', () => {
  test('storage rows cold and warm, verified, with statistics, gates and every format; the folder is left clean', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-bench-files-'));
    const report = await bench.runFilesBenchmark({ dir, bytes: 8 * MiB + 5, iterations: 3 });
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
    const gates = bench.evaluateGates(
      [bench.parseGate('read.storage-warm>=0.001GB/s'), bench.parseGate('read.storage-warm/read.storage-cold>=0.0001')],
      bench.filesGateSource(report),
    );
    expect(gates.map((g) => g.pass)).toEqual([true, true]);
    expect(bench.evaluateGates([bench.parseGate('read.nothing>=1GB/s')], bench.filesGateSource(report))[0].pass).toBe(false);
    expect(formatFilesTable(report)).toMatch(/read\s+storage-cold\s+8\.00 MiB/);
    expect(formatFilesCsv(report).split('\n')[0]).toMatch(/^direction,mode,bytes,timing,median_gbps/);
    expect(filesJunit(report, gates)).toContain('files.gates');
    // HTML: one chart per direction with a bar per row, the table, and the report for tools.
    const html = renderFilesHtml(report, gates);
    expect(html).toMatch(/^<!doctype html>/);
    expect(html.match(/<svg /g)).toHaveLength(new Set(report.results.map((r) => r.direction)).size);
    for (const r of report.results) expect(html).toContain(`<td>${r.mode}</td>`);
    expect(html).toContain('read.storage-warm');
    expect(JSON.parse(html.match(/<script type="application\/json" id="report">(.*)<\/script>/s)[1].replace(/\\u003c/g, '<'))).toEqual(
      JSON.parse(JSON.stringify(report)),
    );
    // Prometheus: each row's median in bytes per second, the gates and the outcome.
    const prom = formatExposition(filesFamilies(report, gates, 1700000000));
    const warm = report.results.find((r) => r.mode === 'storage-warm');
    const line = prom
      .split('\n')
      .find(
        (l) =>
          l.startsWith('cuda_memory_bench_files_bytes_per_second{') && l.includes('mode="storage-warm"') && l.includes('stat="median"'),
      );
    expect(Number(line.split(' ').pop())).toBeCloseTo(warm.gbps.median * 1e9, -3);
    expect(prom).toMatch(/^cuda_memory_bench_files_gate_passed\{device="0",gate="read.storage-warm>=0.001GB\/s"\} 1$/m);
    expect(prom).toMatch(/^cuda_memory_bench_files_ok\{device="0"\} 1$/m);
    expect(prom).toMatch(/^cuda_memory_bench_files_last_run_timestamp_seconds\{device="0"\} 1700000000$/m);
    if (!cm.status().available) expect(report.skipped[0]).toMatch(/no GPU/);
  });

  test('arguments are checked', async () => {
    await expect(bench.runFilesBenchmark({ dir: '/nonexistent-folder' })).rejects.toThrow(TypeError);
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
    // Every output file at once; an output that cannot be written is a usage error (2).
    const outs = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-bench-files-out-'));
    const files = { html: 'r.html', prometheus: 'r.prom', junit: 'r.xml', out: 'r.json' };
    const all = spawnSync(
      process.execPath,
      [
        cli,
        'bench-files',
        '--dir',
        dir,
        '--size',
        '4MiB',
        '--iterations',
        '1',
        ...Object.entries(files).flatMap(([k, f]) => [`--${k}`, path.join(outs, f)]),
      ],
      { encoding: 'utf8' },
    );
    expect(all.status).toBe(0);
    expect(fs.readFileSync(path.join(outs, 'r.html'), 'utf8')).toContain('cuda-memory file benchmark');
    expect(fs.readFileSync(path.join(outs, 'r.prom'), 'utf8')).toMatch(/^cuda_memory_bench_files_ok\{device="0"\} 1$/m);
    expect(fs.readFileSync(path.join(outs, 'r.xml'), 'utf8')).toContain('cuda-memory bench-files');
    expect(JSON.parse(fs.readFileSync(path.join(outs, 'r.json'), 'utf8')).schema).toBe('cuda-memory/files-benchmark@1');
    fs.rmSync(outs, { recursive: true });
    const unwritable = spawnSync(process.execPath, [cli, 'bench-files', '--dir', dir, '--html', '/proc/version'], { encoding: 'utf8' });
    expect(unwritable.status).toBe(2);
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

describe('bench-files stopped midway', () => {
  const { spawn } = require('child_process');
  const cli = path.join(root, 'dist', 'cli.js');
  // The run's test file, once it exists.
  const testFile = (dir) => {
    for (const e of fs.readdirSync(dir)) if (fs.existsSync(path.join(dir, e, 'data.bin'))) return path.join(dir, e, 'data.bin');
    return null;
  };

  test('an AbortSignal stops the run between passes: the folder is removed and it rejects with an AbortError', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-bench-files-'));
    const stop = new AbortController();
    let sawFile = false;
    const onProgress = () => {
      sawFile = testFile(dir) !== null;
      stop.abort('enough');
    };
    await expect(bench.runFilesBenchmark({ dir, bytes: 4 * MiB, iterations: 3, onProgress, signal: stop.signal })).rejects.toEqual(
      expect.objectContaining({
        name: 'AbortError',
        code: 'ABORT_ERR',
        cause: 'enough',
        message: expect.stringMatching(/aborted \(enough\)/),
      }),
    );
    expect(sawFile).toBe(true);
    expect(fs.readdirSync(dir)).toEqual([]);
    // Aborted already: nothing is written; not a signal: a TypeError.
    await expect(bench.runFilesBenchmark({ dir, signal: stop.signal })).rejects.toEqual(expect.objectContaining({ code: 'ABORT_ERR' }));
    await expect(bench.runFilesBenchmark({ dir, signal: 'stop' })).rejects.toEqual(
      expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }),
    );
    expect(fs.readdirSync(dir)).toEqual([]);
    fs.rmSync(dir, { recursive: true });
  });

  test.each(['SIGINT', 'SIGTERM'])('the command stopped by %s removes its test file, says so, and ends by that signal', async (signal) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-bench-files-'));
    const child = spawn(process.execPath, [cli, 'bench-files', '--dir', dir, '--size', '16MiB', '--iterations', '100000'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    const ended = new Promise((resolve) => child.once('exit', (code, sig) => resolve({ code, sig })));
    const t0 = Date.now();
    while (testFile(dir) === null && Date.now() - t0 < 60000) await new Promise((r) => setTimeout(r, 20));
    expect(testFile(dir)).not.toBeNull();
    child.kill(signal);
    expect(await ended).toEqual({ code: null, sig: signal });
    expect(stderr).toContain(`cuda-memory bench-files: stopped by ${signal}; the test file and its folder were removed`);
    expect(fs.readdirSync(dir)).toEqual([]);
    fs.rmSync(dir, { recursive: true });
  });
});

describe('bench-files where the folder or the size cannot work', () => {
  const { spawnSync } = require('child_process');
  const cli = path.join(root, 'dist', 'cli.js');

  test('a size above the largest buffer this Node makes is a coded RangeError before anything is written', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-bench-files-'));
    try {
      const max = require('buffer').constants.MAX_LENGTH;
      const e = await bench.runFilesBenchmark({ dir, bytes: Math.min(max + 1, Number.MAX_SAFE_INTEGER + 1) }).catch((x) => x);
      expect(e).toBeInstanceOf(RangeError);
      expect(e.code).toBe('ERR_OUT_OF_RANGE');
      expect(e.message).toMatch(/options\.bytes/);
      expect(fs.readdirSync(dir)).toEqual([]);
      if (max < 5 * 2 ** 30) {
        // Node 20: the command exits 2 with one line, and leaves no folder behind.
        const r = spawnSync(process.execPath, [cli, 'bench-files', '--dir', dir, '--size', '5GiB'], { encoding: 'utf8', timeout: 60000 });
        expect(r.status).toBe(2);
        expect(r.stderr).toMatch(/^cuda-memory: Expected options.bytes of at most \d+ \(4 GiB, the largest buffer Node/);
        expect(fs.readdirSync(dir)).toEqual([]);
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  // A full and a read-only file system, as tmpfs mounts in a private mount namespace (root only).
  const mounts = privateMountsWork(
    'd=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs "$d"; r=$?; umount "$d" 2>/dev/null; rmdir "$d"; exit $r',
  );
  (mounts ? test : test.skip)(
    `a full disk and a read-only folder: exit 2 naming --dir, and nothing left behind${mounts ? '' : ' — skipped: needs unshare -m and mount, as root'}`,
    () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-bench-files-'));
      try {
        const script = [
          `mount -t tmpfs -o size=1m tmpfs "${dir}"`,
          `"${process.execPath}" "${cli}" bench-files --dir "${dir}" --size 4MiB --iterations 1 2>&1; echo "rc=$?"`,
          `ls -A "${dir}"; echo "--"`,
          `mount -o remount,ro "${dir}"`,
          `"${process.execPath}" "${cli}" bench-files --dir "${dir}" --size 4MiB --iterations 1 2>&1; echo "rc=$?"`,
        ].join('\n');
        const out = inPrivateMounts(script, { encoding: 'utf8', timeout: 120000 });
        const [full, readOnly] = out.split('--\n');
        expect(full).toMatch(
          /^cuda-memory: --dir ".*": there is not enough space for the test file \(ENOSPC\); free space there, give a smaller --size, or choose another folder\nrc=2\n$/,
        );
        expect(readOnly).toMatch(
          /^cuda-memory: --dir ".*": it cannot be written \(permission denied, or a read-only file system\) \(EROFS\); choose a folder this user may write\nrc=2\n$/,
        );
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});

describe('writeWhole', () => {
  // fs.writeSync refuses 2 GiB or more in one call (bench-files --size 3GiB failed so); the
  // pieces are cut small here to show the loop, with a length that is not a multiple of them.
  test('writes every byte in pieces of at most the size given', () => {
    const { writeWhole } = require(path.join(root, 'dist/bench/files'));
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-write-whole-'));
    const file = path.join(dir, 'f');
    const data = Uint8Array.from({ length: 5003 }, (_, i) => (i * 7) % 251);
    const fd = fs.openSync(file, 'w');
    const writeSync = fs.writeSync;
    const lengths = [];
    fs.writeSync = (...a) => (lengths.push(a[3]), writeSync(...a));
    try {
      writeWhole(fd, data, 1000);
    } finally {
      fs.writeSync = writeSync;
      fs.closeSync(fd);
    }
    expect(lengths).toEqual([1000, 1000, 1000, 1000, 1000, 3]);
    expect(Buffer.compare(fs.readFileSync(file), Buffer.from(data))).toBe(0);
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

  test('the read paths take turns: every row has its passes, and progress follows the plan', async () => {
    const labels = [];
    const report = await run({ iterations: 3, onProgress: (done, total, label) => labels.push(label) });
    for (const r of report.results.filter((x) => x.direction === 'read' && x.mode !== 'link')) expect(r.samples).toHaveLength(3);
    expect(labels.slice(0, 6)).toEqual(['storage-cold', 'library-cold', 'naive-cold', 'storage-warm', 'library-warm', 'naive-warm']);
    const lib = report.results.find((r) => r.mode === 'library-cold');
    expect(typeof lib.direct).toBe('boolean');
    expect(report.results.find((r) => r.mode === 'naive-cold').direct).toBeUndefined();
  });
});

'use strict';
// The staged path's settings (configureStaging, saved settings applied at load), the benchmark's
// staged-path rows and the tuning script's refusals; no GPU needed. The pipeline itself is tested
// without a GPU in native/core/test/transfer/staging_pipeline_test.cc and with one below.
const fs = require('fs');
const path = require('path');
const { execFileSync, spawnSync } = require('child_process');
const { cm, bench, root, describeGpu, randomBytes, rng, same, tempDir } = require('../helpers');
const { formatTable, formatCsv, renderHtml, stagedTable } = require(path.join(root, 'dist/report/bench'));
const { addLimits } = require(path.join(root, 'dist/bench/transfer'));
const { sampleReport } = require('../fixtures/sample-report');

const KiB = 1024;
const MiB = 1024 * KiB;

function tmpFile(name) {
  return path.join(tempDir('cm-staging-'), name);
}

describe('configureStaging', () => {
  let before;
  beforeAll(() => {
    before = cm.configureStaging();
  });
  afterAll(() => {
    cm.configureStaging({
      chunkBytes: null,
      firstChunkBytes: null,
      lastChunkBytes: null,
      slots: null,
      threads: null,
      streaming: null,
      autoThreshold: null,
    });
  });

  test('reports the settings in force, thresholds per direction', () => {
    expect(before).toEqual({
      chunkBytes: 8 * MiB,
      firstChunkBytes: 512 * KiB,
      lastChunkBytes: 512 * KiB,
      slots: 8,
      ringBytes: 64 * MiB,
      threads: expect.any(Number),
      streaming: 'auto',
      autoThreshold: { h2d: expect.any(Number), d2h: expect.any(Number) },
    });
    expect(before.threads).toBeGreaterThanOrEqual(1);
    expect(before.threads).toBeLessThanOrEqual(12);
  });

  test('changes each field, and null brings one back to its default', () => {
    const now = cm.configureStaging({ firstChunkBytes: 128 * KiB, autoThreshold: { d2h: 3 * MiB }, slots: 5 });
    expect(now.firstChunkBytes).toBe(128 * KiB);
    expect(now.slots).toBe(5);
    expect(now.ringBytes).toBe(5 * 8 * MiB); // derived from the shape
    expect(now.autoThreshold).toEqual({ h2d: before.autoThreshold.h2d, d2h: 3 * MiB });
    const back = cm.configureStaging({ firstChunkBytes: null, autoThreshold: { d2h: null }, slots: null });
    expect(back).toEqual(before);
    expect(cm.configureStaging({ lastChunkBytes: 256 * KiB, streaming: false })).toMatchObject({
      lastChunkBytes: 256 * KiB,
      streaming: false,
    });
    expect(cm.configureStaging({ streaming: true }).streaming).toBe(true);
    expect(cm.configureStaging({ streaming: 'auto' }).streaming).toBe('auto');
    expect(cm.configureStaging({ lastChunkBytes: null, streaming: null })).toEqual(before);
  });

  test('the first and last chunks are never reported larger than a slot', () => {
    expect(cm.configureStaging({ chunkBytes: 256 * KiB, firstChunkBytes: MiB, lastChunkBytes: 2 * MiB })).toMatchObject({
      firstChunkBytes: 256 * KiB,
      lastChunkBytes: 256 * KiB,
    });
    cm.configureStaging({ chunkBytes: null, firstChunkBytes: null, lastChunkBytes: null });
  });

  test('refuses what it cannot use, naming the field', () => {
    expect(() => cm.configureStaging({ firstChunkBytes: 4096 })).toThrow(/firstChunkBytes/);
    expect(() => cm.configureStaging({ lastChunkBytes: 2 ** 31 })).toThrow(
      /an integer from 65536 to 1073741824 for settings\.lastChunkBytes/,
    );
    expect(() => cm.configureStaging({ chunkBytes: 2 ** 31 })).toThrow(/an integer from 65536 to 1073741824 for settings\.chunkBytes/);
    expect(() => cm.configureStaging({ slots: 65 })).toThrow(/an integer from 2 to 64 for settings\.slots/);
    expect(() => cm.configureStaging({ autoThreshold: 5 })).toThrow(/settings\.autoThreshold/);
    expect(() => cm.configureStaging({ autoThreshold: { h2d: -1 } })).toThrow(/autoThreshold\.h2d/);
    expect(() => cm.configureStaging({ streaming: 'yes' })).toThrow(/true, false or 'auto' for settings\.streaming/);
    expect(cm.configureStaging()).toEqual(before);
  });
});

describe('saved staging settings', () => {
  const env = { ...process.env };
  afterEach(() => {
    process.env = { ...env };
    cm.configureStaging({ autoThreshold: null, slots: null, firstChunkBytes: null });
  });

  test('the file is CUDA_MEMORY_STAGING_FILE, else under XDG_CONFIG_HOME, and none when the variable is empty', () => {
    process.env.CUDA_MEMORY_STAGING_FILE = 'rel/staging.json';
    expect(cm.stagingSettingsPath()).toBe(path.resolve('rel/staging.json'));
    delete process.env.CUDA_MEMORY_STAGING_FILE;
    process.env.XDG_CONFIG_HOME = '/cfg';
    expect(cm.stagingSettingsPath()).toBe('/cfg/cuda-memory/staging.json');
    process.env.CUDA_MEMORY_STAGING_FILE = '';
    expect(cm.stagingSettingsPath()).toBeUndefined();
    expect(() => cm.saveStagingSettings({ slots: 3 }, {})).toThrow(/nowhere to save/);
  });

  test('save then load applies them; a missing file is no settings', () => {
    const file = tmpFile('staging.json');
    expect(cm.loadStagingSettings(file)).toBeUndefined();
    const measuredOn = { date: 'd', gpu: 'g', cpu: 'c', cpus: 1, hostname: 'h' };
    cm.saveStagingSettings({ slots: 6, firstChunkBytes: 256 * KiB, autoThreshold: { h2d: 768 * KiB, d2h: 2 * MiB } }, measuredOn, file);
    const saved = JSON.parse(fs.readFileSync(file, 'utf8'));
    expect(saved).toMatchObject({ schema: 'cuda-memory/staging-settings@1', measuredOn });
    const inForce = cm.loadStagingSettings(file);
    expect(inForce).toMatchObject({ slots: 6, firstChunkBytes: 256 * KiB, autoThreshold: { h2d: 768 * KiB, d2h: 2 * MiB } });
    expect(cm.configureStaging()).toEqual(inForce);
  });

  test('save checks every argument before writing: nothing is written that a load would warn about', () => {
    const file = tmpFile('staging.json');
    const measuredOn = { date: 'd', gpu: 'g', cpu: 'c', cpus: 1, hostname: 'h' };
    const refused = [
      [['x', 'y', file], 'ERR_INVALID_ARG_TYPE', /settings/],
      [[null, measuredOn, file], 'ERR_INVALID_ARG_TYPE', /settings/],
      [[{ slots: 1000 }, measuredOn, file], 'ERR_OUT_OF_RANGE', /settings\.slots/],
      [[{ threads: 0 }, measuredOn, file], 'ERR_OUT_OF_RANGE', /settings\.threads/],
      [[{ chunkBytes: 2 ** 31 }, measuredOn, file], 'ERR_OUT_OF_RANGE', /settings\.chunkBytes/],
      [[{ streaming: 'yes' }, measuredOn, file], 'ERR_INVALID_ARG_TYPE', /settings\.streaming/],
      [[{ autoThreshold: { h2d: -1 } }, measuredOn, file], 'ERR_OUT_OF_RANGE', /settings\.autoThreshold\.h2d/],
      [[{ slots: 3 }, 'y', file], 'ERR_INVALID_ARG_TYPE', /measuredOn/],
      [[{ slots: 3 }, undefined, file], 'ERR_INVALID_ARG_TYPE', /measuredOn/],
      [[{ slots: 3 }, { ...measuredOn, cpus: NaN }, file], 'ERR_OUT_OF_RANGE', /measuredOn\.cpus/],
      [[{ slots: 3 }, { ...measuredOn, gpu: 5 }, file], 'ERR_INVALID_ARG_TYPE', /measuredOn\.gpu/],
      [[{ slots: 3 }, measuredOn, 5], 'ERR_INVALID_ARG_TYPE', /file/],
    ];
    for (const [args, code, message] of refused) {
      expect(() => cm.saveStagingSettings(...args)).toThrow(expect.objectContaining({ code, message: expect.stringMatching(message) }));
      expect(fs.existsSync(file)).toBe(false);
    }
    // Unknown fields are not written; what is written loads without a word.
    cm.saveStagingSettings({ slots: 5, colour: 'blue' }, measuredOn, file);
    expect(JSON.parse(fs.readFileSync(file, 'utf8')).settings).toEqual({ slots: 5 });
    const script = `process.on('warning', (w) => { console.log('warning: ' + w.message); }); require(${JSON.stringify(root)});`;
    const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', env: { ...process.env, CUDA_MEMORY_STAGING_FILE: file } });
    expect(r.stdout + r.stderr).toBe('');
    cm.configureStaging({ slots: null });
  });

  test('a broken or foreign file throws with its name', () => {
    const file = tmpFile('staging.json');
    fs.writeFileSync(file, '{not json');
    expect(() => cm.loadStagingSettings(file)).toThrow(new RegExp(`cannot read staging settings from ${file}`));
    fs.writeFileSync(file, JSON.stringify({ schema: 'other', settings: {} }));
    expect(() => cm.loadStagingSettings(file)).toThrow(/is not a staging settings file/);
    fs.writeFileSync(file, JSON.stringify({ schema: 'cuda-memory/staging-settings@1', settings: { slots: 1000 } }));
    expect(() => cm.loadStagingSettings(file)).toThrow(/were not applied: .*slots/);
  });

  test('every load of the package applies them; a bad file is a warning, not a failed require', () => {
    const file = tmpFile('staging.json');
    cm.saveStagingSettings({ autoThreshold: { h2d: 3 * MiB } }, { date: 'd', gpu: 'g', cpu: 'c', cpus: 1, hostname: 'h' }, file);
    const script = `const cm = require(${JSON.stringify(root)}); process.stdout.write(JSON.stringify(cm.configureStaging().autoThreshold))`;
    const out = execFileSync(process.execPath, ['-e', script], { env: { ...process.env, CUDA_MEMORY_STAGING_FILE: file } });
    expect(JSON.parse(out.toString()).h2d).toBe(3 * MiB);
    fs.writeFileSync(file, 'garbage');
    const r = spawnSync(process.execPath, ['-e', script], { env: { ...process.env, CUDA_MEMORY_STAGING_FILE: file } });
    expect(r.status).toBe(0);
    expect(r.stderr.toString()).toMatch(/CUDA_MEMORY_STAGING_SETTINGS.*cannot read staging settings/s);
  });
});

describe('benchmark rows of the staged path', () => {
  // The sample report plus what a staged run adds: staged, auto, hostcopy and staged-dma rows, and
  // the limits the benchmark gives staged and auto (here staged-dma's, the lowest).
  function stagedReport({ dma = true } = {}) {
    const r = sampleReport();
    const big = 256 * MiB;
    const row = (mode, direction, gbps, extra = {}) => {
      const base = r.results.find((x) => x.mode === 'pinned' && x.bytes === big);
      const samples = base.samples.map((s) => (s * base.gbps.median) / gbps);
      return {
        ...base,
        mode,
        direction,
        timing: 'steady-clock',
        samples,
        seconds: bench.summarize(samples),
        gbps: bench.summarize(samples.map((t) => big / t / 1e9)),
        ...extra,
      };
    };
    r.environment.staging = {
      chunkBytes: 8 * MiB,
      firstChunkBytes: 512 * KiB,
      slots: 8,
      threads: 12,
      streaming: true,
      autoThreshold: { h2d: MiB, d2h: 512 * KiB },
    };
    r.results.push(row('hostcopy', 'h2d', 63));
    if (dma) r.results.push(row('staged-dma', 'h2d', 51.5));
    r.results.push(row('staged', 'h2d', 49.05));
    r.results.push(row('auto', 'h2d', 48.5, { path: 'staged' }));
    addLimits(r.results);
    return r;
  }

  test('the limit of a staged or auto row is the lowest of pinned, hostcopy and staged-dma', () => {
    const median = (rows, mode) => rows.find((x) => x.mode === mode && x.direction === 'h2d' && x.bytes === 256 * MiB).gbps.median;
    const rows = stagedReport().results;
    const dma = median(rows, 'staged-dma');
    expect(dma).toBeLessThan(Math.min(median(rows, 'pinned'), median(rows, 'hostcopy')));
    for (const mode of ['staged', 'auto']) {
      const r = rows.find((x) => x.mode === mode && x.direction === 'h2d');
      expect(r.limitGbps).toBe(dma);
      expect(r.shareOfLimit).toBeCloseTo(r.gbps.median / dma, 12);
    }
    // Without staged-dma rows (an older report, or hostcopy: false): the lower of the other two.
    const without = stagedReport({ dma: false }).results;
    expect(without.find((x) => x.mode === 'staged').limitGbps).toBe(median(without, 'pinned'));
  });

  test('the table names the path auto took and each staged figure as a share of its limit', () => {
    const table = formatTable(stagedReport());
    expect(table).toMatch(/chunks 512 KiB to 8 MiB x8, 12 threads; auto stages h2d from 1 MiB, d2h from 512 KiB/);
    expect(table).toMatch(/h2d\s+staged\s+256 MiB\s+49\.05.*95% of limit 51\.50/);
    expect(table).toMatch(/h2d\s+auto\s+256 MiB\s+48\.50.*path staged, 94% of limit 51\.50/);
    expect(table).toMatch(/h2d\s+hostcopy\s+256 MiB\s+63\.00/);
    expect(table).toMatch(/h2d\s+staged-dma\s+256 MiB\s+51\.50/);
  });

  test('stagedTable puts pageable, staged, auto, pinned, hostcopy and staged-dma side by side', () => {
    const t = stagedTable(stagedReport());
    expect(t.head).toEqual([
      'direction',
      'size',
      'pageable',
      'staged',
      'auto',
      'pinned',
      'hostcopy',
      'staged-dma',
      'staged/pinned',
      'staged/limit',
      'staged/pageable',
    ]);
    expect(t.rows).toEqual([['h2d', '256 MiB', '7.70', '49.05', '48.50', '54.53', '63.00', '51.50', '90%', '95%', '6.4x']]);
    const html = renderHtml(stagedReport());
    expect(html).toContain('staged path against its limit');
    expect(html).toContain('<th>staged-dma</th>');
    expect(html).toMatch(/<td>63\.00<\/td><td>51\.50<\/td><td>90%<\/td><td>95%<\/td>/);
    expect(stagedTable(sampleReport()).rows).toEqual([]);
  });

  test('CSV carries the path, the limit and the share', () => {
    const csv = formatCsv(stagedReport()).trim().split('\n');
    expect(csv[0]).toContain('path,limit_gbps,share_of_limit,verified');
    expect(csv.find((l) => l.startsWith('h2d,auto,'))).toMatch(/,staged,51\.5\d*,0\.94174757\d*,true,/);
  });
});

describe('scripts/tune-staging.js', () => {
  test('says what it cannot do without a GPU, or refuses an unknown flag', () => {
    const r = spawnSync(process.execPath, [path.join(__dirname, '..', '..', 'scripts', 'tune-staging.js'), '--bogus'], {
      env: process.env,
    });
    expect(r.status).toBe(2);
    expect(r.stderr.toString()).toMatch(/unknown argument "--bogus"|CUDA is not available/);
  });
});

describe('scripts/staged-timeline.js', () => {
  const script = path.join(__dirname, '..', '..', 'scripts', 'staged-timeline.js');
  const { parseTimelines, summarize, render, splitRuns } = require(script);
  // Copies as the addon prints them: two from the device, a third cut short, two to it (the
  // second with a first piece that never happened, printed as INT64_MAX nanoseconds / 1000).
  const d2h = (total, landed) =>
    `cuda-memory staged d2h: 2 chunks, ${total} us\n` +
    `  chunk 0 (524288 bytes): issue 0.9..2.6, wait 2.7..17.4, pieces 17.5..26.4\n` +
    `  chunk 1 (1048576 bytes): issue 2.7..4.6, wait 26.5..${landed}, pieces ${landed + 0.2}..${landed + 6}\n`;
  const h2d = (total, issued) =>
    `cuda-memory staged h2d: 2 chunks, ${total} us\n` +
    `  chunk 0 (524288 bytes): issue 8.0..${issued}, wait -1.0..-1.0, pieces 1.2..7.9\n` +
    `  chunk 1 (1048576 bytes): issue 30.0..33.0, wait -1.0..-1.0, pieces 5.0..29.5\n`;
  const text =
    d2h(50, 38) +
    'unrelated line\n' +
    d2h(54, 40) +
    'cuda-memory staged d2h: 2 chunks, 9.0 us\n  chunk 0 (524288 bytes): issue 0.9..2.6, wait 2.7..17.4, pieces 17.5..26.4\n' +
    h2d(60, 11) +
    'cuda-memory staged h2d: 1 chunks, 30.0 us\n  chunk 0 (65536 bytes): issue 5.0..7.5, wait -1.0..-1.0, pieces 9223372036854775.8..-1.0\n';

  test('reads each whole copy, and a time that never happened as null', () => {
    const copies = parseTimelines(text);
    expect(copies.map((c) => [c.direction, c.total, c.chunks.length])).toEqual([
      ['d2h', 50, 2],
      ['d2h', 54, 2],
      ['h2d', 60, 2],
      ['h2d', 30, 1],
    ]);
    expect(copies[3].chunks[0]).toEqual({
      bytes: 65536,
      issuing: 5,
      issued: 7.5,
      waiting: null,
      landed: null,
      firstPiece: null,
      lastPiece: null,
    });
  });

  test('from the device: medians per chunk, the first landing, and the way out after the last', () => {
    const s = summarize(parseTimelines(text).filter((c) => c.direction === 'd2h'));
    expect(s).toMatchObject({ direction: 'd2h', copies: 2, otherPlans: 0, total: 50, firstLanded: 17.4, lastLanded: 38, allOut: 44 });
    expect(s.allOutAfterLastLanding).toBeCloseTo(6, 9);
    expect(s.returnAfterAllOut).toBeCloseTo(6, 9);
    expect(render('d2h 1.5 MiB', s)).toMatch(
      /d2h 1\.5 MiB: 2 chunks, 50\.0 us \(median of 2 copies\)[\s\S]*1024 KiB +2\.7\.\.4\.6 +38\.0 +38\.2\.\.44\.0[\s\S]*first chunk landed 17\.4; last landed 38\.0, all out of the ring 6\.0 later, the copy done 6\.0 after that/,
    );
    expect(summarize([])).toBeNull();
  });

  test('to the device: the first chunk in the ring and issued, and the rest after the last issue', () => {
    const up = parseTimelines(text + h2d(70, 13)).filter((c) => c.direction === 'h2d');
    const s = summarize(up);
    // The one-chunk copy is another plan; of the two left, the lower median.
    expect(s).toMatchObject({ copies: 2, otherPlans: 1, total: 60, firstInRing: 7.9, firstIssued: 11, lastIssued: 33, afterLastIssue: 27 });
    expect(render('h2d 1.5 MiB', s)).toMatch(
      /h2d 1\.5 MiB: 2 chunks, 60\.0 us \(median of 2 copies; 1 of another plan left out\)[\s\S]*512 KiB +8\.0\.\.11\.0 +- +1\.2\.\.7\.9[\s\S]*first chunk in the ring 7\.9, its issue returned 11\.0; the last chunk's 33\.0, the copy done 27\.0 later/,
    );
  });

  test('copies of another plan are counted and left out', () => {
    const other =
      'cuda-memory staged d2h: 1 chunks, 70.0 us\n  chunk 0 (1572864 bytes): issue 0.9..2.6, wait 2.7..40.0, pieces 40.1..60.0\n';
    const s = summarize(parseTimelines(text + other).filter((c) => c.direction === 'd2h'));
    expect([s.copies, s.otherPlans, s.chunks.length]).toEqual([2, 1, 2]);
  });

  test("the child's stderr is cut into its timed runs, warm-up copies and other runs left out", () => {
    // One direction, two sizes: the second size's warm-up copy comes between the two runs.
    const warm16 = d2h(300, 290);
    const stderr =
      d2h(99, 98) +
      'staged-timeline: begin d2h 4194304\n' +
      d2h(50, 38) +
      d2h(54, 40) +
      'staged-timeline: end\n' +
      warm16 +
      'staged-timeline: begin d2h 16777216\n' +
      d2h(350, 340) +
      'staged-timeline: end\n' +
      'staged-timeline: begin h2d 1\n' +
      d2h(1, 1);
    const runs = splitRuns(stderr);
    expect(runs.map((r) => [r.direction, r.bytes, parseTimelines(r.text).map((c) => c.total)])).toEqual([
      ['d2h', 4194304, [50, 54]],
      ['d2h', 16777216, [350]],
      ['h2d', 1, []], // cut short: no end line
    ]);
  });

  test('refuses an unknown flag, a missing or bad value, a bad direction or size, each named', () => {
    for (const args of [
      ['--bogus'],
      ['--copies', '0'],
      ['--directions', 'up'],
      ['--directions', 'd2h,d2h'],
      ['--sizes', '0'],
      ['--sizes', 'lots'],
      ['--sizes', '--json'],
      ['--last-chunk', 'half'],
      ['--threads'],
    ]) {
      const r = spawnSync(process.execPath, [script, ...args], { encoding: 'utf8' });
      expect({ args, status: r.status, stderr: r.stderr }).toEqual({
        args,
        status: 2,
        stderr: expect.stringMatching(/^staged-timeline: \S.*\n$/),
      });
    }
  });

  // (With a GPU, the test below runs it.)
  (cm.status().available ? test.skip : test)(
    `says so, with exit status 2, where CUDA is not available${cm.status().available ? ' — skipped: CUDA is available here' : ''}`,
    () => {
      const r = spawnSync(process.execPath, [script, '--copies', '3'], { encoding: 'utf8' });
      expect([r.status, r.stderr]).toEqual([2, expect.stringMatching(/^staged-timeline: CUDA is not available: /)]);
    },
  );
});

describeGpu('scripts/staged-timeline.js on the GPU', () => {
  test('prints a coherent median timeline for each size and direction, from the traces of real copies', () => {
    const out = execFileSync(
      process.execPath,
      [
        path.join(__dirname, '..', '..', 'scripts', 'staged-timeline.js'),
        '--sizes',
        '1MiB,4MiB',
        '--copies',
        '20',
        '--warmup',
        '2',
        '--json',
      ],
      { encoding: 'utf8' },
    );
    const { settings, timelines } = JSON.parse(out);
    expect(timelines.map((t) => [t.direction, t.bytes, t.copies + t.otherPlans])).toEqual([
      ['d2h', MiB, 20],
      ['h2d', MiB, 20],
      ['d2h', 4 * MiB, 20],
      ['h2d', 4 * MiB, 20],
    ]);
    for (const t of timelines) {
      expect(t.chunks.reduce((a, c) => a + c.bytes, 0)).toBe(t.bytes);
      expect(t.chunks[0].bytes).toBe(Math.min(settings.firstChunkBytes, t.bytes));
    }
    for (const [down, up] of [timelines.slice(0, 2), timelines.slice(2)]) {
      // From the device: a chunk's pieces leave the ring after it lands, and the copy ends after.
      for (const c of down.chunks) expect(c.firstPiece).toBeGreaterThanOrEqual(c.landed);
      expect(down.allOut).toBeGreaterThan(down.lastLanded);
      expect(down.total).toBeGreaterThanOrEqual(down.allOut);
      // To the device: a chunk is issued once its pieces are in the ring.
      for (const c of up.chunks) expect(c.issuing).toBeGreaterThanOrEqual(c.lastPiece);
      expect(up.firstIssued).toBeGreaterThan(up.firstInRing);
      expect(up.total).toBeGreaterThan(up.lastIssued);
    }
  });
});

describeGpu('staged copies one after another go round the ring', () => {
  afterAll(() => cm.configureStaging({ chunkBytes: null, slots: null, firstChunkBytes: null, lastChunkBytes: null }));
  test('a small ring (3 x 1 MiB): copies that wrap it, within a copy and between copies, arrive intact', () => {
    cm.configureStaging({ chunkBytes: MiB, slots: 3, firstChunkBytes: 64 * KiB, lastChunkBytes: 64 * KiB });
    const sizes = [5 * KiB, 3 * MiB - 4096, 700 * KiB + 3, 10 * MiB + 77, 1, 2 * MiB, 4 * MiB + 5, 64 * KiB];
    for (const [i, n] of sizes.entries()) {
      const src = randomBytes(n, 100 + i);
      const dev = cm.DeviceBuffer.alloc(n);
      try {
        cm.copy(dev, src, { strategy: 'staged' });
        const back = new Uint8Array(n);
        cm.copy(back, dev, { strategy: 'staged' });
        expect({ n, same: same(back, src) }).toEqual({ n, same: true });
      } finally {
        dev.free();
      }
    }
  });
});

describeGpu('staged copies at sizes around every chunk boundary', () => {
  test('both directions and both at once arrive intact with the default settings', async () => {
    const s = cm.configureStaging();
    const sizes = [1, 4095, 64 * KiB - 1, s.firstChunkBytes, s.firstChunkBytes + 1, 3 * s.firstChunkBytes + 4097, s.chunkBytes * 3 + 12345];
    for (const n of sizes) {
      const src = randomBytes(n, n);
      const dev = cm.DeviceBuffer.alloc(n);
      const dev2 = cm.DeviceBuffer.alloc(n);
      try {
        cm.copy(dev, src, { strategy: 'staged' });
        const back = new Uint8Array(n);
        cm.copy(back, dev, { strategy: 'staged' });
        expect(same(back, src)).toBe(true);
        // Both directions at once share the team.
        const down = new Uint8Array(n);
        const src2 = randomBytes(n, n + 1);
        cm.copy(dev2, src2);
        await Promise.all([cm.copyAsync(dev, src2, { strategy: 'staged' }), cm.copyAsync(down, dev2, { strategy: 'staged' })]);
        expect(same(down, src2)).toBe(true);
        cm.copy(back, dev);
        expect(same(back, src2)).toBe(true);
      } finally {
        dev.free();
        dev2.free();
      }
    }
  });
});

describeGpu('the first staged copy on a full device', () => {
  // The staging engine is made by the first staged copy; on a full device its stream cannot be
  // had, and a copy under 'auto' must not fail for it (in a child process, which fills the
  // device and gives it all back on exit).
  test('copy() and copyAsync() of 4 MiB pageable each way arrive byte for byte', () => {
    const r = spawnSync(process.execPath, [path.join(__dirname, '..', 'fixtures', 'full-device-copy.js')], {
      encoding: 'utf8',
      timeout: 120000,
    });
    expect({ signal: r.signal, status: r.status, stderr: r.stderr }).toEqual({ signal: null, status: 0, stderr: '' });
    expect(JSON.parse(r.stdout)).toEqual({ full: true, copy: 'same bytes', copyAsync: 'same bytes' });
  });
});

describeGpu('staged path', () => {
  test('byte-exact on random sizes and offsets, both directions', () => {
    const rand = rng(77);
    const d = cm.DeviceBuffer.alloc(64 * MiB + 8192);
    const host = Buffer.from(randomBytes(64 * MiB + 8192, 31));
    const back = Buffer.alloc(64 * MiB + 8192);
    for (let i = 0; i < 40; i++) {
      const n = i < 5 ? [1, 255, 4097, (1 << 20) - 1, 16 * MiB + 3][i] : 1 + rand(64 * MiB);
      const so = rand(4096);
      const dof = rand(4096);
      cm.copy(d, host, { srcOffset: so, dstOffset: dof, byteLength: n, strategy: 'staged' });
      back.fill(0);
      cm.copy(back, d, { srcOffset: dof, dstOffset: so, byteLength: n, strategy: 'staged' });
      expect(Buffer.compare(back.subarray(so, so + n), host.subarray(so, so + n))).toBe(0);
    }
    d.free();
  });

  test('configureStaging changes the pipeline and keeps it correct', () => {
    const old = cm.configureStaging();
    const now = cm.configureStaging({ chunkBytes: 1 * MiB, slots: 3, threads: 2 });
    expect([now.chunkBytes, now.slots, now.threads]).toEqual([MiB, 3, 2]);
    const d = cm.DeviceBuffer.alloc(10 * MiB + 5);
    const h = Buffer.from(randomBytes(10 * MiB + 5, 3));
    cm.copy(d, h, { strategy: 'staged' });
    const b = Buffer.alloc(h.length);
    cm.copy(b, d, { strategy: 'staged' });
    expect(b.equals(h)).toBe(true);
    cm.configureStaging({ chunkBytes: old.chunkBytes, slots: old.slots, threads: old.threads });
    expect(() => cm.configureStaging({ chunkBytes: 100 })).toThrow(/chunkBytes/);
    d.free();
  });
});

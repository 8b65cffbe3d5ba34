'use strict';
// The command line's exit codes, as the README gives them: 0 success, 1 a failed gate or check,
// 2 a usage error or no CUDA; arguments and output paths are checked before CUDA is needed, and
// binary input is described, never echoed.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { root } = require('../helpers');

const cli = path.join(root, 'dist', 'cli.js');
const run = (...args) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 60000 });
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-memory-cli-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

describe('exit codes', () => {
  test.each([
    [['--help'], 0],
    [['--version'], 0],
    [[], 2],
    [['no-such-command'], 2],
    [['bench', '--sizes', 'many'], 2],
    [['bench', '--html', '/nonexistent/dir/report.html'], 2],
    [['bench', '--junit', '/nonexistent/dir/r.xml'], 2],
    [['doctor', '--prometheus', '/nonexistent/dir/d.prom'], 2],
    [['memory-html', 'trace.json', '--out', '/nonexistent/dir/x.html'], 2],
  ])('cuda-memory %j exits %i', (args, code) => {
    const r = run(...args);
    expect(r.status).toBe(code);
    if (code === 2 && args.length) expect(r.stderr).toMatch(/^cuda-memory: /);
  });

  test('an output folder that does not exist is named before anything runs', () => {
    const r = run('memory-html', 'trace.json', '--out', '/nonexistent/dir/x.html');
    expect(r.stderr).toContain('The folder /nonexistent/dir does not exist');
    expect(r.stderr).not.toMatch(/ENOENT|at .*\.js/);
  });

  test('replay of a binary file says what it is and echoes none of it', () => {
    const file = path.join(tmp, 'snapshot.pickle');
    fs.writeFileSync(file, Buffer.from([0x80, 0x04, 0x95, 0x00, 0x1b, 0x5b, 0x32, 0x4a, 0x07, 0x41, 0x42]));
    const r = run('replay', file);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('is a binary file (11 bytes, starting 0x80 0x04 0x95 0x00)');
    expect(r.stderr + r.stdout).not.toContain('\x1b[2J');
    expect(r.stderr + r.stdout).not.toContain('\x07');
  });

  test('replay of JSON cut short names the position, not the text around it', () => {
    const file = path.join(tmp, 'cut.json');
    fs.writeFileSync(file, '{"schema": "cuda-memory/trace@1", "events": [{"action": "al');
    const r = run('replay', file);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/is not valid JSON \((at byte \d+|it ends early or holds a stray character)\)/);
    expect(r.stderr).not.toContain('"al');
  });
});

describe('what the command line reads is bounded', () => {
  const { readBounded } = require(path.join(root, 'dist', 'base', 'files'));

  test('a device that never ends is refused once it passes the bound', () => {
    expect(readBounded('/dev/zero', 1 << 20)).toEqual({ ok: false, size: null });
  });

  test('a file larger than the bound is refused with its size, unread; one within it is read whole', () => {
    const file = path.join(tmp, 'big.json');
    fs.writeFileSync(file, 'x'.repeat(5000));
    expect(readBounded(file, 4999)).toEqual({ ok: false, size: 5000 });
    const r = readBounded(file, 5000);
    expect(r.ok && r.bytes.length).toBe(5000);
  });

  test('replay /dev/zero stops at once with exit 2', () => {
    const t0 = Date.now();
    const r = run('replay', '/dev/zero');
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('/dev/zero is a binary file (not a regular file');
    expect(Date.now() - t0).toBeLessThan(20000);
  });

  test('replay and memory-html --help state the bound', () => {
    for (const cmd of ['replay', 'memory-html']) expect(run(cmd, '--help').stdout).toContain('A trace file is read up to 512 MiB');
  });
});

describe('rough edges', () => {
  // A trace that names its device, and one that does not.
  const events = [
    { action: 'alloc', id: 1, bytes: 2 ** 20, time: 0 },
    { action: 'free', id: 1, time: 1 },
  ];
  const sized = path.join(tmp, 'sized.json');
  const unsized = path.join(tmp, 'unsized.json');
  const pytorch = path.join(__dirname, '..', 'fixtures', 'pytorch-trace.json');
  fs.writeFileSync(sized, JSON.stringify({ schema: 'cuda-memory/trace@1', device: { totalBytes: 2 ** 30 }, events }));
  fs.writeFileSync(unsized, JSON.stringify({ schema: 'cuda-memory/trace@1', events }));

  test.each([
    [['memory-html', sized, '--out', ''], /--out .*Expected a file name/],
    [['memory-html', sized, '--out', '/proc/version'], /cannot write \/proc\/version|The folder \/proc is not writable/],
    [['replay', unsized], /give one with --device-memory/],
    [
      ['replay', pytorch, '--policy', 'growth'],
      /a PyTorch trace \(torch.cuda.memory._snapshot\(\)\) does not record its device's size: add --device-memory/,
    ],
    [['replay', sized, '--policy', 'growth,limit=0'], /limit of at least 256 bytes/],
    [['replay', sized, '--policy', 'growth,limit=-1GiB'], /policy/],
    [['replay', sized, '--policy', 'prealloc,fraction=2'], /Expected fraction in \(0, 1\]/],
    [['top', '--count', '3'], /--count counts the refreshes of --watch/],
    [['top', 'extra'], /too many arguments for 'top'/],
    [['info', 'extra'], /too many arguments for 'info'/],
    [['replay', sized, 'extra'], /too many arguments for 'replay'/],
    [['bench', '--warmup', '1e9'], /Expected an integer from 0 to 1,000\./],
    [['bench', '--iterations', '1e9'], /Expected an integer from 10 to 100,000\./],
    [['bench-alloc', '--pairs', '1e12'], /Expected an integer from 1 to 1,000,000\./],
    [['bench', '--devices', 'all', '--chunk', '1MiB'], /--chunk is for the one-GPU benchmark/],
    [['bench', '--chart', '--json'], /'--chart' cannot be used with option '--json'/],
    [['memory-html', sized, '--out', path.join(tmp, 'x.html'), '--device-memory', '1GiB'], /give a --policy too/],
    [['help', 'nosuch'], /help: no command "nosuch"; the commands are info, bench, /],
  ])('cuda-memory %j is a usage error (exit 2)', (args, message) => {
    const r = run(...args);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^cuda-memory: /);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  test("help <command> prints that command's help and exits 0", () => {
    const r = run('help', 'replay');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('Usage: cuda-memory replay');
  });

  test('bench --help names the hostcopy and staged-dma rows; replay --help lists expandable', () => {
    const help = run('bench', '--help').stdout;
    expect(help).toMatch(/"hostcopy" whenever staged or auto is measured/);
    expect(help).toMatch(/"staged-dma" \(h2d, d2h\): the staged path's own chunks/);
    expect(run('replay', '--help').stdout).toMatch(/growth, prealloc or expandable/);
  });

  test('without CUDA, bench --json prints a JSON report saying why, as doctor --json does, and exits 2', () => {
    const env = { ...process.env, CUDA_MEMORY_ADDON: path.join(tmp, 'no-such-addon.node') };
    for (const args of [
      ['bench', '--json'],
      ['bench', '--p2p', '--json'],
      ['doctor', '--json'],
    ]) {
      const r = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 60000, env });
      expect([args, r.status]).toEqual([args, 2]);
      const report = JSON.parse(r.stdout);
      expect(report.ok === false || report.available === false).toBe(true);
      if (args[0] === 'bench') expect(report).toMatchObject({ available: false, reason: 'ADDON_NOT_LOADED', gates: [] });
    }
  });

  test('without CUDA, bench --junit, --prometheus and --html write a failure that says why, and bench-alloc --json a report; exit 2', () => {
    const env = { ...process.env, CUDA_MEMORY_ADDON: path.join(tmp, 'no-such-addon.node') };
    for (const extra of [[], ['--p2p']]) {
      const junit = path.join(tmp, `nocuda${extra.length}.xml`);
      const prom = path.join(tmp, `nocuda${extra.length}.prom`);
      const html = path.join(tmp, `nocuda${extra.length}.html`);
      const r = spawnSync(process.execPath, [cli, 'bench', ...extra, '--junit', junit, '--prometheus', prom, '--html', html], {
        encoding: 'utf8',
        timeout: 60000,
        env,
      });
      expect(r.status).toBe(2);
      expect(r.stderr).toMatch(/^cuda-memory bench: CUDA is not available \(ADDON_NOT_LOADED\)/);
      const xml = fs.readFileSync(junit, 'utf8');
      expect(xml).toContain('<testsuites tests="1" failures="1"');
      expect(xml).toMatch(
        /<testcase classname="bench" name="CUDA available" time="0.000000"><failure message="CUDA is not available \(ADDON_NOT_LOADED\): /,
      );
      const text = fs.readFileSync(prom, 'utf8');
      expect(text).toContain('cuda_memory_bench_available{reason="ADDON_NOT_LOADED"} 0\n');
      expect(text).toContain('cuda_memory_bench_ok 0\n');
      expect(text).toMatch(/cuda_memory_bench_last_run_timestamp_seconds \d+\n/);
      const page = fs.readFileSync(html, 'utf8');
      expect(page).toMatch(/^<!doctype html>/);
      expect(page).toContain('<strong>Not measured: CUDA is not available (ADDON_NOT_LOADED).</strong>');
      expect(page).toContain('the native addon could not be loaded');
    }
    const r = spawnSync(process.execPath, [cli, 'bench-alloc', '--json'], { encoding: 'utf8', timeout: 60000, env });
    expect(r.status).toBe(2);
    expect(JSON.parse(r.stdout)).toMatchObject({
      schema: 'cuda-memory/alloc-benchmark@1',
      available: false,
      reason: 'ADDON_NOT_LOADED',
      rows: [],
    });
    expect(r.stderr).toMatch(/CUDA is not available \(ADDON_NOT_LOADED\)/);
  });

  test('replay --find-min-limit says on stderr what it is doing', () => {
    const r = run('replay', sized, '--find-min-limit');
    expect(r.status).toBe(0);
    expect(r.stderr).toMatch(/finding the smallest limit: policy 1 of 2: about \d+ replays/);
    expect(r.stderr).toMatch(/policy 2 of 2/);
    expect(r.stdout).toMatch(/min limit/);
  });

  test('a file that cannot be written after the checks is a usage error naming it', () => {
    const { writeOutput } = require(path.join(root, 'dist', 'cli', 'common'));
    expect(() => writeOutput(path.join(tmp, 'no-such-folder', 'x'), 'text')).toThrow(
      /cannot write .*no-such-folder\/x: it does not exist \(ENOENT\); check the path/,
    );
  });
});

describe('a reader that stops early (`| head`, `| grep -q`)', () => {
  // The command's stdout is a pipe whose reader is already gone, so its first write fails with
  // EPIPE, whatever the timing (python3: os.pipe with its read end closed).
  const withClosedReader = (...args) =>
    spawnSync(
      'python3',
      [
        '-c',
        'import os, subprocess, sys\nr, w = os.pipe()\nos.close(r)\np = subprocess.run(sys.argv[1:], stdout=w, stderr=subprocess.PIPE)\nsys.stderr.write(p.stderr.decode())\nsys.exit(p.returncode)',
        process.execPath,
        cli,
        ...args,
      ],
      { encoding: 'utf8', timeout: 60000 },
    );

  test.each([[['--help']], [['info']], [['info', '--json']], [['help', 'bench']], [['top']]])(
    'cuda-memory %j ends quietly with status 0',
    (args) => {
      const r = withClosedReader(...args);
      expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: '' });
    },
  );
});

describe('top and a file of the shared folder it cannot read', () => {
  test('lists it as unreadable, with why, after the groups it could read, and exits 1, as its help says', () => {
    const shm = fs.mkdtempSync(path.join(tmp, 'shm-'));
    const env = { ...process.env, CUDA_MEMORY_SHM_DIR: shm };
    const code = `const cm = require('.');
      const a = cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true, shared: { name: 'fine', memoryLimit: 2 ** 26 } });
      require('fs').writeFileSync(require('path').join(${JSON.stringify(shm)}, 'cuda-memory-' + process.geteuid(), 'cuda-memory-group.damaged.simulated'), 'junk', { mode: 0o600 });
      const r = require('child_process').spawnSync(process.execPath, [${JSON.stringify(cli)}, 'top'], { encoding: 'utf8' });
      a.close();
      console.log(JSON.stringify({ status: r.status, stdout: r.stdout, stderr: r.stderr }));`;
    const r = JSON.parse(spawnSync(process.execPath, ['-e', code], { cwd: root, env, encoding: 'utf8' }).stdout);
    expect(r.status).toBe(1);
    expect(r.stderr).toBe('');
    expect(r.stdout).toMatch(/^group fine on simulated/);
    expect(r.stdout).toMatch(
      /\nunreadable .*cuda-memory-group\.damaged\.simulated: ERR_GROUP_LEDGER_CORRUPT: .*Remove it once no process uses it\.\n/,
    );
    expect(run('top', '--help').stdout.replace(/\s+/g, ' ')).toContain(
      'Exit status 1 where a file of the shared folder could not be read (a damaged or foreign ledger, say): each is listed as unreadable',
    );
    expect(run('--help').stdout.replace(/\s+/g, ' ')).toContain('(for top: a shared file it could not read)');
  });
});

describe('a file the command line cannot read or write', () => {
  // Each message names the file, the operation and what to do, in words (the errno name beside
  // them), never the system's bare text ("EISDIR: illegal operation on a directory, read").
  test.each([
    [['replay', '/tmp'], 'cannot read /tmp: it is a folder (EISDIR); name a file'],
    [['replay', '/nonexistent-trace.json'], 'cannot read /nonexistent-trace.json: it does not exist (ENOENT); check the path'],
    [['bench', '--expectations', '/tmp'], 'cannot read the expectation file /tmp: it is a folder (EISDIR); name a file'],
    [
      ['top', '--hpc-job-mapping-dir', '/etc/passwd'],
      'cannot write the HPC job mapping in /etc/passwd: something other than a folder is already there (EEXIST)',
    ],
    [
      // A short run where there is a GPU: the report is written (and refused) once it is measured.
      [
        'bench',
        '--sizes',
        '4KiB',
        '--modes',
        'pinned',
        '--directions',
        'h2d',
        '--iterations',
        '10',
        '--no-event-loop',
        '--out',
        '/dev/full',
      ],
      'cannot write /dev/full: its file system has no space left (ENOSPC); free space there, or choose another path',
    ],
    [
      ['bench-files', '--dir', '/proc', '--size', '4MiB'],
      '--dir "/proc": no file can be made in it (ENOENT); choose a folder on the storage to measure',
    ],
  ])('cuda-memory %j', (args, message) => {
    const r = run(...args);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(message);
    expect(r.stderr).not.toMatch(/E[A-Z]+: [a-z]/);
  });
});

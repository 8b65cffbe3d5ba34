'use strict';
// `cuda-memory run`: the environment the program is started with, its exit code and signals, the
// usage errors, and the program as a group member (pid, command, bytes) in groupStats, top and the
// Prometheus gauges. Without a GPU the group lives on a simulated device (--simulate), where no
// interposer is preloaded and the program joins through this library; on a GPU the interposer
// is preloaded (test/allocator/member.test.js checks where it is found).
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn, spawnSync } = require('child_process');
const { cm, root, describeGpu } = require('../helpers');

const MiB = 2 ** 20;
const cli = path.join(root, 'dist', 'cli.js');
const fixture = path.join(__dirname, '..', 'fixtures', 'group-member-env.js');
const base = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
const dir = fs.mkdtempSync(path.join(base, 'cuda-memory-run-test-'));
process.env.CUDA_MEMORY_SHM_DIR = dir;
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

// The variables of the contract (and LD_PRELOAD) as the program sees them.
const PRINT_ENV = `const o = {}; for (const k of Object.keys(process.env)) if (/^CUDA_MEMORY_(GROUP|TRACE)|^LD_PRELOAD$/.test(k)) o[k] = process.env[k]; console.log(JSON.stringify(o))`;

const runCli = (args, env = {}) =>
  spawnSync(process.execPath, [cli, 'run', ...args], { encoding: 'utf8', timeout: 60000, env: { ...process.env, ...env } });

describe('cuda-memory run on a simulated device', () => {
  test('the program sees the group, device, budget and its source; LD_PRELOAD stays as it was', () => {
    const r = runCli(['--group', 'envs', '--limit', '1GiB', '--simulate', '80GiB', '--', process.execPath, '-e', PRINT_ENV], {
      LD_PRELOAD: '',
      CUDA_MEMORY_GROUP_BUDGET_SOURCE: 'inherited, to be replaced',
    });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      CUDA_MEMORY_GROUP: 'envs',
      CUDA_MEMORY_GROUP_DEVICE: 'simulated',
      CUDA_MEMORY_GROUP_BUDGET: String(2 ** 30),
      CUDA_MEMORY_GROUP_BUDGET_SOURCE: 'limit 1 GiB',
      LD_PRELOAD: '',
    });
  });

  test('--fraction is of the device’s total memory; --trace passes an absolute path', () => {
    const trace = path.join(os.tmpdir(), 'cm-run-trace.json');
    const r = runCli([
      '--group',
      'frac',
      '--fraction',
      '0.3',
      '--simulate',
      '80GiB',
      '--trace',
      trace,
      '--',
      process.execPath,
      '-e',
      PRINT_ENV,
    ]);
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({
      CUDA_MEMORY_GROUP_BUDGET: String(Math.floor(0.3 * 80 * 2 ** 30)),
      CUDA_MEMORY_GROUP_BUDGET_SOURCE: 'fraction 0.3 of 80 GiB',
      CUDA_MEMORY_TRACE: trace,
    });
  });

  test('the exit code is the program’s, 128 + the signal’s number, 127 for a program not found', () => {
    const sim = ['--group', 'codes', '--limit', '1MiB', '--simulate', '1GiB', '--'];
    expect(runCli([...sim, process.execPath, '-e', 'process.exit(7)']).status).toBe(7);
    expect(runCli([...sim, process.execPath, '-e', 'process.kill(process.pid, "SIGKILL")']).status).toBe(
      128 + os.constants.signals.SIGKILL,
    );
    const missing = runCli([...sim, 'cuda-memory-no-such-program']);
    expect(missing.status).toBe(127);
    expect(missing.stderr).toBe('cuda-memory run: cannot start "cuda-memory-no-such-program": not found\n');
  });

  test('SIGTERM, SIGHUP and SIGUSR1 sent to run reach the program', async () => {
    for (const sig of ['SIGTERM', 'SIGHUP', 'SIGUSR1']) {
      const child = spawn(
        process.execPath,
        [
          cli,
          'run',
          '--group',
          'sig',
          '--limit',
          '1MiB',
          '--simulate',
          '1GiB',
          '--',
          process.execPath,
          '-e',
          `process.on(${JSON.stringify(sig)}, () => process.exit(40)); console.log('ready'); setInterval(() => {}, 1000)`,
        ],
        { stdio: ['ignore', 'pipe', 'inherit'], env: process.env },
      );
      await new Promise((r) => child.stdout.once('data', r));
      child.kill(sig);
      const code = await new Promise((r) => child.on('exit', (c) => r(c)));
      expect({ sig, code }).toEqual({ sig, code: 40 });
    }
  });

  test('usage errors exit 2 with one line naming the fault, before the program starts', () => {
    const cases = [
      [['--limit', '1GiB', '--simulate', '1GiB', '--', 'true'], /required option '--group <name>'/],
      [
        ['--group', 'x', '--limit', '1GiB', '--fraction', '0.5', '--simulate', '1GiB', '--', 'true'],
        /--limit and --fraction were both given/,
      ],
      [['--group', 'x', '--fraction', '1.5', '--simulate', '1GiB', '--', 'true'], /--fraction <f>' argument '1.5' is invalid/],
      [['--group', '../x', '--limit', '1GiB', '--simulate', '1GiB', '--', 'true'], /--group <name>' argument '..\/x' is invalid/],
      [['--group', 'x', '--limit', '100', '--simulate', '1GiB', '--', 'true'], /--limit 100 is below the least budget, 256 bytes/],
      [
        ['--group', 'x', '--limit', '1GiB', '--simulate', '1GiB', '--device', '1', '--', 'true'],
        /--device names a GPU; --simulate has none/,
      ],
      [['--group', 'x', '--limit', '1GiB', '--simulate', '1GiB'], /missing required argument 'command'/],
      [
        ['--group', 'nobody', '--simulate', '1GiB', '--', 'true'],
        /group nobody has no live member on simulated to take its budget from; give --limit or --fraction/,
      ],
    ];
    for (const [args, message] of cases) {
      const r = runCli(args);
      expect({ args, status: r.status, stdout: r.stdout }).toEqual({ args, status: 2, stdout: '' });
      expect(r.stderr).toMatch(message);
      expect(r.stderr).toMatch(/^cuda-memory/);
    }
  });

  test('without a GPU and without --simulate it is a usage error (exit 2) saying why', () => {
    if (cm.status().available) return; // the GPU suite below runs it for real
    const r = runCli(['--group', 'x', '--limit', '1GiB', '--', 'true']);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^cuda-memory run: CUDA is not available \(/);
  });

  test('a member started by run appears with its pid, command and bytes in groupStats, top and the gauges; a live group’s budget must match', async () => {
    const odd = 'odd\x1b[2Jname';
    const child = spawn(
      process.execPath,
      [cli, 'run', '--group', 'shown', '--limit', '256MiB', '--simulate', '80GiB', '--', process.execPath, fixture, root, '32', odd],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
        env: process.env,
      },
    );
    try {
      await new Promise((r) => child.stdout.once('data', r));
      const g = cm.groupStats('shown', { simulated: true });
      expect(g.budgetBytes).toBe(256 * MiB);
      expect(g.budgetSource).toBe('memoryLimit 256 MiB'); // the member joined through the library
      expect(g.members).toHaveLength(1);
      const m = g.members[0];
      expect(m.pid).not.toBe(child.pid); // the program, not run
      expect(m).toMatchObject({
        poolBytes: 32 * MiB,
        bytesInUse: 32 * MiB,
        nvmlUsedBytes: null,
        command: `${process.execPath} ${fixture} ${root} 32 ${odd}`,
      });
      expect(cm.listGroups().groups.find((x) => x.name === 'shown').members[0].command).toBe(m.command);

      const top = spawnSync(process.execPath, [cli, 'top'], { encoding: 'utf8', env: process.env });
      expect(top.stdout).toMatch(
        new RegExp(
          `\\n\\s+${m.pid}\\s+32 MiB\\s+32 MiB\\s+-\\s+32 MiB\\s+256 MiB\\s+\\d{4}-\\S+\\s+\\S*node\\S* \\S+group-member-env\\.js`,
        ),
      );
      expect(top.stdout).not.toContain('\x1b');
      const shown = cm.formatGroups({ groups: [{ ...g, members: [{ ...m, command: `python3 ${odd}`, limitBytes: 0 }] }], unreadable: [] });
      expect(shown).toMatch(/ 32 MiB\s+-\s+\d{4}-\S+\s+python3 odd\\x1b\[2Jname$/m); // no own limit (a preloaded process's)
      // On a GPU: NVML's figure per member, and the total of those NVML lists on the group's line.
      const seen = {
        ...g,
        members: [
          { ...m, nvmlUsedBytes: 600 * MiB },
          { ...m, pid: 1, nvmlUsedBytes: null },
        ],
      };
      const withNvml = cm.formatGroups({ groups: [seen], unreadable: [] });
      expect(withNvml).toContain('\n  NVML: the 1 of 2 members it lists use 600 MiB of the device (contexts and all)\n');
      expect(withNvml).toMatch(new RegExp(`\\n\\s+${m.pid}\\s+32 MiB\\s+32 MiB\\s+600 MiB\\s+32 MiB`));

      const text = cm.metricsText({ groups: true });
      const labels = `group="shown",device="simulated"`;
      expect(text).toContain(`cuda_memory_group_budget_bytes{${labels}} ${256 * MiB}`);
      expect(text).toContain(`cuda_memory_group_charged_bytes{${labels}} ${32 * MiB}`);
      expect(text).toMatch(
        new RegExp(
          `cuda_memory_group_member_charged_bytes\\{${labels},pid="${m.pid}",command="[^"]*group-member-env\\.js[^"]*"\\} ${32 * MiB}`,
        ),
      );
      expect(text).toMatch(new RegExp(`cuda_memory_group_member_in_use_bytes\\{${labels},pid="${m.pid}",[^}]*\\} ${32 * MiB}`));
      expect(text).not.toContain('cuda_memory_group_member_nvml_used_bytes{');
      expect(cm.metricsText({ groups: ['other'] })).not.toContain('group="shown"');
      // The same through prom-client, read at the scrape.
      const client = require('prom-client');
      const registry = new client.Registry();
      const remove = cm.registerMetrics(registry, { groups: true, promClient: client });
      const scraped = await registry.metrics();
      expect(scraped).toContain(`cuda_memory_group_budget_bytes{${labels}} ${256 * MiB}`);
      expect(scraped).toMatch(
        new RegExp(
          `cuda_memory_group_member_charged_bytes\\{${labels},pid="${m.pid}",command="[^"]*group-member-env\\.js[^"]*"\\} ${32 * MiB}`,
        ),
      );
      remove();
      expect(await registry.metrics()).not.toContain('cuda_memory_group');

      // A second member joins the live budget without --limit, and a different budget is refused.
      const join = runCli(['--group', 'shown', '--simulate', '80GiB', '--', process.execPath, '-e', PRINT_ENV]);
      expect(JSON.parse(join.stdout)).toMatchObject({ CUDA_MEMORY_GROUP_BUDGET: '0' });
      expect(JSON.parse(join.stdout).CUDA_MEMORY_GROUP_BUDGET_SOURCE).toBeUndefined();
      const clash = runCli(['--group', 'shown', '--limit', '1GiB', '--simulate', '80GiB', '--', 'true']);
      expect(clash.status).toBe(2);
      expect(clash.stderr).toContain(
        'group shown on simulated has a budget of 256 MiB (memoryLimit 256 MiB) while its 1 member live, not 1 GiB (limit 1 GiB)',
      );
    } finally {
      child.kill('SIGTERM');
    }
    const code = await new Promise((r) => child.on('exit', (c) => r(c)));
    expect(code).toBe(128 + os.constants.signals.SIGTERM); // forwarded: the program died of it
    expect(cm.groupStats('shown', { simulated: true })).toMatchObject({ members: [], chargedBytes: 0 }); // its share came back
  });
});

describeGpu('cuda-memory run on the GPU', () => {
  test('the program sees the GPU’s uuid and the interposer first in LD_PRELOAD', () => {
    const r = runCli(['--group', 'gpu-env', '--fraction', '0.1', '--', process.execPath, '-e', PRINT_ENV], { LD_PRELOAD: '' });
    expect(r.stderr).toBe('');
    const seen = JSON.parse(r.stdout);
    const d = cm.devices()[0];
    expect(seen).toMatchObject({
      CUDA_MEMORY_GROUP: 'gpu-env',
      CUDA_MEMORY_GROUP_DEVICE: d.uuid,
      CUDA_MEMORY_GROUP_BUDGET: String(Math.floor(0.1 * d.totalMemory)),
      LD_PRELOAD: cm.preloadLibraryPath(),
    });
  });

  test('a plain CUDA program under run is refused past the budget and listed with its command, charge and NVML’s used memory', async () => {
    // cudaMalloc calls of 32 MiB (DeviceBuffer.alloc, no allocator): the interposer charges them.
    const prog = `const cm = require(${JSON.stringify(root)}); const held = [];
try { for (;;) held.push(cm.DeviceBuffer.alloc(32 * 2 ** 20)); } catch (e) { console.log(JSON.stringify({ held: held.length, code: e.code })); }
console.log('holding'); process.stdin.resume().on('end', () => process.exit(0));`;
    const child = spawn(process.execPath, [cli, 'run', '--group', 'gpu-run', '--limit', '256MiB', '--', process.execPath, '-e', prog], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: process.env,
    });
    let out = '';
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    try {
      await new Promise((resolve, reject) => {
        child.stdout.on('data', (d) => (out += d).includes('holding') && resolve());
        child.once('exit', (c) => reject(new Error(`exited ${c}: ${out} ${err}`)));
      });
      const took = JSON.parse(out.split('\n')[0]);
      expect(took.code).toBe('cudaErrorMemoryAllocation');
      expect(took.held * 32 * MiB).toBeLessThanOrEqual(256 * MiB);
      expect(took.held * 32 * MiB).toBeGreaterThan(128 * MiB);
      expect(err).toMatch(/cuda-memory preload \(pid \d+\)/); // its one line about the refusal
      const g = cm.groupStats('gpu-run');
      expect(g.members).toHaveLength(1);
      const m = g.members[0];
      expect(m.command).toContain(`${process.execPath} -e const cm = require(`);
      expect(m.bytesInUse).toBe(took.held * 32 * MiB);
      expect(m.poolBytes).toBeLessThanOrEqual(256 * MiB);
      // NVML's figure includes the context and the 32 MiB blocks; null where NVML lists another
      // pid namespace's pids (then it lists no process of this one).
      const { native } = require(path.join(root, 'dist', 'binding', 'native'));
      const listed = (native.deviceProcesses(g.device) || []).some((p) => p.pid === m.pid);
      if (listed) expect(m.nvmlUsedBytes).toBeGreaterThan(took.held * 32 * MiB);
      else expect(m.nvmlUsedBytes).toBeNull();
    } finally {
      child.stdin.end();
    }
    expect(await new Promise((r) => child.on('exit', r))).toBe(0);
    // Its share is back: the group is empty, or gone with its last member.
    let left = [];
    try {
      left = cm.groupStats('gpu-run').members;
    } catch (e) {
      expect(e.code).toBe('ERR_GROUP_NOT_FOUND');
    }
    expect(left).toEqual([]);
  }, 60000);

  test('a group member of this library on the GPU: nvmlUsedBytes is NVML’s figure for its pid', () => {
    const a = cm.createAllocator({ allowGrowth: true, shared: { name: 'gpu-nvml', memoryLimit: 256 * MiB } });
    const b = a.alloc(64 * MiB);
    const g = a.group();
    const { native } = require(path.join(root, 'dist', 'binding', 'native'));
    const mine = (native.deviceProcesses(g.device) || []).find((p) => p.pid === process.pid);
    const m = g.members.find((x) => x.self);
    expect(m.command).toContain('jest');
    if (mine) {
      expect(m.nvmlUsedBytes).toBeGreaterThanOrEqual(64 * MiB);
      expect(Math.abs(m.nvmlUsedBytes - mine.usedBytes)).toBeLessThan(64 * MiB); // read a moment apart
    } else expect(m.nvmlUsedBytes).toBeNull();
    b.free();
    a.close();
  });
});

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
const { cm, metrics, root, describeGpu, inPrivateMounts, privateMountsWork } = require('../helpers');

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

  test('--fraction is of the device’s total memory', () => {
    const r = runCli(['--group', 'frac', '--fraction', '0.3', '--simulate', '80GiB', '--', process.execPath, '-e', PRINT_ENV]);
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({
      CUDA_MEMORY_GROUP_BUDGET: String(Math.floor(0.3 * 80 * 2 ** 30)),
      CUDA_MEMORY_GROUP_BUDGET_SOURCE: 'fraction 0.3 of 80 GiB',
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
      // The command as top shows it, through the fixture's name: cut to 79 characters and an
      // ellipsis past 80 (a clone deep in a temporary folder); its path may hold spaces (a clone in
      // "with space/"). What follows the name (an argument of control characters) top escapes.
      const name = m.command.indexOf('group-member-env.js') + 'group-member-env.js'.length;
      const cut = m.command.length > 80 && name > 79;
      const shownHead = cut ? `${m.command.slice(0, 79)}…` : m.command.slice(0, name);
      expect(top.stdout).toMatch(
        new RegExp(
          `\\n\\s+${m.pid}\\s+32 MiB\\s+32 MiB\\s+-\\s+32 MiB\\s+256 MiB\\s+\\d{4}-\\S+\\s+${shownHead.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`,
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

      const text = metrics.metricsText({ groups: true });
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
      expect(metrics.metricsText({ groups: ['other'] })).not.toContain('group="shown"');
      // The same through prom-client, read at the scrape.
      const client = require('prom-client');
      const registry = new client.Registry();
      const remove = metrics.registerMetrics(registry, { groups: true, promClient: client });
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
      // It is given the live group's budget and source, not 0 ("whatever the group has").
      const join = runCli(['--group', 'shown', '--simulate', '80GiB', '--', process.execPath, '-e', PRINT_ENV]);
      expect(JSON.parse(join.stdout)).toMatchObject({
        CUDA_MEMORY_GROUP_BUDGET: String(256 * MiB),
        CUDA_MEMORY_GROUP_BUDGET_SOURCE: 'memoryLimit 256 MiB',
      });
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

// A program of this library that joins the group its environment names on a simulated device
// when it reads a line on stdin: `docs` as docs/processes.md shows (shared: { name }), else as
// group-member-env.js does (memoryLimit from CUDA_MEMORY_GROUP_BUDGET unless 0). It prints
// "ready" first, then the group it joined or the error's code.
const joiner = (form) => `const cm = require(${JSON.stringify(root)});
process.stdout.write('ready\\n');
process.stdin.once('data', () => {
  const budget = Number(process.env.CUDA_MEMORY_GROUP_BUDGET);
  const shared = ${form === 'docs' ? '{ name: process.env.CUDA_MEMORY_GROUP }' : '{ name: process.env.CUDA_MEMORY_GROUP, ...(budget ? { memoryLimit: budget } : {}) }'};
  let out;
  try {
    const a = cm.createAllocator({ simulate: { totalBytes: 80 * 2 ** 30 }, allowGrowth: true, shared });
    const g = a.group();
    out = { budgetBytes: g.budgetBytes, budgetSource: g.budgetSource, members: g.members.length };
    a.close();
  } catch (e) {
    out = { code: e.code, message: e.message };
  }
  process.stdout.write(JSON.stringify(out) + '\\n');
  process.exit(0);
});`;

// Starts `run ARGS -- node -e joiner(form)`, waits for "ready", calls between(), lets the program
// join and resolves with what it printed, run's exit code and its stderr.
async function runJoiner(args, form, between = () => {}) {
  const child = spawn(process.execPath, [cli, 'run', ...args, '--', process.execPath, '-e', joiner(form)], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: process.env,
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const exited = new Promise((r) => child.on('exit', (c) => r(c)));
  await new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => (out += d).includes('ready\n') && resolve());
    exited.then((c) => reject(new Error(`run exited ${c} before the program was ready: ${err}`)));
  });
  between();
  child.stdin.end('go\n');
  const code = await exited;
  return { code, stderr: err, joined: JSON.parse(out.split('\n')[1]) };
}

describe('cuda-memory run: the budget the program is held to', () => {
  test('without --limit, the live group’s budget is passed on: the program stays held to it after the other members leave before its first allocation', async () => {
    const holder = cm.createAllocator({
      simulate: { totalBytes: 80 * 2 ** 30 },
      allowGrowth: true,
      shared: { name: 'stays', memoryLimit: 256 * MiB },
    });
    const r = await runJoiner(['--group', 'stays', '--simulate', '80GiB'], 'env', () => holder.close()); // the group is gone
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    // Made again at the budget run saw, where it found no group before.
    expect(r.joined).toEqual({ budgetBytes: 256 * MiB, budgetSource: 'memoryLimit 256 MiB', members: 1 });
  });

  test('--simulate with --limit and no live group: a program that joins as docs/processes.md shows gets the budget run was given', async () => {
    const r = await runJoiner(['--group', 'docs-form', '--limit', '300MiB', '--simulate', '80GiB'], 'docs');
    expect(r.code).toBe(0);
    expect(r.joined).toEqual({ budgetBytes: 300 * MiB, budgetSource: 'limit 300 MiB', members: 1 });
  });

  test('the same without --limit: the live group’s budget and source, whether its members stay or leave', async () => {
    const holder = cm.createAllocator({
      simulate: { totalBytes: 80 * 2 ** 30 },
      allowGrowth: true,
      shared: { name: 'docs-join', memoryLimit: 128 * MiB },
    });
    const stayed = await runJoiner(['--group', 'docs-join', '--simulate', '80GiB'], 'docs');
    expect(stayed.joined).toEqual({ budgetBytes: 128 * MiB, budgetSource: 'memoryLimit 128 MiB', members: 2 });
    const left = await runJoiner(['--group', 'docs-join', '--simulate', '80GiB'], 'docs', () => holder.close());
    expect(left.joined).toEqual({ budgetBytes: 128 * MiB, budgetSource: 'memoryLimit 128 MiB', members: 1 });
  });

  test('a program of this library refuses a CUDA_MEMORY_GROUP_BUDGET of its group that is not a budget, naming the variable', () => {
    const join = (budget, group = 'hand') =>
      spawnSync(
        process.execPath,
        [
          '-e',
          `const cm = require(${JSON.stringify(root)}); try { const a = cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true, shared: { name: 'hand' } }); console.log(a.group().budgetBytes); a.close(); } catch (e) { console.log(e.name, e.code, e.message); }`,
        ],
        {
          encoding: 'utf8',
          env: { ...process.env, CUDA_MEMORY_GROUP: group, CUDA_MEMORY_GROUP_DEVICE: 'simulated', CUDA_MEMORY_GROUP_BUDGET: budget },
        },
      ).stdout.trim();
    for (const bad of ['lots', '20GiB', '-1', '100', '1e9', '9007199254740992'])
      expect(join(bad)).toBe(
        `RangeError ERR_OUT_OF_RANGE Expected a number of bytes in decimal digits, from 256 to 2^53-1 (or 0 to join the group's budget), for CUDA_MEMORY_GROUP_BUDGET, the budget this process was started with in group 'hand' on simulated, but received ${JSON.stringify(bad)}`,
      );
    expect(join(String(64 * MiB))).toBe(String(64 * MiB));
    // 0, or the variables of another group: nothing to join at (ERR_GROUP_NOT_FOUND).
    expect(join('0')).toMatch(/^InterprocessError ERR_GROUP_NOT_FOUND /);
    expect(join(String(64 * MiB), 'other')).toMatch(/^InterprocessError ERR_GROUP_NOT_FOUND /);
  });

  test('usage errors of the budget: a --fraction that rounds below 256 bytes, a budget above the simulated device, --trace with --simulate', () => {
    const cases = [
      [
        ['--fraction', '1e-12', '--simulate', '80GiB'],
        'run: --fraction 1e-12 of 80 GiB is a budget of 0 bytes, below the least budget, 256 bytes',
      ],
      [
        ['--fraction', '0.0001', '--simulate', '1MiB'],
        'run: --fraction 0.0001 of 1 MiB is a budget of 104 bytes, below the least budget, 256 bytes',
      ],
      [
        ['--limit', '2GiB', '--simulate', '1GiB'],
        "run: --limit 2 GiB is above the simulated device's total memory, 1 GiB: a budget cannot bind more than the device has",
      ],
      [
        ['--limit', '1GiB', '--simulate', '1GiB', '--trace', path.join(os.tmpdir(), 'cm-run-never.json')],
        'run: --trace records what the interposer sees, and --simulate preloads none; a program of this library records its own allocator (allocator.startRecording())',
      ],
    ];
    for (const [args, message] of cases) {
      const r = runCli(['--group', 'small', ...args, '--', process.execPath, '-e', 'console.log("started")']);
      expect({ args, status: r.status, stdout: r.stdout, stderr: r.stderr }).toEqual({
        args,
        status: 2,
        stdout: '',
        stderr: `cuda-memory: ${message}\n`,
      });
    }
    expect(fs.existsSync(path.join(os.tmpdir(), 'cm-run-never.json'))).toBe(false);
  });

  test('--strict puts CUDA_MEMORY_GROUP_STRICT=1 in the program’s environment; without it an inherited value stays', () => {
    const sim = ['--group', 'strict', '--limit', '1MiB', '--simulate', '1GiB'];
    const strict = runCli([...sim, '--strict', '--', process.execPath, '-e', PRINT_ENV], { CUDA_MEMORY_GROUP_STRICT: '' });
    expect(strict.status).toBe(0);
    expect(JSON.parse(strict.stdout).CUDA_MEMORY_GROUP_STRICT).toBe('1');
    const plain = JSON.parse(runCli([...sim, '--', process.execPath, '-e', PRINT_ENV]).stdout);
    expect(plain.CUDA_MEMORY_GROUP_STRICT).toBeUndefined();
    const inherited = JSON.parse(runCli([...sim, '--', process.execPath, '-e', PRINT_ENV], { CUDA_MEMORY_GROUP_STRICT: '1' }).stdout);
    expect(inherited.CUDA_MEMORY_GROUP_STRICT).toBe('1');
  });

  test('CUDA_MEMORY_LOCK_TIMEOUT_MS=0 is refused by the library’s reader, naming the range 1 to 86400000; run says so with exit 2', () => {
    const range = 'Expected an integer from 1 to 86400000 (milliseconds) for CUDA_MEMORY_LOCK_TIMEOUT_MS but received "0"';
    const lib = spawnSync(
      process.execPath,
      [
        '-e',
        `const cm = require(${JSON.stringify(root)}); try { cm.groupStats('none', { simulated: true }); } catch (e) { console.log(e.name, e.code, e.message); }`,
      ],
      { encoding: 'utf8', env: { ...process.env, CUDA_MEMORY_LOCK_TIMEOUT_MS: '0' } },
    );
    expect(lib.stdout.trim()).toBe(`RangeError ERR_OUT_OF_RANGE ${range}`);
    expect(() => cm.groupStats('none', { simulated: true, lockTimeoutMs: 0 })).toThrow(
      'Expected an integer from 1 to 86400000 (milliseconds) for options.lockTimeoutMs but received 0',
    );
    const r = runCli(
      ['--group', 'locks', '--limit', '1MiB', '--simulate', '1GiB', '--', process.execPath, '-e', 'console.log("started")'],
      {
        CUDA_MEMORY_LOCK_TIMEOUT_MS: '0',
      },
    );
    expect({ status: r.status, stdout: r.stdout, stderr: r.stderr }).toEqual({ status: 2, stdout: '', stderr: `cuda-memory: ${range}\n` });
  });
});

// Whether gcc -static links a program here (the static C library is installed).
function staticCcWorks() {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-run-cc-'));
  try {
    return spawnSync('cc', ['-static', '-x', 'c', '-o', path.join(d, 'a'), '-'], { input: 'int main(void) { return 0; }\n' }).status === 0;
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
}

// The ledger of group `name` on the simulated device as a live member leaves it, its bytes (to
// write back altered), and its path. The group is gone afterwards.
function ledgerBytes(name) {
  const a = cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true, shared: { name, memoryLimit: 64 * MiB } });
  const file = a.group().path;
  const bytes = fs.readFileSync(file);
  a.close();
  expect(fs.existsSync(file)).toBe(false);
  return { file, bytes };
}

describe('cuda-memory run: a group the program could not join is a usage error before it starts', () => {
  const files = path.join(dir, `cuda-memory-${process.geteuid()}`);
  const start = (name) =>
    runCli(['--group', name, '--limit', '64MiB', '--simulate', '1GiB', '--', process.execPath, '-e', 'console.log("started")']);
  // Exit 2, nothing started, one line naming the group, the code, the file and the cause.
  const refused = (name, code, cause) => {
    const r = start(name);
    expect({ name, status: r.status, stdout: r.stdout }).toEqual({ name, status: 2, stdout: '' });
    expect(r.stderr).toMatch(new RegExp(`^cuda-memory: run: the program could not join group ${name} on simulated: ${code}: `));
    expect(r.stderr).toContain(cause);
    expect(r.stderr.split('\n')).toHaveLength(2);
    return r.stderr;
  };

  test('a damaged, foreign or other-version ledger', () => {
    const damaged = ledgerBytes('damaged');
    const b = Buffer.from(damaged.bytes);
    b.writeBigUInt64LE(0xffffffffffffffffn, 24); // the budget, under the header's checksum
    fs.writeFileSync(damaged.file, b, { mode: 0o600 });
    refused('damaged', 'ERR_GROUP_LEDGER_CORRUPT', `the group ledger ${damaged.file} is damaged (its header checksum is wrong)`);

    const foreign = path.join(files, 'cuda-memory-group.foreign.simulated');
    fs.writeFileSync(foreign, 'not a ledger at all\n', { mode: 0o600 });
    refused('foreign', 'ERR_GROUP_LEDGER_FOREIGN', `${foreign} is not a cuda-memory group ledger`);

    const other = ledgerBytes('version');
    const v = Buffer.from(other.bytes);
    v.writeUInt32LE(3, 16);
    fs.writeFileSync(other.file, v, { mode: 0o600 });
    refused(
      'version',
      'ERR_GROUP_LEDGER_VERSION',
      `the group ledger ${other.file} has format version 3 and this cuda-memory reads version 2`,
    );
    for (const f of [damaged.file, foreign, other.file]) fs.rmSync(f);
  });

  test('an untrusted ledger: open to others, a symbolic link, another user’s; an untrusted folder', () => {
    const open = ledgerBytes('open');
    fs.writeFileSync(open.file, open.bytes, { mode: 0o600 });
    fs.chmodSync(open.file, 0o644);
    refused('open', 'ERR_SHM_UNTRUSTED', `${open.file} was not used: its mode 0644 lets other users read or write it`);
    fs.rmSync(open.file);

    const target = path.join(dir, 'elsewhere');
    fs.writeFileSync(target, '');
    const link = path.join(files, 'cuda-memory-group.linked.simulated');
    fs.symlinkSync(target, link);
    refused('linked', 'ERR_SHM_UNTRUSTED', `${link} was not used: it is a symbolic link`);
    fs.rmSync(link);

    if (process.geteuid() === 0) {
      const theirs = ledgerBytes('theirs');
      fs.writeFileSync(theirs.file, theirs.bytes, { mode: 0o600 });
      fs.chownSync(theirs.file, 2001, 2001);
      refused('theirs', 'ERR_SHM_UNTRUSTED', `${theirs.file} was not used: it is owned by uid 2001`);
      fs.rmSync(theirs.file);
    }

    fs.chmodSync(files, 0o755);
    try {
      refused('anything', 'ERR_SHM_UNTRUSTED', `the folder ${files} was not used: its mode 0755 lets other users into it (0700 expected)`);
    } finally {
      fs.chmodSync(files, 0o700);
    }
  });

  test('a full group: 128 members, as many as a ledger holds', () => {
    const members = [];
    try {
      for (let i = 0; i < 128; i++)
        members.push(
          cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true, shared: { name: 'full', memoryLimit: 64 * MiB } }),
        );
      expect(cm.groupStats('full', { simulated: true }).members).toHaveLength(128);
      const file = path.join(files, 'cuda-memory-group.full.simulated');
      refused(
        'full',
        'ERR_GROUP_FULL',
        `the group ledger ${file} already has 128 members, as many as a ledger holds (128); another can join once one leaves`,
      );
      members.pop().close();
      expect(start('full').stdout).toBe('started\n'); // a slot is free again
    } finally {
      for (const m of members) m.close();
    }
  });

  // A tmpfs of 64 KiB, mounted in a private mount namespace (root, unshare -m) and filled, holds
  // this user's folder but no room for a ledger's file.
  const mounts = privateMountsWork('d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs "$d" && umount "$d" && rmdir "$d"');
  (mounts ? test : test.skip)(
    `a shared-memory file system too full to make the ledger's file${mounts ? '' : ' — skipped: needs root and unshare -m to mount a small tmpfs'}`,
    () => {
      const small = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-run-full-'));
      try {
        const script = `mount -t tmpfs -o size=64k,mode=1777 tmpfs "${small}" && mkdir -m 0700 "${small}/cuda-memory-${process.geteuid()}" &&
(dd if=/dev/zero of="${small}/filler" bs=4096 2>/dev/null; true) &&
CUDA_MEMORY_SHM_DIR="${small}" "${process.execPath}" "${cli}" run --group roomless --limit 64MiB --simulate 1GiB -- "${process.execPath}" -e 'console.log("started")' 2>&1; echo "exit $?"`;
        const out = inPrivateMounts(script, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
        const ledger = path.join(small, `cuda-memory-${process.geteuid()}`, 'cuda-memory-group.roomless.simulated');
        const { fileBytes } = require(path.join(root, 'dist', 'binding', 'native')).native.groupFormat();
        expect(out).toBe(
          `cuda-memory: run: the program could not join group roomless on simulated: ERR_SHM_NO_SPACE: not enough room for ${fileBytes} bytes in the shared-memory file system holding ${ledger} (see \`df\` of its folder; CUDA_MEMORY_SHM_DIR picks another)\nexit 2\n`,
        );
      } catch (e) {
        throw new Error(`${e.message}\n${e.stdout}\n${e.stderr}`);
      } finally {
        fs.rmSync(small, { recursive: true, force: true });
      }
    },
  );
});

describeGpu('cuda-memory run on the GPU', () => {
  test('the program sees the GPU’s uuid and the interposer first in LD_PRELOAD; --trace passes an absolute path, --strict its variable', () => {
    const trace = path.join(os.tmpdir(), 'cm-run-trace.json');
    const r = runCli(['--group', 'gpu-env', '--fraction', '0.1', '--trace', trace, '--strict', '--', process.execPath, '-e', PRINT_ENV], {
      LD_PRELOAD: '',
    });
    expect(r.stderr).toBe('');
    const seen = JSON.parse(r.stdout);
    const d = cm.devices()[0];
    expect(seen).toMatchObject({
      CUDA_MEMORY_GROUP: 'gpu-env',
      CUDA_MEMORY_GROUP_DEVICE: d.uuid,
      CUDA_MEMORY_GROUP_BUDGET: String(Math.floor(0.1 * d.totalMemory)),
      CUDA_MEMORY_GROUP_STRICT: '1',
      CUDA_MEMORY_TRACE: trace,
      LD_PRELOAD: cm.preloadLibraryPath(),
    });
    fs.rmSync(trace, { force: true });
  });

  test('the group’s device key is the uuid the interposer reads (cuDeviceGetUuid_v2), a MIG instance’s own on a MIG device', () => {
    // A program of the driver alone, as the interposer and cuda_memory_ipc.py ask it.
    const bin = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-run-uuid-'));
    try {
      fs.writeFileSync(
        path.join(bin, 'uuid.c'),
        `#include <dlfcn.h>
#include <stdio.h>
typedef int (*init_t)(unsigned);
typedef int (*count_t)(int*);
typedef int (*get_t)(int*, int);
typedef int (*uuid_t_)(unsigned char*, int);
int main(void) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) return 1;
  init_t init = (init_t)dlsym(h, "cuInit");
  count_t count = (count_t)dlsym(h, "cuDeviceGetCount");
  get_t get = (get_t)dlsym(h, "cuDeviceGet");
  uuid_t_ uuid = (uuid_t_)dlsym(h, "cuDeviceGetUuid_v2");
  if (!uuid) uuid = (uuid_t_)dlsym(h, "cuDeviceGetUuid");
  int n = 0;
  if (init(0) || count(&n)) return 2;
  for (int i = 0; i < n; i++) {
    int dev; unsigned char u[16];
    if (get(&dev, i) || uuid(u, dev)) return 3;
    printf("GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\\n", u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  }
  return 0;
}
`,
      );
      expect(spawnSync('cc', ['-o', path.join(bin, 'uuid'), path.join(bin, 'uuid.c'), '-ldl'], { encoding: 'utf8' }).status).toBe(0);
      const driver = spawnSync(path.join(bin, 'uuid'), [], { encoding: 'utf8' });
      expect(driver.status).toBe(0);
      expect(cm.devices().map((d) => d.uuid)).toEqual(driver.stdout.trim().split('\n'));
      // run keys the group by the same.
      const r = runCli(['--group', 'gpu-key', '--fraction', '0.1', '--', process.execPath, '-e', PRINT_ENV]);
      expect(JSON.parse(r.stdout).CUDA_MEMORY_GROUP_DEVICE).toBe(driver.stdout.split('\n')[0]);
    } finally {
      fs.rmSync(bin, { recursive: true, force: true });
    }
  });

  test('without --limit a CUDA program stays held to the live group’s budget after the other members leave before it allocates', async () => {
    const holder = cm.createAllocator({ allowGrowth: true, shared: { name: 'gpu-stays', memoryLimit: 256 * MiB } });
    holder.alloc(MiB).free();
    const prog = `const cm = require(${JSON.stringify(root)}); process.stdout.write('ready\\n');
process.stdin.once('data', () => { const held = [];
try { for (;;) held.push(cm.DeviceBuffer.alloc(32 * 2 ** 20)); } catch (e) { console.log(JSON.stringify({ held: held.length, code: e.code })); }
process.exit(0); });`;
    const child = spawn(process.execPath, [cli, 'run', '--group', 'gpu-stays', '--', process.execPath, '-e', prog], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: process.env,
    });
    let out = '';
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const exited = new Promise((r) => child.on('exit', r));
    await new Promise((resolve, reject) => {
      child.stdout.on('data', (d) => (out += d).includes('ready\n') && resolve());
      exited.then((c) => reject(new Error(`exited ${c}: ${err}`)));
    });
    holder.close(); // the group is gone before the program's first allocation
    child.stdin.end('go\n');
    expect(await exited).toBe(0);
    const took = JSON.parse(out.split('\n')[1]);
    expect(took.code).toBe('cudaErrorMemoryAllocation');
    expect(took.held * 32 * MiB).toBeLessThanOrEqual(256 * MiB);
    expect(err).not.toMatch(/cannot join group/);
  }, 60000);

  // Root, to give a copy to another uid, and a static C library, for gcc -static.
  const canBuild = process.geteuid() === 0 && staticCcWorks();
  (canBuild ? test : test.skip)(
    `a program the loader will not preload into (set-user-ID, static, a script of one) is named in a warning before it starts, and refused with --strict${canBuild ? '' : ' — skipped: needs root and gcc -static'}`,
    () => {
      const bin = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-run-loader-'));
      fs.chmodSync(bin, 0o755);
      try {
        const src = path.join(bin, 'p.c');
        fs.writeFileSync(src, '#include <stdio.h>\nint main(void) { puts("started"); return 0; }\n');
        const setuid = path.join(bin, 'setuid');
        const statik = path.join(bin, 'static');
        const script = path.join(bin, 'script');
        expect(spawnSync('cc', ['-o', setuid, src]).status).toBe(0);
        expect(spawnSync('cc', ['-static', '-o', statik, src]).status).toBe(0);
        fs.chownSync(setuid, 65534, 65534);
        fs.chmodSync(setuid, 0o4755);
        fs.writeFileSync(script, `#!${statik}\n`, { mode: 0o755 });
        for (const [file, why] of [
          [setuid, `${setuid} is set-user-ID to uid 65534, so the kernel starts it in secure-execution mode`],
          [statik, `${statik} is linked statically (an ELF executable without a program interpreter, PT_INTERP)`],
          [script, `${script} is a script whose #! line starts ${statik}; ${statik} is linked statically`],
        ]) {
          const r = runCli(['--group', 'gpu-loader', '--fraction', '0.1', '--', file]);
          expect(r.status).toBe(0);
          expect(r.stdout).toBe('started\n');
          expect(r.stderr).toMatch(new RegExp(`^cuda-memory run: warning: the budget of group gpu-loader will not bind "${file}": `));
          expect(r.stderr).toContain(why);
          const strict = runCli(['--group', 'gpu-loader', '--fraction', '0.1', '--strict', '--', file]);
          expect({ status: strict.status, stdout: strict.stdout }).toEqual({ status: 2, stdout: '' });
          expect(strict.stderr).toContain(`cuda-memory: run: --strict: the budget of group gpu-loader will not bind "${file}": ${why}`);
        }
        // A dynamically linked program: no warning.
        const plain = runCli(['--group', 'gpu-loader', '--fraction', '0.1', '--', process.execPath, '-e', 'console.log("started")']);
        expect(plain.stderr).toBe('');
      } finally {
        fs.rmSync(bin, { recursive: true, force: true });
      }
    },
  );

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

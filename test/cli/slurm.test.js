'use strict';
// `cuda-memory slurm task-prolog` and `epilog` (lib/cli/slurm.ts): first what the hook reads
// (scontrol's GRES, hostlists, the node's schemes), then against real Slurm daemons, a one-node
// cluster on 127.0.0.1 (scripts/slurm-cluster.sh) whose two GPUs are stand-in devices: GPU 0 in 8
// shards, GPU 1 counted as 8 GiB of gpumem. The jobs run the interposer's stand-in CUDA driver
// (test/allocator/preload), with 8 GiB per device, as root, and one as a second user (uid and gid
// 2001, by setpriv), whose task prolog runs as that user and whose group lives in that user's
// folder. Without the daemons (not installed, not root) the cluster's tests skip saying why; under
// CUDA_MEMORY_REQUIRE_SLURM=1 (CI) that fails.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { cm, metrics, openTempDir, packageForOtherUsers, readableByAll, root } = require('../helpers');

const GiB = 2 ** 30;
const MiB = 2 ** 20;
const cli = path.join(root, 'dist', 'cli.js');
const slurm = require(path.join(root, 'dist', 'cli', 'slurm.js'));

describe('what the hook reads', () => {
  test('Slurm hostlists', () => {
    expect(slurm.expandHostlist('localhost')).toEqual(['localhost']);
    expect(slurm.expandHostlist('gpu[01-03,7],cpu5')).toEqual(['gpu01', 'gpu02', 'gpu03', 'gpu7', 'cpu5']);
    expect(slurm.expandHostlist('n[1-2]-ib')).toEqual(['n1-ib', 'n2-ib']);
    expect(slurm.expandHostlist('n[3-1]')).toEqual([]);
    expect(slurm.expandHostlist('n[0-999999]')).toEqual([]);
  });

  test('scontrol show job -d: the GRES on this node, each with its GPUs or its count', () => {
    const text = [
      'JobId=12 JobName=train',
      '   JOB_GRES=shard:2,gpumem:3221225472',
      '     Nodes=gpu[01-02] CPU_IDs=0 Mem=0 GRES=shard:2(IDX:0),gpumem(CNT:3221225472)',
      '     Nodes=gpu03 CPU_IDs=0-3 Mem=0 GRES=gpu:h200:2(IDX:0,2),shard:1(IDX:3)',
      '     Nodes=gpu04 CPU_IDs=0 Mem=0 GRES=',
    ].join('\n');
    expect(slurm.parseJobGres(text, 'gpu02')).toEqual([
      { name: 'shard', type: null, count: 2, indices: [0], text: 'shard:2(IDX:0)' },
      { name: 'gpumem', type: null, count: 3221225472, indices: [], text: 'gpumem(CNT:3221225472)' },
    ]);
    expect(slurm.parseJobGres(text, 'gpu03').map((g) => [g.name, g.type, g.count, g.indices])).toEqual([
      ['gpu', 'h200', 2, [0, 2]],
      ['shard', null, 1, [3]],
    ]);
    expect(slurm.parseJobGres(text, 'gpu04')).toEqual([]);
    expect(slurm.parseJobGres(text, 'gpu05')).toBeNull();
    expect(() => slurm.parseJobGres('   Nodes=a CPU_IDs=0 GRES=shard:x(IDX:0)', 'a')).toThrow(/cannot read the GRES "shard:x\(IDX:0\)"/);
    expect(() => slurm.parseJobGres('   Nodes=a CPU_IDs=0 GRES=gpu:1(IDX:9-1)', 'a')).toThrow(/cannot read the GRES/);
  });

  test("the node's schemes make grants; a GPU given whole that the node shares is granted twice", () => {
    const gres = (text) => slurm.parseJobGres(`   Nodes=n CPU_IDs=0 Mem=0 GRES=${text}`, 'n');
    const grants = (text, schemes) => [...slurm.nodeGrants(gres(text), schemes).grants].map(([gpu, g]) => [gpu, g.map((x) => x.source)]);
    const node = { shards: { count: 8, gpus: [0] }, gpumemGpu: 1 };
    expect(grants('shard:2(IDX:0)', node)).toEqual([[0, ['--gres=shard:2(IDX:0)']]]);
    expect(slurm.nodeGrants(gres('shard:2(IDX:0)'), node).grants.get(0)[0]).toMatchObject({ kind: 'shares', count: 2, of: 8 });
    expect(grants('gpumem(CNT:3221225472)', node)).toEqual([[1, ['--gres=gpumem:3221225472']]]);
    expect(slurm.nodeGrants(gres('gpumem(CNT:3221225472)'), node).gpumemBytes).toBe(3 * GiB);
    expect(grants('gpu:1(IDX:0)', node)).toEqual([[0, ['--gres=gpu:1(IDX:0)', 'its shards']]]);
    expect(grants('gpu:1(IDX:1)', node)).toEqual([[1, ['--gres=gpu:1(IDX:1)', "the node's gpumem"]]]);
    // A node of whole GPUs only: a GPU given whole is one grant.
    expect(grants('gpu:2(IDX:0-1)', { shards: null, gpumemGpu: null })).toEqual([
      [0, ['--gres=gpu:2(IDX:0-1)']],
      [1, ['--gres=gpu:2(IDX:0-1)']],
    ]);
    // Without a gpumem GPU declared, gpumem counts GPU 0; shards need their count per GPU.
    expect(grants('gpumem(CNT:1024)', { shards: null, gpumemGpu: null })).toEqual([[0, ['--gres=gpumem:1024']]]);
    expect(() => slurm.nodeGrants(gres('shard:2(IDX:0)'), { shards: null, gpumemGpu: null })).toThrow(/--shards COUNT/);
    expect(() => slurm.nodeGrants(gres('shard:4(IDX:0-1)'), { shards: { count: 8, gpus: null }, gpumemGpu: null })).toThrow(/on 2 GPUs/);
  });

  test('export lines: one per variable, a line break in a value cannot start another', () => {
    expect(
      slurm.exportLines([
        ['A', 'x y'],
        ['B', 'one\nexport LD_PRELOAD=/evil.so'],
      ]),
    ).toBe('export A=x y\nexport B=one export LD_PRELOAD=/evil.so\n');
  });

  test('outside a Slurm task the hook is a usage error; the epilog never fails', () => {
    const env = { ...process.env };
    delete env.SLURM_JOB_ID;
    const t = spawnSync(process.execPath, [cli, 'slurm', 'task-prolog'], { encoding: 'utf8', env, timeout: 60000 });
    expect(t.status).toBe(2);
    expect(t.stderr).toMatch(/SLURM_JOB_ID is "": this is not a Slurm task/);
    for (const e of [{}, { SLURM_JOB_ID: '12' }, { SLURM_JOB_ID: '12', SLURM_JOB_UID: 'root' }, { SLURM_JOB_ID: '$(x)' }]) {
      const r = spawnSync(process.execPath, [cli, 'slurm', 'epilog'], { encoding: 'utf8', env: { ...env, ...e }, timeout: 60000 });
      expect(r.status).toBe(0);
    }
  });
});

describe("a job's group, without the daemons (simulated device)", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-memory-slurm-groups-'));
  let saved;
  beforeAll(() => {
    saved = process.env.CUDA_MEMORY_SHM_DIR;
    process.env.CUDA_MEMORY_SHM_DIR = dir;
  });
  afterAll(() => {
    if (saved === undefined) delete process.env.CUDA_MEMORY_SHM_DIR;
    else process.env.CUDA_MEMORY_SHM_DIR = saved;
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('groupStats, listGroups, top and the gauges name the job and its user; other groups have none', () => {
    const user = os.userInfo().username;
    const a = cm.createAllocator({ allowGrowth: true, simulate: { totalBytes: GiB }, shared: { name: 'slurm-42', memoryLimit: 64 * MiB } });
    const b = cm.createAllocator({ allowGrowth: true, simulate: { totalBytes: GiB }, shared: { name: 'slurm-x', memoryLimit: 64 * MiB } });
    try {
      const job = { scheduler: 'slurm', id: '42', uid: process.geteuid(), user };
      expect(cm.groupStats('slurm-42', { simulated: true }).job).toEqual(job);
      const list = cm.listGroups();
      expect(list.groups.map((g) => [g.name, g.job])).toEqual([
        ['slurm-42', job],
        ['slurm-x', null],
      ]);
      expect(cm.formatGroups(list)).toContain(`group slurm-42 on simulated, slurm job 42 of ${user}: budget 64 MiB`);
      expect(cm.formatGroups(list)).toMatch(/^group slurm-x on simulated: budget/m);
      const text = metrics.metricsText({ groups: true });
      expect(text).toContain(`cuda_memory_group_job_info{group="slurm-42",device="simulated",scheduler="slurm",job="42",user="${user}"} 1`);
      expect(text).not.toContain('job_info{group="slurm-x"');
    } finally {
      a.close();
      b.close();
    }
  });

  test("the epilog's removal takes the group's ledger and records, and only that group's", () => {
    const a = cm.createAllocator({ allowGrowth: true, simulate: { totalBytes: GiB }, shared: { name: 'slurm-43', memoryLimit: 64 * MiB } });
    const other = cm.createAllocator({
      allowGrowth: true,
      simulate: { totalBytes: GiB },
      shared: { name: 'slurm-430', memoryLimit: 64 * MiB },
    });
    try {
      const folder = cm.shmDir();
      fs.writeFileSync(path.join(folder, 'cuda-memory-uncharged.slurm-43.simulated.123'), 'x', { mode: 0o600 });
      fs.symlinkSync('/etc/passwd', path.join(folder, 'cuda-memory-uncharged.slurm-43.simulated.124'));
      const said = slurm.removeGroup('slurm-43');
      expect(said.some((l) => /still has 1 live member/.test(l))).toBe(true);
      expect(said.some((l) => /simulated\.124 is not a file of this user's; left/.test(l))).toBe(true);
      expect(fs.readdirSync(folder).sort()).toEqual([
        'cuda-memory-group.slurm-430.simulated',
        'cuda-memory-uncharged.slurm-43.simulated.124',
      ]);
      expect(fs.existsSync('/etc/passwd')).toBe(true);
    } finally {
      a.close();
      other.close();
    }
  });
});

// ---- against the daemons ----------------------------------------------------------------------

const which = (cmd) => spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' }).stdout.trim();
const missing = ['slurmctld', 'slurmd', 'srun', 'sbatch', 'scontrol', 'munged', 'mknod', 'setpriv'].filter((c) => !which(c));
const why =
  missing.length > 0
    ? `${missing.join(', ')} not installed (scripts/slurm-cluster.sh install installs Debian's slurmctld, slurmd, slurm-client and munge)`
    : process.geteuid?.() !== 0
      ? 'the one-node cluster needs root (the daemons, mknod)'
      : null;

function describeSlurm(name, fn) {
  if (why === null) return describe(`[Slurm] ${name}`, fn);
  if (process.env.CUDA_MEMORY_REQUIRE_SLURM === '1')
    return describe(`[Slurm] ${name}`, () => test('needs the Slurm daemons (CUDA_MEMORY_REQUIRE_SLURM=1)', () => expect(why).toBeNull()));
  // Not fn itself: its body makes folders (the harness's, the cluster's) that only its hooks,
  // which a skipped describe never runs, would remove.
  return describe(`[Slurm] ${name}`, () => test.skip(`skipped: ${why}`, () => {}));
}

describeSlurm('a one-node cluster holds each job to the GPU memory Slurm gave it', () => {
  // The stand-in driver and its test program, built by the interposer's harness; its shared folder
  // is the jobs' (CUDA_MEMORY_SHM_DIR, which the hooks are given and srun passes on).
  const harness = require('../allocator/preload/harness');
  harness.useHarness();
  const prog = path.join(harness.bin, 'dynamic');
  // The second user's jobs: the cluster's folder (slurm.conf, munge's socket) where that user can
  // reach it, and the hooks and that user's tasks run readable copies of the package and of the
  // stand-in driver and program (the checkout and the harness's folders may be where only root
  // can enter). slurm-cluster.sh gives the uid a passwd entry where it has none.
  const JOB_UID = 2001;
  const asJobUser = ['--reuid', String(JOB_UID), '--regid', String(JOB_UID), '--clear-groups'];
  const cluster = openTempDir('cuda-memory-slurm-');
  const pkg = packageForOtherUsers();
  const userBin = openTempDir('cuda-memory-slurm-bin-');
  const userProg = path.join(userBin, 'dynamic');
  const quote = (s) => `'${s.replace(/'/g, `'\\''`)}'`;
  const env = {
    ...process.env,
    SLURM_CONF: path.join(cluster, 'etc', 'slurm.conf'),
    LD_LIBRARY_PATH: harness.bin,
    FAKE_CUDA_TOTAL: String(8 * GiB),
  };
  const sh = (args, opts = {}) => spawnSync(args[0], args.slice(1), { encoding: 'utf8', env, timeout: 120000, ...opts });
  const userEnv = () => ({ ...env, ...pkg.env, LD_LIBRARY_PATH: userBin });
  const script = path.join(root, 'scripts', 'slurm-cluster.sh');

  beforeAll(() => {
    for (const f of ['dynamic', 'libcudart.so.13', 'libcuda.so.1']) fs.copyFileSync(path.join(harness.bin, f), path.join(userBin, f));
    readableByAll(userBin);
    // The jobs' shared folder, where each user makes a folder of its own, as in /dev/shm.
    fs.chmodSync(harness.dir, 0o1777);
    const r = sh(['bash', script, 'start', cluster], {
      env: {
        ...env,
        SLURM_TEST_PORT: String(20000 + (process.pid % 10000) * 2),
        SLURM_TEST_JOB_UID: String(JOB_UID),
        CUDA_MEMORY_SLURM_CLI: `${quote(process.execPath)} ${quote(path.join(pkg.root, 'dist', 'cli.js'))}`,
        CUDA_MEMORY_SLURM_HOOK_ARGS: '--gpu-memory 8GiB --shards 8@0 --gpumem-gpu 1',
        CUDA_MEMORY_SLURM_HOOK_ENV: `CUDA_MEMORY_SHM_DIR=${quote(harness.dir)}`,
      },
    });
    if (r.status !== 0) throw new Error(`the cluster did not start: ${r.stdout}${r.stderr}`);
  }, 120000);
  afterAll(() => {
    sh(['scancel', '--user=root']);
    sh(['scancel', `--user=${JOB_UID}`]);
    sh(['bash', script, 'stop', cluster]);
  }, 60000);

  const ledgers = (job) => (fs.existsSync(harness.files) ? fs.readdirSync(harness.files).filter((f) => f.includes(`.slurm-${job}.`)) : []);
  const jobOf = (out) => /Submitted batch job (\d+)/.exec(out)?.[1];
  const state = (job) => sh(['squeue', '-h', '-j', job, '-o', '%T %r']).stdout.trim();
  async function until(what, ok, ms = 30000) {
    const t0 = Date.now();
    for (;;) {
      const v = ok();
      if (v) return Date.now() - t0;
      if (Date.now() - t0 > ms) throw new Error(`not within ${ms} ms: ${what}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  // A job's steps done and its epilog run: squeue no longer lists it.
  const gone = (job) => until(`job ${job} to end`, () => state(job) === '');
  // srun of the stand-in program with these lines on its input; its answers, one per line.
  const srun = (gres, lines, extra = []) => {
    const r = sh(['srun', ...gres, ...extra, prog], { input: lines.map((l) => `${l}\n`).join('') + 'exit\n' });
    return { ...r, answers: r.stdout.trim().split('\n') };
  };

  // A shard:2 task's lines and what its answers must be: refused at exactly 2/8 of the GPU.
  const twoOfEight = [`alloc malloc ${2 * GiB + 2 * MiB}`, `alloc malloc ${2 * GiB}`, `alloc malloc ${2 * MiB}`, 'meminfo'];
  const expectTwoOfEight = (r) => {
    expect(r.answers[0]).toBe('err 2');
    expect(r.answers[1]).toMatch(/^ok 0x/);
    expect(r.answers[2]).toBe('err 2');
    expect(r.answers[3]).toBe(`ok 0 ${2 * GiB}`);
    expect(r.stderr).toMatch(
      /group 'slurm-\d+' refused cuMemAlloc of 2\.00 GiB: its budget is 2\.00 GiB \(slurm job \d+: 2 of 8 shards of 8 GiB/,
    );
  };
  // A job left running, driven line by line (harness.start): srun and its arguments, or setpriv's
  // for a second user's; and the one job of a user, asked once its task answered.
  const live = (args, env) => harness.start(args, env, []);
  const onlyJobOf = (user) => {
    const ids = sh(['squeue', '-h', '-u', String(user), '-o', '%A'])
      .stdout.trim()
      .split('\n');
    expect(ids).toEqual([expect.stringMatching(/^\d+$/)]);
    return ids[0];
  };

  test('--gres=shard:2 of 8: the program is refused at exactly 2/8 of the GPU, and sees 2/8 as its total', async () => {
    const r = srun(['--gres=shard:2'], twoOfEight);
    expectTwoOfEight(r);
    expect(r.status).toBe(0);
  });

  test(`a job of uid ${JOB_UID}: its task prolog holds it to its 2 of 8 shards; its ledger is in that user's folder; the epilog (root) removes it`, async () => {
    // The task prolog runs as the job's user, and its exports, LD_PRELOAD included, reach the task.
    const p = live([which('setpriv'), ...asJobUser, 'srun', `--chdir=${userBin}`, '--gres=shard:2', userProg], userEnv());
    try {
      const answers = [];
      for (const line of twoOfEight) answers.push(await p.send(line));
      expectTwoOfEight({ answers, stderr: await harness.stderrOf(p, /refused cuMemAlloc/) });
      const job = onlyJobOf(JOB_UID);
      // The group's ledger is in the job user's own folder (SLURM_JOB_UID's), none in root's.
      const folder = path.join(harness.dir, `cuda-memory-${JOB_UID}`);
      const ledger = `cuda-memory-group.slurm-${job}.${harness.DEV0}`;
      expect(fs.readdirSync(folder)).toEqual([ledger]);
      const [d, l] = [fs.statSync(folder), fs.statSync(path.join(folder, ledger))];
      expect([d.uid, d.gid, d.mode & 0o777, l.uid, l.gid]).toEqual([JOB_UID, JOB_UID, 0o700, JOB_UID, JOB_UID]);
      expect(ledgers(job)).toEqual([]);
      expect(harness.group(`slurm-${job}`)).toBeNull();
      // scancel: the task dies without leaving its group (SIGTERM), so its ledger outlives it, and
      // only the epilog, run as root, removes it from that user's folder.
      sh(['scancel', job]);
      await gone(job);
      expect(fs.readdirSync(folder)).toEqual([]);
      await p.exited;
    } finally {
      p.kill();
    }
  }, 60000);

  test(`uid ${JOB_UID} can neither remove a root job's group nor join it`, async () => {
    const p = live([which('srun'), '--gres=shard:2', prog], env);
    let job;
    try {
      expect(await p.send(`alloc malloc ${GiB}`)).toMatch(/^ok 0x/);
      job = onlyJobOf('root');
      const group = `slurm-${job}`;
      const before = harness.group(group);
      expect(before).toMatchObject({ budgetBytes: 2 * GiB, members: [expect.anything()] });
      const asUser = (args, opts) => sh([which('setpriv'), ...asJobUser, ...args], { cwd: pkg.root, ...opts });
      // The epilog run by that user for root's job cannot become root, and removes nothing.
      const e = asUser([process.execPath, path.join(pkg.root, 'dist', 'cli.js'), 'slurm', 'epilog'], {
        env: { ...userEnv(), SLURM_JOB_ID: job, SLURM_JOB_UID: '0', SLURM_JOB_GID: '0' },
      });
      expect(e.stderr).toMatch(/cannot become user 0 \(.*\); nothing removed/);
      expect(e.status).toBe(0);
      // A process of that user's naming root's job's group, at 4 GiB, is a member of a group of its
      // own (in its own folder): its 3 GiB fit there, not in root's job's 2 GiB, and it sees 4 GiB.
      const m = asUser([userProg], {
        env: { ...userEnv(), ...harness.budget(group, 4 * GiB), LD_PRELOAD: pkg.env.CUDA_MEMORY_PRELOAD },
        input: `alloc malloc ${3 * GiB}\nmeminfo\nexit\n`,
      });
      expect(m.stdout.split('\n').slice(0, 2)).toEqual([expect.stringMatching(/^ok 0x/), `ok ${GiB} ${4 * GiB}`]);
      // Root's job's group as it was: its budget, its charge, its one member, and still held to them.
      expect(ledgers(job)).toEqual([`cuda-memory-group.${group}.${harness.DEV0}`]);
      expect(harness.group(group)).toEqual(before);
      expect(await p.send(`alloc malloc ${GiB + 2 * MiB}`)).toBe('err 2');
      await p.exit();
    } finally {
      p.kill();
    }
    await gone(job);
    expect(ledgers(job)).toEqual([]);
  }, 60000);

  test("a step's child processes are members: the parent's 1 GiB and its child's 512 MiB leave no room for 768 MiB", () => {
    // Without the child's charge the parent's 1.75 GiB would fit the 2 GiB.
    const r = srun(
      ['--gres=shard:2'],
      [`alloc malloc ${GiB}`, `fork ${512 * MiB}`, `alloc malloc ${768 * MiB}`, 'release', `alloc malloc ${768 * MiB}`],
    );
    expect(r.answers[0]).toMatch(/^ok 0x/);
    expect(r.answers[1]).toMatch(/^ok child \d+ ok/);
    expect(r.answers[2]).toBe('err 2');
    // The child gone, its share is back.
    expect(r.answers[4]).toMatch(/^ok 0x/);
  });

  test("the steps of one job share the job's budget; the epilog leaves no ledger", async () => {
    // The batch step holds 1.5 GiB of the job's 2; a step started beside it gets the rest only.
    const body = [
      '#!/bin/sh',
      `(echo "alloc malloc ${1.5 * GiB}"; sleep 4) | ${quote(prog)} > ${quote(cluster)}/batch-$SLURM_JOB_ID.out &`,
      'sleep 1',
      `printf 'alloc malloc ${GiB}\\nalloc malloc ${256 * MiB}\\nexit\\n' | srun --overlap ${quote(prog)}`,
      'wait',
    ].join('\n');
    fs.writeFileSync(path.join(cluster, 'steps.sh'), body + '\n', { mode: 0o755 });
    const out = path.join(cluster, 'steps.out');
    const job = jobOf(sh(['sbatch', '--gres=shard:2', '-o', out, '-e', `${out}.err`, path.join(cluster, 'steps.sh')]).stdout);
    await gone(job);
    expect(fs.readFileSync(path.join(cluster, `batch-${job}.out`), 'utf8')).toMatch(/^ok 0x/);
    expect(fs.readFileSync(out, 'utf8').split('\n').slice(0, 2)).toEqual(['err 2', expect.stringMatching(/^ok 0x/)]);
    expect(ledgers(job)).toEqual([]);
  }, 60000);

  test('gpumem:3G jobs: two run on the 8 GiB GPU, a third waits in the queue; scancel gives the share back', async () => {
    const hold = path.join(cluster, 'hold.sh');
    fs.writeFileSync(hold, `#!/bin/sh\n(echo "alloc malloc ${3 * GiB}"; echo "alloc malloc ${2 * MiB}"; sleep 120) | ${quote(prog)}\n`, {
      mode: 0o755,
    });
    const submit = (n) =>
      jobOf(
        sh(['sbatch', '--gres=gpumem:3G', '-o', path.join(cluster, `hold-${n}.out`), '-e', path.join(cluster, `hold-${n}.err`), hold])
          .stdout,
      );
    const jobs = [submit(1), submit(2)];
    for (const j of jobs) await until(`job ${j} running`, () => state(j).startsWith('RUNNING'));
    const third = submit(3);
    // Each running job: its group at 3 GiB, charged 3 GiB; the 2 MiB more refused.
    await until('both jobs charged', () =>
      jobs.every((j) => cm.listGroups().groups.find((g) => g.name === `slurm-${j}`)?.chargedBytes === 3 * GiB),
    );
    for (const [i, j] of jobs.entries()) {
      expect(
        fs
          .readFileSync(path.join(cluster, `hold-${i + 1}.out`), 'utf8')
          .split('\n')
          .slice(0, 2),
      ).toEqual([expect.stringMatching(/^ok 0x/), 'err 2']);
      const g = cm.listGroups().groups.find((x) => x.name === `slurm-${j}`);
      expect(g).toMatchObject({ budgetBytes: 3 * GiB, job: { scheduler: 'slurm', id: j, uid: 0, user: 'root' } });
      expect(g.budgetSource).toBe(`slurm job ${j}: 3 GiB of 8 GiB (--gres=gpumem:3221225472)`);
    }
    // Slurm packs by gpumem: 3 + 3 + 3 GiB is more than the GPU's 8.
    await until(`job ${third} waiting for resources`, () => /^PENDING (Resources|Priority)/.test(state(third)));
    // Seen per job: top and the gauges.
    const top = sh([process.execPath, cli, 'top']).stdout;
    expect(top).toContain(`group slurm-${jobs[0]} on ${harness.DEV0}, slurm job ${jobs[0]} of root: budget 3 GiB`);
    const text = metrics.metricsText({ groups: true });
    expect(text).toContain(
      `cuda_memory_group_job_info{group="slurm-${jobs[0]}",device="${harness.DEV0}",scheduler="slurm",job="${jobs[0]}",user="root"} 1`,
    );
    // scancel: the job's processes end, its epilog removes its ledger, and the third job runs.
    const t0 = Date.now();
    sh(['scancel', jobs[0]]);
    await until(`job ${third} to start`, () => state(third).startsWith('RUNNING'));
    const started = Date.now() - t0;
    await until(`job ${jobs[0]}'s ledger to go`, () => ledgers(jobs[0]).length === 0);
    console.log(`scancel to the waiting job running: ${started} ms; to the cancelled job's ledger gone: ${Date.now() - t0} ms`);
    sh(['scancel', jobs[1], third]);
    for (const j of [...jobs, third]) await gone(j);
    for (const j of [...jobs, third]) expect(ledgers(j)).toEqual([]);
  }, 120000);

  test('a job without GPU GRES is untouched', () => {
    const plain = { ...env };
    delete plain.LD_PRELOAD;
    delete plain.CUDA_MEMORY_REQUIRE_SLURM; // the test run's own (.ci/run sets it), not a hook's
    const r = sh(['srun', 'env'], { env: plain });
    expect(r.stdout.split('\n').filter((l) => /^(CUDA_MEMORY_(?!SHM_DIR)|LD_PRELOAD=)/.test(l))).toEqual([]);
    expect(r.stdout).toMatch(/^SLURM_JOB_ID=\d+$/m);
    expect(r.status).toBe(0);
  });

  test('a job that would promise a GPU twice is refused: a line on its stderr, and its task fails', () => {
    // gpu:1 lands on GPU 0, whose memory the node shares in shards.
    const r = sh(['srun', '--gres=gpu:1', 'true']);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(
      /cuda-memory slurm: job \d+ refused: ERR_ALLOCATION_PROMISED_TWICE: GPU 0 is granted 2 times \(--gres=gpu:1\(IDX:0\), its shards\)/,
    );
    expect(r.stderr).toMatch(/TaskProlog failed/);
    // shards on GPU 0 and gpumem on GPU 1: memory on two GPUs, which one process cannot be held to.
    const both = sh(['srun', '--gres=shard:2,gpumem:1G', 'true']);
    expect(both.status).not.toBe(0);
    expect(both.stderr).toMatch(/refused: the job's memory is on 2 GPUs of this node/);
  });
});

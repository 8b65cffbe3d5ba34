'use strict';
// scripts/elastic-run.js without a GPU: how it finds hand-overs in the members' events, cuts the
// live section's samples at the budget changes, the checks of a finished run (each broken in
// turn), its plan (--dry-run) and its usage errors, and the Python member's syntax. The run
// itself needs the GPU machine (docs/processes.md says how).
const path = require('path');
const { spawnSync } = require('child_process');
const { root, expectEachFaultFailsItsCheck } = require('../helpers');

const script = path.join(root, 'scripts', 'elastic-run.js');
const { jsonLines, handoversOf, livePhases, checksOf } = require(script);
const { judgeSamples } = require(path.join(root, 'scripts', 'lib', 'gpu-steps.js'));
const GiB = 2 ** 30;
const MiB = 2 ** 20;

// Two members taking turns: member i's round r is asked for 0.9 s before 2.1 r + 1.05 i s, granted
// then (member 1's round 3 `lateBy` seconds later), and freed 1 s after its grant.
function turnEvents(rounds, lateBy = 0) {
  return [0, 1].map((i) =>
    Array.from({ length: rounds }, (_, r) => {
      const on = 2.1 * r + 1.05 * i;
      const asked = on - (r === 0 && i === 0 ? 0 : 0.9);
      const got = on + (i === 1 && r === 3 ? lateBy : 0);
      return [
        { event: 'got', round: r, asked, got, waitedS: got - asked },
        { event: 'free', round: r, from: got + 1, to: got + 1.01 },
      ];
    }).flat(),
  );
}

test('hand-overs: each grant that waited is matched with the free of the other member it waited for', () => {
  const h = handoversOf(turnEvents(10));
  // Every grant but the first member's first waited for the other's free.
  expect(h).toHaveLength(19);
  for (const x of h) expect(x.afterFreeS).toBeCloseTo(0.05, 6);
  const late = handoversOf(turnEvents(10, 2)).filter((x) => x.afterFreeS > 1);
  expect(late).toEqual([expect.objectContaining({ member: 1, round: 3 })]);
  // A grant that did not overlap any free of the other is no hand-over.
  expect(
    handoversOf([[{ event: 'got', round: 0, asked: 0, got: 0.01, waitedS: 0.01 }], [{ event: 'free', round: 0, from: 5, to: 5.1 }]]),
  ).toEqual([]);
});

test('jsonLines keeps every JSON object line, in order, and nothing else', () => {
  expect(jsonLines('phase ready\n{"a":1}\nnot json\n[1]\n{"b":2}\n')).toEqual([{ a: 1 }, [1], { b: 2 }]);
});

// Samples every 100 ms: [t, chargedBytes, nvmlBytes, budgetBytes].
const samplesOf = (rows) => rows.map(([t, chargedBytes, nvmlBytes, budgetBytes]) => ({ t, chargedBytes, nvmlBytes, budgetBytes }));
const B8 = 8 * GiB;
const B16 = 16 * GiB;
const ov = 1600 * MiB;
const marks = [
  { fromMs: 0, atMs: 0, budgetBytes: B8 },
  { fromMs: 1000, atMs: 1200, budgetBytes: B16 },
  { fromMs: 2000, atMs: 2200, budgetBytes: B8 },
];
function liveSamples() {
  return samplesOf([
    [0, 7 * GiB, 7 * GiB + ov, B8],
    [500, 8 * GiB, 8 * GiB + ov, B8],
    [1100, 8 * GiB, 8 * GiB + ov, B16], // group set is running: either budget
    [1300, 12 * GiB, 12 * GiB + ov, B16],
    [1800, 15 * GiB, 15 * GiB + ov, B16],
    [2100, 15 * GiB, 15 * GiB + ov, B16],
    [2300, 14 * GiB, 14 * GiB + ov, B8], // above the lowered budget: bound by the old one
    [2400, 11 * GiB, 11 * GiB + ov, B8],
    [2500, 7.5 * GiB, 7.5 * GiB + ov, B8],
    [2600, 8 * GiB, 8 * GiB + ov, B8],
  ]);
}

test('live phases: cut at the changes, the old budget bounding a lowered one until the charge is under it', () => {
  const [a, b, c] = livePhases(liveSamples(), marks, ov);
  expect(a).toMatchObject({ budgetBytes: B8, samples: 2, ledgerBudgets: [B8], maxChargedBytes: B8, chargedOver: 0, nvmlOver: 0 });
  expect(b).toMatchObject({ budgetBytes: B16, samples: 3, ledgerBudgets: [B16], maxChargedBytes: 15 * GiB, chargedOver: 0, nvmlOver: 0 });
  expect(c).toMatchObject({
    budgetBytes: B8,
    samples: 5,
    ledgerBudgets: [B8],
    underAfterMs: 300,
    roseBeforeUnder: false,
    maxChargedAfterUnderBytes: B8,
  });
  expect(c.chargedOver).toBe(0);
  // A rise before the charge is under the lowered budget, and a charge above it afterwards.
  const rose = liveSamples();
  rose[7].chargedBytes = 14.5 * GiB;
  expect(livePhases(rose, marks, ov)[2].roseBeforeUnder).toBe(true);
  const after = liveSamples();
  after[9].chargedBytes = 9 * GiB;
  expect(livePhases(after, marks, ov)[2]).toMatchObject({ maxChargedAfterUnderBytes: 9 * GiB, chargedOver: 1 });
  // Never under: no time, and every sample bound by the old budget.
  const never = liveSamples().slice(0, 8);
  expect(livePhases(never, marks, ov)[2]).toMatchObject({ underAfterMs: null, maxChargedAfterUnderBytes: null, chargedOver: 0 });
  // NVML above the budget in force plus the overheads.
  const nvml = liveSamples();
  nvml[1].nvmlBytes = B8 + ov + 1;
  expect(livePhases(nvml, marks, ov)[0].nvmlOver).toBe(1);
  // While the cudaMemGetInfo probe runs (and one interval either side), its context is allowed
  // for, and only then.
  const probe = 512 * 2 ** 20;
  nvml[1].nvmlBytes = B8 + ov + probe;
  expect(livePhases(nvml, marks, ov, [{ fromMs: 550, toMs: 580 }], probe)[0].nvmlOver).toBe(0);
  expect(livePhases(nvml, marks, ov, [{ fromMs: 300, toMs: 400 }], probe)[0].nvmlOver).toBe(0);
  expect(livePhases(nvml, marks, ov, [{ fromMs: 300, toMs: 399 }], probe)[0].nvmlOver).toBe(1);
  expect(livePhases(nvml, marks, ov, [{ fromMs: 700, toMs: 900 }], probe)[0].nvmlOver).toBe(1);
  nvml[1].nvmlBytes = B8 + ov + probe + 1;
  expect(livePhases(nvml, marks, ov, [{ fromMs: 550, toMs: 580 }], probe)[0].nvmlOver).toBe(1);
});

function judged(budgetBytes, rows) {
  const thresholdBytes = budgetBytes + ov;
  return {
    budgetBytes,
    thresholdBytes,
    judged: judgeSamples(
      samplesOf(rows).map((s) => ({ ...s, phase: null })),
      thresholdBytes,
      budgetBytes,
    ),
  };
}

// A finished run whose every check passes; each case below breaks one thing.
function passing() {
  const B20 = 20 * GiB;
  const ok = (result) => ({ exitCode: 0, signal: null, result });
  return {
    turns: {
      rounds: 10,
      members: [ok({ grants: 10, refusals: 0 }), ok({ grants: 10, refusals: 0 })],
      handovers: handoversOf(turnEvents(10)),
      ...judged(B20, [
        [0, 12 * GiB, 12 * GiB + ov],
        [100, 12 * GiB, 12 * GiB + ov],
      ]),
    },
    guaranteed: {
      requestBytes: B8,
      burstBytes: B8,
      cycles: 1000,
      torch: ok({ allocs: 700, refusals: 0, peakReservedBytes: 7.7 * GiB }),
      borrower: ok({ allocs: 5000, refusals: 900, leastRefusedBytes: B8 + 2 * MiB, peakBytes: B8 }),
      ...judged(B16, [[0, 15 * GiB, 15 * GiB + ov]]),
    },
    live: {
      members: ['node', 'torch', 'cpp'].map((name) => ({ name, ...ok({ refusals: 10 }) })),
      memInfo: [B8, B16, B8].map((b) => ({ budgetBytes: b, total: b, free: b / 4 })),
      phases: livePhases(liveSamples(), marks, ov),
    },
  };
}

test('the checks of a finished run, each broken in turn', () => {
  const cases = [
    [(r) => (r.turns.members[1].result.refusals = 1), /^turns: both members ran/],
    [(r) => (r.turns.members[0].exitCode = 1), /^turns: both members ran/],
    [(r) => (r.turns.members[0].result.grants = 9), /^turns: both members ran/],
    [(r) => (r.turns.handovers = handoversOf(turnEvents(10, 2))), /^turns: each grant that waited/],
    [(r) => (r.turns.handovers = r.turns.handovers.slice(0, 5)), /^turns: each grant that waited/],
    [(r) => Object.assign(r.turns, judged(20 * GiB, [[0, 21 * GiB, 21 * GiB]])), /^turns: the ledger never above/],
    [(r) => (r.guaranteed.torch.result.refusals = 1), /^guaranteed: the PyTorch member/],
    [(r) => (r.guaranteed.torch.exitCode = null), /^guaranteed: the PyTorch member/],
    [(r) => (r.guaranteed.borrower.result.leastRefusedBytes = B8), /^guaranteed: the borrower was refused/],
    [(r) => Object.assign(r.guaranteed.borrower.result, { refusals: 0, leastRefusedBytes: null }), /^guaranteed: the borrower was refused/],
    [(r) => Object.assign(r.guaranteed, judged(B16, [[0, 15 * GiB, B16 + ov + 1]])), /^guaranteed: the ledger never above/],
    [(r) => (r.live.members[2].exitCode = 1), /^live: every member ended/],
    [(r) => (r.live.phases[1].ledgerBudgets = [B8, B16]), /^live: the ledger held each budget/],
    [(r) => (r.live.memInfo[1].total = B8), /^live: cudaMemGetInfo/],
    [(r) => (r.live.phases[1].maxChargedBytes = B8), /^live: after the raise/],
    [(r) => (r.live.phases[2].roseBeforeUnder = true), /^live: after the lowering/],
    [(r) => (r.live.phases[2].underAfterMs = null), /^live: after the lowering/],
    [(r) => (r.live.phases[0].nvmlOver = 1), /^live: the ledger never above the budget in force/],
  ];
  expectEachFaultFailsItsCheck(passing, checksOf, cases);
  // A section left out has no checks.
  const r = passing();
  delete r.live;
  expect(checksOf(r)).toHaveLength(6);
});

test('--dry-run prints the plan; an unknown section or a missing --out is a usage error', () => {
  const dry = spawnSync(process.execPath, [script, '--dry-run', '--only', 'guaranteed,live'], { encoding: 'utf8' });
  expect(dry.status).toBe(0);
  const p = JSON.parse(dry.stdout);
  expect(p.turns).toBeUndefined();
  expect(p.guaranteed.torch).toEqual(expect.arrayContaining(['run', '--request', String(B8), 'guaranteed']));
  expect(p.guaranteed.burstBytes).toBe(B8);
  expect(p.live.budgets).toEqual([B8, B16, B8]);
  expect(p.live.set).toEqual(expect.arrayContaining(['group', 'set', p.live.group, '--limit', 'SIZE']));
  for (const [args, said] of [
    [['--only', 'waits'], /unknown section waits/],
    [[], /--out DIR is required/],
    [['--bogus'], /Unknown option/],
  ]) {
    const r = spawnSync(process.execPath, [script, ...args], { encoding: 'utf8' });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(said);
  }
});

test('the Python member parses', () => {
  const r = spawnSync(
    'python3',
    ['-c', 'import ast, sys; ast.parse(open(sys.argv[1]).read())', path.join(root, 'scripts', 'preload', 'torch-elastic.py')],
    {
      encoding: 'utf8',
    },
  );
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
});

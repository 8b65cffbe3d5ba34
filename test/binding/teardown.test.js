'use strict';
// A worker thread that exits (process.exit() in the worker, or worker.terminate()) with work in
// flight ends only itself: the process and its main thread go on, and the device's free memory
// returns to where it was. Each case runs in a child process, so a crash shows as a failure here.
const path = require('path');
const { spawnSync } = require('child_process');
const { describeGpu, gpu } = require('../helpers');

const fixture = path.join(__dirname, '..', 'fixtures', 'worker-exit.js');

function runCase(scenario, mode) {
  const r = spawnSync(process.execPath, [fixture, scenario, mode], { encoding: 'utf8', timeout: 110000 });
  const line = r.stdout.trim().split('\n').pop() || '';
  let report = null;
  try {
    report = JSON.parse(line);
  } catch {
    // reported below through the status, signal and stderr
  }
  return { status: r.status, signal: r.signal, stderr: r.stderr, report };
}

function expectSurvived(scenario, mode, { checkMemory }) {
  const r = runCase(scenario, mode);
  expect({ status: r.status, signal: r.signal, stderr: r.stderr }).toEqual({ status: 0, signal: null, stderr: '' });
  expect(r.report).toMatchObject({ scenario, mode, mainAlive: true, workerExitCode: mode === 'exit' ? 0 : 1 });
  if (checkMemory) {
    expect(typeof r.report.freeBefore).toBe('number');
    expect(r.report.freeAfter).toBe(r.report.freeBefore);
  }
  return r.report;
}

const modes = [
  ['exit', 'process.exit() in the worker'],
  ['terminate', 'worker.terminate()'],
];

describe('a worker that ends with host copies in flight ends alone', () => {
  for (const [mode, how] of modes) {
    test(`${how} during a 512 MiB host-to-host copyAsync`, () => {
      expectSurvived('host', mode, { checkMemory: false });
    });
    test(`${how} in the middle of 100 concurrent copies`, () => {
      expectSurvived('host-100', mode, { checkMemory: false });
    });
  }
});

describeGpu('a worker that ends with device work in flight ends alone and gives its memory back', () => {
  const scenarios = [
    ['driver', 'a 512 MiB pageable copy on the driver path'],
    ['staged', '1 GiB staged copies both ways'],
    ['pinned', '1 GiB pinned and write-combined copies'],
    ['registered', '512 MiB registered copies both ways'],
    ['stream', 'eight copies queued on a stream, and an event'],
    ['allocator', 'an allocator with 16 live blocks being filled'],
    ['async-allocator', "a stream-ordered ('async') allocator with 16 blocks on two streams being filled"],
    ['mixed-100', '100 concurrent copies of every kind'],
  ];
  for (const [scenario, what] of scenarios) {
    for (const [mode, how] of modes) {
      test(`${how} during ${what}`, () => {
        const r = expectSurvived(scenario, mode, { checkMemory: true });
        console.log(`${scenario}/${mode}: worker ended in ${r.ms} ms; device free ${r.freeAfter - r.freeBefore} bytes changed`);
      });
    }
  }
});

if (!gpu) test('the GPU teardown tests need a GPU (see the skipped suite above)', () => expect(gpu).toBe(false));

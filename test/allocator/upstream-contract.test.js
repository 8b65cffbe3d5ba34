'use strict';
// The upstream contract (native/core/allocator/upstream_contract.h) over the CUDA device's
// upstream, cudaMalloc's and cudaMallocManaged's, on a GPU; the core's tests run the same contract
// over the simulated device and a group's (native/core/test/allocator/upstream_contract_test.cc).
const { native } = require('../../dist/binding/native');
const { gpu, gpuCount, describeGpu } = require('../helpers');

const MiB = 2 ** 20;
// What the driver's own allocations may move the free memory by between two readings.
const slack = 8 * MiB;

// The contract reads the whole device's free memory, which another process moves: one of an
// earlier test that is still going away raised it by 16 MiB during the contract once in the whole
// suite on an H200 (a refusal past the free memory then succeeded). So the device is let settle
// first (five equal readings 100 ms apart, for at most 10 s), and a run that finds a rule broken
// runs once more after the device settles again: an upstream that breaks the contract breaks it
// in both runs, and the first run's findings are in the message.
function settle() {
  const until = Date.now() + 10000;
  let last = -1;
  let same = 0;
  while (same < 5 && Date.now() < until) {
    const { free } = native.memGetInfo(0);
    same = free === last ? same + 1 : 1;
    last = free;
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
  }
}

function contract(managed) {
  settle();
  const first = native.upstreamContract(0, managed, slack);
  if (first.length === 0) return [];
  settle();
  const second = native.upstreamContract(0, managed, slack);
  return second.length === 0 ? [] : [...second, `(the first run found: ${first.join('; ')})`];
}

describeGpu('the CUDA upstream keeps the contract every upstream keeps', () => {
  test("cudaMalloc's: regions, footprints, a refusal past the free memory, granules", () => {
    expect(contract(false)).toEqual([]);
  });
  test("cudaMallocManaged's", () => {
    expect(contract(true)).toEqual([]);
  });
});

test('the device is checked before anything is taken', () => {
  expect(() => native.upstreamContract(-1, false, 0)).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
  // The value as JavaScript prints it.
  expect(() => native.upstreamContract(-1, false, 0)).toThrow(/^device must be an integer from 0 to \d+, got -1$/);
  expect(() => native.upstreamContract(0.5, false, 0)).toThrow(/, got 0\.5$/);
  expect(() => native.upstreamContract(NaN, false, 0)).toThrow(/, got NaN$/);
  if (gpu) expect(() => native.upstreamContract(gpuCount, false, 0)).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
  else expect(() => native.upstreamContract(0, false, 0)).toThrow(expect.objectContaining({ code: 'ERR_CUDA_UNAVAILABLE' }));
});

'use strict';
// The upstream contract (native/core/allocator/upstream_contract.h) over the CUDA device's
// upstream, cudaMalloc's and cudaMallocManaged's, on a GPU; the core's tests run the same contract
// over the simulated device and a group's (native/core/test/allocator/upstream_contract_test.cc).
const { native } = require('../../dist/binding/native');
const { gpu, gpuCount, describeGpu } = require('../helpers');

const MiB = 2 ** 20;
// What the driver's own allocations may move the free memory by between two readings.
const slack = 8 * MiB;

describeGpu('the CUDA upstream keeps the contract every upstream keeps', () => {
  // The refusal asks for more than the device has: past its free memory, the driver first gives back
  // memory it held for this process (upstream_contract.h, refusal_reclaims).
  test("cudaMalloc's: regions, footprints, a refusal past the device's memory, granules", () => {
    expect(native.upstreamContract(0, false, slack)).toEqual([]);
  });
  test("cudaMallocManaged's", () => {
    expect(native.upstreamContract(0, true, slack)).toEqual([]);
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

'use strict';
// budgetFromAllocation: a scheduler's grants on each GPU as group budgets (lib/allocator/allocation.ts).
const { cm } = require('../helpers');

const GiB = 2 ** 30;
const H200 = 150110011392; // an H200's memory as CUDA reports it
const shares = (count, of, source = `shard:${count}`) => ({ kind: 'shares', count, of, source });
const bytes = (n, source = 'gpumem') => ({ kind: 'bytes', bytes: n, source });
const whole = { kind: 'whole', source: 'gpu:1' };

describe('budgetFromAllocation', () => {
  test('shares are that part of the GPU, rounded down, exact past 2^32', () => {
    expect(cm.budgetFromAllocation([{ gpu: 0, totalBytes: 8 * GiB, grants: [shares(2, 8)] }])).toEqual([
      { gpu: 0, budgetBytes: 2 * GiB, source: '2 of 8 shards of 8 GiB (shard:2)' },
    ]);
    const [b] = cm.budgetFromAllocation([{ gpu: 0, totalBytes: H200, grants: [shares(2, 8)] }]);
    expect(b.budgetBytes).toBe(37527502848); // 150110011392 / 4
    const [c] = cm.budgetFromAllocation([{ gpu: 0, totalBytes: H200 + 3, grants: [shares(1, 3)] }]);
    expect(c.budgetBytes).toBe(Math.floor((H200 + 3) / 3));
    const [d] = cm.budgetFromAllocation([{ gpu: 0, totalBytes: 2 ** 53 - 1, grants: [shares(3, 7)] }]);
    expect(BigInt(d.budgetBytes)).toBe(((2n ** 53n - 1n) * 3n) / 7n);
  });

  test('bytes are the budget; a whole GPU has none unless the admin sets a share', () => {
    expect(cm.budgetFromAllocation([{ gpu: 1, totalBytes: 8 * GiB, grants: [bytes(3 * GiB, 'gpumem:3G')] }])).toEqual([
      { gpu: 1, budgetBytes: 3 * GiB, source: '3 GiB of 8 GiB (gpumem:3G)' },
    ]);
    expect(cm.budgetFromAllocation([{ gpu: 0, totalBytes: null, grants: [bytes(3 * GiB)] }])[0].budgetBytes).toBe(3 * GiB);
    expect(cm.budgetFromAllocation([{ gpu: 0, totalBytes: 8 * GiB, grants: [whole] }])).toEqual([
      { gpu: 0, budgetBytes: null, source: 'the whole GPU (gpu:1), no budget' },
    ]);
    expect(cm.budgetFromAllocation([{ gpu: 0, totalBytes: 8 * GiB, grants: [whole] }], { wholeGpuFraction: 0.75 })[0].budgetBytes).toBe(
      6 * GiB,
    );
  });

  test('each GPU with a grant gets its own budget; a GPU without one none', () => {
    const r = cm.budgetFromAllocation([
      { gpu: 0, totalBytes: 8 * GiB, grants: [shares(4, 8)] },
      { gpu: 1, totalBytes: 16 * GiB, grants: [] },
      { gpu: 'GPU-22222222-2222-2222-2222-222222222222', totalBytes: 16 * GiB, grants: [shares(1, 4)] },
    ]);
    expect(r.map((b) => [b.gpu, b.budgetBytes])).toEqual([
      [0, 4 * GiB],
      ['GPU-22222222-2222-2222-2222-222222222222', 4 * GiB],
    ]);
  });

  test('a GPU granted twice is refused: its memory would be promised twice', () => {
    for (const grants of [
      [shares(2, 8), bytes(GiB)],
      [shares(2, 8), whole],
      [bytes(GiB), whole],
      [shares(1, 8), shares(1, 8)],
    ]) {
      let err;
      try {
        cm.budgetFromAllocation([{ gpu: 0, totalBytes: 8 * GiB, grants }]);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(cm.CudaMemoryError);
      expect(err.code).toBe('ERR_ALLOCATION_PROMISED_TWICE');
      expect(err.message).toContain('GPU 0 is granted 2 times');
      for (const g of grants) expect(err.message).toContain(g.source);
    }
  });

  test('grants that cannot be budgets are refused with ERR_ALLOCATION_INVALID, naming the grant', () => {
    const refused = (gpu, total, grant) => {
      try {
        cm.budgetFromAllocation([{ gpu, totalBytes: total, grants: [grant] }]);
      } catch (e) {
        return `${e.code}: ${e.message}`;
      }
      return 'accepted';
    };
    expect(refused(0, 8 * GiB, shares(9, 8))).toBe('ERR_ALLOCATION_INVALID: GPU 0: shard:9 is 9 shares of a GPU cut into 8');
    expect(refused(0, null, shares(1, 8))).toMatch(/^ERR_ALLOCATION_INVALID: .*memory is not known/);
    expect(refused(0, 8 * GiB, bytes(9 * GiB, 'gpumem:9G'))).toBe(
      "ERR_ALLOCATION_INVALID: GPU 0: gpumem:9G is 9 GiB, more than the GPU's 8 GiB",
    );
    expect(refused(0, 1000, shares(1, 8))).toMatch(/below the least, 256 bytes/);
    expect(refused(0, 8 * GiB, bytes(255))).toMatch(/below the least/);
  });

  test('hostile input is an argument error naming it', () => {
    const bad = [
      [[{ gpu: -1, totalBytes: GiB, grants: [] }], /allocation\[0\]\.gpu/],
      [[{ gpu: 'a b', totalBytes: GiB, grants: [] }], /allocation\[0\]\.gpu/],
      [[{ gpu: 0, totalBytes: 0, grants: [] }], /allocation\[0\]\.totalBytes/],
      [[{ gpu: 0, totalBytes: 2 ** 53, grants: [] }], /allocation\[0\]\.totalBytes/],
      [[{ gpu: 0, totalBytes: GiB, grants: [{ kind: 'shares', count: 0, of: 8 }] }], /grants\[0\]\.count/],
      [[{ gpu: 0, totalBytes: GiB, grants: [{ kind: 'shares', count: 1.5, of: 8 }] }], /grants\[0\]\.count/],
      [[{ gpu: 0, totalBytes: GiB, grants: [{ kind: 'shares', count: 1, of: 2 ** 21 }] }], /grants\[0\]\.of/],
      [[{ gpu: 0, totalBytes: GiB, grants: [{ kind: 'bytes', bytes: -1 }] }], /grants\[0\]\.bytes/],
      [[{ gpu: 0, totalBytes: GiB, grants: [{ kind: 'half' }] }], /grants\[0\]\.kind/],
      [[{ gpu: 0, totalBytes: GiB, grants: [{ kind: 'whole', source: 5 }] }], /grants\[0\]\.source/],
      [
        [
          { gpu: 0, totalBytes: GiB, grants: [] },
          { gpu: 0, totalBytes: GiB, grants: [] },
        ],
        /each GPU once/,
      ],
      ['gpu0', /allocation/],
    ];
    for (const [input, re] of bad) expect(() => cm.budgetFromAllocation(input)).toThrow(re);
    expect(() => cm.budgetFromAllocation([], { wholeGpuFraction: 0 })).toThrow(/wholeGpuFraction/);
    expect(() => cm.budgetFromAllocation([], { wholeGpuFraction: 1.5 })).toThrow(/wholeGpuFraction/);
  });
});

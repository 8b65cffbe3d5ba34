'use strict';
// What the peer translations share: sizes, an allocator on a simulated device, and the
// no-duplicate, no-overlap check the peers' own tests make on their pointers.
const { cm, simAllocator: sim } = require('../../helpers');

const KiB = 1024;
const MiB = 2 ** 20;
const GiB = 2 ** 30;

/** Sorted by address, no two buffers share an address and none reaches into the next. */
function expectDisjoint(buffers) {
  const spans = buffers.map((b) => [b.address, b.byteLength]).sort((x, y) => x[0] - y[0]);
  for (let i = 1; i < spans.length; i++) {
    expect(spans[i][0]).not.toBe(spans[i - 1][0]);
    expect(spans[i][0] - spans[i - 1][0]).toBeGreaterThanOrEqual(spans[i - 1][1]);
  }
}

module.exports = { cm, KiB, MiB, GiB, sim, expectDisjoint };

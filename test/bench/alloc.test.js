'use strict';
// lib/bench/alloc.ts on a GPU: a small run of the allocator benchmark.
const path = require('path');
const { execFileSync } = require('child_process');
const { cm, describeGpu, root } = require('../helpers');

describeGpu('allocator benchmark (small run)', () => {
  test('cuda-memory bench-alloc --json prints every row with its samples summarized', () => {
    const out = execFileSync(process.execPath, [path.join(root, 'dist', 'cli.js'), 'bench-alloc', '--json', '--pairs', '2000'], {
      encoding: 'utf8',
    });
    const r = JSON.parse(out);
    expect(r.schema).toBe('cuda-memory/alloc-benchmark@1');
    expect(r.gpu).toBe(cm.devices()[0].name);
    expect(r.rows.map((x) => x.name)).toEqual([
      'allocator.alloc + free (cached size, device)',
      'allocator.alloc + free, held across an await (device)',
      'allocator.alloc + free, recording a trace (device)',
      'allocator.alloc + free (mixed sizes 4 KiB-8 MiB, device)',
      'allocator.alloc + free, expandableSegments (cached size, device)',
      'allocator.alloc + free, expandableSegments (mixed sizes 4 KiB-8 MiB)',
      'expandableSegments: map + unmap 1 granule (alloc, free, emptyCache)',
      'expandableSegments: map + unmap 32 granules (alloc, free, emptyCache)',
      "allocator.alloc + free, backend 'async' (cached size)",
      "allocator.alloc + free, backend 'async' (mixed sizes 4 KiB-8 MiB)",
      "allocator.alloc on one stream + free on another, backend 'async'",
      'allocator.alloc + free (simulated device)',
      'cudaMalloc + cudaFree (C++, no JS)',
      'cudaMalloc + cudaFree (C++, no JS)',
      'cudaMalloc + cudaFree (C++, child process)',
      'cudaMalloc + cudaFree (C++, child under the interposer)',
      'cudaMalloc + cudaFree (C++, child process)',
      'cudaMalloc + cudaFree (C++, child under the interposer)',
      'pinnedPool.alloc + free (hit)',
      'cudaMallocHost + cudaFreeHost (C++, no JS)',
      'cudaMallocHost + cudaFreeHost (C++, no JS)',
    ]);
    for (const x of r.rows) {
      expect(x.microseconds.count).toBeGreaterThan(0);
      expect(x.microseconds.median).toBeGreaterThan(0);
      expect(x.microseconds.p10).toBeLessThanOrEqual(x.microseconds.median);
      expect(x.microseconds.median).toBeLessThanOrEqual(x.microseconds.p90);
    }
    expect(r.rows[0].microseconds.count).toBe(2);
  });
});

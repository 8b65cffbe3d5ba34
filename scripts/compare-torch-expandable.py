#!/usr/bin/env python3
"""PyTorch's expandable segments beside examples/expandable-segments.js and the expandable rows
of `cuda-memory bench-alloc`: the same fragmenting workload (128 blocks of 4 MiB, all but the
last freed, then 508 MiB) under a cap of 520 MiB, with and without
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, its outcome and peak reserved memory; then,
with expandable segments, a cached 1 MiB alloc+free and a 2 MiB block that must be mapped
(torch.empty, del, empty_cache), in microseconds (median, p10, p90).

The cap is 520 MiB rather than the example's 512: PyTorch takes blocks of 1 to 10 MiB in 20 MiB
segments (with expandable segments, it maps 20 MiB at a time), so under 512 MiB it runs out at
block 125 in both configurations, before the workload's question is asked. The setting must be
made before CUDA starts, so each configuration runs in a child process.
"""
import os
import statistics
import subprocess
import sys
import time

if len(sys.argv) > 1 and sys.argv[1] == "child":
    import torch

    MiB = 1 << 20
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(520 * MiB / total, 0)
    held = []
    try:
        for _ in range(128):
            held.append(torch.empty(4 * MiB, dtype=torch.uint8, device="cuda"))
        for i in range(127):
            held[i] = None
        big = torch.empty(508 * MiB, dtype=torch.uint8, device="cuda")
        del big
        outcome = "survived"
    except torch.OutOfMemoryError:
        # PyTorch serves 4 MiB blocks from 20 MiB segments: under the cap it can fail before the
        # 128 blocks are all there.
        stage = f"at block {len(held)} of 128" if len(held) < 128 else "at the 508 MiB block"
        outcome = f"out of memory {stage}"
    held = None
    peak = torch.cuda.max_memory_reserved() / MiB
    segments = torch.cuda.memory_stats().get("segment.all.peak", 0)
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") or "default"
    print(f"torch {torch.__version__} ({conf}): {outcome}; peak reserved {peak:.0f} MiB in {segments} segment(s)", flush=True)
    if "expandable" in conf:
        torch.cuda.set_per_process_memory_fraction(1.0, 0)

        def timed(pair, n, warm, batch):
            # n samples, each the mean of `batch` pairs (as bench-alloc batches cached pairs)
            for _ in range(warm):
                pair()
            out = []
            for _ in range(n):
                t0 = time.perf_counter_ns()
                for _ in range(batch):
                    pair()
                out.append((time.perf_counter_ns() - t0) / 1000 / batch)
            out.sort()
            return statistics.median(out), out[len(out) // 10], out[len(out) * 9 // 10]

        def cached():
            x = torch.empty(MiB, dtype=torch.uint8, device="cuda")
            del x

        def mapped():
            x = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda")
            del x
            torch.cuda.empty_cache()

        for name, pair, n, warm, batch in [
            ("cached 1 MiB alloc+free", cached, 200, 100_000, 1000),
            ("map + unmap a 2 MiB block (empty, del, empty_cache)", mapped, 200, 5, 1),
        ]:
            med, p10, p90 = timed(pair, n, warm, batch)
            print(f"torch expandable segments: {name}: median {med:.3f} us, p10 {p10:.3f} us, p90 {p90:.3f} us", flush=True)
    sys.exit(0)

for conf in ["", "expandable_segments:True"]:
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
    subprocess.run([sys.executable, __file__, "child"], env=env, check=True)

#!/usr/bin/env python3
"""PyTorch's caching allocator on the same machine, for comparison with `cuda-memory bench-alloc`:
microseconds per torch.empty + del of a cached 1 MiB block, median of batches of 1000 pairs."""
import statistics
import time

import torch

n = 1 << 20
for _ in range(5000):
    x = torch.empty(n, dtype=torch.uint8, device="cuda")
    del x
samples = []
for _ in range(200):
    t0 = time.perf_counter_ns()
    for _ in range(1000):
        x = torch.empty(n, dtype=torch.uint8, device="cuda")
        del x
    samples.append((time.perf_counter_ns() - t0) / 1000 / 1000)
samples.sort()
print(f"torch {torch.__version__} caching allocator, torch.empty(1 MiB) + del: median {statistics.median(samples):.3f} us, "
      f"p10 {samples[len(samples) // 10]:.3f} us, p90 {samples[len(samples) * 9 // 10]:.3f} us per pair")

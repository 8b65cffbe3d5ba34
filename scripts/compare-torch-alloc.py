#!/usr/bin/env python3
"""PyTorch's allocators on the same machine, for comparison with `cuda-memory bench-alloc`:
microseconds per alloc+free pair, median (p10, p90) of batches of 1000 pairs.

Rows: a cached 1 MiB block (torch.empty + del); mixed sizes, the same 1,024 sizes from 4 KiB to
8 MiB that bench-alloc uses; a block allocated on one stream and last used on another
(record_stream), freed. The backend is PyTorch's own caching allocator, or CUDA's stream-ordered
pool when run with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (set before CUDA starts).
Where CuPy is installed, its default memory pool's cached 1 MiB pair (cupy.empty + del) follows.

--only-cached: the cached 1 MiB rows only. --json FILE: the rows also as JSON, a list of
{library, version, row, median, p10, p90} in microseconds.
"""
import argparse
import json
import statistics
import time

import torch


def mixed_sizes():
    # The xorshift32 sequence of lib/bench/alloc.ts mixedSizes().
    x, out = 2463534242, []
    for _ in range(1024):
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        out.append(round(4096 * 2 ** ((x / 4294967296) * 11)))
    return out


def measure(pair, warmup=100_000, batches=200):
    for i in range(warmup):
        pair(i)
    samples = []
    for b in range(batches):
        t0 = time.perf_counter_ns()
        for i in range(1000):
            pair(i)
        samples.append((time.perf_counter_ns() - t0) / 1000 / 1000)
    samples.sort()
    return statistics.median(samples), samples[len(samples) // 10], samples[len(samples) * 9 // 10]


def cached(_):
    x = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    del x


sizes = mixed_sizes()


def mixed(i):
    x = torch.empty(sizes[i & 1023], dtype=torch.uint8, device="cuda")
    del x


s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()


def two_streams(_):
    with torch.cuda.stream(s1):
        x = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    x.record_stream(s2)
    del x


parser = argparse.ArgumentParser()
parser.add_argument("--only-cached", action="store_true")
parser.add_argument("--json")
args = parser.parse_args()
rows = []


def report(library, version, name, pair):
    med, p10, p90 = measure(pair)
    rows.append({"library": library, "version": version, "row": name, "median": med, "p10": p10, "p90": p90})
    print(f"{library} {version}: {name}: median {med:.3f} us, p10 {p10:.3f} us, p90 {p90:.3f} us per pair", flush=True)


backend = torch.cuda.get_allocator_backend()
torch_rows = [("cached 1 MiB", cached), ("mixed sizes 4 KiB-8 MiB", mixed), ("alloc on one stream, used and freed on another", two_streams)]
for name, pair in torch_rows[:1] if args.only_cached else torch_rows:
    report(f"torch ({backend})", torch.__version__, name, pair)
torch.cuda.synchronize()

try:
    import cupy
except ImportError:
    cupy = None
if cupy is not None:

    def cupy_cached(_):
        x = cupy.empty(1 << 20, dtype=cupy.uint8)
        del x

    report("cupy (default memory pool)", cupy.__version__, "cached 1 MiB", cupy_cached)
    cupy.cuda.Device().synchronize()

if args.json:
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=2)

#!/usr/bin/env python3
"""vLLM's start-up memory profile, done with PyTorch alone, for scripts/servers-run.js.

vLLM's GPU worker (vllm/v1/worker/gpu_worker.py) takes a torch.cuda.mem_get_info() snapshot at
start and refuses to start when the free memory is below total x gpu_memory_utilization (the
ValueError below); it then loads the model, runs a profiling forward pass, and gives the KV cache
total x utilization less the peak it saw (the weights, the pass's activations, and what was taken
outside PyTorch's allocator). This script does the same with plain tensors:

  vllm-profile.py [--utilization 0.9] [--model-gib 4] [--activation-gib 0.5] [--layers 32] [--hold 1.0]

`phase filled` is printed once the cache is allocated and written, held --hold seconds. One JSON
line at the end; exit 1 where vLLM would not start.
"""
import argparse
import json
import os
import time

import torch

GiB = 2**30
MiB = 2**20


def filled(nbytes):
    return torch.ones(nbytes, dtype=torch.uint8, device="cuda")  # made and written: the memory is really used


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--utilization", type=float, default=0.9)
    p.add_argument("--model-gib", type=float, default=4)
    p.add_argument("--activation-gib", type=float, default=0.5)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--hold", type=float, default=1.0)
    o = p.parse_args()
    out = {"pid": os.getpid(), "utilization": o.utilization, "started": False}

    # 1. The start-up snapshot, and vLLM's check of it.
    torch.cuda.empty_cache()
    free0, total = torch.cuda.mem_get_info()
    requested = int(total * o.utilization)
    out.update(totalBytes=total, freeAtStartBytes=free0, requestedBytes=requested)
    if free0 < requested:
        out["error"] = (
            f"ValueError: Free memory on device ({free0 / GiB:.2f}/{total / GiB:.2f} GiB) on startup is less than desired "
            f"GPU memory utilization ({o.utilization}, {requested / GiB:.2f} GiB)"
        )
        print(json.dumps(out), flush=True)
        raise SystemExit(1)

    # 2. The model's weights, then a profiling pass whose activations come and go.
    weights = filled(int(o.model_gib * GiB))
    torch.cuda.reset_peak_memory_stats()
    act = filled(int(o.activation_gib * GiB))
    torch.cuda.synchronize()
    del act
    free1, _ = torch.cuda.mem_get_info()
    peak = torch.cuda.memory_stats()["allocated_bytes.all.peak"]
    torch.cuda.empty_cache()
    torch_now = torch.cuda.memory_stats()["allocated_bytes.all.current"]
    free2, total2 = torch.cuda.mem_get_info()
    non_torch = (total2 - free2) - torch_now
    if non_torch > 0:
        peak += non_torch

    # 3. The KV cache: what is left of the share, one tensor per layer in whole 2 MiB pages.
    kv = requested - peak
    out.update(modelBytes=weights.numel(), peakBytes=peak, nonTorchBytes=non_torch, freeAfterProfileBytes=free1, kvCacheBytes=kv)
    if kv <= 0:
        out["error"] = "ValueError: No available memory for the cache blocks"
        print(json.dumps(out), flush=True)
        raise SystemExit(1)
    per_layer = (kv // o.layers) // (2 * MiB) * (2 * MiB)
    cache = [filled(per_layer) for _ in range(o.layers)]
    torch.cuda.synchronize()
    free3, _ = torch.cuda.mem_get_info()
    out.update(started=True, kvAllocatedBytes=per_layer * len(cache), reservedBytes=torch.cuda.memory_reserved(), freeAfterCacheBytes=free3)
    print("phase filled", flush=True)
    time.sleep(o.hold)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

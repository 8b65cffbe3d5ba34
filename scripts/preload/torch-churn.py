#!/usr/bin/env python3
"""PyTorch's side of the shared-budget run (scripts/shared-budget-run.js): tensors of random sizes
allocated, written and freed as a training loop's activations come and go, on GPU 0, in a process
that `cuda-memory run` made a member of a group budget.

  torch-churn.py --mode shared --seconds S --seed N   for S seconds; a refusal (torch.OutOfMemoryError)
                                                      is counted, half the live tensors are freed,
                                                      and the loop goes on
  torch-churn.py --mode replay --steps N --seed N     a fixed, seeded sequence; the cache is emptied
                                                      after each free, so the program asks the driver
                                                      for the same memory in every run; the first
                                                      refusal ends it (exit 3)
  torch-churn.py --mode idle --seconds S              the CUDA context and PyTorch's kernels loaded,
                                                      no tensor kept: its context overhead

One JSON line at the end: {mode, pid, allocs, frees, refusals, refusedAs, survived, peakReservedBytes}.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch

MiB = 2**20


def size(rng, lo, hi):
    # Log-uniform, as tensor sizes in a model spread over orders of magnitude; whole MiB.
    return max(1, int(math.exp(rng.uniform(math.log(lo), math.log(hi))) // MiB)) * MiB


def tensor(nbytes):
    t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    t.fill_(1)  # the memory is really used
    return t


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["shared", "replay", "idle"], required=True)
    p.add_argument("--seconds", type=float, default=120)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--min-bytes", type=int, default=MiB)
    p.add_argument("--max-bytes", type=int, default=1024 * MiB)
    p.add_argument("--max-live", type=int, default=32)
    # Set up (the context, the allocator's streams, the fill kernel), print "ready", then wait for
    # this file before the time starts: the members of one run set themselves up before any churns.
    p.add_argument("--go")
    o = p.parse_args()
    rng = random.Random(o.seed)
    out = {"mode": o.mode, "pid": os.getpid(), "allocs": 0, "frees": 0, "refusals": 0, "refusedAs": None, "survived": True}

    def set_up():
        tensor(MiB)  # loads the fill kernel's module, as the other modes do
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        print("ready", flush=True)

    if o.mode == "idle":
        set_up()
        time.sleep(o.seconds)
    else:
        if o.go:
            set_up()
            waited = time.monotonic() + 120
            while not os.path.exists(o.go) and time.monotonic() < waited:
                time.sleep(0.001)
        live = []
        deadline = time.monotonic() + o.seconds
        step = 0
        while (time.monotonic() < deadline) if o.mode == "shared" else (step < o.steps):
            step += 1
            if live and (len(live) >= o.max_live or rng.random() < 0.45):
                live.pop(rng.randrange(len(live)))
                out["frees"] += 1
                if o.mode == "replay":
                    torch.cuda.empty_cache()
                continue
            nbytes = size(rng, o.min_bytes, o.max_bytes)
            try:
                live.append(tensor(nbytes))
                out["allocs"] += 1
            except torch.OutOfMemoryError as e:  # the refusal, as PyTorch raises it
                out["refusals"] += 1
                out["refusedAs"] = type(e).__module__ + "." + type(e).__name__
                if o.mode == "replay":
                    out["survived"] = False
                    out["failedAtStep"] = step
                    break
                del live[: len(live) // 2]
        torch.cuda.synchronize()
        out["peakReservedBytes"] = torch.cuda.max_memory_reserved()
        live.clear()
    print(json.dumps(out), flush=True)
    return 0 if out["survived"] else 3


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PyTorch's side of the elastic-sharing run (scripts/elastic-run.js), on GPU 0, in a process that
`cuda-memory run` made a member of a group budget.

  torch-elastic.py turns --rounds N --bytes B --hold S
      N times: one tensor of B bytes (waiting, under `run --wait`, while the group has no room),
      written, held S seconds, freed and the cache emptied, so the memory goes back to the group.
      Prints a JSON event per grant and per free, with wall-clock times (time.time(), one clock for
      every process on the machine): {"event":"got","round","asked","got","waitedS"} and
      {"event":"free","round","from","to"}.
  torch-elastic.py guaranteed --cycles N --request B [--margin M] [--seed N]
      N cycles of a training loop's tensors (log-uniform sizes from 16 MiB to 1 GiB, whole 2 MiB
      pages) kept under B - M bytes live, so that every allocation is within the member's request;
      after each free the cache is emptied, so every allocation reaches the driver and the group.
      Every refusal is recorded with what PyTorch had reserved and what it asked.

Both print `phase ready` after the CUDA context is made (then wait --delay seconds), and one JSON summary line at the end:
{mode, pid, grants|allocs, refusals, refusedAs, ...}. A refusal is torch.OutOfMemoryError, caught.
"""
import argparse
import json
import math
import os
import random
import time

import torch

MiB = 2**20
PAGE = 2 * MiB


def emit(v):
    print(json.dumps(v), flush=True)


def tensor(nbytes):
    t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    t.fill_(1)  # the memory is really used
    return t


def turns(o, out):
    out.update(grants=0, waits=[])
    for r in range(o.rounds):
        asked = time.time()
        try:
            t = torch.empty(o.bytes, dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError as e:
            out["refusals"] += 1
            out["refusedAs"] = type(e).__module__ + "." + type(e).__name__
            emit({"event": "refused", "round": r, "asked": asked, "at": time.time()})
            continue
        got = time.time()
        out["grants"] += 1
        out["waits"].append(got - asked)
        emit({"event": "got", "round": r, "asked": asked, "got": got, "waitedS": got - asked})
        t.fill_(1)
        torch.cuda.synchronize()
        time.sleep(o.hold)
        freed = time.time()
        del t
        torch.cuda.empty_cache()
        emit({"event": "free", "round": r, "from": freed, "to": time.time()})
        time.sleep(0.05)  # the other member's turn comes in between


def guaranteed(o, out):
    rng = random.Random(o.seed)
    limit = o.request - o.margin
    out.update(allocs=0, frees=0, refusalsWithin=[], peakReservedBytes=0)
    live = []
    live_bytes = 0
    for _ in range(o.cycles):
        n = max(1, int(math.exp(rng.uniform(math.log(16 * MiB), math.log(1024 * MiB))) // PAGE)) * PAGE
        while live and (live_bytes + n > limit or rng.random() < 0.3):
            live_bytes -= live.pop(rng.randrange(len(live))).numel()
            out["frees"] += 1
            torch.cuda.empty_cache()
        if live_bytes + n > limit:
            continue
        reserved = torch.cuda.memory_reserved()
        try:
            live.append(tensor(n))
            live_bytes += n
            out["allocs"] += 1
            out["peakReservedBytes"] = max(out["peakReservedBytes"], torch.cuda.memory_reserved())
        except torch.OutOfMemoryError as e:
            out["refusals"] += 1
            out["refusedAs"] = type(e).__module__ + "." + type(e).__name__
            out["refusalsWithin"].append({"reservedBytes": reserved, "askedBytes": n, "liveBytes": live_bytes})
    del live
    torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("turns")
    t.add_argument("--rounds", type=int, default=10)
    t.add_argument("--bytes", type=int, required=True)
    t.add_argument("--hold", type=float, default=1.0)
    g = sub.add_parser("guaranteed")
    g.add_argument("--cycles", type=int, default=1000)
    g.add_argument("--request", type=int, required=True)
    g.add_argument("--margin", type=int, default=256 * MiB)
    g.add_argument("--seed", type=int, default=1)
    for q in (t, g):
        q.add_argument("--delay", type=float, default=0, help="seconds to wait after `phase ready`")
    o = p.parse_args()
    out = {"mode": o.mode, "pid": os.getpid(), "refusals": 0, "refusedAs": None}
    tensor(MiB)  # the context and the fill kernel, before the run's first step
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    out["memGetInfo"] = {"free": free, "total": total}
    print("phase ready", flush=True)
    time.sleep(o.delay)
    (turns if o.mode == "turns" else guaranteed)(o, out)
    emit(out)


if __name__ == "__main__":
    main()

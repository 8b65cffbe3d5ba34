#!/usr/bin/env python3
"""JAX sizing itself, for scripts/servers-run.js: the backend started on GPU 0 with the environment's
XLA_PYTHON_CLIENT_* settings (by default XLA's allocator takes 75% of the total memory that
cuMemGetInfo reports, at once), then an array that fits and one that does not.

  jax-fit.py [--array-gib 4] [--too-big-gib 10] [--hold 1.0]

Each step prints `phase NAME` and is held --hold seconds, so that the caller's 100 ms samples of
NVML and the ledger fall inside it: `prealloc` (the backend up), `array` (the --array-gib array
made and kept), `refused` (the --too-big-gib array asked for). 0 leaves a step out. One JSON line
at the end; the refusal is caught, so the process ends normally.
"""
import argparse
import json
import os
import time

GiB = 2**30


def phase(name, hold):
    print("phase " + name, flush=True)
    time.sleep(hold)


def stats(dev):
    s = dev.memory_stats() or {}
    keep = ("bytes_limit", "bytes_in_use", "bytes_reserved", "pool_bytes", "peak_bytes_in_use")
    return {k: s[k] for k in keep if k in s}


def rows(gib):
    # gib rows of 1 GiB of float32: no dimension above 2^31 elements.
    import jax.numpy as jnp

    return jnp.ones((gib, GiB // 4), dtype=jnp.float32)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--array-gib", type=int, default=4)
    p.add_argument("--too-big-gib", type=int, default=10)
    p.add_argument("--hold", type=float, default=1.0)
    o = p.parse_args()

    import jax

    dev = jax.devices()[0]  # starts the backend: with preallocation, the allocator takes its share here
    env = {k: os.environ[k] for k in ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION") if k in os.environ}
    out = {"pid": os.getpid(), "jax": jax.__version__, "platform": dev.platform, "env": env, "prealloc": stats(dev)}
    phase("prealloc", o.hold)

    x = None
    if o.array_gib:
        x = rows(o.array_gib)
        x.block_until_ready()
        out["array"] = {"bytes": int(x.nbytes), "ok": True, "stats": stats(dev)}
        phase("array", o.hold)

    if o.too_big_gib:
        r = {"bytes": o.too_big_gib * GiB, "refused": False}
        try:
            y = rows(o.too_big_gib)
            y.block_until_ready()
            del y
        except Exception as e:  # XLA's own error (XlaRuntimeError / JaxRuntimeError), caught
            r.update(refused=True, refusedAs=type(e).__module__ + "." + type(e).__name__, message=str(e)[:400])
            r["resourceExhausted"] = "RESOURCE_EXHAUSTED" in str(e)
        out["tooBig"] = r
        phase("refused", o.hold)
        if x is not None:  # the process goes on working after the refusal
            out["afterRefusal"] = float((x[0, :1024] * 2).sum())

    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""CuPy's default memory pool, numba's device arrays or PyTorch's caching allocator meeting the
budget, for scripts/servers-run.js: blocks of --chunk-mib allocated (and written, for CuPy and
PyTorch) until the library refuses one with its own error, which is caught; then everything is
freed and one block allocated again.

  refuse.py --lib cupy|numba|torch [--chunk-mib 512] [--max-chunks 4096] [--hold 1.0] [--idle]

The refusal expected: cupy.cuda.memory.OutOfMemoryError (the pool frees its cached blocks and
retries before it raises), numba's CudaAPIError with CUDA_ERROR_OUT_OF_MEMORY (its memory manager
runs its pending frees and retries first), torch.OutOfMemoryError (the caching allocator frees its
cached blocks and retries first). Any other error is not caught. `phase full` is printed
at the refusal, held --hold seconds. One JSON line at the end; exit 3 if nothing was refused.
--idle: one small block made and freed (the library's context and kernels loaded), `phase ready`
held, and nothing else: the context overhead.
"""
import argparse
import json
import os
import time

MiB = 2**20


def free_cache(lib):
    """Gives the library's cached blocks back to the device."""
    if lib == "cupy":
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
    elif lib == "torch":
        import torch

        torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", choices=["cupy", "numba", "torch"], required=True)
    p.add_argument("--chunk-mib", type=int, default=512)
    p.add_argument("--max-chunks", type=int, default=4096)
    p.add_argument("--hold", type=float, default=1.0)
    p.add_argument("--idle", action="store_true")
    o = p.parse_args()
    chunk = MiB if o.idle else o.chunk_mib * MiB

    if o.lib == "cupy":
        import cupy

        refusal = cupy.cuda.memory.OutOfMemoryError

        def alloc():
            a = cupy.empty(chunk, dtype=cupy.uint8)
            a.fill(1)
            cupy.cuda.Device().synchronize()
            return a

        def pool_bytes():
            return int(cupy.get_default_memory_pool().total_bytes())

    elif o.lib == "torch":
        import torch

        refusal = torch.cuda.OutOfMemoryError

        def alloc():
            a = torch.empty(chunk, dtype=torch.uint8, device="cuda")
            a.fill_(1)
            torch.cuda.synchronize()
            return a

        def pool_bytes():
            return int(torch.cuda.memory_reserved())

    else:
        import numpy as np
        from numba import cuda
        from numba.cuda.cudadrv.driver import CudaAPIError

        refusal = CudaAPIError

        def alloc():
            return cuda.device_array(chunk, dtype=np.uint8)

        def pool_bytes():
            return None

    out = {"pid": os.getpid(), "lib": o.lib, "chunkBytes": chunk, "chunks": 0, "refused": False}
    if o.idle:
        alloc()  # made and dropped at once
        free_cache(o.lib)
        print("phase ready", flush=True)
        time.sleep(o.hold)
        print(json.dumps(out), flush=True)
        return
    live = []
    for _ in range(o.max_chunks):
        try:
            live.append(alloc())
        except refusal as e:  # the library's own out-of-memory error
            out.update(refused=True, refusedAs=type(e).__module__ + "." + type(e).__name__, message=str(e)[:400])
            out["code"] = str(getattr(e, "code", "")) or None
            break
    out["chunks"] = len(live)
    out["allocatedBytes"] = len(live) * chunk
    out["poolBytes"] = pool_bytes()
    print("phase full", flush=True)
    time.sleep(o.hold)
    live.clear()
    free_cache(o.lib)
    again = alloc()  # the share given back is had again
    out["recovered"] = again is not None
    del again
    print(json.dumps(out), flush=True)
    raise SystemExit(0 if out["refused"] else 3)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch's side of scripts/files-vs-torch.js: times safetensors.torch.load_file(path,
device='cuda'), cold (the file's pages dropped from the page cache before each pass) or warm (one
untimed pass first), and checks every tensor of every pass against the SHA-256 digests the
checkpoint was written with. Prints one JSON object.

usage: files-vs-torch.py PATH DIGESTS_JSON PASSES cold|warm
"""
import hashlib
import json
import os
import sys
import time


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main():
    path, digests_path, passes, cache = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if cache not in ("cold", "warm"):
        raise SystemExit("the last argument must be cold or warm")
    with open(digests_path) as f:
        expected = json.load(f)

    import torch
    import safetensors
    from safetensors.torch import load_file

    # CUDA's start-up is not the loader's cost.
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()

    def check(tensors):
        bad = sorted(set(expected) ^ set(tensors))
        for name, t in tensors.items():
            if name not in expected:
                continue
            raw = t.reshape(-1).view(torch.uint8).cpu().numpy().tobytes()
            if hashlib.sha256(raw).hexdigest() != expected[name]:
                bad.append(name)
        return bad

    if cache == "warm":
        t = load_file(path, device="cuda")
        torch.cuda.synchronize()
        del t
    seconds, mismatched = [], []
    for _ in range(passes):
        if cache == "cold":
            drop_cache(path)
        t0 = time.perf_counter()
        tensors = load_file(path, device="cuda")
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t0)
        mismatched += check(tensors)
        del tensors
        torch.cuda.empty_cache()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "verified": not mismatched,
                "mismatched": sorted(set(mismatched)),
                "torch": torch.__version__,
                "safetensors": getattr(safetensors, "__version__", "unknown"),
                "gpu": torch.cuda.get_device_name(0),
            }
        )
    )


if __name__ == "__main__":
    main()

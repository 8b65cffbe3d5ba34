#!/usr/bin/env python3
"""PyTorch's side of scripts/files-vs-torch.js, as a co-process: times
safetensors.torch.load_file(path, device='cuda') one pass per request, so that its passes take
turns with the library's in the same rounds, and checks every tensor of every pass against the
SHA-256 digests the checkpoint was written with.

usage: files-vs-torch.py PATH DIGESTS_JSON
Prints one JSON line when ready ({"torch", "safetensors", "gpu"}), then reads one request a line
from standard input and answers each with one JSON line:
  cold    the file's pages dropped from the page cache, then one timed pass
  warm    one timed pass as the file is
  warmup  one untimed pass
A request it cannot serve is answered {"error": "..."}; end of input ends it.
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


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    path, digests_path = sys.argv[1], sys.argv[2]
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

    say(
        {
            "torch": torch.__version__,
            "safetensors": getattr(safetensors, "__version__", "unknown"),
            "gpu": torch.cuda.get_device_name(0),
        }
    )
    for line in sys.stdin:
        request = line.strip()
        if request not in ("cold", "warm", "warmup"):
            say({"error": f"unknown request {request!r}"})
            continue
        if request == "cold":
            drop_cache(path)
        t0 = time.perf_counter()
        tensors = load_file(path, device="cuda")
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        # Each pass allocates anew, as the library's default load does.
        mismatched = [] if request == "warmup" else check(tensors)
        del tensors
        torch.cuda.empty_cache()
        say({"seconds": seconds, "mismatched": mismatched})


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes a PyTorch memory trace that `cuda-memory replay` and `cuda-memory memory-html` read:
json.dump(torch.cuda.memory._snapshot()) after _record_memory_history(), around a few training
steps of a small model. Frames are cut to the innermost two per event (--frames) to keep the file
small; everything else is as PyTorch wrote it.

    python3 scripts/pytorch-trace.py OUT.json [--steps 4] [--frames 2]
"""
import argparse
import json
import sys

ap = argparse.ArgumentParser(
    description="Writes a PyTorch memory trace (torch.cuda.memory._snapshot() as JSON) around a few training steps, "
    "for `cuda-memory replay` and `cuda-memory memory-html`. Needs PyTorch and a GPU."
)
ap.add_argument("out", help="the JSON file to write")
ap.add_argument("--steps", type=int, default=4, help="training steps to record (default 4)")
ap.add_argument("--frames", type=int, default=2, help="stack frames kept per event (default 2)")
a = ap.parse_args()

# After the arguments, so that --help works where PyTorch is not installed.
try:
    import torch
except ImportError as e:
    sys.exit(f"pytorch-trace.py needs PyTorch (pip install torch): {e}")

torch.cuda.memory._record_memory_history(max_entries=100000)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)
).cuda()
opt = torch.optim.Adam(model.parameters())
for step in range(a.steps):
    x = torch.randn(256 * (1 + step % 2), 1024, device="cuda")
    y = torch.randint(0, 10, (x.shape[0],), device="cuda")
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
snap = torch.cuda.memory._snapshot()
torch.cuda.memory._record_memory_history(enabled=None)
for trace in snap.get("device_traces", []):
    for e in trace:
        if "frames" in e:
            e["frames"] = e["frames"][: a.frames]
for seg in snap.get("segments", []):
    for b in seg.get("blocks", []):
        if "frames" in b:
            b["frames"] = b["frames"][: a.frames]
with open(a.out, "w") as f:
    json.dump(snap, f)
n = sum(len(t) for t in snap.get("device_traces", []))
print(f"torch {torch.__version__}: wrote {a.out}: {n} trace events, {len(snap.get('segments', []))} segments")

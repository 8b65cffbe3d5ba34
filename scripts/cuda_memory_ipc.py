#!/usr/bin/env python3
"""The Python side of cuda-memory's CUDA IPC descriptors (cuda-ipc@1), with no cuda-memory here.

A descriptor is JSON: {"type": "cuda-ipc@1", "handle": <128 hex digits of cudaIpcMemHandle_t>,
"offset": <bytes into the allocation>, "byteLength": <bytes>, "allocationBytes": <the
allocation's size, optional>, "device": "GPU-<uuid>", "pid": <exporter>}. See docs/processes.md,
"Sharing with Python".

As a module (needs CuPy; PyTorch for the torch functions):

    import cuda_memory_ipc as cmi
    opened = cmi.open_descriptor(desc)   # a CuPy uint8 array over the exported bytes
    t = cmi.to_torch(opened.array)       # a torch tensor over the same memory (DLPack)
    ...
    del t; opened.close()                # close before the exporter frees its buffer
    desc = cmi.export_torch(tensor)      # untyped_storage()._share_cuda_(); keep `tensor` alive
    desc = cmi.export_cupy(array)        # cupy.cuda.runtime.ipcGetMemHandle; keep `array` alive

As a program (what the library's tests run):

    cuda_memory_ipc.py check-and-write DESCRIPTOR SEED   check pattern SEED, write its complement
    cuda_memory_ipc.py hold DESCRIPTOR                   open it, print "opened", wait
    cuda_memory_ipc.py export torch|cupy BYTES SEED      export pattern SEED, then obey stdin:
                                                         "verify SEED" checks the bytes hold
                                                         pattern SEED, "exit" ends
"""
import ctypes
import json
import sys

CUDA_IPC_HANDLE_SIZE = 64

_cuda = None


def _driver():
    """libcuda, initialised; the driver API answers what the runtime's Python bindings do not."""
    global _cuda
    if _cuda is None:
        lib = ctypes.CDLL("libcuda.so.1")
        rc = lib.cuInit(0)
        if rc != 0:
            raise RuntimeError("cuInit failed with CUresult %d" % rc)
        _cuda = lib
    return _cuda


def device_uuid(index):
    """The "GPU-…" uuid of CUDA device `index` (CUDA_VISIBLE_DEVICES numbering), as cuda-memory writes it."""
    lib = _driver()
    dev = ctypes.c_int()
    if lib.cuDeviceGet(ctypes.byref(dev), index) != 0:
        raise ValueError("no CUDA device %d" % index)
    raw = (ctypes.c_ubyte * 16)()
    fn = getattr(lib, "cuDeviceGetUuid_v2", None) or lib.cuDeviceGetUuid
    if fn(raw, dev) != 0:
        raise RuntimeError("cuDeviceGetUuid failed for device %d" % index)
    h = bytes(raw).hex()
    return "GPU-%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])


def device_index(uuid):
    """The CUDA index of the GPU with this uuid in this process; ValueError if it is not visible."""
    lib = _driver()
    count = ctypes.c_int()
    lib.cuDeviceGetCount(ctypes.byref(count))
    for i in range(count.value):
        if device_uuid(i).lower() == uuid.lower():
            return i
    raise ValueError("GPU %s is not visible to this process (CUDA_VISIBLE_DEVICES?)" % uuid)


def address_range(ptr):
    """(base, size) of the CUDA allocation holding device pointer `ptr` (cuMemGetAddressRange)."""
    lib = _driver()
    base = ctypes.c_uint64()
    size = ctypes.c_size_t()
    rc = lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
    if rc != 0:
        raise RuntimeError("cuMemGetAddressRange failed with CUresult %d" % rc)
    return base.value, size.value


def _handle_bytes(handle):
    """The 64 bytes of cudaIpcMemHandle_t from PyTorch's handle (raw, or a version byte and 'c')."""
    h = bytes(handle)
    if len(h) == CUDA_IPC_HANDLE_SIZE:
        return h
    if len(h) == CUDA_IPC_HANDLE_SIZE + 2 and h[1:2] == b"c":
        return h[2:]
    if len(h) >= 2 and h[1:2] == b"e":
        raise ValueError("an expandable-segment handle cannot be opened with cudaIpcOpenMemHandle; "
                         "export from a process without expandable_segments")
    raise ValueError("unknown CUDA IPC handle format (%d bytes)" % len(h))


class Opened:
    """An opened descriptor: `array` is a CuPy uint8 array over the bytes; close() unmaps them."""

    def __init__(self, base, array, device):
        self.base = base
        self.array = array
        self.device = device

    def close(self):
        import cupy
        if self.base:
            with cupy.cuda.Device(self.device):
                cupy.cuda.runtime.deviceSynchronize()
                cupy.cuda.runtime.ipcCloseMemHandle(self.base)
            self.base = 0
            self.array = None


def open_descriptor(desc):
    """Opens a cuda-ipc@1 descriptor (a dict or its JSON) as a CuPy uint8 array, after checking it."""
    import cupy
    if isinstance(desc, str):
        desc = json.loads(desc)
    if desc.get("type") != "cuda-ipc@1":
        raise ValueError("not a cuda-ipc@1 descriptor: type %r" % desc.get("type"))
    offset, length = int(desc["offset"]), int(desc["byteLength"])
    dev = device_index(desc["device"])
    with cupy.cuda.Device(dev):
        base = cupy.cuda.runtime.ipcOpenMemHandle(_handle_bytes(bytes.fromhex(desc["handle"])))
        try:
            start, size = address_range(base)
            if start != base or offset + length > size:
                raise ValueError("offset %d + %d bytes runs past the %d-byte allocation" % (offset, length, size))
            if "allocationBytes" in desc and int(desc["allocationBytes"]) != size:
                raise ValueError("the exporter's allocation was %d bytes, this one is %d" % (desc["allocationBytes"], size))
        except Exception:
            cupy.cuda.runtime.ipcCloseMemHandle(base)
            raise
        holder = Opened(base, None, dev)
        mem = cupy.cuda.UnownedMemory(base + offset, length, holder, dev)
        holder.array = cupy.ndarray((length,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(mem, 0))
    return holder


def to_torch(array):
    """A torch tensor over the same device memory as a CuPy array (DLPack; no copy)."""
    import torch
    return torch.from_dlpack(array)


def export_torch(tensor):
    """A cuda-ipc@1 descriptor of a contiguous CUDA tensor, from PyTorch's own IPC export
    (untyped_storage()._share_cuda_(): device, handle, storage bytes, storage offset, ...).
    Keep `tensor` alive until the importer has closed it."""
    import torch
    if not tensor.is_cuda or not tensor.is_contiguous():
        raise ValueError("export_torch needs a contiguous CUDA tensor")
    storage = tensor.untyped_storage()
    shared = storage._share_cuda_()
    device, handle, storage_offset = shared[0], shared[1], int(shared[3])
    start = storage_offset + tensor.storage_offset() * tensor.element_size()
    base, size = address_range(storage.data_ptr())
    if base != storage.data_ptr() - storage_offset:
        raise RuntimeError("PyTorch's storage offset does not match the allocation's base")
    torch.cuda.synchronize(device)
    return {"type": "cuda-ipc@1", "handle": _handle_bytes(handle).hex(), "offset": start,
            "byteLength": tensor.numel() * tensor.element_size(), "allocationBytes": size,
            "device": device_uuid(device), "pid": __import__("os").getpid()}


def export_cupy(array):
    """A cuda-ipc@1 descriptor of a contiguous CuPy array. Keep `array` alive until the importer
    has closed it."""
    import cupy
    if not array.flags.c_contiguous:
        raise ValueError("export_cupy needs a contiguous array")
    ptr = array.data.ptr
    base, size = address_range(ptr)
    handle = cupy.cuda.runtime.ipcGetMemHandle(base)
    cupy.cuda.runtime.deviceSynchronize()
    return {"type": "cuda-ipc@1", "handle": bytes(handle).hex(), "offset": ptr - base,
            "byteLength": array.nbytes, "allocationBytes": size,
            "device": device_uuid(array.device.id), "pid": __import__("os").getpid()}


def pattern(n, seed):
    """The bytes the tests write: (i * 7 + seed) mod 256."""
    import cupy
    return ((cupy.arange(n, dtype=cupy.int64) * 7 + seed) % 256).astype(cupy.uint8)


def _main(argv):
    import cupy
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "check-and-write":
        import torch
        desc, seed = json.loads(argv[2]), int(argv[3])
        opened = open_descriptor(desc)
        n = opened.array.size
        want = pattern(n, seed)
        ok_cupy = bool((opened.array == want).all())
        t = to_torch(opened.array)
        ok_torch = bool(torch.equal(t, torch.from_dlpack(want)))
        t.copy_(255 - t)  # the complement, written through torch
        torch.cuda.synchronize()
        del t
        opened.close()
        print(json.dumps({"ok": ok_cupy and ok_torch, "cupy": ok_cupy, "torch": ok_torch, "bytes": n}), flush=True)
        return 0 if ok_cupy and ok_torch else 1
    if cmd == "hold":
        opened = open_descriptor(argv[2])
        opened.array[:16] = opened.array[:16]  # touch it: the mapping is in use
        cupy.cuda.runtime.deviceSynchronize()
        print("opened", flush=True)
        sys.stdin.read()  # until killed, or stdin closes
        opened.close()
        return 0
    if cmd == "export":
        import torch
        kind, n, seed = argv[2], int(argv[3]), int(argv[4])
        if kind == "torch":
            keep = torch.from_dlpack(pattern(n, seed)).clone()
            desc = export_torch(keep)
            view = cupy.from_dlpack(keep)
        elif kind == "cupy":
            keep = pattern(n, seed).copy()
            desc = export_cupy(keep)
            view = keep
        else:
            print("export torch|cupy BYTES SEED", file=sys.stderr)
            return 2
        print(json.dumps(desc), flush=True)
        for line in sys.stdin:
            words = line.split()
            if words[:1] == ["verify"]:
                cupy.cuda.runtime.deviceSynchronize()
                ok = bool((view == pattern(n, int(words[1]))).all())
                # The memory is still usable here: write and read it back.
                view += 1
                ok = ok and bool((view == (pattern(n, int(words[1])) + 1)).all())
                view -= 1
                cupy.cuda.runtime.deviceSynchronize()
                print(json.dumps({"ok": ok}), flush=True)
            elif words[:1] == ["exit"]:
                break
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv))

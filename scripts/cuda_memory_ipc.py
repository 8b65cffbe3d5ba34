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

    desc = cmi.parse_descriptor(text)    # the checks open_descriptor makes, without a GPU

As a program (what the library's tests run):

    cuda_memory_ipc.py validate                          each line of stdin a descriptor's JSON;
                                                         each line of stdout what the checks said
    cuda_memory_ipc.py check-and-write DESCRIPTOR SEED   check pattern SEED, write its complement
    cuda_memory_ipc.py hold DESCRIPTOR                   open it, print "opened", wait
    cuda_memory_ipc.py export torch|cupy BYTES SEED      export pattern SEED, then obey stdin:
                                                         "verify SEED" checks the bytes hold
                                                         pattern SEED, "exit" ends
"""
import ctypes
import json
import math
import re
import sys

CUDA_IPC_HANDLE_SIZE = 64
MAX_SAFE_INTEGER = 2**53 - 1  # JavaScript's Number.MAX_SAFE_INTEGER: the Node side's bound

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


class DescriptorError(ValueError):
    """A descriptor refused by parse_descriptor; `code` is the Node side's error code."""

    code = "ERR_IPC_HANDLE_INVALID"

    def __init__(self, why):
        super().__init__("the IPC handle is not valid: " + why)


def _js_text(value):
    """A value as JavaScript's JSON.stringify writes it in the Node side's messages."""
    if value is _MISSING:
        return "undefined"
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_MISSING = object()
_HEX = re.compile(r"[0-9a-fA-F]+")
_GPU_UUID = re.compile(r"[Gg][Pp][Uu]-[0-9a-fA-F-]{36}")


def _is_safe_size(value):
    """Number.isSafeInteger(value) && value >= 0, for what JSON gives Python (bool is not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return False
    return 0 <= value <= MAX_SAFE_INTEGER


def _refuse_constant(name):
    raise ValueError("%s is not JSON" % name)


def parse_descriptor(desc):
    """Checks a cuda-ipc@1 descriptor (a dict or its JSON) exactly as the Node side does
    (parseCudaIpcDescriptor in lib/memory/ipc.ts: the same checks, in the same order, with the
    same messages) and returns it in one spelling: the handle in 128 lower-case digits, the uuid
    as CUDA writes it, no unknown fields; DescriptorError otherwise."""
    if isinstance(desc, str):
        try:
            # JSON as JavaScript reads it: no NaN or Infinity.
            desc = json.loads(desc, parse_constant=_refuse_constant)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python's stack
            raise DescriptorError("it is a string but not JSON") from None
    if not isinstance(desc, dict):
        raise DescriptorError("expected a cuda-ipc@1 descriptor object, or its JSON")
    kind = desc.get("type", _MISSING)
    if kind != "cuda-ipc@1":
        raise DescriptorError('its type is %s, expected "cuda-ipc@1"' % _js_text(kind))
    handle = desc.get("handle")
    if not isinstance(handle, str) or not _HEX.fullmatch(handle):
        raise DescriptorError("handle must be a string of hex digits")
    raw = handle.lower()
    if len(raw) == 2 * (CUDA_IPC_HANDLE_SIZE + 2):
        # PyTorch's shareable handle: a version byte, a type byte, then cudaIpcMemHandle_t.
        byte = raw[2:4]
        if byte == "65":
            raise DescriptorError(
                "it is a PyTorch expandable-segment handle ('e'): that memory is mapped with cuMemCreate and "
                "cannot be opened with cudaIpcOpenMemHandle; export from a process without expandable_segments")
        if byte != "63":
            raise DescriptorError("its 66-byte handle has type byte 0x%s, expected 0x63 ('c', a cudaMalloc block)" % byte)
        raw = raw[4:]
    if len(raw) != 2 * CUDA_IPC_HANDLE_SIZE:
        raise DescriptorError("handle must be 128 hex digits (the 64 bytes of cudaIpcMemHandle_t), got %d" % len(handle))
    device = desc.get("device")
    if not isinstance(device, str) or not _GPU_UUID.fullmatch(device):
        raise DescriptorError('device must be a GPU uuid ("GPU-…")')
    for key in ("offset", "byteLength", "pid"):
        if not _is_safe_size(desc.get(key)):
            raise DescriptorError("%s must be a non-negative integer" % key)
    offset, length, pid = (int(desc[k]) for k in ("offset", "byteLength", "pid"))
    if length == 0:
        raise DescriptorError("byteLength must be at least 1")
    out = {"type": "cuda-ipc@1", "handle": raw, "offset": offset, "byteLength": length}
    if "allocationBytes" in desc:
        allocation = desc["allocationBytes"]
        if not _is_safe_size(allocation) or allocation < 1:
            raise DescriptorError("allocationBytes must be a positive integer when given")
        if offset + length > allocation:
            raise DescriptorError("offset %d + byteLength %d runs past allocationBytes %d" % (offset, length, allocation))
        out["allocationBytes"] = int(allocation)
    out["device"] = "GPU-" + device[4:].lower()  # as CUDA writes it, whatever the case given
    out["pid"] = pid
    return out


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
    desc = parse_descriptor(desc)
    offset, length = desc["offset"], desc["byteLength"]
    dev = device_index(desc["device"])
    with cupy.cuda.Device(dev):
        base = cupy.cuda.runtime.ipcOpenMemHandle(bytes.fromhex(desc["handle"]))
        try:
            start, size = address_range(base)
            if start != base or offset + length > size:
                raise ValueError("offset %d + %d bytes runs past the %d-byte allocation" % (offset, length, size))
            if "allocationBytes" in desc and desc["allocationBytes"] != size:
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


def _validate_lines(lines, out):
    """One result per descriptor line: {"ok": true, "descriptor": ...} or {"ok": false, "code", "message"}."""
    for line in lines:
        try:
            result = {"ok": True, "descriptor": parse_descriptor(line.rstrip("\n"))}
        except DescriptorError as e:
            result = {"ok": False, "code": e.code, "message": str(e)}
        out.write(json.dumps(result) + "\n")
    out.flush()
    return 0


def _main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "validate":
        return _validate_lines(sys.stdin, sys.stdout)
    if cmd in ("check-and-write", "hold"):
        # Checked before CUDA, CuPy or PyTorch is touched: a refused descriptor maps nothing.
        try:
            desc = parse_descriptor(argv[2] if len(argv) > 2 else "")
        except DescriptorError as e:
            print(json.dumps({"ok": False, "code": e.code, "message": str(e)}), flush=True)
            return 1
    import cupy
    if cmd == "check-and-write":
        import torch
        seed = int(argv[3])
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
        opened = open_descriptor(desc)
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

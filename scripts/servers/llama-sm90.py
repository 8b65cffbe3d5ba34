#!/usr/bin/env python3
"""node-llama-cpp's CUDA prebuilt made to run on Hopper (sm_90) with a CUDA 13.0 driver, and packed
small enough to carry to a GPU machine, for scripts/servers-run.js (--llama-bundle).

  llama-sm90.py --modules DIR --out FILE.tar.xz [--work DIR] [--jobs 2] [--ptx-version 9.0] [--no-ptxas]

Why: @node-llama-cpp/linux-x64-cuda 3.22.1's libggml-cuda.so holds, in each of its 143 fat
binaries (one per .cu file), machine code for sm_86/89/120/121 and PTX for compute_75/80/90 of
ISA 9.1 (CUDA 13.1's). Driver 580 (CUDA 13.0) compiles PTX up to ISA 9.0 only, so on an H200
(sm_90) no image loads. The compute_90 PTX uses nothing of 9.1: lowered to `.version 9.0`,
ptxas 13.0 assembles it for sm_90.

What it does, for each fat binary in the library's .nv_fatbin section (the layout: a 16-byte
header, magic 0xBA55ED50, then entries, each a header of kind, arch, sizes and flags and its
payload, zstd-compressed where the flags say so):
  1. takes the compute_90 PTX out (zstd -d), lowers its ISA version;
  2. assembles it for sm_90 (ptxas -arch=sm_90), cached in --work by the PTX's hash (with
     --no-ptxas, one not cached stays PTX of ISA 9.0, which the driver compiles as it loads it);
  3. makes a fat binary of that one image with fatbinary, uncompressed where it fits (xz packs it
     better than zstd does), compressed where not, and writes it over the old one in place, the rest of the old one zeroed: the
     runtime registers each fat binary by its address (.nvFatBinSegment) and reads its size from
     its header, so nothing else in the library changes;
then packs node_modules without what the GPU machine does not run (the other platforms'
prebuilts, the CUDA 12 fallback, the llama.cpp sources kept for building) into --out with xz.
Needs zstd, ptxas and fatbinary (CUDA 13.0) on PATH. One JSON line at the end.
"""
import argparse
import concurrent.futures
import hashlib
import io
import json
import lzma
import os
import re
import struct
import subprocess
import tarfile
import tempfile
import time

MAGIC = 0xBA55ED50
PTX, ELF = 1, 2
LIB = os.path.join("@node-llama-cpp", "linux-x64-cuda", "bins", "linux-x64-cuda", "libggml-cuda.so")
LEAVE = ("linux-x64-cuda-ext", "gitRelease.bundle")  # besides every other @node-llama-cpp platform


def section(data, want):
    """(file offset, size) of the ELF section named `want`."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strs = heads[shstrndx][4]
    for name, _, _, _, off, size in heads:
        if data[strs + name : data.index(b"\0", strs + name)].decode() == want:
            return off, size
    raise SystemExit(f"llama-sm90: no {want} section")


def fatbins(data, off, size):
    """Each fat binary in [off, off + size): its offset, its whole size, its entries."""
    p, end = off, off + size
    while p < end:
        magic, _, hsz, fsz = struct.unpack_from("<IHHQ", data, p)
        if magic != MAGIC:
            p += 8  # alignment between fat binaries
            continue
        entries, q = [], p + hsz
        while q < p + hsz + fsz:
            kind, _, ehsz, esize, csize, _, minor, major, arch, _, _, flags, _, dsize = struct.unpack_from("<HHIQIIHHIIIQQQ", data, q)
            entries.append(dict(kind=kind, arch=arch, isa=(major, minor), head=q, start=q + ehsz, size=esize, csize=csize, dsize=dsize))
            q += ehsz + esize
        yield p, hsz + fsz, entries
        p += hsz + fsz


def ptx_of(data, e):
    body = data[e["start"] : e["start"] + (e["csize"] or e["size"])]
    if e["dsize"]:
        if body[:4] != b"\x28\xb5\x2f\xfd":
            raise SystemExit("llama-sm90: a compressed PTX that is not zstd (an older fatbinary's); not handled")
        body = subprocess.run(["zstd", "-d", "-c"], input=body, capture_output=True, check=True).stdout
    return body.rstrip(b"\0")


def ptx_fatbin(data, e, lowered, version):
    """A fat binary of the lowered PTX alone, zstd-compressed as the original was (fatbinary 13.0
    compresses PTX to about a third of that, which may not fit): the original entry's header with
    the sizes and the ISA version changed. The decompressed size keeps the PTX's closing NUL."""
    major, minor = (int(x) for x in version.split("."))
    text = lowered + b"\0"
    z = subprocess.run(["zstd", "-12", "-T2", "-c", "-q"], input=text, capture_output=True, check=True).stdout
    head = bytearray(data[e["head"] : e["start"]])
    padded = (len(z) + 7) // 8 * 8
    struct.pack_into("<QI", head, 8, padded, len(z))
    struct.pack_into("<HH", head, 24, minor, major)
    struct.pack_into("<Q", head, 72, len(text))
    entry = bytes(head) + z + bytes(padded - len(z))
    return struct.pack("<IHHQ", MAGIC, 1, 16, len(entry)) + entry


def assemble(data, e, room, version, work, ptxas=True):
    """The sm_90 fat binary of one compute_90 PTX: its machine code, or, with ptxas=False and none
    cached, the lowered PTX itself, which the driver compiles when the module first loads."""
    lowered = re.sub(rb"^\.version \d+\.\d+$", f".version {version}".encode(), ptx_of(data, e), count=1, flags=re.M)
    key = hashlib.sha256(lowered).hexdigest()[:24]
    src, cubin = os.path.join(work, key + ".ptx"), os.path.join(work, key + ".cubin")
    if not os.path.exists(cubin):
        if not ptxas:
            return ptx_fatbin(data, e, lowered, version), False
        with open(src, "wb") as f:
            f.write(lowered)
        subprocess.run(["ptxas", "-arch=sm_90", "-o", cubin + ".tmp", src], check=True, capture_output=True)
        os.replace(cubin + ".tmp", cubin)
        os.unlink(src)
    fat = os.path.join(work, key + ".fatbin")
    # Uncompressed where it fits in the old one's room (xz packs it better), else compressed.
    for extra in ([], ["--compress-all", "--compress-mode=size"]):
        subprocess.run(["fatbinary", "-64", f"--create={fat}", *extra, f"--image3=kind=elf,sm=90,file={cubin}"], check=True, capture_output=True)
        with open(fat, "rb") as f:
            image = f.read()
        if len(image) <= room:
            break
    return image, True


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--modules", required=True, help="a node_modules folder with node-llama-cpp 3.22.1 installed")
    p.add_argument("--out", required=True)
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "llama-sm90"))
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--ptx-version", default="9.0")
    p.add_argument("--no-ptxas", action="store_true", help="assemble nothing: what is not cached keeps its PTX")
    o = p.parse_args()
    os.makedirs(o.work, exist_ok=True)
    t0 = time.time()
    lib = os.path.join(o.modules, LIB)
    data = bytearray(open(lib, "rb").read())
    off, size = section(data, ".nv_fatbin")
    found = list(fatbins(data, off, size))

    # 1-2. PTX out, assembled for sm_90 (ptxas in parallel; each a process of its own).
    jobs = []
    for start, whole, entries in found:
        e = [x for x in entries if x["kind"] == PTX and x["arch"] == 90]
        if not e:
            raise SystemExit(f"llama-sm90: the fat binary at {start} has no compute_90 PTX")
        jobs.append((start, whole, e[0]))
    with concurrent.futures.ThreadPoolExecutor(o.jobs) as pool:
        made = list(pool.map(lambda j: assemble(data, j[2], j[1], o.ptx_version, o.work, not o.no_ptxas), jobs))
    images = [m[0] for m in made]

    # 3. Each written over the old one, the rest zeroed.
    for (start, whole, _), new in zip(jobs, images):
        if len(new) > whole:
            raise SystemExit(f"llama-sm90: the sm_90 fat binary ({len(new)} bytes) does not fit in the old one's {whole}")
        data[start : start + whole] = new + bytes(whole - len(new))

    # 4. The bundle: node_modules as the GPU machine runs it, the patched library in its place.
    def keep(rel):
        parts = rel.split(os.sep)
        if len(parts) > 1 and parts[0] == "@node-llama-cpp" and parts[1] != "linux-x64-cuda":
            return False
        return not any(x in parts for x in LEAVE)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for dirpath, dirs, files in os.walk(o.modules):
            rel = os.path.relpath(dirpath, o.modules)
            dirs[:] = sorted(d for d in dirs if keep(os.path.normpath(os.path.join(rel, d))))
            for f in sorted(files):
                r = os.path.normpath(os.path.join(rel, f))
                if not keep(r):
                    continue
                name = os.path.join("node_modules", r)
                if r == LIB:
                    info = tar.gettarinfo(os.path.join(dirpath, f), name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(bytes(data)))
                else:
                    tar.add(os.path.join(dirpath, f), name, recursive=False)
    with lzma.open(o.out + ".tmp", "wb", preset=9 | lzma.PRESET_EXTREME) as f:
        f.write(buf.getvalue())
    os.replace(o.out + ".tmp", o.out)
    print(
        json.dumps(
            {
                "fatbins": len(found),
                "assembled": sum(1 for m in made if m[1]),
                "leftAsPtx": sum(1 for m in made if not m[1]),
                "sm90Bytes": sum(len(x) for x in images),
                "unpackedBytes": len(buf.getvalue()),
                "bundle": o.out,
                "bundleBytes": os.path.getsize(o.out),
                "seconds": round(time.time() - t0, 1),
            }
        )
    )


if __name__ == "__main__":
    main()

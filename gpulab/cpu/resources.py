"""Registers, shared memory and theoretical occupancy without a GPU, from NVRTC.

NVRTC compiles CUDA C to a GPU's machine code (a cubin) without a driver or a
GPU: its Python wheel (``nvidia-cuda-nvrtc``, Linux only) is enough.  The cubin
is an ELF file; its ``.nv.info`` section holds each kernel's register count
(attribute EIATTR_REGCOUNT) and stack frame, and each kernel's static shared
memory is the size of its ``.nv.shared.<kernel>`` section.  The occupancy
then follows from the architecture's limits in :mod:`gpulab.datasheet`, with
the calculator the lab uses for every GPU.

    table = resources.compile_resources("kernels/fcnet/03_fused_shared.cu")
    resources.occupancy(registers=35, threads=256, shared_bytes=0)
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import struct
import sys
from pathlib import Path

import pandas as pd

from .. import paths
from ..paths import toolkit_include_options
from ..errors import KernelCompileError

#: The recording GPU's architecture (the H100 of labdata/runs/): what the book's figures are for.
DEFAULT_ARCH = "sm_90"
#: Shared memory the system reserves in every block from compute capability 8.0 on; the
#: cubin's shared section counts it, CUDA's function attributes (and so the GPU path) do not.
_RESERVED_SHARED = 1024

_EIATTR_REGCOUNT = 0x2F
_EIATTR_FRAME_SIZE = 0x11
_EIFMT_SVAL = 0x04


def _wheel_roots() -> list[Path]:
    roots = []
    for entry in sys.path:
        for version in ("cu13", "cu12"):
            candidate = Path(entry) / "nvidia" / version
            if candidate.is_dir():
                roots.append(candidate)
    return roots


@functools.lru_cache(maxsize=1)
def _library():
    """libnvrtc from the nvidia-cuda-nvrtc wheel, a CUDA toolkit or the system; or the reason why not."""
    candidates = []
    for root in _wheel_roots():
        candidates += sorted(glob.glob(str(root / "lib" / "libnvrtc.so.*")))
    for home in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            candidates += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")))
    candidates.append("libnvrtc.so")
    errors = []
    for name in candidates:
        folder = os.path.dirname(name)
        try:
            # The builtins library must be found first: NVRTC opens it by name.
            for builtins in sorted(glob.glob(os.path.join(folder, "libnvrtc-builtins.so.*"))) if folder else ():
                if ".alt." not in builtins:
                    ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            lib = ctypes.CDLL(name)
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            return lib, folder
        except OSError as exc:
            errors.append(str(exc))
    return None, ("NVRTC is not installed (pip install nvidia-cuda-nvrtc nvidia-cuda-runtime "
                  "nvidia-cuda-crt, on Linux; or a CUDA toolkit)")


def unavailable() -> str | None:
    """None when NVRTC can be used here, else why not."""
    lib, reason = _library()
    return None if lib is not None else reason


def _include_dirs() -> list[str]:
    """Folders with cuda_fp16.h and mma.h (and crt/mma.h) for NVRTC."""
    found = [str(root / "include") for root in _wheel_roots() if (root / "include" / "cuda_fp16.h").is_file()]
    found += [option[2:] for option in toolkit_include_options()]
    return found


def compile_cubin(source: str, filename: str, arch: str = DEFAULT_ARCH, include_dirs=(), options=()) -> bytes:
    """Compile CUDA C source to a cubin for ``arch`` with NVRTC (no GPU needed); ``options``
    are further NVRTC options (``-D`` macros, ``--generate-line-info``)."""
    lib, reason = _library()
    if lib is None:
        raise RuntimeError(reason)

    def check(status: int, what: str):
        if status:
            raise RuntimeError(f"NVRTC {what}: {lib.nvrtcGetErrorString(status).decode()}")

    program = ctypes.c_void_p()
    check(lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), filename.encode(), 0, None, None),
          "could not start")
    try:
        options = [f"--gpu-architecture={arch}", "-std=c++17",
                   *(f"-I{d}" for d in [*include_dirs, *_include_dirs()]), *options]
        array = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        status = lib.nvrtcCompileProgram(program, len(options), array)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(program, log)
        if status:
            text = log.value.decode(errors="replace")
            raise KernelCompileError(f"{filename}: NVRTC ({arch}) did not compile it:\n{text.strip()[-3000:]}",
                                     path=filename, line=None, log=text)
        lib.nvrtcGetCUBINSize(program, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        check(lib.nvrtcGetCUBIN(program, cubin), "gave no cubin")
        return cubin.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def cubin_resources(cubin: bytes, reserved_shared: int = _RESERVED_SHARED) -> pd.DataFrame:
    """Per kernel of a cubin: registers per thread, static shared memory (less
    the system's reserved part) and stack frame (local memory) in bytes."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = []
    for i in range(shnum):
        name, _, _, _, offset, size, link, _, _, _ = struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize)
        sections.append({"name_at": name, "offset": offset, "size": size, "link": link})

    def string(table: dict, at: int) -> str:
        start = table["offset"] + at
        return cubin[start:cubin.index(b"\0", start)].decode()

    for s in sections:
        s["name"] = string(sections[shstrndx], s["name_at"])
    by_name = {s["name"]: s for s in sections}
    symtab = by_name[".symtab"]
    symstr = sections[symtab["link"]]

    def symbol(index: int) -> str:
        return string(symstr, struct.unpack_from("<I", cubin, symtab["offset"] + 24 * index)[0])

    kernels = {s["name"][len(".text."):]: {} for s in sections if s["name"].startswith(".text.")}
    info = by_name.get(".nv.info")
    at, end = (info["offset"], info["offset"] + info["size"]) if info else (0, 0)
    while at + 4 <= end:
        fmt, attribute = cubin[at], cubin[at + 1]
        if fmt != _EIFMT_SVAL:
            at += 4
            continue
        size = struct.unpack_from("<H", cubin, at + 2)[0]
        if attribute in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and size >= 8:
            index, value = struct.unpack_from("<II", cubin, at + 4)
            key = "registers" if attribute == _EIATTR_REGCOUNT else "local_bytes"
            kernels.setdefault(symbol(index), {})[key] = value
        at += 4 + size
    rows = [{"kernel": name, "registers": values.get("registers"),
             "static_shared_bytes": max(0, by_name.get(f".nv.shared.{name}", {}).get("size", 0) - reserved_shared),
             "local_bytes": values.get("local_bytes", 0)} for name, values in kernels.items()]
    return pd.DataFrame(rows).set_index("kernel")


@functools.lru_cache(maxsize=128)
def _resources(source: str, filename: str, arch: str, include_dirs: tuple) -> pd.DataFrame:
    reserved = _RESERVED_SHARED if int(arch.split("_")[1]) >= 80 else 0
    return cubin_resources(compile_cubin(source, filename, arch, include_dirs), reserved)


def compile_resources(path, arch: str = DEFAULT_ARCH) -> pd.DataFrame:
    """Registers per thread, static shared memory and local memory of every
    kernel of a kernel file, as NVRTC compiles it for ``arch`` (an H100 by
    default), without a GPU.  Raises RuntimeError saying why where NVRTC is
    not installed."""
    real = paths.kernel_path(path)
    table = _resources(real.read_text(), paths.display_path(real), arch,
                       (str(paths.KERNELS), str(real.parent))).copy()
    table.attrs["source"] = f"NVRTC for {arch}, no GPU"
    return table


def occupancy(registers: int, threads: int, shared_bytes: int = 0, compute_capability: str = "9.0") -> dict:
    """Resident blocks and warps per SM and the theoretical occupancy of a
    launch shape, from the architecture's limits (:mod:`gpulab.datasheet`)."""
    from .. import datasheet
    return datasheet.architecture(compute_capability).blocks_per_sm(threads, registers, shared_bytes)

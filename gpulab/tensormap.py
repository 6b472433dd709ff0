"""Tensor maps: the 128-byte descriptors that Hopper's bulk tensor copies (TMA) read.

A tensor map describes a 2-D array in global memory (its address, sizes, row pitch and
element type), the box that one copy moves into shared memory and the swizzle with which
the box is laid out there. It is made on the host and passed to the kernel by value as a
``const __grid_constant__ CUtensorMap`` parameter (kernels/common/hopper.h).

On a GPU :func:`encode_2d` calls the driver's ``cuTensorMapEncodeTiled`` (through ctypes:
every CUDA driver has it from 12.0 on); the bytes are the driver's own and opaque. On the
CPU backend it writes the same fields in a layout of the lab's own, which the emulated
copy (gpulab/cpu/include/gpulab_hopper_cpu.h) reads: the array's address, as on a GPU --
the CPU backend runs each launch in a process forked from this one, where that address
still holds the array as it was at the launch.

    a_map = tensormap.encode_2d(A, box=(64, 128), swizzle=128)   # box: (columns, rows)
    kernel(grid, block, (a_map, b_map, C, M, N, K))
"""
from __future__ import annotations

import ctypes
import functools
import struct
from dataclasses import dataclass

import numpy as np

from .errors import KernelArgumentError
from .signature import TENSOR_MAP_DTYPE

#: Bytes of a CUtensorMap (CU_TENSOR_MAP_NUM_QWORDS = 16 words of 8 bytes).
TENSOR_MAP_BYTES = 128
#: Swizzle widths in bytes -> CUtensorMapSwizzle (cuda.h: NONE, 32B, 64B, 128B).
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}
#: Element types -> CUtensorMapDataType (cuda.h). uint8 (CU_TENSOR_MAP_DATA_TYPE_UINT8) carries FP8
#: codes (gpulab.fp8): the copy engine moves bytes and fills what lies outside the array with
#: zeros, which is +0 in e4m3 and e5m2 alike.
_DATA_TYPES = {np.dtype(np.uint8): 0, np.dtype(np.float16): 6, np.dtype(np.float32): 7}
#: CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: NumPy and CuPy have no bfloat16, so a bfloat16 array is held
#: as uint16 bit patterns and named with ``element="bf16"``.
_BFLOAT16 = 9
#: The CPU backend's layout: magic, address, rows, columns, row pitch (bytes), box columns,
#: box rows, element bytes, swizzle bytes (gpulab_hopper_cpu.h reads the same fields).
CPU_MAGIC = 0x70616D54534C5047   # "GPLSTmap"
_CPU_LAYOUT = struct.Struct("<QQQQQIIII")


@dataclass(frozen=True)
class TensorMap:
    """A tensor map and the array it describes (kept alive while the map is)."""

    raw: bytes
    array: object
    box: tuple[int, ...]
    swizzle: int
    backend: str

    def as_argument(self) -> np.void:
        """The 128 bytes as a NumPy void scalar: what CuPy passes by value to a struct parameter."""
        return np.frombuffer(self.raw, dtype=TENSOR_MAP_DTYPE)[0]

    @property
    def box_bytes(self) -> int:
        """Bytes one copy of a whole box moves (what it counts on its mbarrier)."""
        n = self.array.dtype.itemsize
        for side in self.box:
            n *= side
        return n


def encode_2d(array, box: tuple[int, int], swizzle: int = 128, *, element: str | None = None) -> TensorMap:
    """A tensor map of the row-major 2-D ``array`` (rows x columns; NumPy on the CPU
    backend, CuPy on a GPU) whose copies move ``box = (box_columns, box_rows)`` elements,
    laid out in shared memory with ``swizzle`` (0, 32, 64 or 128 bytes).

    The rules are the hardware's (cuTensorMapEncodeTiled): rows start 16-byte aligned
    (the row pitch is a multiple of 16 bytes), a box side is 1 to 256 elements, and with a
    swizzle a box row is at most the swizzle's width. Coordinates outside the array read
    as zeros. ``element="bf16"``: the array holds bfloat16 bit patterns as uint16. A uint8 array
    (FP8 codes) is mapped as bytes.
    """
    if getattr(array, "ndim", None) != 2:
        raise KernelArgumentError(f"encode_2d needs a 2-D array (rows x columns), got "
                                  f"{type(array).__name__} of shape {getattr(array, 'shape', '?')}")
    dtype = np.dtype(array.dtype)
    data_type = _DATA_TYPES.get(dtype)
    if element == "bf16":
        if dtype != np.uint16:
            raise KernelArgumentError(f"encode_2d(element='bf16') takes bfloat16 bit patterns as uint16, got {dtype}")
        data_type = _BFLOAT16
    elif element is not None:
        raise KernelArgumentError(f"encode_2d: element must be None or 'bf16', got {element!r}")
    if data_type is None:
        raise KernelArgumentError(f"encode_2d: element type {dtype} is not supported (float16, float32, or "
                                  f"uint8 for FP8 codes)")
    if not array.flags.c_contiguous:
        raise KernelArgumentError("encode_2d needs a C-contiguous array (pass xp.ascontiguousarray(a))")
    if swizzle not in SWIZZLES:
        raise KernelArgumentError(f"swizzle must be one of {sorted(SWIZZLES)} bytes, got {swizzle!r}")
    rows, cols = (int(n) for n in array.shape)
    pitch = cols * dtype.itemsize
    if pitch % 16:
        raise KernelArgumentError(
            f"encode_2d: a row is {pitch} bytes ({cols} x {dtype}); a tensor map needs rows that are a "
            f"multiple of 16 bytes ({16 // dtype.itemsize} elements), so that each row starts 16-byte aligned")
    bc, br = (int(n) for n in box)
    if not (1 <= bc <= 256 and 1 <= br <= 256):
        raise KernelArgumentError(f"box sides must be 1 to 256 elements, got {box}")
    if (bc * dtype.itemsize) % 16:
        raise KernelArgumentError(f"a box row must be a multiple of 16 bytes, got {bc} x {dtype}")
    if swizzle and bc * dtype.itemsize > swizzle:
        raise KernelArgumentError(f"with a {swizzle}-byte swizzle a box row holds at most {swizzle} bytes; "
                                  f"got {bc} x {dtype.itemsize}")
    if isinstance(array, np.ndarray):
        raw = _CPU_LAYOUT.pack(CPU_MAGIC, array.ctypes.data, rows, cols, pitch, bc, br, dtype.itemsize, swizzle)
        return TensorMap(raw.ljust(TENSOR_MAP_BYTES, b"\0"), array, (bc, br), swizzle, "cpu")
    address = int(array.data.ptr)
    if address % 16:
        raise KernelArgumentError("encode_2d: a tensor map's array must start 16-byte aligned")
    return TensorMap(_encode_driver(address, data_type, rows, cols, pitch, bc, br, swizzle), array, (bc, br),
                     swizzle, "gpu")


@functools.lru_cache(maxsize=1)
def _driver():
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    return fn


def _encode_driver(address, data_type, rows, cols, pitch, bc, br, swizzle) -> bytes:
    buffer = ctypes.create_string_buffer(TENSOR_MAP_BYTES + 128)
    start = (-ctypes.addressof(buffer)) % 128      # the driver wants the map 64- (CUDA 13: 128-) byte aligned
    out = ctypes.addressof(buffer) + start
    u64x2, u32x2 = ctypes.c_uint64 * 2, ctypes.c_uint32 * 2
    result = _driver()(
        ctypes.c_void_p(out), ctypes.c_int(data_type), ctypes.c_uint32(2), ctypes.c_void_p(address),
        u64x2(cols, rows), u64x2(pitch, 0), u32x2(bc, br), u32x2(1, 1),
        ctypes.c_int(0),                   # no interleave
        ctypes.c_int(SWIZZLES[swizzle]),
        ctypes.c_int(2),                   # L2 promotion of 128 bytes
        ctypes.c_int(0))                   # out-of-bounds elements read as zeros
    if result != 0:
        raise KernelArgumentError(f"cuTensorMapEncodeTiled failed with CUresult {result} (array {rows} x {cols} "
                                  f"of data type {data_type}, box {bc} x {br}, swizzle {swizzle})")
    return ctypes.string_at(out, TENSOR_MAP_BYTES)


# ------------------------------------------------------------------ 4-D maps (issue 26: conv steps)
#: The CPU backend's layout of a 4-D map: magic, address, the four sizes (innermost first), the
#: byte strides of dimensions 1-3, the four box sides, element bytes, swizzle bytes
#: (gpulab_hopper_cpu.h's CpuTensorMap4 reads the same fields).
CPU_MAGIC_4D = 0x3470614D54534C47   # "GLSTMap4"
_CPU_LAYOUT_4D = struct.Struct("<QQ4Q3Q4III")


def encode_4d(array, box: tuple[int, int, int, int], swizzle: int = 128) -> TensorMap:
    """A tensor map of the C-contiguous 4-D ``array`` (e.g. an NHWC image batch, shape
    (N, H, W, C)) whose copies move a box of ``box = (b0, b1, b2, b3)`` elements, innermost
    dimension first (for NHWC: channels, w, h, images), laid out in shared memory as the box's
    rows of b0 elements one after another, with ``swizzle`` (0, 32, 64 or 128 bytes).

    The conv steps read one 128-pixel tile of one tap (r, s) as a box {64 channels, w, h, 1}:
    128 rows of 128 bytes, the K-major, 128-byte-swizzled tile wgmma reads. The rules are
    cuTensorMapEncodeTiled's, as for :func:`encode_2d`: each stride (bytes from one index of
    dimensions 1-3 to the next) a multiple of 16, box sides 1 to 256, a box row a multiple of
    16 bytes and with a swizzle at most its width. Coordinates outside the array (negative
    ones too) read as zeros: a convolution's zero border comes free.
    """
    if getattr(array, "ndim", None) != 4:
        raise KernelArgumentError(f"encode_4d needs a 4-D array, got {type(array).__name__} of shape "
                                  f"{getattr(array, 'shape', '?')}")
    dtype = np.dtype(array.dtype)
    if dtype not in _DATA_TYPES:
        raise KernelArgumentError(f"encode_4d: element type {dtype} is not supported (float16 or float32)")
    if not array.flags.c_contiguous:
        raise KernelArgumentError("encode_4d needs a C-contiguous array (pass xp.ascontiguousarray(a))")
    if swizzle not in SWIZZLES:
        raise KernelArgumentError(f"swizzle must be one of {sorted(SWIZZLES)} bytes, got {swizzle!r}")
    dims = tuple(int(n) for n in reversed(array.shape))          # innermost first, as the driver wants
    strides = tuple(int(s) for s in reversed(array.strides))[1:]  # bytes, dimensions 1-3
    if strides[0] % 16:
        raise KernelArgumentError(
            f"encode_4d: the innermost dimension is {dims[0]} x {dtype} = {strides[0]} bytes; a tensor map needs "
            f"a multiple of 16 bytes ({16 // dtype.itemsize} elements), so that every row starts 16-byte aligned")
    b = tuple(int(n) for n in box)
    if len(b) != 4 or not all(1 <= n <= 256 for n in b):
        raise KernelArgumentError(f"box must be 4 sides of 1 to 256 elements, got {box}")
    if (b[0] * dtype.itemsize) % 16:
        raise KernelArgumentError(f"a box row must be a multiple of 16 bytes, got {b[0]} x {dtype}")
    if swizzle and b[0] * dtype.itemsize > swizzle:
        raise KernelArgumentError(f"with a {swizzle}-byte swizzle a box row holds at most {swizzle} bytes; "
                                  f"got {b[0]} x {dtype.itemsize}")
    if isinstance(array, np.ndarray):
        raw = _CPU_LAYOUT_4D.pack(CPU_MAGIC_4D, array.ctypes.data, *dims, *strides, *b, dtype.itemsize, swizzle)
        return TensorMap(raw.ljust(TENSOR_MAP_BYTES, b"\0"), array, b, swizzle, "cpu")
    address = int(array.data.ptr)
    if address % 16:
        raise KernelArgumentError("encode_4d: a tensor map's array must start 16-byte aligned")
    buffer = ctypes.create_string_buffer(TENSOR_MAP_BYTES + 128)
    out = ctypes.addressof(buffer) + (-ctypes.addressof(buffer)) % 128
    u64x4, u64x3, u32x4 = ctypes.c_uint64 * 4, ctypes.c_uint64 * 3, ctypes.c_uint32 * 4
    result = _driver()(
        ctypes.c_void_p(out), ctypes.c_int(_DATA_TYPES[dtype]), ctypes.c_uint32(4), ctypes.c_void_p(address),
        u64x4(*dims), u64x3(*strides), u32x4(*b), u32x4(1, 1, 1, 1),
        ctypes.c_int(0), ctypes.c_int(SWIZZLES[swizzle]),
        ctypes.c_int(2),                   # L2 promotion of 128 bytes
        ctypes.c_int(0))                   # out-of-bounds elements read as zeros
    if result != 0:
        raise KernelArgumentError(f"cuTensorMapEncodeTiled failed with CUresult {result} (array {array.shape} "
                                  f"{dtype}, box {b}, swizzle {swizzle})")
    return TensorMap(ctypes.string_at(out, TENSOR_MAP_BYTES), array, b, swizzle, "gpu")


def cpu_map_extent(raw: bytes) -> tuple[int, int] | None:
    """(address, bytes) of the array a CPU-backend tensor map's 128 bytes describe, or None for
    bytes that are not one (the grader's sandbox sends that array to the process that launches)."""
    magic, address = struct.unpack_from("<QQ", raw)
    if magic == CPU_MAGIC:
        _, _, rows, _, pitch, *_ = _CPU_LAYOUT.unpack_from(raw)
        return address, rows * pitch
    if magic == CPU_MAGIC_4D:
        fields = _CPU_LAYOUT_4D.unpack_from(raw)
        return address, fields[5] * fields[8]           # dims[3] x strides[2]
    return None


def with_address(raw: bytes, address: int) -> bytes:
    """A CPU-backend tensor map's bytes describing the same array at ``address``."""
    return raw[:8] + struct.pack("<Q", address) + raw[16:]

"""The geometry of the AlexNet chapter's tensor-core steps beyond wmma (18-22): mma.sync with
ldmatrix, cp.async pipelines, swizzled shared memory, their tf32 form and the split fp16 one.

This module holds the channels-last copy with its border written out (``kernels/alexnet/nhwc_runs.h``),
the tile shapes of each kernel and the per-layer choice of tile; :class:`.launchers.Mma` binds
the steps from them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


LAYOUT_BLOCK = 256       # to_padded_nhwc's threads per block (one block per padded row)
FILTER_BLOCK = 256


@dataclass(frozen=True)
class Tile:
    """One instantiation of a step's GEMM template: BM filters x BN pixels, warp tiles of
    WM x WN, ``stages`` slices in flight (1: through registers, double-buffered in shared
    memory), slices of ``bk_bytes`` per row, ``pad`` bytes of padding per row (0 when the rows
    are swizzled)."""

    BM: int
    BN: int
    WM: int
    WN: int
    stages: int
    pad: int = 0
    bk_bytes: int = 64

    @property
    def threads(self) -> int:
        return 32 * (self.BM // self.WM) * (self.BN // self.WN)

    def shared_bytes(self, itemsize: int) -> int:
        """Dynamic shared memory: the slices in flight, or the staged output if larger."""
        row = self.bk_bytes + self.pad
        stages = max(self.stages, 2)
        return max(stages * (self.BM + self.BN) * row, self.BM * (self.BN + 8) * itemsize)


#: Every kernel of steps 18-21 and its tile (the names are those in the .cu files).
TILES = {
    "conv_mma_ldmatrix": Tile(128, 128, 64, 32, 1, pad=16),
    "conv_mma_cp_async": Tile(128, 128, 64, 32, 4, pad=16),
    "conv_mma_128x128": Tile(128, 128, 64, 32, 4),
    "conv_mma_96x128": Tile(96, 128, 48, 32, 4),
    "conv_mma_128x128_w4": Tile(128, 128, 64, 64, 4),
    "conv_mma_128x64": Tile(128, 64, 64, 32, 4),
    "conv_mma_64x128": Tile(64, 128, 32, 64, 4),
    "conv_mma_128x256": Tile(128, 256, 64, 64, 3),
    "conv_mma_128x128_w4_k64": Tile(128, 128, 64, 64, 3, bk_bytes=128),
    "conv_mma_128x128_k64": Tile(128, 128, 64, 32, 3, bk_bytes=128),
    "conv_mma_96x128_k64": Tile(96, 128, 48, 32, 3, bk_bytes=128),
    "conv_mma_64x128_k64": Tile(64, 128, 32, 64, 4, bk_bytes=128),
    "conv_tf32_128x128": Tile(128, 128, 64, 32, 4),
    "conv_tf32_96x128": Tile(96, 128, 48, 32, 4),
    "conv_tf32_128x128_w4": Tile(128, 128, 64, 64, 4),
    "conv_tf32_128x64": Tile(128, 64, 64, 32, 4),
    "conv_tf32_64x128": Tile(64, 128, 32, 64, 4),
    "conv_split_128x128_k64": Tile(128, 128, 64, 32, 3, bk_bytes=128),
    "conv_split_96x128_k64": Tile(96, 128, 48, 32, 3, bk_bytes=128),
}

#: The kernel each step runs on each layer (1..5). Steps 18 and 19 use one tile everywhere;
#: steps 20 and 21 one per layer, chosen by timing every candidate on the H100
#: (tools/tune_fast.py).
LAYER_KERNELS = {
    "18": {i: "conv_mma_ldmatrix" for i in range(1, 6)},
    "19": {i: "conv_mma_cp_async" for i in range(1, 6)},
    "20": {1: "conv_mma_96x128", 2: "conv_mma_128x128_w4_k64", 3: "conv_mma_128x128_w4_k64",
           4: "conv_mma_128x128_w4_k64", 5: "conv_mma_128x128_w4_k64"},
    "21": {1: "conv_tf32_96x128", 2: "conv_tf32_128x128_w4", 3: "conv_tf32_128x128_w4",
           4: "conv_tf32_128x128_w4", 5: "conv_tf32_64x128"},
    "22": {1: "conv_split_96x128_k64", 2: "conv_split_128x128_k64", 3: "conv_split_128x128_k64",
           4: "conv_split_128x128_k64", 5: "conv_split_128x128_k64"},
}

#: Steps whose copies split each float into three blocks of half channels (see 22_split_fp16.cu).
SPLIT_STEPS = ("22",)


@dataclass(frozen=True)
class Geometry:
    """The padded channels-last input and the filter runs for one layer (nhwc_runs.h)."""

    Cp: int      # channels per pixel in the copy (all blocks)
    L: int       # elements per filter row's run (S * Cp rounded up to a 16-byte multiple)
    Hp: int
    Wp: int
    chunk: int   # elements per 16-byte chunk (8 halves, 4 floats)
    R: int
    block: int   # channels per block: Cp, or Cp / 3 for the split copies

    @property
    def Lc(self) -> int:
        return self.L // self.chunk

    def Kp(self, tile: Tile, itemsize: int) -> int:
        """The filter matrix's row pitch for ``tile``: R * L rounded up to a whole slice."""
        per_slice = tile.bk_bytes // itemsize
        return -(-self.R * self.L // per_slice) * per_slice


def geometry(layer, itemsize: int, blocks: int = 1) -> Geometry:
    """Cp, L, Hp, Wp and Kp of ``layer`` for elements of ``itemsize`` bytes (2 or 4), with
    ``blocks`` channel blocks per pixel (3 for the split copies)."""
    chunk = 16 // itemsize
    C, S, U = layer.C, layer.S, layer.U
    # Channels: a multiple of the chunk, or 4 halves (8 bytes) for layer 1's 3 channels when
    # the stride is even, so that two output columns' windows start 16 bytes apart.
    if itemsize == 2 and C <= 4 and U % 2 == 0:
        Cp = 4
    else:
        Cp = -(-C // chunk) * chunk
    block = Cp
    Cp *= blocks
    L = -(-S * Cp // chunk) * chunk
    Hp = layer.H + 2 * layer.P
    Wp = max(layer.W + 2 * layer.P, (layer.F - 1) * U + -(-L // Cp))
    if (Cp * itemsize) % 16:
        # pixels of 8 (mod 16) bytes: an even number per row, and an even stride, keep every
        # window's start 16-byte aligned
        if (U * Cp * itemsize) % 16:
            raise ValueError(f"{layer.name}: {Cp} channels of {itemsize} bytes with stride {U} leave "
                             "windows that do not start on 16 bytes")
        Wp += Wp % 2
    return Geometry(Cp=Cp, L=L, Hp=Hp, Wp=Wp, chunk=chunk, R=layer.R, block=block)


def copy_layout(step) -> tuple[type, str, int]:
    """The element type of a step's copies, its kernels' suffix, and blocks per pixel."""
    if step.number in SPLIT_STEPS:
        return np.float16, "split", 3
    if step.precision == "fp16":
        return np.float16, "half", 1
    return np.float32, "float", 1


def scratch_bytes(step, layer, N: int) -> int:
    """The channels-last copy and the filter runs (for the widest slice)."""
    dtype, _, blocks = copy_layout(step)
    itemsize = np.dtype(dtype).itemsize
    g = geometry(layer, itemsize, blocks)
    return itemsize * (N * g.Hp * g.Wp * g.Cp + layer.M * g.Kp(Tile(1, 1, 1, 1, 1, bk_bytes=128), itemsize))


def kernel_for(step_number: str, layer) -> str:
    return LAYER_KERNELS[step_number][layer.index]


def launch_config(step_number: str, layer, N: int, itemsize: int) -> dict:
    """The GEMM's kernel, grid, block and dynamic shared memory on ``layer``."""
    name = kernel_for(step_number, layer)
    tile = TILES[name]
    return {"kernel": name, "grid": (-(-N * layer.E * layer.F // tile.BN), -(-layer.M // tile.BM)),
            "block": (tile.threads,), "shared_bytes": tile.shared_bytes(itemsize)}


def layout_shared_bytes(layer, itemsize: int) -> int:
    """to_padded_nhwc's dynamic shared memory: one input row of every channel."""
    return layer.C * layer.W * itemsize

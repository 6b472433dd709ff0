"""Step 25 of the AlexNet ladder on its stride-1 layers: Hopper's wgmma fed by TMA
(kernels/alexnet/25_wgmma_tma.cu, the GEMM of kernels/common/hopper_conv.cuh), issue 26: the
launch and its tile shapes. Layer 1 (stride 4, 3 channels) is not run here: the ladder
(:mod:`.steps`) hands it to step 20's kernel, the fastest the ladder has for it.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ... import tensormap
from ...errors import KernelArgumentError
from ...kernels import get_backend, load_module

FILE = "alexnet/25_wgmma_tma.cu"
GPU_OPTIONS = ("-arch=sm_90a",)
BM, BK, STAGES, THREADS = 128, 64, 4, 384
#: The tile shapes the kernel file instantiates: (TW, BN, BK) -- TW output columns (TH = 128 / TW
#: rows) of one image times BN filters, slices of BK channels (64: the 128-byte swizzle; 32: the
#: 64-byte swizzle, for 96-channel layer 2, whose 64-channel slices would be a quarter zeros).
CANDIDATES = tuple((tw, bn, 64) for tw in (8, 16, 32) for bn in (128, 256)) + ((16, 256, 32), (32, 256, 32))
#: The shape each stride-1 layer runs with: the fastest of CANDIDATES on each layer at N = 128 when
#: all were timed on an H100 (a development run of issue 26, not yet a recorded sweep of the
#: chapter). They are also the ones that waste the fewest tile rows, filter columns and zero
#: channels: layer 2's 27 x 27 in 4 x 32 tiles (729 of 896 rows) and 96 channels in 3 slices of
#: 32; 13 x 13 in 16 x 8 or 8 x 16 (169 of 256, within a few percent of each other); 384 filters
#: in 3 x 128, 256 in 1 x 256.
DEFAULT_TILES = {2: (32, 256, 32), 3: (16, 128, 64), 4: (16, 128, 64), 5: (8, 256, 64)}


def applies(layer) -> bool:
    """Stride 1 (layers 2-5): a tap's input pixels are then a box of the image."""
    return layer.U == 1


def shared_bytes(bn: int) -> int:
    """The ring of STAGES slices of (128 + BN) x 64 halves, plus 1 KiB for the swizzle's alignment."""
    return STAGES * (BM + bn) * BK * 2 + 1024


def _tile(tile) -> tuple[int, int, int]:
    """(TW, BN, BK) of a tile given as (TW, BN) (64-channel slices) or (TW, BN, BK)."""
    return tuple(tile) + (64,) if len(tile) == 2 else tuple(tile)


def tiles(layer, N: int, tile) -> int:
    tw, bn, _ = _tile(tile)
    th = BM // tw
    return N * -(-layer.E // th) * -(-layer.F // tw) * -(-layer.M // bn)


def row_use(layer, tile) -> float:
    """The share of a tile's pixel rows and filter columns that are real outputs."""
    tw, bn, _ = _tile(tile)
    th = BM // tw
    return (layer.E * layer.F * layer.M) / (-(-layer.E // th) * th * -(-layer.F // tw) * tw * -(-layer.M // bn) * bn)


def padded_channels(layer, bk: int = BK) -> tuple[int, int]:
    """(channels of the channels-last copy: C rounded up to 8, so that a pixel is whole 16-byte
    chunks; channels of the filter rows: C rounded up to a slice of ``bk``)."""
    return -(-layer.C // 8) * 8, -(-layer.C // bk) * bk


def filter_rows(w, layer, xp, bk: int = BK):
    """The filters as M x (R S Cp) halves, k in (r, s, c) order, zero past C: made once per layer."""
    _, cp = padded_channels(layer, bk)
    wp = xp.zeros((layer.M, layer.R * layer.S, cp), dtype=xp.float16)
    wp[:, :, :layer.C] = xp.asarray(w).astype(xp.float16).transpose(0, 2, 3, 1).reshape(
        layer.M, layer.R * layer.S, layer.C)
    return wp.reshape(layer.M, layer.R * layer.S * cp)


def kernel_for(layer, tile=None) -> str:
    """The name of the GEMM kernel ``layer`` runs with (its :data:`DEFAULT_TILES` shape)."""
    tw, bn, bk = _tile(tile or DEFAULT_TILES[layer.index])
    return f"conv_wgmma_{tw}x{bn}" + ("_k32" if bk == 32 else "")


def scratch_bytes(layer, N: int, tile=None) -> int:
    """Device memory beyond x, w and y: the channels-last copy of x and the filter rows (halves)."""
    _, _, bk = _tile(tile or DEFAULT_TILES[layer.index])
    cin, cp = padded_channels(layer, bk)
    return 2 * (N * layer.H * layer.W * cin + layer.M * layer.R * layer.S * cp)


def launch_config(layer, N: int, tile=None, blocks: int = 132) -> dict:
    """The GEMM's grid (one block per SM, ``blocks``: an H100's 132; fewer for fewer tiles), block
    and dynamic shared memory."""
    tw, bn, bk = _tile(tile or DEFAULT_TILES[layer.index])
    return {"grid": (max(1, min(blocks, tiles(layer, N, (tw, bn)))),), "block": (THREADS,),
            "shared_bytes": shared_bytes(bn)}


def blocks_here(backend) -> int:
    """One block per SM on a GPU; 1 on the CPU backend (its few tiles then still loop)."""
    if backend.name == "gpu":
        import cupy
        return int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    return 1


def make_launch(layer, N: int, x, w, y, backend=None, tile=None, blocks: int | None = None) -> Callable[[], None]:
    """y (N x M x E x F, half) = conv(x, w) for a stride-1 ``layer`` on device arrays (x, w half,
    NCHW / MCRS). Binding lays the filters out and makes both tensor maps; each call copies x to
    channels-last and runs the GEMM. ``tile``: (TW, BN), default :data:`DEFAULT_TILES`."""
    be = get_backend(backend)
    if not applies(layer):
        raise KernelArgumentError(f"{layer.name} has stride {layer.U}: the wgmma step runs stride-1 layers only "
                                  "(a tap's pixels are then one box of the input)")
    tw, bn, bk = _tile(tile or DEFAULT_TILES[layer.index])
    if (tw, bn, bk) not in CANDIDATES:
        raise KernelArgumentError(f"tile {(tw, bn, bk)} is not compiled; the kernel file has {CANDIDATES}")
    module = load_module(FILE, be, options=GPU_OPTIONS if be.name == "gpu" else ())
    cin, cp = padded_channels(layer, bk)
    xt = be.xp.empty((N, layer.H, layer.W, cin), dtype=np.float16)
    wp = filter_rows(w, layer, be.xp, bk)
    map_x = tensormap.encode_4d(xt, (bk, tw, BM // tw, 1), swizzle=2 * bk)
    map_w = tensormap.encode_2d(wp, (bk, bn), swizzle=2 * bk)
    gemm = module.get_function(kernel_for(layer, (tw, bn, bk)))
    gemm.allow_shared_memory(shared_bytes(bn))
    hw = layer.H * layer.W
    to_nhwc = module.get_function("to_nhwc_half").bind(
        (-(-hw // 32), -(-cin // 32), N), (32, 8), (x, xt, np.int32(layer.C), np.int32(hw), np.int32(cin)))
    grid = (max(1, min(blocks or blocks_here(be), tiles(layer, N, (tw, bn)))),)
    run = gemm.bind(grid, (THREADS,), (map_x, map_w, y, *(np.int32(v) for v in (
        N, layer.C, cp, layer.M, layer.E, layer.F, layer.R, layer.S, layer.P))), shared_bytes(bn))

    def launch():
        to_nhwc()
        run()
    launch.keep = (xt, wp, map_x, map_w)
    launch.parts = {"layout": (to_nhwc,), "gemm": run}
    return launch


def run(layer, x, w, backend=None, tile=None, blocks=None) -> np.ndarray:
    """conv(x, w) on host float inputs (converted to half) with a NaN-poisoned output; y on the host."""
    be = get_backend(backend)
    y = be.poisoned(layer.y_shape(x.shape[0]), np.float16)
    make_launch(layer, x.shape[0], be.to_device(x.astype(np.float16)), be.to_device(w.astype(np.float16)), y, be,
                tile, blocks)()
    be.synchronize()
    return be.to_host(y)

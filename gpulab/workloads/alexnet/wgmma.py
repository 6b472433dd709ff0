"""Step 25 of the AlexNet ladder on its stride-1 layers: Hopper's wgmma fed by TMA
(kernels/alexnet/25_wgmma_tma.cu, the GEMM of kernels/common/hopper_conv.cuh), issue 26: the
tile shapes and scratch, from which :class:`.launchers.Wgmma` binds it. Layer 1 (stride 4, 3
channels) is not run by it: the ladder (:mod:`.steps`) hands it to step 20, the fastest the ladder
has for it.
"""
from __future__ import annotations

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


def tile_shape(tile) -> tuple[int, int, int]:
    """(TW, BN, BK) of a tile given as (TW, BN) (64-channel slices) or (TW, BN, BK)."""
    return tuple(tile) + (64,) if len(tile) == 2 else tuple(tile)


def tiles(layer, N: int, tile) -> int:
    tw, bn, _ = tile_shape(tile)
    th = BM // tw
    return N * -(-layer.E // th) * -(-layer.F // tw) * -(-layer.M // bn)


def row_use(layer, tile) -> float:
    """The share of a tile's pixel rows and filter columns that are real outputs."""
    tw, bn, _ = tile_shape(tile)
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
    tw, bn, bk = tile_shape(tile or DEFAULT_TILES[layer.index])
    return f"conv_wgmma_{tw}x{bn}" + ("_k32" if bk == 32 else "")


def scratch_bytes(layer, N: int, tile=None) -> int:
    """Device memory beyond x, w and y: the channels-last copy of x and the filter rows (halves)."""
    _, _, bk = tile_shape(tile or DEFAULT_TILES[layer.index])
    cin, cp = padded_channels(layer, bk)
    return 2 * (N * layer.H * layer.W * cin + layer.M * layer.R * layer.S * cp)


def launch_config(layer, N: int, tile=None, blocks: int = 132) -> dict:
    """The GEMM's grid (one block per SM, ``blocks``: an H100's 132; fewer for fewer tiles), block
    and dynamic shared memory."""
    tw, bn, bk = tile_shape(tile or DEFAULT_TILES[layer.index])
    return {"grid": (max(1, min(blocks, tiles(layer, N, (tw, bn)))),), "block": (THREADS,),
            "shared_bytes": shared_bytes(bn)}


def blocks_here(backend) -> int:
    """One block per SM on a GPU; 1 on the CPU backend (its few tiles then still loop)."""
    if backend.name == "gpu":
        import cupy
        return int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    return 1

"""Steps 26 and 27 of the AlexNet ladder on its stride-1 layers: step 25's wgmma GEMM on float
data (issue 26) -- step 26 reads it as tf32 (kernels/alexnet/26_wgmma_tf32.cu), step 27 splits
each float into two tf32 numbers for fp32 accuracy (3xTF32, kernels/alexnet/27_wgmma_3xtf32.cu).
The GEMMs are the convpool chapter's steps 10 and 11 (kernels/common/hopper_conv.cuh); this
module holds their tile shapes and scratch (:class:`.launchers.Wgmma32` binds them). The tile
geometry (128-pixel tiles of TW x 128 / TW, one block per SM) is step 25's, read from
:mod:`.wgmma`. Layer 1 (stride 4) is not run by them: the ladder (:mod:`.steps`) hands it to
step 21 (tf32) or 22 (fp32 accuracy).
"""
from __future__ import annotations

from ...errors import KernelArgumentError
from ..convpool.problem import tf32_split
from . import wgmma
from .wgmma import BM, THREADS

FILES = {"26": "alexnet/26_wgmma_tf32.cu", "27": "alexnet/27_wgmma_3xtf32.cu"}
#: Channels per slice: one 128-byte row of floats.
BK = 32
#: Slots of the ring (kernels/common/hopper_conv.cuh: Conv32Tf32, Conv32Split) and the tiles of
#: A (128 x 32) and B (BN x 32) a slot holds: step 26 x and w, step 27 their two tf32 parts each.
STAGES = {"26": 4, "27": 3}
TENSORS = {"26": 1, "27": 2}
#: TW of a flat tile: 128 consecutive slots of a copy that lays the images one after another, each
#: row followed by P zero columns and each image by P zero rows (kernels/common/hopper_conv.cuh),
#: so that a tile runs across rows and images and one box of a 2-D map is a tap's A slice.
FLAT = 0
#: TW of a pair of flat tiles: two blocks of a cluster on neighbouring flat tiles with the same
#: filters, each loading half of B for both by TMA multicast (the hopper chapter's step 8).
PAIR = -2
#: The tile shapes each kernel file instantiates: (TW, BN) -- TW output columns (128 / TW rows) of
#: one image, or a flat tile (TW = FLAT), times BN filters. Step 27 keeps 128 filters (its two
#: partial accumulators beside the sums fill the consumer's registers).
CANDIDATES = {"26": tuple((tw, bn) for tw in (8, 16, 32) for bn in (128, 256))
              + tuple((tw, bn) for tw in (FLAT, PAIR) for bn in (128, 192, 256)),
              "27": tuple((tw, 128) for tw in (8, 16, 32, FLAT, PAIR))}
#: The shape each stride-1 layer runs with: the fastest of CANDIDATES on each layer at N = 128 when
#: all were timed on an H100 (development runs of issue 26 with gpulab.sweep, not a recorded sweep;
#: the flat tiles and pairs on 2026-11-26 09:58 UTC, each checked against float64 first). Flat tiles
#: won on the 13 x 13 layers (layers 3-4 in two tiles of 192 filters: 0.178 and 0.228 ms against
#: 0.235 and 0.306 for the best rectangles; layer 5: 0.177 against 0.195), while layer 2's 27 x 27
#: gained nothing (flat 128: 0.440, 32 x 256: 0.438 ms); pairs were never the fastest (layer 2:
#: 0.467 against flat's 0.453 for BN = 256; faster than flat only at BN = 256 on layers 3-4, where
#: both lose to BN = 192). Step 27: flat on every layer (pairs 1-5% slower).
DEFAULT_TILES = {"26": {2: (32, 256), 3: (FLAT, 192), 4: (FLAT, 192), 5: (FLAT, 128)},
                 "27": {2: (FLAT, 128), 3: (FLAT, 128), 4: (FLAT, 128), 5: (FLAT, 128)}}


def check_step(number: str) -> str:
    if number not in FILES:
        raise KernelArgumentError(f"step {number!r} is not a float wgmma step; expected one of {sorted(FILES)}")
    return number


def tile_for(number: str, layer, tile=None) -> tuple[int, int]:
    """(TW, BN) of step ``number`` on ``layer``: ``tile``, else :data:`DEFAULT_TILES`."""
    tw, bn = tile or DEFAULT_TILES[check_step(number)][layer.index]
    if (tw, bn) not in CANDIDATES[number]:
        raise KernelArgumentError(f"tile {(tw, bn)} is not compiled for step {number}; "
                                  f"{FILES[number]} has {CANDIDATES[number]}")
    return tw, bn


def flat_dims(layer) -> tuple[int, int]:
    """(Hp, Wp) of a flat copy: H + P rows and W + P columns a picture, the last P of each zeros
    (a tap reaches P pixels past either edge, and the zeros after one row or image are the ones
    before the next)."""
    return layer.H + layer.P, layer.W + layer.P


def tiles(layer, N: int, tile) -> int:
    """Tiles of (TW, BN) ``tile`` on ``layer`` at batch N: step 25's count for TW > 0; flat tiles
    cover the N Hp Wp slots of the flat copy in runs of 128."""
    tw, bn = tile
    if tw > 0:
        return wgmma.tiles(layer, N, (tw, bn))
    hp, wp = flat_dims(layer)
    runs = -(-N * hp * wp // BM)
    if tw == PAIR:
        runs += runs % 2
    return runs * -(-layer.M // bn)


def tile_name(tile) -> str:
    """(TW, BN) in words: "32 x 256" (TW columns of one image x BN filters), "flat x 192", "pair x 256"."""
    tw, bn = tile
    return f"{ {FLAT: 'flat', PAIR: 'pair'}.get(tw, tw)} x {bn}"


def row_use(layer, N: int, tile) -> float:
    """The share of the tiles' pixel rows and filter columns that are real outputs."""
    return N * layer.E * layer.F * layer.M / (tiles(layer, N, tile) * BM * tile[1])


def grid_blocks(layer, N: int, tile, blocks: int) -> int:
    """Blocks of the persistent GEMM: ``blocks`` (one per SM), fewer for fewer tiles; for pairs an
    even count (two blocks a cluster), at least 2."""
    n = max(1, min(blocks, tiles(layer, N, tile)))
    return max(2, n - n % 2) if tile[0] == PAIR else n


def shared_bytes(number: str, bn: int, tw: int = 8) -> int:
    """The ring: STAGES slots of TENSORS x (128 + BN) x 32 floats, plus 1 KiB for the swizzle's
    alignment; pairs (tw = PAIR) keep their full and empty barriers after it (8 bytes each a slot)."""
    return STAGES[number] * TENSORS[number] * (BM + bn) * BK * 4 + 1024 + (16 * STAGES[number] if tw == PAIR else 0)


def padded_channels(layer) -> tuple[int, int]:
    """(channels of the channels-last copy: C rounded up to 4, so that a pixel is whole 16-byte
    chunks; channels of the filter rows: C rounded up to a slice of 32)."""
    return -(-layer.C // 4) * 4, -(-layer.C // BK) * BK


def filter_rows(w, layer, xp) -> tuple:
    """The filters as M x (R S Cp) floats, k in (r, s, c) order, zero past C, split into their
    tf32 part (rounded to nearest) and the remainder: made once per layer. Step 26 reads the
    first, step 27 both."""
    _, cp = padded_channels(layer)
    wp = xp.zeros((layer.M, layer.R * layer.S, cp), dtype=xp.float32)
    wp[:, :, :layer.C] = xp.asarray(w, dtype=xp.float32).transpose(0, 2, 3, 1).reshape(
        layer.M, layer.R * layer.S, layer.C)
    return tf32_split(wp.reshape(layer.M, layer.R * layer.S * cp), xp)


def kernel_for(number: str, layer, tile=None) -> str:
    """The name of the GEMM kernel step ``number`` runs ``layer`` with."""
    tw, bn = tile_for(number, layer, tile)
    shape = {FLAT: f"flat_{bn}", PAIR: f"pair_{bn}"}.get(tw, f"{tw}x{bn}")
    return f"conv_wgmma_{'tf32' if number == '26' else '3xtf32'}_{shape}"


def scratch_bytes(number: str, layer, N: int, tile=None) -> int:
    """Device memory beyond x, w and y: the channels-last copy of x (step 27: its two parts; flat
    tiles: N Hp Wp slots a copy) and the filter rows (both parts)."""
    cin, cp = padded_channels(layer)
    hp, wp = flat_dims(layer) if tile_for(number, layer, tile)[0] <= 0 else (layer.H, layer.W)
    return 4 * (TENSORS[check_step(number)] * N * hp * wp * cin + 2 * layer.M * layer.R * layer.S * cp)


def launch_config(number: str, layer, N: int, tile=None, blocks: int = 132) -> dict:
    """The GEMM's grid (one block per SM, ``blocks``: an H100's 132; fewer for fewer tiles), block
    and dynamic shared memory."""
    tw, bn = tile_for(number, layer, tile)
    return {"grid": (grid_blocks(layer, N, (tw, bn), blocks),), "block": (THREADS,),
            "shared_bytes": shared_bytes(number, bn, tw)}

"""How a warp's memory accesses map onto the hardware: 32-byte sectors of
device memory and the 32 banks of shared memory.

Both take the addresses the 32 threads of one warp touch in one instruction
(a sequence of 32 numbers, or a 2-D array of warps x 32 lanes) and count what
the hardware does for them, with the sizes from :mod:`gpulab.datasheet`.
"""
from __future__ import annotations

import numpy as np

from .datasheet import SECTOR_BYTES, SHARED_BANKS, WARP_SIZE


def _warps(addresses) -> np.ndarray:
    a = np.asarray(addresses, dtype=np.int64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] > WARP_SIZE:
        raise ValueError(f"expected the addresses of one warp ({WARP_SIZE} lanes) or an array of "
                         f"warps x {WARP_SIZE} lanes, got shape {np.shape(addresses)}")
    return a


def sectors(byte_addresses, access_bytes: int = 4) -> np.ndarray:
    """The number of distinct 32-byte sectors each warp's access touches
    (one number per warp): the unit in which L1, L2 and device memory move
    data. 32 lanes reading consecutive floats touch 4."""
    out = []
    for warp in _warps(byte_addresses):
        first, last = warp // SECTOR_BYTES, (warp + access_bytes - 1) // SECTOR_BYTES
        out.append(len(set(first.tolist()) | set(last.tolist())))
    return np.array(out)


def bank_passes(word_addresses) -> np.ndarray:
    """The passes each warp's shared-memory access needs (one number per warp):
    the most distinct 4-byte words it asks of any one bank. Lanes reading the
    same word share it (a broadcast), so 1 means conflict-free and 32 means
    every lane waits for its own pass."""
    out = []
    for warp in _warps(word_addresses):
        words = np.unique(warp)
        out.append(int(np.bincount(words % SHARED_BANKS, minlength=SHARED_BANKS).max()))
    return np.array(out)

"""Step 28 of the AlexNet ladder: step 25 with layer 1's copy of x to channels-last made by one
kernel of 16-byte stores (kernels/alexnet/28_vector_copies.cu). The GEMMs are step 20's (layer 1)
and step 25's (layers 2-5), bound as those steps bind them; only the copy that starts layer 1's
call changes (:func:`with_chunk_copy`; :mod:`.steps` decides where).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...errors import KernelArgumentError
from ...kernels import get_backend, load_module

FILE = "alexnet/28_vector_copies.cu"
KERNEL = "to_nhwc_chunks_half"
CHUNK = 8          # halves per thread: one 16-byte store
BLOCK = 256        # threads per block: any multiple of the warp does; 8 warps, a common default


def chunks(xt_shape) -> int:
    """The 16-byte chunks of a channels-last copy of shape (N, Hp, Wp, Cp): one thread each."""
    N, Hp, Wp, Cp = xt_shape
    return N * Hp * Wp * Cp // CHUNK


def copy_launch(x, xt, C: int, H: int, W: int, P: int, backend=None) -> Callable[[], None]:
    """The copy of NCHW halves ``x`` (N x C x H x W) into ``xt`` (N x Hp x Wp x Cp halves):
    ``xt[n, hp, wp, c] = x[n, c, hp - P, wp - P]`` inside the image, 0 in the border (P rows and
    columns before, whatever Hp, Wp leave after) and for C <= c < Cp; bound, no arguments."""
    be = get_backend(backend)
    N, Hp, Wp, Cp = xt.shape
    if tuple(x.shape) != (N, C, H, W):
        raise KernelArgumentError(f"x has shape {tuple(x.shape)}; expected {(N, C, H, W)} (N x C x H x W)")
    if x.dtype != np.float16 or xt.dtype != np.float16:
        raise KernelArgumentError(f"x and xt must be float16, got {x.dtype} and {xt.dtype}")
    if Cp < C or not (Cp % CHUNK == 0 or (Cp == 4 and Hp * Wp % 2 == 0)):
        raise KernelArgumentError(f"xt has {Cp} channels for C = {C}: expected a multiple of 8 at least C, "
                                  "or 4 with an even number of pixels per image (a 16-byte chunk is then 2 "
                                  "whole pixels)")
    if Hp < H + P or Wp < W + P or P < 0:
        raise KernelArgumentError(f"xt's {Hp} x {Wp} pixels cannot hold a {H} x {W} image after a border of {P}")
    if chunks(xt.shape) >= 2**31 or x.size >= 2**31:
        raise KernelArgumentError(f"{KERNEL} indexes with 32-bit integers: {xt.shape} is too large")
    kernel = load_module(FILE, be).get_function(KERNEL)
    return kernel.bind((-(-chunks(xt.shape) // BLOCK),), (BLOCK,),
                       (x, xt, *(np.int32(v) for v in (N, C, H, W, Cp, Hp, Wp, P))))


def with_chunk_copy(launch: Callable, x, layer, P: int, backend=None) -> Callable[[], None]:
    """``launch`` (step 25's or step 20's, as their modules bind it: ``launch.keep[0]`` is its
    channels-last copy, ``launch.parts`` its copy and GEMM) with its copy replaced by
    :func:`copy_launch` into the same buffer, border ``P``."""
    xt = launch.keep[0]
    copy = copy_launch(x, xt, layer.C, layer.H, layer.W, P, backend)
    gemm = launch.parts["gemm"]

    def run():
        copy()
        gemm()
    run.keep = launch.keep
    run.parts = {"layout": (copy,), "gemm": gemm}
    return run

"""The problem every step solves, declared once: AlexNet's five convolution layers, their shapes,
FLOP and byte counts, the reduced layers the checks run on the CPU backend, the batch sizes, the
seeded inputs and the float64 reference. A :class:`Conv` (a layer at a batch size) is one case.

Notation (the same in the kernels, the text and the plots): a layer maps an
input ``x`` of N x C x H x W to an output ``y`` of N x M x E x F with M filters
``w`` of C x R x S, stride U and zero padding P; every array is NCHW,
row-major. Each layer is measured on its own random input (the chapter times
the convolutions, not the pooling and ReLU that sit between them in AlexNet).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ... import ladder
from ...device import limits

NAME = "alexnet"
TITLE = "AlexNet's five convolution layers, from a CPU loop to tensor cores"


@dataclass(frozen=True)
class Layer:
    """One convolution layer's shape (the batch size N is chosen per run)."""

    index: int      # 1..5
    C: int          # input channels
    H: int          # input height
    W: int          # input width
    M: int          # filters (output channels)
    R: int          # filter height
    S: int          # filter width
    U: int          # stride
    P: int          # zero padding on each side

    @property
    def name(self) -> str:
        return f"conv{self.index}"

    @property
    def E(self) -> int:
        return (self.H + 2 * self.P - self.R) // self.U + 1

    @property
    def F(self) -> int:
        return (self.W + 2 * self.P - self.S) // self.U + 1

    @property
    def K(self) -> int:
        """The reduction length C*R*S: multiply-adds per output."""
        return self.C * self.R * self.S

    def x_shape(self, N: int) -> tuple:
        return (N, self.C, self.H, self.W)

    @property
    def w_shape(self) -> tuple:
        return (self.M, self.C, self.R, self.S)

    def y_shape(self, N: int) -> tuple:
        return (N, self.M, self.E, self.F)

    def dims(self, N: int) -> tuple:
        """The kernels' shape arguments, in their order: N, C, H, W, M, R, S, U, P, E, F."""
        return (N, self.C, self.H, self.W, self.M, self.R, self.S, self.U, self.P, self.E, self.F)

    def flops(self, N: int) -> int:
        """2 FLOPs (a multiply and an add) per multiply-add of direct convolution."""
        return 2 * N * self.M * self.E * self.F * self.K

    def bytes(self, N: int, itemsize: int = 4) -> int:
        """The fewest bytes a kernel must move: read x and w once, write y once."""
        return itemsize * (N * self.C * self.H * self.W + self.M * self.K + N * self.M * self.E * self.F)

    def describe(self, N: int) -> str:
        return (f"{self.name}: {self.C}x{self.H}x{self.W} -> {self.M}x{self.E}x{self.F}, "
                f"{self.M} filters {self.R}x{self.S}, stride {self.U}, pad {self.P}")


#: AlexNet's convolution layers (input 3 x 227 x 227), as in the student report.
LAYERS = [
    Layer(1, C=3, H=227, W=227, M=96, R=11, S=11, U=4, P=0),     # -> 96 x 55 x 55
    Layer(2, C=96, H=27, W=27, M=256, R=5, S=5, U=1, P=2),       # -> 256 x 27 x 27
    Layer(3, C=256, H=13, W=13, M=384, R=3, S=3, U=1, P=1),      # -> 384 x 13 x 13
    Layer(4, C=384, H=13, W=13, M=384, R=3, S=3, U=1, P=1),      # -> 384 x 13 x 13
    Layer(5, C=384, H=13, W=13, M=256, R=3, S=3, U=1, P=1),      # -> 256 x 13 x 13
]

#: Reduced layers for the CPU backend: the same filter sizes, strides and paddings, channel
#: counts that are multiples of nothing the kernels tile by (3 -> 10 -> 17 -> 20 -> 19 -> 13),
#: and a layer 1 whose 33 x 33 output needs two passes of a 17 x 17 block, as the real
#: layer 1's 55 x 55 needs two of 28 x 28.
CHECK_LAYERS = [
    Layer(1, C=3, H=139, W=139, M=10, R=11, S=11, U=4, P=0),     # -> 10 x 33 x 33
    Layer(2, C=10, H=15, W=15, M=17, R=5, S=5, U=1, P=2),        # -> 17 x 15 x 15
    Layer(3, C=17, H=7, W=7, M=20, R=3, S=3, U=1, P=1),          # -> 20 x 7 x 7
    Layer(4, C=20, H=7, W=7, M=19, R=3, S=3, U=1, P=1),          # -> 19 x 7 x 7
    Layer(5, C=19, H=7, W=7, M=13, R=3, S=3, U=1, P=1),          # -> 13 x 7 x 7
]
CHECK_N = 2

#: Batch sizes of the ladder, and of the scaling study beyond them.
BATCHES = [1, 32, 128]
SCALING_BATCHES = [256, 512, 1024, 2048]
MAIN_N = 128
#: The share of the device's memory one variant may use (the rest holds the reference, the
#: inputs of every precision and PyTorch's cache). Larger sizes are skipped and listed, with
#: the reason, in the run's "skipped" table. On the H100 (80 GB) the budget is 42.5 GB.
MEMORY_FRACTION = 0.5
#: The recording GPU's memory, for the budget on a machine without a GPU (an H100: 79.2 GiB).
RECORDING_MEMORY_BYTES = 85_017_493_504


def memory_limit(total_bytes: float | None = None) -> float:
    """Bytes one variant may use: :data:`MEMORY_FRACTION` of this device's memory (or of
    the simulated device's: :func:`gpulab.device.simulate`), else of ``total_bytes``, else
    of the recording H100's."""
    here = limits()
    if here is not None:
        return here.memory_budget(MEMORY_FRACTION)
    return MEMORY_FRACTION * (total_bytes or RECORDING_MEMORY_BYTES)


def total_flops(N: int, layers=LAYERS) -> int:
    return sum(layer.flops(N) for layer in layers)


def block_shape(layer: Layer) -> tuple[int, int]:
    """(BX, BY) for the direct kernels: the output plane in as few passes as possible with
    at most 32 threads per side, split evenly: 55 -> 28 (two passes), 27 -> 27, 13 -> 13."""
    def side(n: int) -> int:
        passes = -(-n // 32)
        return -(-n // passes)
    return side(layer.F), side(layer.E)


def make_inputs(layer: Layer, N: int, seed: int | None = 0) -> tuple[np.ndarray, np.ndarray]:
    """x in [0, 1) (like activations after a ReLU) and w uniform with variance 1/K (so
    outputs are of order 1), float32, from ``seed`` and the layer's index."""
    seq = np.random.SeedSequence(None if seed is None else (seed, layer.index))
    x_seed, w_seed = seq.spawn(2)       # separate streams: x[:n] is the same for every N
    x = np.random.default_rng(x_seed).random(layer.x_shape(N), dtype=np.float32)
    bound = math.sqrt(3.0 / layer.K)
    w = np.random.default_rng(w_seed).uniform(-bound, bound, layer.w_shape).astype(np.float32)
    return x, w


def reference(x, w, layer: Layer, xp=np, chunk: int = 16):
    """y in float64: im2col (a strided view of the padded input, copied as columns) times
    the filters as a matrix, ``chunk`` images at a time. ``xp`` is numpy or cupy."""
    N = x.shape[0]
    E, F, K = layer.E, layer.F, layer.K
    w2 = xp.asarray(w).reshape(layer.M, K).astype(xp.float64)
    y = xp.empty(layer.y_shape(N), dtype=xp.float64)
    p = layer.P
    for n0 in range(0, N, chunk):
        xb = xp.asarray(x[n0:n0 + chunk]).astype(xp.float64)
        if p:
            xb = xp.pad(xb, ((0, 0), (0, 0), (p, p), (p, p)))
        xb = xp.ascontiguousarray(xb)
        sn, sc, sh, sw = xb.strides
        windows = xp.lib.stride_tricks.as_strided(
            xb, shape=(xb.shape[0], layer.C, layer.R, layer.S, E, F),
            strides=(sn, sc, sh, sw, sh * layer.U, sw * layer.U))
        cols = windows.reshape(xb.shape[0], K, E * F)          # copies: the im2col matrix
        y[n0:n0 + chunk] = xp.matmul(w2, cols).reshape(xb.shape[0], layer.M, E, F)
    return y


def storage_dtype(precision: str):
    """The array type of x, w and y in ``precision``: half for fp16 steps, else float32 (tf32
    steps read float32 data)."""
    return np.float16 if precision == "fp16" else np.float32


@dataclass(frozen=True)
class Conv(ladder.Case):
    """One layer at batch size N: x (N x C x H x W) and w (M x C x R x S) in a step's storage
    type, y (N x M x E x F). A check row says which kernel ran the layer and why, where a step
    hands the layer to another's kernel (``note``): its launcher's ``kernel`` and ``note``."""

    layer: Layer
    N: int = 2
    output_name = "y"

    @property
    def columns(self) -> dict:
        return {"layer": self.layer.name, "N": self.N}

    def inputs(self, seed, precision="fp32") -> dict:
        x, w = make_inputs(self.layer, self.N, seed)
        return {"x": x.astype(storage_dtype(precision)), "w": w.astype(storage_dtype(precision))}

    def reference(self, inputs, precision="fp32") -> np.ndarray:
        return reference(inputs["x"], inputs["w"], self.layer)

    def output(self, precision="fp32"):
        return self.layer.y_shape(self.N), storage_dtype(precision)

    def check_columns(self, step, inputs, out) -> dict:
        return {"kernel": step.launcher.kernel(step, self.layer), "layer": self.layer.name, "N": self.N,
                "precision": step.precision, "note": step.launcher.note(step, self.layer)}

    def label(self, step) -> str:
        return f"{step.kernels[0]} {self.layer.name}"


def cases(layers=None, N: int = CHECK_N) -> list[Conv]:
    """The check's cases: each of ``layers`` (default the reduced :data:`CHECK_LAYERS`) at batch N."""
    return [Conv(layer, N) for layer in layers or CHECK_LAYERS]


def k_table(layer: Layer) -> np.ndarray:
    """For step 15's implicit GEMM: for each k = (c, r, s), the offset c*H*W + r*W + s of
    its input element from the window's corner, and (r << 16) | s for the padding test."""
    k = np.arange(layer.K)
    c, r, s = k // (layer.R * layer.S), (k // layer.S) % layer.R, k % layer.S
    table = np.empty((layer.K, 2), dtype=np.int32)
    table[:, 0] = (c * layer.H + r) * layer.W + s
    table[:, 1] = (r << 16) | s
    return table.ravel()


def layers_table(N: int = MAIN_N) -> pd.DataFrame:
    """Each layer's shape and work at batch size N: FLOPs, compulsory bytes (fp32) and
    arithmetic intensity."""
    return pd.DataFrame([{
        "layer": layer.name, "input C x H x W": f"{layer.C} x {layer.H} x {layer.W}",
        "filters M x R x S": f"{layer.M} x {layer.R} x {layer.S}", "stride U": layer.U, "pad P": layer.P,
        "output M x E x F": f"{layer.M} x {layer.E} x {layer.F}", "K = C*R*S": layer.K,
        "GFLOP": layer.flops(N) / 1e9, "MB (fp32)": layer.bytes(N) / 1e6,
        "FLOP per byte": layer.flops(N) / layer.bytes(N)} for layer in LAYERS]).set_index("layer")


def _subset(N: int):
    """The images checked beyond N = 128: first, middle and last."""
    import cupy
    return cupy.asarray(sorted({0, N // 2, N - 1})) if N > MAIN_N else slice(None)

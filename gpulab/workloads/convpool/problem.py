"""The problem every step solves, declared once: the layer's shapes, its work, its seeded inputs,
every form the kernels read them in, and the float64 reference. A :class:`Conv` (the layer at a
:class:`Shape`) is one case of a check.

Notation (the same in the kernels, the text and the plots): an input x of N x C x Hp x Wp --
the H x W image with its zero border of 2 already written out, as in the report (224 -> 228) --
M filters w of C x 5 x 5 and a bias b of M; the convolution is E x F = H x W per filter, the
2 x 2 max-pool halves it to PE x PF = 112 x 112:

    y[n, m, pe, pf] = relu(max over the window (i, j) of conv[n, m, 2 pe + i, 2 pf + j])
    conv[n, m, e, f] = b[m] + sum over c, r, s of w[m, c, r, s] x[n, c, e + r, f + s]
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ... import ladder
from ...roofline import floors_ms as roofline_floors

NAME = "convpool"
TITLE = "A 256-channel conv + ReLU + max-pool layer, and finding the best launch shape by sweeping"
RS = 5        # filter height and width
BORDER = 2    # zero border on each side: the convolution keeps the image's size


@dataclass(frozen=True)
class Shape:
    """One conv + ReLU + max-pool layer at batch size N."""

    N: int    # images
    C: int    # input channels
    H: int    # image height (without its border)
    W: int    # image width
    M: int    # filters (output channels)

    def __post_init__(self):
        for name in ("N", "C", "H", "W", "M"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.H % 2 or self.W % 2:
            raise ValueError(f"the 2 x 2 pool needs an even image; got H x W = {self.H} x {self.W}")

    @property
    def Hp(self) -> int:
        return self.H + 2 * BORDER

    @property
    def Wp(self) -> int:
        return self.W + 2 * BORDER

    @property
    def E(self) -> int:
        return self.H

    @property
    def F(self) -> int:
        return self.W

    @property
    def PE(self) -> int:
        return self.E // 2

    @property
    def PF(self) -> int:
        return self.F // 2

    @property
    def K(self) -> int:
        """Multiply-adds per convolution output: C x 5 x 5."""
        return self.C * RS * RS

    def batch(self, N: int) -> "Shape":
        return replace(self, N=N)

    def x_shape(self, layout: str = "nchw") -> tuple:
        if layout == "nhwc":
            return (self.N, self.Hp, self.Wp, self.C)
        return (self.N, self.C, self.Hp, self.Wp)

    @property
    def w_shape(self) -> tuple:
        return (self.M, self.C, RS, RS)

    @property
    def y_shape(self) -> tuple:
        return (self.N, self.M, self.PE, self.PF)

    @property
    def conv_shape(self) -> tuple:
        return (self.N, self.M, self.E, self.F)

    def dims(self) -> tuple:
        """The kernels' shape arguments, in their order: N, C, Hp, Wp, M, E, F."""
        return (self.N, self.C, self.Hp, self.Wp, self.M, self.E, self.F)

    @property
    def flops(self) -> int:
        """2 FLOPs per multiply-add of the convolution (the bias, ReLU and max are noise)."""
        return 2 * self.N * self.M * self.E * self.F * self.K

    def bytes(self, itemsize: int = 4) -> int:
        """The fewest bytes of device memory: read x, w and b once, write y (float) once."""
        return itemsize * (self.N * self.C * self.Hp * self.Wp + self.M * self.K) + 4 * (self.M + self.N * self.M
                                                                                        * self.PE * self.PF)

    def prepool_bytes(self, itemsize: int = 4) -> int:
        """What an unfused layer adds: the convolution's output written once and read back once."""
        return 2 * itemsize * self.N * self.M * self.E * self.F

    def describe(self) -> str:
        return (f"N = {self.N}: {self.C} x {self.Hp} x {self.Wp} (a {self.H} x {self.W} image, zero border "
                f"{BORDER}) -> {self.M} filters 5 x 5 -> {self.M} x {self.E} x {self.F} -> ReLU, 2 x 2 max-pool "
                f"-> {self.M} x {self.PE} x {self.PF}")


#: The report's layer: 256 -> 256 channels, 5 x 5 filters, 224 x 224 images (228 with the border).
LAYER = Shape(N=1, C=256, H=224, W=224, M=256)
#: Batch sizes: one image (the report's case), and two batches.
BATCHES = (1, 8, 32)
#: The CPU backend's shape: channels and filters that are multiples of nothing the kernels tile by
#: (24 channels: a multiple of 8, as steps 6-8 need, but not of 16 or 32; 20 filters: not of 128,
#: 64 or 32), a pooled width (10) that is not a multiple of step 5's 8 per thread, and a pooled
#: plane (7 x 10 = 70 windows) that leaves partial tiles of 32 windows.
CHECK = Shape(N=2, C=24, H=14, W=20, M=20)


def make_inputs(shape: Shape, seed: int | None = 0, xp=np):
    """x (N x C x Hp x Wp, the image uniform in [0, 1) like activations after a ReLU, the border
    zero), w uniform with variance 1 / (3K) so that the sums are of order 1, and b uniform in
    +-0.1; float32, from ``seed``. ``xp`` is numpy, or cupy to generate on the GPU (its own
    generator: the numbers differ from numpy's)."""
    seq = np.random.SeedSequence(seed)
    x_seed, w_seed, b_seed = (int(s.generate_state(1)[0]) for s in seq.spawn(3))
    rng = xp.random.default_rng(x_seed)
    x = xp.zeros(shape.x_shape(), dtype=xp.float32)
    x[:, :, BORDER:-BORDER, BORDER:-BORDER] = rng.random((shape.N, shape.C, shape.H, shape.W), dtype=xp.float32)
    bound = math.sqrt(1.0 / shape.K)
    w = np.random.default_rng(w_seed).uniform(-bound, bound, shape.w_shape).astype(np.float32)
    b = np.random.default_rng(b_seed).uniform(-0.1, 0.1, shape.M).astype(np.float32)
    return x, xp.asarray(w), xp.asarray(b)


def conv_reference(x, w, b, xp=np):
    """conv + bias in float64: one matrix product per image and filter tap (r, s), the input
    window of that tap taken as a strided slice. ``xp`` is numpy or cupy."""
    N, C, Hp, Wp = x.shape
    M = w.shape[0]
    E, F = Hp - RS + 1, Wp - RS + 1
    w64 = xp.asarray(w, dtype=xp.float64)
    out = xp.empty((N, M, E, F), dtype=xp.float64)
    for n in range(N):
        xn = xp.asarray(x[n], dtype=xp.float64)
        acc = xp.zeros((M, E * F), dtype=xp.float64)
        for r in range(RS):
            for s in range(RS):
                acc += w64[:, :, r, s] @ xn[:, r:r + E, s:s + F].reshape(C, E * F)
        out[n] = acc.reshape(M, E, F) + xp.asarray(b, dtype=xp.float64)[:, None, None]
    return out


def pool_reference(conv, xp=np):
    """ReLU, then the largest of each 2 x 2 window."""
    N, M, E, F = conv.shape
    return xp.maximum(conv.reshape(N, M, E // 2, 2, F // 2, 2).max(axis=(3, 5)), 0.0)


def reference(x, w, b, xp=np):
    """y = maxpool(relu(conv(x, w) + b)) in float64."""
    return pool_reference(conv_reference(x, w, b, xp), xp)


def floors_ms(shape: Shape, fp32_gflops: float, gbs: float, itemsize: int = 4) -> dict:
    """The arithmetic floor (FLOPs at ``fp32_gflops``) and the memory floor (compulsory bytes at
    ``gbs``) of one layer, in ms."""
    return roofline_floors(shape.flops, shape.bytes(itemsize), peak_gflops=fp32_gflops, peak_gbs=gbs)


def work_table(batches=BATCHES, shape: Shape = LAYER):
    """The layer's work at each batch size: GFLOP, compulsory MB, and the pre-pool tensor an
    unfused layer writes and reads back."""
    return pd.DataFrame([{
        "N": N, "GFLOP": shape.batch(N).flops / 1e9, "compulsory MB (fp32)": shape.batch(N).bytes() / 1e6,
        "pre-pool tensor MB (fp32)": shape.batch(N).prepool_bytes() / 2e6,
        "unfused extra MB (write + read)": shape.batch(N).prepool_bytes() / 1e6,
        "FLOP per compulsory byte": shape.batch(N).flops / shape.batch(N).bytes()} for N in batches]).set_index("N")


# --------------------------------------------------------------------------- the inputs' forms
#: Step 6's filter tile: its filters' form (wt_gemm) has zero columns up to a multiple of it.
FILTER_TILE = 128
#: Steps 9-11's slices of channels: one 128-byte row of their elements (64 halves, 32 floats);
#: their filters' channels are padded with zeros to a multiple of the slice.
SLICE_HALVES, SLICE_FLOATS = 64, 32


def padded_channels(shape: Shape, slice_channels: int = SLICE_HALVES) -> int:
    """Steps 9-11's Cp: C rounded up to their slices of ``slice_channels`` channels."""
    return -(-shape.C // slice_channels) * slice_channels


def tf32_split(a, xp=np):
    """(big, small): ``a`` (float32) rounded to the nearest tf32, ties away from zero, and the
    remainder a - big (exact in float32) -- step 11's split_tf32, the same bit arithmetic."""
    a = xp.ascontiguousarray(xp.asarray(a, dtype=xp.float32))
    big = ((a.view(xp.uint32) + xp.uint32(0x1000)) & xp.uint32(0xFFFFE000)).view(xp.float32)
    return big, a - big


def koff_table(shape: Shape) -> np.ndarray:
    """Step 6: for k = (c, r, s), the offset (c*Hp + r)*Wp + s of its input from the window's corner."""
    k = np.arange(shape.K)
    c, r, s = k // (RS * RS), (k // RS) % RS, k % RS
    return ((c * shape.Hp + r) * shape.Wp + s).astype(np.int32)


def weight_forms(w, shape: Shape, xp=np) -> dict:
    """Every form the kernels read the filters in, made once (as a framework does when it loads
    a model): w (M x C x 5 x 5 as given), wt (C*25 x M), wt_gemm (K x Mp, zero columns past M) and
    its offset table koff, wr32 and wr16 (M x 25*C, k in (r, s, c) order), wp (half, M x 25*Cp in
    (r, s, c) order, the channels padded with zeros to Cp, a multiple of 64), and wp32b / wp32s
    (the same in float, Cp a multiple of 32, split into its tf32 big part and remainder)."""
    w = xp.asarray(w, dtype=xp.float32)
    M, K = shape.M, shape.K
    mp = -(-M // FILTER_TILE) * FILTER_TILE
    flat = w.reshape(M, K)
    wt_gemm = xp.zeros((K, mp), dtype=xp.float32)
    wt_gemm[:, :M] = flat.T
    wr = xp.ascontiguousarray(w.transpose(0, 2, 3, 1).reshape(M, K))
    cp = padded_channels(shape)
    wp = xp.zeros((M, RS * RS, cp), dtype=xp.float16)
    wp[:, :, :shape.C] = w.transpose(0, 2, 3, 1).reshape(M, RS * RS, shape.C)
    cp32 = padded_channels(shape, SLICE_FLOATS)
    wp32 = xp.zeros((M, RS * RS, cp32), dtype=xp.float32)
    wp32[:, :, :shape.C] = w.transpose(0, 2, 3, 1).reshape(M, RS * RS, shape.C)
    wp32b, wp32s = tf32_split(wp32.reshape(M, RS * RS * cp32), xp)
    return {"w": xp.ascontiguousarray(w), "wt": xp.ascontiguousarray(flat.T), "wt_gemm": wt_gemm,
            "koff": xp.asarray(koff_table(shape)), "wr32": wr, "wr16": wr.astype(xp.float16),
            "wp": wp.reshape(M, RS * RS * cp), "wp32b": wp32b, "wp32s": wp32s}


#: The channels-last copies of the input, by element type: what the tensor-core steps read.
CHANNELS_LAST = {np.dtype(np.float32): "xt32", np.dtype(np.float16): "xt16"}


def input_forms(x, channels_last=tuple(CHANNELS_LAST), xp=np) -> dict:
    """The input in each layout and type the kernels read: x (NCHW float), and channels-last
    copies in each of the element types ``channels_last`` (:data:`CHANNELS_LAST`'s names: xt32,
    xt16). Made before timing, as cuDNN's channels-last inputs are."""
    forms = {"x": x}
    for dtype in dict.fromkeys(np.dtype(d) for d in channels_last):
        forms[CHANNELS_LAST[dtype]] = xp.ascontiguousarray(x.transpose(0, 2, 3, 1)).astype(dtype)
    return forms


def layer_arrays(x, w, b, shape: Shape, channels_last=tuple(CHANNELS_LAST), xp=np) -> dict:
    """Every array a step reads, by the name its launcher binds: the input's forms
    (:func:`input_forms`), the filters' (:func:`weight_forms`) and the bias b."""
    return {**input_forms(x, channels_last, xp), **weight_forms(w, shape, xp), "b": b}


@dataclass(frozen=True)
class Conv(ladder.Case):
    """The layer at ``shape``: the input x (NCHW float, zero border included) in every form a step
    reads, the filters' forms and the bias (:func:`layer_arrays`), from a seed; y (N x M x PE x
    PF, float32 in every precision) the output."""

    shape: Shape
    output_name = "y"

    @property
    def columns(self) -> dict:
        return {"N": self.shape.N}

    def inputs(self, seed, precision="fp32") -> dict:
        return layer_arrays(*make_inputs(self.shape, seed), self.shape)

    def reference(self, inputs, precision="fp32") -> np.ndarray:
        return reference(inputs["x"], inputs["w"], inputs["b"])

    def output(self, precision="fp32"):
        return self.shape.y_shape, np.float32

    def check_columns(self, step, inputs, out) -> dict:
        return {"kernel": step.kernel, "precision": step.precision, "N": self.shape.N}

    def label(self, step) -> str:
        return step.label


def cases(shape: Shape = CHECK, shapes=None) -> list[Conv]:
    """The check's cases: the layer at ``shape`` (default the reduced :data:`CHECK`), or at each of
    ``shapes``."""
    return [Conv(s) for s in (shapes if shapes is not None else (shape,))]

"""The AlexNet chapter's workload: the five convolution layers, declared once.

The notebook, the tests and ``python -m gpulab record alexnet`` all read this
module: the layers' shapes and their FLOP and byte counts, the seeded inputs,
the float64 reference, the ladder of kernels with their launch
configurations, the CPU baselines, and the benchmark the recorded run comes
from.

Notation (the same in the kernels, the text and the plots): a layer maps an
input ``x`` of N x C x H x W to an output ``y`` of N x M x E x F with M filters
``w`` of C x R x S, stride U and zero padding P; every array is NCHW,
row-major. Each layer is measured on its own random input (the chapter times
the convolutions, not the pooling and ReLU that sit between them in AlexNet).
"""
from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from .. import ladder
from ..check import check, compare
from ..errors import CheckFailed, KernelCompileError
from ..kernels import DEFAULT_SHARED_LIMIT, Backend, get_backend, load_module
from . import alexnet_tc, alexnet_winograd

CHAPTER = "alexnet"
TITLE = "AlexNet's five convolution layers, from a CPU loop to tensor cores"


# --------------------------------------------------------------------------- the layers
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
    from ..device import limits
    here = limits()
    if here is not None:
        return here.memory_budget(MEMORY_FRACTION)
    return MEMORY_FRACTION * (total_bytes or RECORDING_MEMORY_BYTES)


def unfit_reason(step: "Step", layer: "Layer", N: int) -> str | None:
    """Why ``step`` cannot run ``layer`` at batch size ``N`` here (too much shared memory
    per block, or more device memory than the budget), or None when it can."""
    from ..device import limits
    here = limits()
    if here is not None:
        why = here.shared_fits(launch_config(step, layer, N)["shared_bytes"])
        if why:
            return why
        return here.memory_fits(footprint_bytes(step, layer, N), MEMORY_FRACTION)
    need = footprint_bytes(step, layer, N)
    if need > memory_limit():
        return f"needs {need / 1e9:.1f} GB of device memory; the budget is {memory_limit() / 1e9:.1f} GB"
    return None


def total_flops(N: int, layers=LAYERS) -> int:
    return sum(layer.flops(N) for layer in layers)


def block_shape(layer: Layer) -> tuple[int, int]:
    """(BX, BY) for the direct kernels: the output plane in as few passes as possible with
    at most 32 threads per side, split evenly: 55 -> 28 (two passes), 27 -> 27, 13 -> 13."""
    def side(n: int) -> int:
        passes = -(-n // 32)
        return -(-n // passes)
    return side(layer.F), side(layer.E)


# --------------------------------------------------------------------------- inputs, reference
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


def k_table(layer: Layer) -> np.ndarray:
    """For step 15's implicit GEMM: for each k = (c, r, s), the offset c*H*W + r*W + s of
    its input element from the window's corner, and (r << 16) | s for the padding test."""
    k = np.arange(layer.K)
    c, r, s = k // (layer.R * layer.S), (k // layer.S) % layer.R, k % layer.S
    table = np.empty((layer.K, 2), dtype=np.int32)
    table[:, 0] = (c * layer.H + r) * layer.W + s
    table[:, 1] = (r << 16) | s
    return table.ravel()


# --------------------------------------------------------------------------- the ladder
@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung of the ladder: a kernel file, its kernel(s), and how it is launched.

    kind: "plane" (grid M x N, one block per image and filter), "channels" (grid
    M x N x C, then a reduction kernel), "atomic" (grid M x N x C/CB, atomicAdd into a
    zeroed y), "gemm"/"wmma" (implicit GEMM tiles), "wmma_nhwc" (layout copies, then implicit
    GEMM tiles), "gemm_tuned" (padded copy of x, filter transpose, then implicit GEMM tiles with
    the reduction split over gridDim.z), "mma" (steps 18 on: a padded channels-last copy, filter
    runs, then mma.sync tiles; see :mod:`gpulab.workloads.alexnet_tc`), "filters4" (exercise 1:
    grid M/4 x N).
    shared: what the dynamic shared memory holds (see :func:`shared_bytes`).
    """

    kernels: tuple
    kind: str
    shared: str = "none"
    report_name: str = ""


STEPS = [
    Step("01", "alexnet/01_direct_global.cu", "sum in global memory",
         ("conv_direct_global",), "plane", report_name="Mcpy / UM"),
    Step("02", "alexnet/02_registers.cu", "sum in a register",
         ("conv_registers",), "plane", report_name="rla2m"),
    Step("03", "alexnet/03_shared_weights_one_thread.cu", "filter in shared, one thread copies",
         ("conv_shared_weights_one_thread",), "plane", shared="filter", report_name="rswbdl2m"),
    Step("04", "alexnet/04_shared_weights_cooperative.cu", "filter in shared, all threads copy",
         ("conv_shared_weights_cooperative",), "plane", shared="filter", report_name="rswmtla2m"),
    Step("05", "alexnet/05_shared_only.cu", "shared memory only",
         ("conv_shared_only",), "plane", shared="filter+acc", report_name="swso"),
    Step("06", "alexnet/06_half.cu", "half precision storage",
         ("conv_half",), "plane", precision="fp16", report_name="halfprecision"),
    Step("07", "alexnet/07_channels_across_blocks.cu", "channels across blocks + reduction",
         ("conv_channel_partials", "reduce_channels"), "channels", report_name="Mk"),
    Step("08", "alexnet/08_channels_shared_weights.cu", "+ shared weights",
         ("conv_channel_partials_sw", "reduce_channels"), "channels", shared="slice", report_name="Mk-sw-mt"),
    Step("09", "alexnet/09_channels_shared_input.cu", "+ shared input tiles",
         ("conv_channel_partials_si", "reduce_channels"), "channels", shared="slice+patch", report_name="Mk-sw-mt-si-c"),
    Step("10", "alexnet/10_layer1_noncoalesced.cu", "step 2, non-coalesced mapping",
         ("conv_registers_noncoalesced",), "plane", report_name="rla2m, non-coalesced"),
    Step("11", "alexnet/11_vector_loads.cu", "+ float4 loads",
         ("conv_channel_partials_vec", "reduce_channels"), "channels", shared="vec", report_name="Mk-sw-mt-si-c-vec"),
    Step("12", "alexnet/12_half_on_best.cu", "+ half precision",
         ("conv_channel_partials_half", "reduce_channels_half"), "channels", precision="fp16", shared="vec",
         report_name="Mk-sw-mt-si-c-half"),
    Step("13", "alexnet/13_single_kernel_atomics.cu", "single kernel, atomics, low memory",
         ("conv_channel_chunks_atomic",), "atomic", shared="vec",
         report_name="exp-Mk-sw-mt-si-c-vec"),
    Step("14", "alexnet/14_implicit_gemm.cu", "implicit GEMM, 8x8 register tiles",
         ("conv_implicit_gemm",), "gemm"),
    Step("15", "alexnet/15_tensor_cores_wmma.cu", "implicit GEMM on tensor cores (wmma)",
         ("conv_implicit_gemm_wmma",), "wmma", precision="fp16"),
    Step("16", "alexnet/16_tensor_cores_nhwc.cu",
         "tensor cores on a channels-last copy",
         ("conv_implicit_gemm_wmma_nhwc", "nchw_to_nhwc_half", "filters_to_rsc_half"), "wmma_nhwc", precision="fp16"),
    Step("17", "alexnet/17_implicit_gemm_tuned.cu",
         "implicit GEMM tuned: padded copy, warp tiles, split K",
         ("conv_igemm_tuned", "pad_input", "filters_to_kxm"), "gemm_tuned"),
]
#: Steps 18 on: tensor cores through mma.sync (gpulab/workloads/alexnet_tc.py launches them).
MMA_STEPS = [
    Step("18", "alexnet/18_mma_ldmatrix.cu",
         "mma.sync + ldmatrix on a padded channels-last copy",
         ("conv_mma_ldmatrix", "to_padded_nhwc_half", "to_filter_runs_half"), "mma", precision="fp16"),
    Step("19", "alexnet/19_cp_async_pipeline.cu",
         "+ cp.async 4-stage pipeline",
         ("conv_mma_cp_async", "to_padded_nhwc_half", "to_filter_runs_half"), "mma", precision="fp16"),
    Step("20", "alexnet/20_swizzle_tiles.cu",
         "+ swizzled shared memory, a tile per layer",
         ("conv_mma_128x128", "to_padded_nhwc_half", "to_filter_runs_half"), "mma", precision="fp16"),
    Step("21", "alexnet/21_tf32.cu",
         "step 20 in tf32 (fp32 data)",
         ("conv_tf32_128x128", "to_padded_nhwc_float", "to_filter_runs_float"), "mma", precision="tf32"),
    Step("22", "alexnet/22_split_fp16.cu",
         "fp32 accuracy: each float as two halves, three fp16 products",
         ("conv_split_128x128_k64", "to_padded_nhwc_split", "to_filter_runs_split"), "mma"),
]
STEPS += MMA_STEPS
#: Steps 23 on: Winograd's minimal filtering on the 3 x 3 layers, the batched GEMMs on the FMA
#: units (gpulab/workloads/alexnet_winograd.py launches them, and says what runs layers 1 and 2).
WINOGRAD_STEPS = [
    Step("23", "alexnet/23_winograd_2x2.cu",
         "Winograd F(2x2,3x3) on layers 3-5 (fp32 FMA)",
         ("conv_winograd_gemm", "winograd_input_2x2", "winograd_output_2x2", "winograd_filter_2x2"), "winograd"),
    Step("24", "alexnet/24_winograd_4x4.cu",
         "Winograd F(4x4,3x3) on layers 3-5 (fp32 FMA)",
         ("conv_winograd_gemm", "winograd_input_4x4", "winograd_output_4x4", "winograd_filter_4x4"), "winograd"),
]
STEPS += WINOGRAD_STEPS
STEP = {s.number: s for s in STEPS}
#: Exercise 1's kernel, launched like step 2 with a quarter of the blocks along M.
EXERCISE = Step("E1", "alexnet/exercise_01_four_filters.cu", "exercise: four filters per block",
                ("conv_four_filters",), "filters4")
CPU_LOOP_FILE = "alexnet/cpu_loop_nest.cu"

CHANNELS_PER_BLOCK = 16      # step 13: channels one block sums before its atomicAdd
REDUCE_BLOCK = 256           # the reduction kernels' block: 8 warps, a common default
GEMM_TILE = 128              # steps 14-17: outputs per block tile along M and along N*E*F
GEMM_THREADS = 256
GEMM_BK = 8                  # step 17's slice of k: K is padded to a multiple of it
#: Step 17's split-K rule: blocks resident at once on the recording GPU (an H100 has 132 SMs;
#: the kernel's __launch_bounds__(256, 2) fits two blocks on each) ...
RESIDENT_BLOCKS = 132 * 2
#: ... and the fewest slices a split may have (shorter ones spend too much of their time on
#: the tile's first load and its atomic write-back).
MIN_SLICES_PER_SPLIT = 16
MAX_SPLITS = 8
TILE_OVERHEAD_SLICES = 2     # a tile's first load and write-back, in slices, for the estimate
#: cuDNN may compute an fp32 convolution with Winograd or FFT algorithms, which round
#: differently from a direct sum: its fp32 check allows 1e-4 instead of 1e-5.
CUDNN_FP32_TOLERANCE = 1e-4

#: The batch size also timed cold (L2 flushed between calls: experiment ``ladder_cold``):
#: one image's input, filters and output fit in the H100's 50 MB L2.
COLD_N = 1
#: Why the cold table has no L2-flushed time for cuDNN's CUDA-graph rows.
COLD_GAP = "cuDNN's CUDA-graph rows are timed warm only; its eager rows are timed both ways"
#: Steps timed in the scaling study (N up to 2048), and in the copy breakdown at N = 128.
SCALING_STEPS = ("04", "11", "13", "14", "15", "16", "17", "20", "22")
TRANSFER_STEPS = ("13", "14", "16")


def shared_bytes(step: Step, layer: Layer) -> int:
    """Dynamic shared memory per block for ``step`` on ``layer``."""
    bx, by = block_shape(layer)
    R, S, U = layer.R, layer.S, layer.U
    if step.shared == "filter":
        return 4 * layer.K
    if step.shared == "filter+acc":
        return 4 * (layer.K + bx * by)
    if step.shared == "slice":
        return 4 * R * S
    if step.shared == "slice+patch":
        return 4 * (R * S + ((by - 1) * U + R) * ((bx - 1) * U + S))
    if step.shared == "vec":
        s4 = -(-S // 4) * 4
        pitch = -(-((bx - 1) * U + s4) // 4) * 4
        return 4 * (R * s4 + ((by - 1) * U + R) * pitch)
    return 0


def scratch_bytes(step: Step, layer: Layer, N: int) -> int:
    """Device memory a step needs beyond x, w and y: the partial sums of the channel steps."""
    if step.kind == "channels":
        return N * layer.C * layer.M * layer.E * layer.F * step.itemsize
    if step.kind == "wmma":
        return 8 * layer.K
    if step.kind == "wmma_nhwc":
        return 2 * (N * layer.H * layer.W * padded_channels(layer) + layer.M * padded_filter_row(layer))
    if step.kind == "mma":
        return alexnet_tc.scratch_bytes(step, layer, N)
    if step.kind == "winograd":
        ran = fallback_step(step, layer)
        return alexnet_winograd.scratch_bytes(step, layer, N) if ran is step else scratch_bytes(ran, layer, N)
    if step.kind == "gemm_tuned":
        Hp, Wp = layer.H + 2 * layer.P, layer.W + 2 * layer.P
        padded = 4 * N * layer.C * Hp * Wp if layer.P else 0
        Kp, Mp = gemm_padded_k(layer), -(-layer.M // GEMM_TILE) * GEMM_TILE
        return padded + 4 * Kp * Mp + 4 * Kp
    return 0


def gemm_padded_k(layer: Layer) -> int:
    """Step 17's Kp: K rounded up to a whole number of slices."""
    return -(-layer.K // GEMM_BK) * GEMM_BK


def gemm_splits(layer: Layer, N: int) -> int:
    """How many blocks step 17 splits each output tile's reduction over. The estimated time
    of s splits is waves of resident blocks times the slices each block runs, plus
    TILE_OVERHEAD_SLICES for its first load and its write-back:
    ceil(tiles * s / RESIDENT_BLOCKS) * (ceil(slices / s) + TILE_OVERHEAD_SLICES). We take the
    smallest s within 5% of the best estimate (each split adds a pass of atomic adds over y,
    which the estimate leaves out), with at least MIN_SLICES_PER_SPLIT slices per split.
    Layer 5 at N = 128: 338 tiles of 432 slices take 2 waves x 434 unsplit, 4 x 146 in three."""
    tiles = -(-N * layer.E * layer.F // GEMM_TILE) * -(-layer.M // GEMM_TILE)
    slices = gemm_padded_k(layer) // GEMM_BK
    costs = {}
    for s in range(1, MAX_SPLITS + 1):
        per = -(-slices // s)
        if s > 1 and (per < MIN_SLICES_PER_SPLIT or per * (s - 1) >= slices):
            continue                   # too short, or the last split would be empty
        costs[s] = -(-tiles * s // RESIDENT_BLOCKS) * (per + TILE_OVERHEAD_SLICES)
    best = min(costs.values())
    return min(s for s, cost in costs.items() if cost <= 1.05 * best)


def gemm_offsets(layer: Layer) -> np.ndarray:
    """Step 17's table: for each k = (c, r, s) < Kp, the offset (c*Hp + r)*Wp + s of its
    input element from the window's corner in the padded input; 0 (a valid element, whose
    weight is 0) for k >= K."""
    Hp, Wp = layer.H + 2 * layer.P, layer.W + 2 * layer.P
    k = np.arange(layer.K)
    c, r, s = k // (layer.R * layer.S), (k // layer.S) % layer.R, k % layer.S
    table = np.zeros(gemm_padded_k(layer), dtype=np.int32)
    table[:layer.K] = (c * Hp + r) * Wp + s
    return table


def padded_channels(layer: Layer) -> int:
    """Step 16's channel count Cp: C itself when it is a multiple of 8 (one 16-byte load of
    halves), 4 when C <= 4 (layer 1: two 8-byte loads), else C rounded up to a multiple of 8."""
    return 4 if layer.C <= 4 else -(-layer.C // 8) * 8


def padded_filter_row(layer: Layer) -> int:
    """Step 16's filter row Kp: R*S*Cp halves rounded up to a multiple of 8 (16 bytes)."""
    return -(-layer.R * layer.S * padded_channels(layer) // 8) * 8


def footprint_bytes(step: Step, layer: Layer, N: int) -> int:
    """Device memory for one layer's run of ``step``: x, w, y in the step's precision plus
    its scratch buffers."""
    return layer.bytes(N, step.itemsize) + scratch_bytes(step, layer, N)


def launch_config(step: Step, layer: Layer, N: int) -> dict:
    """The main kernel's grid, block and dynamic shared memory, as the chapter launches it."""
    bx, by = block_shape(layer)
    if step.kind == "plane":
        grid = (layer.M, N)
    elif step.kind == "channels":
        grid = (layer.M, N, layer.C)
    elif step.kind == "atomic":
        grid = (layer.M, N, -(-layer.C // CHANNELS_PER_BLOCK))
    elif step.kind == "filters4":
        grid = (-(-layer.M // 4), N)
    elif step.kind == "mma":
        cfg = alexnet_tc.launch_config(step.number, layer, N, step.itemsize)
        return {key: cfg[key] for key in ("grid", "block", "shared_bytes")}
    elif step.kind == "winograd":
        ran = fallback_step(step, layer)
        return alexnet_winograd.launch_config(step, layer, N) if ran is step else launch_config(ran, layer, N)
    elif step.kind == "gemm_tuned":
        return {"grid": (-(-N * layer.E * layer.F // GEMM_TILE), -(-layer.M // GEMM_TILE),
                         gemm_splits(layer, N)), "block": (GEMM_THREADS,), "shared_bytes": 0}
    else:
        return {"grid": (-(-N * layer.E * layer.F // GEMM_TILE), -(-layer.M // GEMM_TILE)),
                "block": (GEMM_THREADS,), "shared_bytes": 0}
    return {"grid": grid, "block": (bx, by), "shared_bytes": shared_bytes(step, layer)}


def make_launch(step: Step, layer: Layer, N: int, x, w, y, backend: str | Backend | None = None) -> Callable:
    """A no-argument function that runs ``step`` on device arrays x, w -> y (allocating
    its scratch once, here): what the checks and the timers call."""
    be = get_backend(backend)
    if step.gpu_only and be.name == "cpu":
        raise NotImplementedError(f"step {step.number} ({step.file}) runs on a GPU only: "
                                  "the CPU backend has no nvcuda::wmma (tensor cores) yet")
    if step.kind == "mma":
        return alexnet_tc.make_launch(step, layer, N, x, w, y, be)
    if step.kind == "winograd":
        ran = fallback_step(step, layer)
        if ran is not step:
            return make_launch(ran, layer, N, x, w, y, be)
        return alexnet_winograd.make_launch(step, layer, N, x, w, y, be)
    module = load_module(step.file, be)
    main = module.get_function(step.kernels[0])
    cfg = launch_config(step, layer, N)
    if cfg["shared_bytes"] > DEFAULT_SHARED_LIMIT:
        main.allow_shared_memory(cfg["shared_bytes"])   # layer 1's patch: 55-57 KB
    dims = layer.dims(N)
    if step.kind in ("plane", "filters4"):
        return main.bind(cfg["grid"], cfg["block"], (x, w, y, *dims), cfg["shared_bytes"])
    if step.kind == "channels":
        partial = be.xp.empty((N, layer.C, layer.M, layer.E, layer.F), dtype=step.dtype)
        first = main.bind(cfg["grid"], cfg["block"], (x, w, partial, *dims), cfg["shared_bytes"])
        outputs = N * layer.M * layer.E * layer.F
        second = module.get_function(step.kernels[1]).bind(
            -(-outputs // REDUCE_BLOCK), REDUCE_BLOCK, (partial, y, N, layer.C, layer.M, layer.E * layer.F))

        def launch():
            first()
            second()
        return launch
    if step.kind == "atomic":
        kernel = main.bind(cfg["grid"], cfg["block"], (x, w, y, *dims, CHANNELS_PER_BLOCK),
                           cfg["shared_bytes"])
        if be.name == "gpu":
            def launch():
                y.data.memset_async(0, y.nbytes)     # the sums start from zero
                kernel()
        else:
            def launch():
                y[...] = 0
                kernel()
        return launch
    if step.kind == "wmma_nhwc":
        cp = padded_channels(layer)
        hw = layer.H * layer.W
        xt = be.xp.empty((N, hw, cp), dtype=np.float16)
        wt = be.xp.empty((layer.M, padded_filter_row(layer)), dtype=np.float16)
        tile = 32                                       # the transpose kernel's tile
        to_nhwc = module.get_function(step.kernels[1]).bind(
            (-(-hw // tile), -(-cp // tile), N), (tile, 8), (x, xt, N, layer.C, hw, cp))
        to_rsc = module.get_function(step.kernels[2]).bind(
            -(-wt.size // 256), 256, (w, wt, layer.M, layer.C, layer.R, layer.S, cp))
        gemm = main.bind(cfg["grid"], cfg["block"],
                         (xt, wt, y, N, cp, layer.H, layer.W, layer.M, layer.R, layer.S, layer.U,
                          layer.P, layer.E, layer.F), 0)

        def launch():
            to_nhwc()
            to_rsc()
            gemm()
        return launch
    if step.kind == "gemm":
        return main.bind(cfg["grid"], cfg["block"], (x, w, y, *dims), 0)
    if step.kind == "gemm_tuned":
        return _tuned_gemm_launch(module, main, cfg, layer, N, x, w, y, be)
    table = be.to_device(k_table(layer))
    return main.bind(cfg["grid"], cfg["block"], (x, w, table, y, *dims), 0)


def _tuned_gemm_launch(module, main, cfg, layer: Layer, N: int, x, w, y, be: Backend) -> Callable:
    """Step 17: pad x (when P > 0), transpose the filters, zero y (when K is split), GEMM."""
    P, M, K = layer.P, layer.M, layer.K
    Hp, Wp = layer.H + 2 * P, layer.W + 2 * P
    Mp, Kp = cfg["grid"][1] * GEMM_TILE, gemm_padded_k(layer)
    splits = cfg["grid"][2]
    per_split = -(-(Kp // GEMM_BK) // splits)
    pad_block, pad_items = 256, 4                        # PAD_BLOCK, PAD_ITEMS in the kernel file
    if P and N * layer.C * Hp * Wp >= 2**31 - pad_block * pad_items:
        raise ValueError(f"step 17 indexes the padded input with 32-bit integers: N = {N} makes it "
                         f"{N * layer.C * Hp * Wp} elements for {layer.name}, over 2^31")
    xp = be.xp.empty((N, layer.C, Hp, Wp), dtype=np.float32) if P else x
    wt = be.xp.empty((Kp, Mp), dtype=np.float32)
    table = be.to_device(gemm_offsets(layer))
    steps = []
    if P:
        steps.append(module.get_function("pad_input").bind(
            -(-xp.size // (pad_block * pad_items)), pad_block, (x, xp, N * layer.C, layer.H, layer.W, P)))
    tile = 32                                            # the transpose's tile
    steps.append(module.get_function("filters_to_kxm").bind(
        (-(-Kp // tile), Mp // tile), (tile, 8), (w, wt, M, K, Mp, Kp)))
    if splits > 1:
        if be.name == "gpu":
            steps.append(lambda: y.data.memset_async(0, y.nbytes))   # the split sums start from zero
        else:
            def zero():
                y[...] = 0
            steps.append(zero)
    steps.append(main.bind(cfg["grid"], cfg["block"],
                           (xp, wt, table, y, N, layer.C, Hp, Wp, M, Mp, Kp, layer.U, layer.E, layer.F,
                            per_split, int(splits > 1)), 0))

    def launch():
        for part in steps:
            part()
    return launch


def fallback_step(step: Step, layer: Layer) -> Step:
    """The step that runs ``layer`` for Winograd step ``step``: itself where F(m x m, 3 x 3)
    applies, else the step :data:`gpulab.workloads.alexnet_winograd.FALLBACK` names."""
    return step if alexnet_winograd.applies(layer) else STEP[alexnet_winograd.FALLBACK[layer.index]]


def kernels_per_layer(steps=None, layers=None) -> pd.DataFrame:
    """Which step and kernel file run each layer for the Winograd steps."""
    out = []
    for number in steps or alexnet_winograd.TILE:
        step = STEP[number]
        for layer in layers or LAYERS:
            ran = fallback_step(step, layer)
            how = (f"Winograd F({alexnet_winograd.TILE[number]}x{alexnet_winograd.TILE[number]},3x3)" if ran is step
                   else f"step {ran.number} ({ran.title})")
            out.append({"step": number, "layer": layer.name, "runs": how, "file": ran.file})
    return pd.DataFrame(out)


def main_kernel(step: Step, layer: Layer) -> str:
    """The name of the kernel that does ``step``'s arithmetic on ``layer``: the tile a step
    from 18 on picks for it, or for a Winograd step on a layer it does not apply to, the
    fallback step's kernel (:data:`gpulab.workloads.alexnet_winograd.FALLBACK`)."""
    if step.kind == "winograd":
        ran = fallback_step(step, layer)
        return step.kernels[0] if ran is step else main_kernel(ran, layer)
    if step.kind == "mma":
        return alexnet_tc.kernel_for(step.number, layer)
    return step.kernels[0]


def run(step: Step, layer: Layer, x: np.ndarray, w: np.ndarray, backend=None) -> np.ndarray:
    """Run one step on host inputs (float32; converted to the step's precision) with a
    NaN-poisoned output; return y on the host."""
    be = get_backend(backend)
    dx, dw = be.to_device(x.astype(step.dtype)), be.to_device(w.astype(step.dtype))
    y = be.poisoned(layer.y_shape(x.shape[0]), step.dtype)
    make_launch(step, layer, x.shape[0], dx, dw, y, be)()
    be.synchronize()
    return be.to_host(y)


def check_steps(backend: str | Backend | None = None, steps=None, layers=None, N: int = CHECK_N,
                seed: int | None = None) -> pd.DataFrame:
    """Every step against the float64 reference on every (reduced) layer, with fresh random
    inputs (``seed=None``: a new seed per call, written in the table) and a NaN-poisoned
    output. Steps the backend cannot run are listed with status "skipped: <why>"; ``note`` says
    which step's kernel ran a layer a Winograd step does not apply to."""
    seed = int(np.random.SeedSequence().entropy % 2**31) if seed is None else seed

    def check_one(step, be):
        for layer in layers or CHECK_LAYERS:
            x, w = make_inputs(layer, N, seed)
            ran = fallback_step(step, layer) if step.kind == "winograd" else step
            note = "" if ran is step else f"step {ran.number}'s kernel: Winograd needs 3 x 3, stride 1"
            yield ({"kernel": main_kernel(step, layer), "layer": layer.name, "N": N, "precision": step.precision,
                    "seed": seed, "note": note},
                   compare(run(step, layer, x, w, be), reference(x, w, layer), step.precision,
                           name=f"{step.kernels[0]} {layer.name}"))
    return ladder.check_steps(steps or STEPS, check_one, backend)


def accuracy_table(backend=None, steps=("17", "23", "24"), layers=None, N: int = 1,
                   seed: int = 0) -> pd.DataFrame:
    """Each step's error against the float64 reference on the 3 x 3 layers (by default the
    full-size layers 3-5, one image: a few seconds on the CPU backend), measured now on
    ``backend``, on the same seeded inputs for every step: the relative error norm (what the
    checks compare with the tolerance) and the largest error of one output over the largest
    output (max |y - ref| / max |ref|)."""
    be = get_backend(backend)
    rows = []
    for layer in layers or [layer for layer in LAYERS if alexnet_winograd.applies(layer)]:
        x, w = make_inputs(layer, N, seed)
        ref = reference(x, w, layer)
        for number in steps:
            step = STEP[number]
            y = run(step, layer, x, w, be)
            result = compare(y, ref, step.precision, name=f"step {number} {layer.name}")
            rows.append({"step": number, "variant": step.label, "layer": layer.name,
                         "rel_error": result.rel_error,
                         "max_error_over_max_output": result.max_abs_error / float(np.abs(ref).max()),
                         "passed": result.passed})
    return pd.DataFrame(rows)


def multiply_table(N: int, layers=None) -> pd.DataFrame:
    """Per 3 x 3 layer: direct convolution's multiplies against F(2x2,3x3)'s and
    F(4x4,3x3)'s at batch size N, the tiles past the output's edge included."""
    rows = []
    for layer in layers or LAYERS:
        if not alexnet_winograd.applies(layer):
            continue
        direct = N * layer.M * layer.E * layer.F * layer.K
        row = {"layer": layer.name, "output E x F": f"{layer.E} x {layer.F}", "direct (G mul)": direct / 1e9}
        for number, m in alexnet_winograd.TILE.items():
            g = alexnet_winograd.geometry(number, layer, N)
            row[f"F({m}x{m},3x3) tiles"] = f"{g.TH} x {g.TW}"
            row[f"F({m}x{m},3x3) (G mul)"] = alexnet_winograd.multiplies(number, layer, N) / 1e9
            row[f"F({m}x{m},3x3) fewer"] = direct / alexnet_winograd.multiplies(number, layer, N)
        rows.append(row)
    return pd.DataFrame(rows).set_index("layer")


def layer_totals(rows: pd.DataFrame) -> pd.DataFrame:
    """The five layers added up per variant and batch size (and phase, memory where present),
    keeping only variants measured on all five. ``median_ms`` is the sum of the per-layer
    medians; ``q1_ms``/``q3_ms`` add the quartiles, an approximation of the sum's spread."""
    keys = [c for c in ("experiment", "variant", "size", "phase", "memory", "step", "precision")
            if c in rows.columns and rows[c].notna().any()]
    totals = (rows.groupby(keys, sort=False, dropna=False)
              .agg(median_ms=("median_ms", "sum"), q1_ms=("q1_ms", "sum"), q3_ms=("q3_ms", "sum"),
                   flops=("flops", "sum"), bytes=("bytes", "sum"), layers=("layer", "nunique"))
              .reset_index())
    return totals[totals["layers"] == len(LAYERS)].drop(columns="layers").reset_index(drop=True)


def totals_at(totals: pd.DataFrame, N: int, steps=None) -> pd.DataFrame:
    """The rows of :func:`layer_totals` at batch size ``N`` (for the given steps only)."""
    rows = totals[totals["size"] == N]
    return rows if steps is None else rows[rows["step"].isin(list(steps))]


def step_ms(totals: pd.DataFrame, step: str, N: int = MAIN_N) -> float:
    """One step's time for all five layers at batch size ``N``."""
    return float(totals_at(totals, N, [step])["median_ms"].iloc[0])


def fastest(totals: pd.DataFrame, N: int, steps, precision: str) -> pd.Series:
    """The fastest of ``steps`` in ``precision`` at batch size ``N``."""
    rows = totals_at(totals, N, steps)
    return rows[rows["precision"] == precision].sort_values("median_ms").iloc[0]


#: The chapter's targets for the five layers at N = 128, in ms (issue #14): fp32 computed as
#: fp32 (no tf32 rounding of the inputs), tf32, fp16. A target is met only by a step that is
#: also faster than cuDNN's fastest path of the same precision class in the same run.
TARGETS_MS = {"fp32": 3.25, "tf32": 1.46, "fp16": 1.18}


def targets_table(totals: pd.DataFrame, floor_ms: float, fp16_floor_ms: float | None = None,
                  tf32_floor_ms: float | None = None) -> pd.DataFrame:
    """The best step per precision against :data:`TARGETS_MS`, beside the fastest cuDNN
    path of matching precision (fp32 without tf32; tf32; fp16 or bf16) and the precision's own
    floor: ``floor_ms`` (the FLOPs at the measured FP32 rate) for fp32, ``tf32_floor_ms`` for
    tf32 and ``fp16_floor_ms`` (at the measured fp16 tensor-core rate) for fp16 (NaN when not
    given). A target is met when the step is within the target time and faster than that
    cuDNN path. The rows read whatever steps the run recorded: a step the run predates
    simply is not a candidate."""
    ours = [s.number for s in STEPS]
    floors = {"fp32": floor_ms, "tf32": tf32_floor_ms, "fp16": fp16_floor_ms}
    rows = []
    for precision, target in TARGETS_MS.items():
        mine = totals_at(totals, MAIN_N, ours)
        if not (mine["precision"] == precision).any():
            continue
        best = fastest(totals, MAIN_N, ours, precision)
        cudnn = vendor_best(totals, MAIN_N, precision)
        cudnn_ms = cudnn["median_ms"] if cudnn is not None else np.nan
        floor = floors[precision] if floors[precision] else np.nan
        rows.append({"precision": precision, "best step": best["variant"], "ms": best["median_ms"],
                     "target ms": target, "fastest cuDNN path": cudnn["variant"] if cudnn is not None else "none",
                     "cuDNN ms": cudnn_ms, "vs cuDNN": cudnn_ms / best["median_ms"],
                     "met": bool(best["median_ms"] <= target and best["median_ms"] < cudnn_ms),
                     "TFLOP/s": best["flops"] / best["median_ms"] / 1e9,
                     "floor ms": floor, "x floor": best["median_ms"] / floor})
    return pd.DataFrame(rows)


def unrecorded_steps(ladder: pd.DataFrame, steps=None) -> list[str]:
    """The ladder's steps (numbers) with no row in a run's ``ladder`` rows: steps added after
    the run was recorded, which every view shows as "not recorded yet"."""
    have = set(step_labels(ladder)["step"]) if not ladder.empty else set()
    return [s.number for s in (steps or STEPS) if s.number not in have]


def recorded_beside(run, N: int, steps=None) -> dict:
    """For a live run: each recorded run's totals at ``N`` for ``steps``, {GPU: rows}, to
    mark beside the live bars (:func:`gpulab.plots.speedup_ladder`'s ``others``); empty
    for a recorded run."""
    from ..runs import recorded_beside as others
    return {gpu: totals_at(layer_totals(other.experiment("ladder")), N, steps) for gpu, other in others(run).items()}


def gpu_comparison(root=None):
    """Per step (five layers at N = 128, and cuDNN's fastest paths), the H200's recorded
    time over the H100's against the roofline's prediction; None until both runs exist."""
    from ..runs import gpu_comparison as compare_gpus

    def select(run):
        totals = layer_totals(run.experiment("ladder"))
        ours = totals_at(totals, MAIN_N, [s.number for s in STEPS])
        return pd.concat([ours, vendor_lines(totals, MAIN_N)])[["variant", "median_ms", "flops", "bytes",
                                                                 "precision"]]
    return compare_gpus(CHAPTER, select, root=root,
                        title=f"Does each step gain what the roofline predicts on the H200? (N = {MAIN_N})")


def beats_cudnn(totals_or_ladder: pd.DataFrame, N: int = MAIN_N) -> pd.DataFrame:
    """Per layer at batch size ``N``: the lab's fastest step and cuDNN's fastest path of
    each precision class, and where the lab's is faster."""
    rows = totals_or_ladder[totals_or_ladder["size"] == N]
    out = []
    for layer in LAYERS:
        at = rows[rows["layer"] == layer.index]
        for precision in ("fp32", "fp16"):
            members = ("fp16", "bf16") if precision == "fp16" else ("fp32",)
            ours = at[at["step"].isin([s.number for s in STEPS]) & (at["precision"] == precision)]
            cudnn = at[(at["step"] == "cuDNN") & at["precision"].isin(members)]
            if ours.empty or cudnn.empty:
                continue
            o, c = ours.loc[ours["median_ms"].idxmin()], cudnn.loc[cudnn["median_ms"].idxmin()]
            out.append({"layer": layer.name, "precision": precision, "lab's fastest": o["variant"],
                        "lab ms": o["median_ms"], "cuDNN's fastest": c["variant"], "cuDNN ms": c["median_ms"],
                        "lab faster": bool(o["median_ms"] < c["median_ms"])})
    return pd.DataFrame(out)


#: The profiler columns the chapter shows.
PROFILED_COLUMNS = ["step", "kernel", "duration_ns", "instructions_per_mac", "issue_slots_busy_pct",
                    "fma_pipe_pct", "stall_global_memory", "l2_bytes"]


def profiled(profile: pd.DataFrame, steps, caption: str, layer: int = 2, columns=PROFILED_COLUMNS):
    """The recorded profile of ``steps`` on one layer, with warp instructions per
    multiply-add (x 32 threads over the layer's MACs: the cost of one multiply-add)."""
    macs = LAYERS[layer - 1].flops(PROFILE_N) / 2
    rows = profile[(profile["layer"] == layer) & profile["step"].isin(list(steps))]
    rows = rows.assign(instructions_per_mac=rows["warp_instructions"] * 32 / macs)
    return rows[[c for c in columns if c in rows.columns]].style.format(precision=3, thousands=",").hide(
        axis="index").set_caption(f"layer {layer}, N = {PROFILE_N}; " + caption)


def step_labels(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its ``step`` column as the ladder writes it ("01", "cuDNN"): a side
    table whose steps are all numbers reads back from CSV as integers (1, 2, ...)."""
    def label(value):
        text = str(value)
        return f"{int(float(text)):02d}" if text.replace(".", "", 1).isdigit() else text
    return table.assign(step=table["step"].map(label))


def gap_reason(run, N: int, steps=None) -> str:
    """Why a per-layer table at batch ``N`` has empty cells: the reasons the run's ``skipped``
    table gives for ``steps`` (numbers; None: all) at ``N`` (on a GPU with less memory a large
    layer of a step is skipped, not crashed), or a plain "not timed in this run" when it has none."""
    table = run.tables.get("skipped")
    if table is not None and len(table):
        rows = step_labels(table)
        rows = rows[(pd.to_numeric(rows["size"], errors="coerce") == N)
                    & (rows["step"].isin(steps) | (rows["step"] == "all") if steps is not None else True)]
        parts = [f"step {r.step}, conv{int(r.layer)}: {r.reason}" if str(r.step)[:1].isdigit()
                 else f"{r.step}, conv{int(r.layer)}: {r.reason}" for r in rows.itertuples()]
        if parts:
            return "skipped in this run: " + "; ".join(dict.fromkeys(parts))
    return "not timed in this run"


def layers_table(N: int = MAIN_N) -> pd.DataFrame:
    """Each layer's shape and work at batch size N: FLOPs, compulsory bytes (fp32) and
    arithmetic intensity."""
    return pd.DataFrame([{
        "layer": layer.name, "input C x H x W": f"{layer.C} x {layer.H} x {layer.W}",
        "filters M x R x S": f"{layer.M} x {layer.R} x {layer.S}", "stride U": layer.U, "pad P": layer.P,
        "output M x E x F": f"{layer.M} x {layer.E} x {layer.F}", "K = C*R*S": layer.K,
        "GFLOP": layer.flops(N) / 1e9, "MB (fp32)": layer.bytes(N) / 1e6,
        "FLOP per byte": layer.flops(N) / layer.bytes(N)} for layer in LAYERS]).set_index("layer")


# --------------------------------------------------------------------------- CPU baselines
def numpy_conv(x: np.ndarray, w: np.ndarray, layer: Layer) -> np.ndarray:
    """The multi-core CPU baseline: im2col (one copy of the input windows) and one float32
    matrix product per image through NumPy's BLAS, which uses every core."""
    N, E, F, K = x.shape[0], layer.E, layer.F, layer.K
    p = layer.P
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p))) if p else x
    sn, sc, sh, sw = xp.strides
    windows = np.lib.stride_tricks.as_strided(
        xp, shape=(N, layer.C, layer.R, layer.S, E, F),
        strides=(sn, sc, sh, sw, sh * layer.U, sw * layer.U))
    cols = windows.reshape(N, K, E * F)
    return np.matmul(w.reshape(layer.M, K), cols).reshape(N, layer.M, E, F)


def host_description() -> dict:
    """The CPU the baselines ran on: model name and core count."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu_model": model, "cores": os.cpu_count(), "numpy": np.__version__}


def cpu_baseline_rows(batches=BATCHES, layers=LAYERS, loop_images: int = 1) -> list[dict]:
    """Time both CPU baselines with the host's clock. The one-core loop nest runs
    ``loop_images`` images per layer and is scaled linearly to each batch size (the full
    N = 128 loop would take many minutes); NumPy runs every batch size in full. Each result
    is checked against the float64 reference first."""
    from ..timing import Timing

    rows = []
    host = host_description()
    loop = load_module(CPU_LOOP_FILE, "cpu").get_function("conv_loop_nest")
    for layer in layers:
        x, w = make_inputs(layer, max(batches))
        x1 = np.ascontiguousarray(x[:loop_images])
        y1 = np.full(layer.y_shape(loop_images), np.nan, np.float32)
        samples = []
        for _ in range(2):
            start = time.perf_counter()
            loop(1, 1, (x1, w, y1, *layer.dims(loop_images)))
            samples.append((time.perf_counter() - start) * 1e3)
        check(y1, reference(x1, w, layer), "fp32", name=f"loop nest {layer.name}")
        per_image = np.asarray(samples) / loop_images
        for N in batches:
            method = "measured" if N == loop_images else f"measured on {loop_images} image(s), scaled by N"
            rows.append(Timing(per_image * N, method="host timer").row(
                "cpu", "one core: compiled loop nest (g++ -O2)", N, "kernel",
                flops=layer.flops(N), bytes=layer.bytes(N), layer=layer.index, step="cpu", method=method,
                cpu_model=host["cpu_model"]))
        for N in batches:
            xs = np.ascontiguousarray(x[:N])
            if N == batches[0]:
                check(numpy_conv(xs, w, layer), reference(xs, w, layer), "fp32",
                      name=f"numpy {layer.name}")
            samples = []
            for _ in range(3 if N < MAIN_N else 1):
                start = time.perf_counter()
                numpy_conv(xs, w, layer)
                samples.append((time.perf_counter() - start) * 1e3)
            rows.append(Timing(samples, method="host timer").row(
                "cpu", f"all cores: NumPy im2col + BLAS ({os.cpu_count()} threads)", N, "kernel",
                flops=layer.flops(N), bytes=layer.bytes(N), layer=layer.index, step="cpu",
                method="measured", cpu_model=host["cpu_model"]))
    return rows


def vendor_paths(layer: Layer, x32, w32, N: int, graphs: bool = True, labels=None):
    """Every cuDNN path for one layer (:func:`gpulab.baselines.conv_paths`: fp32, tf32,
    fp16, bf16, NCHW and channels-last), and in CUDA graphs when ``graphs``; beyond
    N = 128 their output is checked on the same three images as the ladder's."""
    from .. import baselines
    eager = baselines.conv_paths(x32, w32, stride=layer.U, padding=layer.P,
                                 fp32_tolerance=CUDNN_FP32_TOLERANCE)
    if labels is not None:
        eager = [p for p in eager if p.label in labels]
    if N > MAIN_N:
        pick = _subset(N)
        eager = [baselines.with_output(p, lambda out: out[pick], "checked on three images") for p in eager]
    return eager + (baselines.graph_paths(eager, launches=3) if graphs else [])


def vendor_best(totals: pd.DataFrame, N: int, precision: str, mode: str | None = None) -> pd.Series | None:
    """The fastest cuDNN path of matching precision (fp32 without tf32; tf32; fp16 or
    bf16) for all five layers at batch size ``N``: the baseline the chapter quotes.
    ``mode``: "eager", "graph" or None (either)."""
    from ..baselines import fastest
    rows = totals_at(totals, N, ["cuDNN"])
    rows = rows.assign(mode=np.where(rows["variant"].str.endswith("CUDA graph"), "graph", "eager"))
    return fastest(rows, precision, mode=mode)


def vendor_lines(totals: pd.DataFrame, N: int) -> pd.DataFrame:
    """The fastest cuDNN path per precision class at ``N``: the dashed lines of the
    ladder figures (every path: :func:`vendor_figure`)."""
    picks = [vendor_best(totals, N, p) for p in ("fp32", "tf32", "fp16")]
    return pd.DataFrame([p for p in picks if p is not None]).reset_index(drop=True)


def vendor_figure(totals: pd.DataFrame, N: int, caption: str):
    """Every cuDNN path for all five layers at ``N``, fastest of each precision class starred."""
    from .. import plots
    rows = totals_at(totals, N, ["cuDNN"])
    rows = rows.assign(mode=np.where(rows["variant"].str.endswith("CUDA graph"), "graph", "eager"))
    return plots.vendor_paths(rows, title=f"Which cuDNN path is fastest? (all five layers, N = {N})",
                              caption=caption)


def cudnn_algorithms(run_or_table) -> pd.DataFrame:
    """Which algorithm cuDNN chose per layer and path at N = 128, read from the names of
    the kernels it launched (PyTorch profiler), as recorded in the run."""
    from ..baselines import algorithm_family
    table = run_or_table.tables.get("cudnn_algorithms") if hasattr(run_or_table, "tables") else run_or_table
    if table is None:
        raise KeyError("this run has no cudnn_algorithms table: re-record it with `python -m gpulab record alexnet`")
    # Read the family again from the kernel names, so a better reading applies to older runs too.
    return table.assign(algorithm=[algorithm_family(str(k).split(" | ")) for k in table["kernels"]])


def benchmark_all(repeats: int = 100, quick: bool = False, deadline_s: float = 300.0):
    """Every experiment of the chapter on the GPU: (rows, side tables). Every kernel is
    checked against a float64 reference computed on the GPU before it is timed, at the
    size it is timed at (beyond N = 128 on three images of the batch); a failure raises.
    Scaling sizes not started within ``deadline_s`` are skipped (and listed as such)."""
    import cupy

    from .. import roofline, transfers
    from ..timing import benchmark

    budget_ms = 300.0 if not quick else 100.0
    started = time.perf_counter()

    def progress(text):
        print(f"alexnet [{time.perf_counter() - started:5.0f} s] {text}", flush=True)
    batches = [1, 8] if quick else BATCHES
    scaling = [256] if quick else SCALING_BATCHES
    rows, skipped, checks, algorithms = [], [], [], []
    pool = cupy.get_default_memory_pool()

    def note_skip(step, layer, N, reason):
        skipped.append({"step": step, "layer": layer.index, "size": N, "reason": reason})

    def measure(step: Step, layer: Layer, N: int, x, w, ref, experiment: str):
        y = cupy.full(layer.y_shape(N), cupy.nan, dtype=step.dtype)
        launch = make_launch(step, layer, N, x, w, y, "gpu")
        launch()
        result = compare(y if ref.shape[0] == N else y[_subset(N)], ref, step.precision,
                         name=f"step {step.number} {layer.name} N={N}")
        checks.append({"step": step.number, "layer": layer.index, "size": N,
                       "rel_error": result.rel_error, "passed": result.passed})
        if not result.passed:
            raise CheckFailed(str(result))
        timing = benchmark(launch, repeats=repeats, budget_ms=budget_ms)
        labels = dict(flops=layer.flops(N), bytes=layer.bytes(N, step.itemsize), layer=layer.index,
                      step=step.number, precision=step.precision, kernel=main_kernel(step, layer))
        rows.append(timing.row(experiment, step.label, N, "kernel", **labels))
        if experiment == "ladder" and N == COLD_N:     # a small batch fits in L2: time it cold too
            rows.append(benchmark(launch, repeats=repeats, budget_ms=budget_ms, flush_l2=True)
                        .row("ladder_cold", step.label, N, "kernel", **labels))
        del launch, y
        return timing.median_ms

    def measure_cudnn(layer, N, x32, w32, ref, experiment, graphs=True, labels=None):
        from .. import baselines
        paths = vendor_paths(layer, x32, w32, N, graphs=graphs, labels=labels)
        result = baselines.measure(
            paths, reference=ref, experiment=experiment, size=N, flops=layer.flops(N),
            bytes=lambda path: layer.bytes(N, 2 if path.precision in ("fp16", "bf16") else 4),
            repeats=repeats, budget_ms=min(budget_ms, 150.0), labels={"layer": layer.index, "step": "cuDNN"},
            on_failure="skip", log=lambda text: None)
        rows.extend(result.rows)
        for entry in result.skipped:
            note_skip("cuDNN", layer, N, f"{entry['variant']}: {entry['reason']}")
        if experiment == "ladder" and N == COLD_N:
            rows.extend(baselines.measure(
                [p for p in paths if not p.graph], reference=ref, experiment="ladder_cold", size=N,
                flops=layer.flops(N), bytes=lambda path: layer.bytes(N, 2 if path.precision in ("fp16", "bf16") else 4),
                repeats=repeats, budget_ms=min(budget_ms, 150.0), flush_l2=True,
                labels={"layer": layer.index, "step": "cuDNN"}, on_failure="skip", log=lambda text: None).rows)
        checks.extend({"step": r["variant"], "layer": layer.index, "size": N, "rel_error": r["rel_error"],
                       "passed": True} for r in result.rows)
        return paths

    # --- the ladder: every step, layer and batch size, cuDNN as the vendor line
    main_ms = {}
    for layer in LAYERS:
        x_host, w_host = make_inputs(layer, max(batches))
        x32, w32 = cupy.asarray(x_host), cupy.asarray(w_host)
        x16, w16 = x32.astype(cupy.float16), w32.astype(cupy.float16)
        ref_all = reference(x32, w32, layer, xp=cupy)
        for N in batches:
            ref = ref_all[:N]
            for step in STEPS + [EXERCISE]:
                why = unfit_reason(step, layer, N)
                if why:
                    note_skip(step.number, layer, N, why)
                    continue
                xs, ws = (x16, w16) if step.precision == "fp16" else (x32, w32)
                main_ms[(step.number, layer.index, N)] = measure(step, layer, N, xs[:N], ws, ref, "ladder")
                if step.kind == "winograd" and N == MAIN_N and alexnet_winograd.applies(layer):
                    # The filter transform runs once per model, outside the timed calls: time it here.
                    rows.append(alexnet_winograd.time_filter_transform(step, layer, w32, repeats, budget_ms))
            paths = measure_cudnn(layer, N, x32[:N], w32, ref, "ladder", graphs=N in (1, MAIN_N))
            if N == MAIN_N:
                algorithms.extend(_algorithm_rows(layer, paths))
            progress(f"ladder {layer.name} N={N}: " + ", ".join(
                f"{s.number} {main_ms[(s.number, layer.index, N)]:.3g}" for s in STEPS
                if (s.number, layer.index, N) in main_ms) + " ms")
        del x32, w32, x16, w16, ref_all, ref
        pool.free_all_blocks()
        _torch_empty_cache()

    # --- where the time goes when the data starts on the host (N = 128)
    progress("transfers")
    N = batches[-1]
    for layer in LAYERS:
        x_host, w_host = make_inputs(layer, N)
        for number in ("01",) + TRANSFER_STEPS:
            step = STEP[number]
            memories = transfers.MEMORY_KINDS if number == "01" else ("pageable", "pinned")
            host_in = [x_host.astype(step.dtype), w_host.astype(step.dtype)]
            slow = main_ms.get((number, layer.index, N), 0) > 50
            for memory in memories:
                try:
                    rows.extend(r | {"layer": layer.index, "step": number, "precision": step.precision}
                                for r in transfers.transfer_breakdown(
                                    _device_launcher(step, layer, N), host_in, layer.y_shape(N), step.dtype,
                                    memory=memory, warmup=1 if slow else 2, repeats=3 if slow else 10,
                                    experiment="transfers", variant=step.label, size=N))
                except RuntimeError as exc:     # e.g. no prefetch on this platform
                    note_skip(number, layer, N, f"{memory}: {exc}")
        pool.free_all_blocks()

    # --- scaling with the batch size, beyond N = 128: cuDNN's fastest eager path per precision class
    totals = layer_totals(pd.DataFrame([r for r in rows if r["experiment"] == "ladder"]))
    fastest_cudnn = {row["variant"] for row in (vendor_best(totals, batches[-1], p, "eager")
                                                for p in ("fp32", "tf32", "fp16")) if row is not None}
    for layer in LAYERS:
        # Generated on the GPU (seeded): 1.3 GB for layer 1 at N = 2048 is slow to make on the host.
        x32 = cupy.random.default_rng(layer.index).random(layer.x_shape(max(scaling)), dtype=cupy.float32)
        w32 = cupy.asarray(make_inputs(layer, 1)[1])
        x16, w16 = x32.astype(cupy.float16), w32.astype(cupy.float16)
        for N in scaling:
            ref = reference(x32[_subset(N)], w32, layer, xp=cupy)
            if time.perf_counter() - started > deadline_s:
                note_skip("all", layer, N, "the record ran past its time budget")
                continue
            progress(f"scaling {layer.name} N={N}")
            for number in SCALING_STEPS:
                step = STEP[number]
                at_main = main_ms.get((number, layer.index, batches[-1]), 0.0)
                predicted = at_main * N / batches[-1]
                why = unfit_reason(step, layer, N)
                if why:
                    note_skip(number, layer, N, why)
                    continue
                if predicted > 4000:
                    note_skip(number, layer, N, f"about {predicted / 1e3:.0f} s per run: over the "
                                                "record's time budget")
                    continue
                xs, ws = (x16, w16) if step.precision == "fp16" else (x32, w32)
                measure(step, layer, N, xs[:N], ws, ref, "scaling")
            measure_cudnn(layer, N, x32[:N], w32, ref, "scaling", graphs=False, labels=fastest_cudnn)
            pool.free_all_blocks()
        del x32, w32, x16, w16
        pool.free_all_blocks()
        _torch_empty_cache()

    # --- the CPU baselines, the device's ceilings, and the tables that go with the run
    progress("CPU baselines")
    try:
        rows.extend(cpu_baseline_rows(batches))
    except KernelCompileError as exc:        # no g++ on the GPU machine: say so, keep the rest
        skipped.append({"step": "cpu", "layer": 0, "size": 0, "reason": f"no CPU backend: {exc}"})
    rows.extend(roofline.measure_ceilings(repeats=10))
    progress("profile")
    tables = {"skipped": pd.DataFrame(skipped, columns=["step", "layer", "size", "reason"]),
              "checks": pd.DataFrame(checks), "resources": resources_table(),
              "cudnn_algorithms": pd.DataFrame(algorithms, columns=["layer", "variant", "precision", "layout",
                                                                    "algorithm", "kernels"])}
    profile = profile_table()
    if profile is not None:
        tables["profile"] = profile
    progress("done")
    return rows, tables


def _algorithm_rows(layer: Layer, paths) -> list[dict]:
    """Which algorithm cuDNN chose for each eager path on ``layer``: the kernels it
    launched, by name (PyTorch profiler), and the family they name."""
    from .. import baselines
    out = []
    for path in paths:
        if path.graph:
            continue
        names = baselines.path_kernels(path)
        out.append({"layer": layer.index, "variant": path.label, "precision": path.precision,
                    "layout": path.layout, "algorithm": baselines.algorithm_family(names),
                    "kernels": " | ".join(names)})
    return out


def _subset(N: int):
    """The images checked beyond N = 128: first, middle and last."""
    import cupy
    return cupy.asarray(sorted({0, N // 2, N - 1})) if N > MAIN_N else slice(None)


def _device_launcher(step: Step, layer: Layer, N: int):
    """``launch(inputs, output)`` for :mod:`gpulab.transfers`, binding once per buffer set."""
    bound = {}

    def launch(inputs, output):
        key = (inputs[0].data.ptr, inputs[1].data.ptr, output.data.ptr)
        if key not in bound:
            bound[key] = make_launch(step, layer, N, inputs[0], inputs[1], output, "gpu")
        bound[key]()
    return launch


def _torch_empty_cache() -> None:
    try:
        import torch
        torch.cuda.empty_cache()
    except Exception:
        pass


def memory_table(batches=None, total_bytes: float | None = None) -> pd.DataFrame:
    """Device memory per step, layer and batch size (x, w, y and scratch), from the shapes,
    and whether it fits the budget (:func:`memory_limit`) of this device, or of a device
    with ``total_bytes`` of memory."""
    limit = memory_limit(total_bytes)
    rows = []
    for N in batches or BATCHES + SCALING_BATCHES:
        for step in STEPS:
            for layer in LAYERS:
                need = footprint_bytes(step, layer, N)
                rows.append({"step": step.number, "variant": step.label, "layer": layer.index,
                             "size": N, "bytes": need, "scratch_bytes": scratch_bytes(step, layer, N),
                             "fits": need <= limit})
    return pd.DataFrame(rows)


def resources_table() -> pd.DataFrame:
    """Registers, shared and local memory of every kernel of the ladder, as compiled here."""
    from ..kernels import resource_table
    frames = []
    for step in STEPS:
        table = resource_table(load_module(step.file, "gpu")).reset_index()
        frames.append(table.assign(step=step.number))
    return pd.concat(frames, ignore_index=True)


#: Nsight Compute counters the chapter reads to explain the big steps: the profiler
#: module's standard set, plus how busy the FMA and tensor pipes and the memories were.
PROFILE_EXTRA_METRICS = {
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_busy_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_busy_pct",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "fma_pipe_pct",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_pct",
    "lts__t_bytes.sum": "l2_bytes",
    "smsp__inst_executed.sum": "warp_instructions",
}
#: Why warps wait (cycles stalled per issued instruction, by reason). Collected when this
#: ncu knows them; the profile is retried without them otherwise.
PROFILE_STALL_METRICS = {
    "sm__inst_issued.avg.pct_of_peak_sustained_active": "issue_slots_busy_pct",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": "stall_global_memory",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio": "stall_shared_memory",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": "stall_barrier",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio": "stall_mio_throttle",
    "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio": "stall_lg_throttle",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio": "stall_math_pipe",
    "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": "stall_fixed_latency",
}
#: (layer, step) pairs the profile covers, in launch order: the big steps on layer 2, and
#: layer 1's two thread mappings (steps 2 and 10).
PROFILE_RUNS = ([(2, s) for s in ("01", "02", "04", "07", "09", "11", "13", "14", "15", "16", "17",
                                   "18", "19", "20", "21", "22")]
                + [(1, "02"), (1, "10")])
PROFILE_N = 32


def profile_table() -> pd.DataFrame | None:
    """The profiler's view of :data:`PROFILE_RUNS` at N = 32: one row per kernel launch,
    from Nsight Compute run over a child process; None where ``ncu`` is missing or fails
    (the reason is printed)."""
    import sys

    from .. import profiler
    if profiler.ncu_path() is None:
        print("alexnet: no ncu here, so the run has no profile table")
        return None
    driver = [sys.executable, "-m", "gpulab.workloads.alexnet", "profile-target"]
    base = list(profiler.STANDARD_METRICS) + list(PROFILE_EXTRA_METRICS)
    table = None
    for metrics in (base + list(PROFILE_STALL_METRICS), base):
        try:
            table = profiler.per_launch(profiler.profile(driver, metrics, kernel_regex="^(conv_|reduce_)",
                                                         timeout=240))
            break
        except Exception as exc:    # a profiler failure must not lose the timings
            print(f"alexnet: the profile with {len(metrics)} metrics failed: {str(exc)[-1500:]}")
    if table is None:
        return None
    table = table.rename(columns={**PROFILE_EXTRA_METRICS, **PROFILE_STALL_METRICS})
    table = table.sort_values("id").reset_index(drop=True)
    return label_profile(table)


def label_profile(table: pd.DataFrame) -> pd.DataFrame:
    """Label the profiled launches (in launch order) with the layer and step of
    :data:`PROFILE_RUNS`: each run makes one ``conv_`` launch (steps 18 on pick their GEMM per
    layer, so the kernel's name alone does not say the step), and a ``reduce_`` launch belongs
    to the run before it."""
    runs, labels, current = iter(PROFILE_RUNS), [], (None, None)
    for kernel in table["kernel"]:
        if str(kernel).startswith("conv_"):
            current = next(runs, (None, None))
        labels.append(current)
    table = table.copy()
    table["layer"] = [layer for layer, _ in labels]
    table["step"] = [step for _, step in labels]
    table["size"] = PROFILE_N
    return table


def _profile_target() -> None:
    """Run each of :data:`PROFILE_RUNS` once at N = 32 (the child process ncu watches)."""
    import cupy
    for index, number in PROFILE_RUNS:
        layer, step = LAYERS[index - 1], STEP[number]
        x, w = make_inputs(layer, PROFILE_N)
        y = cupy.empty(layer.y_shape(PROFILE_N), dtype=step.dtype)
        make_launch(step, layer, PROFILE_N, cupy.asarray(x.astype(step.dtype)),
                    cupy.asarray(w.astype(step.dtype)), y, "gpu")()
    cupy.cuda.get_current_stream().synchronize()


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["profile-target"]:
        _profile_target()
    else:
        print("usage: python -m gpulab.workloads.alexnet profile-target  (the child run ncu profiles)")


# ------------------------------------------------------------ what each step's prediction claims
# The kernel files' predictions as claims a run can check (gpulab.predictions states the rules):
# on the five layers' time at N = MAIN_N ("all"), or on the layers a prediction names ("layer 1",
# "layers 2-5", "layers 3-5", or "one image"); a reason is shown only when the run says the
# claim failed in that direction (the chapter's "What we learned" cells give the evidence).
def _predicted():
    from .. import predictions as p
    issue = ("every kernel of the report's family spends several instructions per multiply-add, and "
             "the rate at which an SM issues them, not the loads, is the limit (see the profile)")
    return {
        "01": p.unjudged("the baseline: every later step is measured against it"),
        "02": p.times(3, None, "01", claim="3x or more faster than step 1", because=(
            "step 2 removed step 1's L2 round trips but is limited by instruction issue: each "
            "multiply-add costs about twenty instructions (loads, index arithmetic, padding tests)")),
        "03": p.slower("02", because_faster=(
            "at N = 128 each block computes for far longer than the one-thread copy takes")),
        "04": p.same("02", claim="back to about step 2's time"),
        "05": p.about(1 / 1.5, "03", claim="about 1.5x slower than step 3", because_faster=(
            "shared sums change where a value comes from, not how many instructions fetch it: " + issue)),
        "06": p.Expect(1 / 1.2, 1.2, "02", claim="within 20% of step 2"),
        "07": (p.faster("02", "one image"), p.slower("02")),
        "08": p.faster("07", claim="a small gain over step 7", because=(
            "the shared copy of the weights and its barrier cost more than the broadcast loads from L1 "
            "they replaced")),
        "09": p.times(1.5, 2, "08", because=(
            "with a 3 x 3 filter a block does only nine multiply-adds per output between two barriers, "
            "so copying the patch and waiting costs more than the loads it saves, and layer 1's stride-4 "
            "reads put four threads of a warp on each shared-memory bank")),
        "10": (p.times(1 / 1.7, 1 / 1.3, "02", "layer 1", claim="layer 1 1.3-1.7x slower than step 2"),
               p.same("02", "layers 2-5", claim="layers 2-5 unchanged")),
        "11": (p.about(2, "09", "layer 1", because=issue),
               p.same("09", "layers 3-5", claim="roughly even on layers 3-5", because=(
                   "layers 3-5 now do a third more multiply-adds, on padding zeros"))),
        "12": (p.times(1.5, 2, "11", "layers 2-5", claim="towards 2x faster than step 11 on layers 2-5",
                       because="the partial buffer's traffic was not most of the time: " + issue),
               p.same("11", "one image", claim="little change at N = 1")),
        "13": p.times(2, 4, "11", "layers 2-5", because=(
            "without the partial buffer the atomics remain, and " + issue)),
        "14": p.ms_between(7, 10, because=(
            "at 128 registers per thread only two blocks (a quarter of the SM's warps) are resident, too "
            "few to hide the shared-memory loads and the barrier per slice; the rest goes to the im2col "
            "address arithmetic and to partly empty tiles (see the profile)")),
        "15": p.times(3, 5, "14", because=(
            "its tensor pipe is busy less than a tenth of the time: its warps build each B slice one "
            "2-byte element at a time (a table lookup, a bounds test and a load per element) and wait "
            "for those loads")),
        "16": (p.times(2, 3, "15", "layers 2-5"), p.ms_between(2, 2.5)),
        "17": p.about_ms(7),
        "18": p.times(1.5, 2, "16", "layers 2-5", because=(
            "its warps stall on shared memory, and its 16-byte stores of the next slice into padded "
            "rows cost bank conflicts (see the profile)")),
        "19": p.times(1.1, 1.2, "18", "layers 2-5", because=(
            "cp.async halved the shared-memory stall (see the profile), but that stall was a smaller "
            "share of the main loop's time than the prediction assumed")),
        "20": (p.about(1.2, "19", "layer 1", because=(
            "layer 1's short reduction (17 slices) leaves much of each tile's time to the prologue and the "
            "write-back, which the 96-row tiles do not shorten")), p.about(1.25, "19", "layer 5", because_faster=(
            "besides fuller waves, the swizzled rows free shared memory for larger tiles (four warps "
            "of 64 x 64, slices of 64 k: half the barriers)"))),
        "21": p.about_ms(2),
        "22": p.ms_between(3.3, 3.6, because=(
            "the second set of sums takes registers (one block of 8 warps per SM), and the tensor pipe "
            "is busy only part of the time (see the profile): it costs less than three times step 20, "
            "but more than predicted")),
        "23": p.about_ms(2, "layers 3-5"),
        "24": p.about(1.3, "23", "layers 3-5"),
    }


#: step number -> the checkable claim(s) of its kernel file's prediction (see gpulab.predictions)
PREDICTED = _predicted()

#: The cases a claim may name: (name, batch size, layers summed).
PREDICTION_CASES = (("all", MAIN_N, (1, 2, 3, 4, 5)), ("layers 2-5", MAIN_N, (2, 3, 4, 5)),
                    ("layers 3-5", MAIN_N, (3, 4, 5)), ("layer 1", MAIN_N, (1,)), ("layer 5", MAIN_N, (5,)),
                    ("one image", 1, (1, 2, 3, 4, 5)))


def prediction_table(run):
    """Each step's prediction (from its kernel file) against ``run``: the five layers at
    :data:`MAIN_N`, claims about some layers (or one image) judged on those."""
    from .. import predictions
    from ..baselines import is_vendor
    lad = run.experiment("ladder")
    lad = lad[~is_vendor(lad)]
    out = []
    for case, N, layers in PREDICTION_CASES:
        per = lad[lad["size"] == N].pivot_table(index="step", columns="layer", values="median_ms", aggfunc="first")
        per.index = [step_labels(pd.DataFrame({"step": [s]}))["step"].iloc[0] for s in per.index]
        if not set(layers) <= set(per.columns):
            continue
        sums = per[list(layers)].sum(axis=1, min_count=len(layers)).dropna()
        out.append(pd.DataFrame({"step": sums.index, "case": case, "median_ms": sums.to_numpy()}))
    measured = pd.concat(out, ignore_index=True)
    steps = [(s.number, s.title, s.file) for s in STEPS]
    return predictions.table(steps, measured, PREDICTED, main_case="all")

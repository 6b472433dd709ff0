"""The AlexNet chapter's ladder: every step's kernel file and how it is launched, the checks
against the float64 reference, what each step needs of the device (shared memory, scratch,
the memory budget), and what each kernel file predicts.

Steps 18-22 are launched by :mod:`.tc`, steps 23-24 by :mod:`.winograd`, step 25 by
:mod:`.wgmma`, steps 26-27 (the same GEMM on floats) by :mod:`.wgmma32`, step 28 as step 25 with
layer 1's copy from :mod:`.copies`; where Winograd (layers 1 and 2) or steps 25-28 (layer 1) do not
apply this module hands the layer to the fallback step, so none of those modules reads the ladder.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from ... import ladder, predictions
from ...check import compare
from ...device import limits
from ...errors import KernelArgumentError
from ...kernels import DEFAULT_SHARED_LIMIT, Backend, get_backend, load_module, resource_table
from . import copies, tc, wgmma, wgmma32, winograd
from .shapes import (BATCHES, CHECK_LAYERS, CHECK_N, LAYERS, MAIN_N, MEMORY_FRACTION, SCALING_BATCHES, Layer,
                     block_shape, k_table, make_inputs, memory_limit, reference)


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung of the ladder: a kernel file, its kernel(s), and how it is launched.

    kind: "plane" (grid M x N, one block per image and filter), "channels" (grid
    M x N x C, then a reduction kernel), "atomic" (grid M x N x C/CB, atomicAdd into a
    zeroed y), "gemm"/"wmma" (implicit GEMM tiles), "wmma_nhwc" (layout copies, then implicit
    GEMM tiles), "gemm_tuned" (padded copy of x, filter transpose, then implicit GEMM tiles with
    the reduction split over gridDim.z), "mma" (steps 18 on: a padded channels-last copy, filter
    runs, then mma.sync tiles; see :mod:`gpulab.workloads.alexnet.tc`), "filters4" (exercise 1:
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
#: Steps 18 on: tensor cores through mma.sync (gpulab/workloads/tc.py launches them).
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
#: units (gpulab/workloads/winograd.py launches them, and says what runs layers 1 and 2).
WINOGRAD_STEPS = [
    Step("23", "alexnet/23_winograd_2x2.cu",
         "Winograd F(2x2,3x3) on layers 3-5 (fp32 FMA)",
         ("conv_winograd_gemm", "winograd_input_2x2", "winograd_output_2x2", "winograd_filter_2x2"), "winograd"),
    Step("24", "alexnet/24_winograd_4x4.cu",
         "Winograd F(4x4,3x3) on layers 3-5 (fp32 FMA)",
         ("conv_winograd_gemm", "winograd_input_4x4", "winograd_output_4x4", "winograd_filter_4x4"), "winograd"),
]
STEPS += WINOGRAD_STEPS
#: Step 25 on: Hopper's wgmma fed by TMA on the stride-1 layers 2-5 (gpulab/workloads/wgmma.py
#: launches it); layer 1 runs step 20's kernel (:data:`WGMMA_FALLBACK`). Built for sm_90a: refused,
#: with the reason, on any other GPU.
WGMMA_STEPS = [
    Step("25", "alexnet/25_wgmma_tma.cu",
         "wgmma fed by TMA boxes, warp-specialized (layers 2-5; layer 1 step 20's)",
         ("conv_wgmma_16x128", "to_nhwc_half"), "wgmma", precision="fp16"),
    # Steps 26-27: step 25's GEMM on float data (gpulab/workloads/wgmma32.py), layer 1 on step 21's
    # and step 22's kernels (:data:`WGMMA32_FALLBACK`).
    Step("26", "alexnet/26_wgmma_tf32.cu",
         "step 25 in tf32 (layers 2-5; layer 1 step 21's)",
         ("conv_wgmma_tf32_16x128", "to_nhwc_float"), "wgmma", precision="tf32"),
    Step("27", "alexnet/27_wgmma_3xtf32.cu",
         "fp32 accuracy: 3xTF32 on wgmma (layers 2-5; layer 1 step 22's)",
         ("conv_wgmma_3xtf32_16x128", "to_nhwc_split"), "wgmma"),
]
STEPS += WGMMA_STEPS
#: Step 28: step 25 with layer 1's copy to channels-last made in one pass of 16-byte stores
#: (gpulab/workloads/alexnet/copies.py); the GEMMs, and layers 2-5's copies, are step 25's.
COPY_STEPS = [
    Step("28", "alexnet/28_vector_copies.cu",
         "step 25 + layer 1's copy in 16-byte chunks",
         ("to_nhwc_chunks_half",), "wgmma", precision="fp16"),
]
STEPS += COPY_STEPS
#: The step each of COPY_STEPS changes only layer 1's copy of.
COPY_OF = {"28": "25"}
STEP = {s.number: s for s in STEPS}
#: The steps each of the book's two AlexNet chapters teaches: book/alexnet the ladder up to the
#: Winograd steps, book/alexnet_hopper, after the hopper chapter has taught their machinery (TMA,
#: mbarriers, wgmma, warp specialization, clusters), the rest. One ladder and one recorded run
#: serve both chapters.
CHAPTER_STEPS = {"alexnet": tuple(s.number for s in STEPS if s not in WGMMA_STEPS + COPY_STEPS),
                 "alexnet_hopper": tuple(s.number for s in WGMMA_STEPS + COPY_STEPS)}
#: The step whose kernel runs a layer step 25 does not apply to (layer 1: stride 4, 3 channels).
WGMMA_FALLBACK = "20"
#: The same for the float steps 26-27: the ladder's fastest kernel of their precision on layer 1
#: (step 21 in tf32; step 22, split fp16, for fp32 accuracy).
WGMMA32_FALLBACK = {"26": "21", "27": "22"}
#: The compute capability step 25's kernels are compiled for (wgmma, TMA, setmaxnreg: sm_90a).
WGMMA_CAPABILITY = "9."
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
        return tc.scratch_bytes(step, layer, N)
    if step.kind == "winograd":
        ran = fallback_step(step, layer)
        return winograd.scratch_bytes(step, layer, N) if ran is step else scratch_bytes(ran, layer, N)
    if step.kind == "wgmma":
        ran = fallback_step(step, layer)
        if ran is not step:
            return scratch_bytes(ran, layer, N)
        return wgmma32.scratch_bytes(step.number, layer, N) if step.number in wgmma32.FILES else \
            wgmma.scratch_bytes(layer, N)
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


def unfit_reason(step: Step, layer: Layer, N: int) -> str | None:
    """Why ``step`` cannot run ``layer`` at batch size ``N`` here (too much shared memory
    per block, or more device memory than the budget), or None when it can."""
    here = limits()
    if step.kind == "wgmma" and fallback_step(step, layer) is step:
        why = wgmma_refusal(step, here)
        if why:
            return why
    if here is not None:
        why = here.shared_fits(launch_config(step, layer, N)["shared_bytes"])
        if why:
            return why
        return here.memory_fits(footprint_bytes(step, layer, N), MEMORY_FRACTION)
    need = footprint_bytes(step, layer, N)
    if need > memory_limit():
        return f"needs {need / 1e9:.1f} GB of device memory; the budget is {memory_limit() / 1e9:.1f} GB"
    return None


def wgmma_refusal(step: Step, here=None) -> str | None:
    """Why step 25 cannot run on this GPU (None on Hopper, on the CPU backend, or where the
    capability is not known): its kernels use wgmma, TMA and setmaxnreg, compiled for sm_90a."""
    here = limits() if here is None else here
    if here is None or here.compute_capability is None or str(here.compute_capability).startswith(WGMMA_CAPABILITY):
        return None
    return (f"step {step.number} is built for sm_90a (wgmma, TMA, setmaxnreg): it runs on compute capability "
            f"9.x (Hopper) only; {here.name} has {here.compute_capability}")


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
        cfg = tc.launch_config(step.number, layer, N, step.itemsize)
        return {key: cfg[key] for key in ("grid", "block", "shared_bytes")}
    elif step.kind == "winograd":
        ran = fallback_step(step, layer)
        return winograd.launch_config(step, layer, N) if ran is step else launch_config(ran, layer, N)
    elif step.kind == "wgmma":
        ran = fallback_step(step, layer)
        if ran is not step:
            return launch_config(ran, layer, N)
        return wgmma32.launch_config(step.number, layer, N) if step.number in wgmma32.FILES else \
            wgmma.launch_config(layer, N)
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
        return tc.make_launch(step, layer, N, x, w, y, be)
    if step.kind == "winograd":
        ran = fallback_step(step, layer)
        if ran is not step:
            return make_launch(ran, layer, N, x, w, y, be)
        return winograd.make_launch(step, layer, N, x, w, y, be)
    if step.number in COPY_OF:
        # The step it changes, bound as that step binds it; on layer 1 (step 20's kernel, whose
        # layout has the layer's zero border written out) its copy replaced. On layers 2-5 the
        # chunked copy was slower than step 25's own (see the kernel file).
        base = STEP[COPY_OF[step.number]]
        launch = make_launch(base, layer, N, x, w, y, be)
        if fallback_step(base, layer) is base:
            return launch
        return copies.with_chunk_copy(launch, x, layer, layer.P, be)
    if step.kind == "wgmma":
        ran = fallback_step(step, layer)
        if ran is not step:
            return make_launch(ran, layer, N, x, w, y, be)
        why = wgmma_refusal(step)
        if why:               # refused here, with the reason, rather than by the driver at launch
            raise KernelArgumentError(why)
        if step.number in wgmma32.FILES:
            return wgmma32.make_launch(step.number, layer, N, x, w, y, be)
        return wgmma.make_launch(layer, N, x, w, y, be)
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
    applies, else the step :data:`gpulab.workloads.alexnet.winograd.FALLBACK` names; for steps 25-27,
    itself on the stride-1 layers, else step :data:`WGMMA_FALLBACK` (:data:`WGMMA32_FALLBACK` for
    the float steps). Any other step runs itself."""
    if step.kind == "wgmma":
        return step if wgmma.applies(layer) else STEP[WGMMA32_FALLBACK.get(step.number, WGMMA_FALLBACK)]
    if step.kind != "winograd":
        return step
    return step if winograd.applies(layer) else STEP[winograd.FALLBACK[layer.index]]


def kernels_per_layer(steps=None, layers=None) -> pd.DataFrame:
    """Which step and kernel file run each layer for the Winograd steps."""
    out = []
    for number in steps or winograd.TILE:
        step = STEP[number]
        for layer in layers or LAYERS:
            ran = fallback_step(step, layer)
            how = (f"Winograd F({winograd.TILE[number]}x{winograd.TILE[number]},3x3)" if ran is step
                   else f"step {ran.number} ({ran.title})")
            out.append({"step": number, "layer": layer.name, "runs": how, "file": ran.file})
    return pd.DataFrame(out)


def main_kernel(step: Step, layer: Layer) -> str:
    """The name of the kernel that does ``step``'s arithmetic on ``layer``: the tile a step
    from 18 on picks for it, or for a Winograd step on a layer it does not apply to, the
    fallback step's kernel (:data:`gpulab.workloads.alexnet.winograd.FALLBACK`)."""
    if step.kind in ("winograd", "wgmma"):
        ran = fallback_step(step, layer)
        if ran is not step:
            return main_kernel(ran, layer)
        if step.number in wgmma32.FILES:
            return wgmma32.kernel_for(step.number, layer)
        return wgmma.kernel_for(layer) if step.kind == "wgmma" else step.kernels[0]
    if step.kind == "mma":
        return tc.kernel_for(step.number, layer)
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
            ran = fallback_step(step, layer)
            note = "" if ran is step else (f"step {ran.number}'s kernel: " + (
                "Winograd needs 3 x 3, stride 1" if step.kind == "winograd" else f"step {step.number} needs stride 1"))
            yield ({"kernel": main_kernel(step, layer), "layer": layer.name, "N": N, "precision": step.precision,
                    "seed": seed, "note": note},
                   compare(run(step, layer, x, w, be), reference(x, w, layer), step.precision,
                           name=f"{step.kernels[0]} {layer.name}"))
    return ladder.check_steps(steps or STEPS, check_one, backend, skip=lambda step: (
        wgmma_refusal(step) if step.kind == "wgmma" else None))


def accuracy_table(backend=None, steps=("17", "23", "24"), layers=None, N: int = 1,
                   seed: int = 0) -> pd.DataFrame:
    """Each step's error against the float64 reference on the 3 x 3 layers (by default the
    full-size layers 3-5, one image: a few seconds on the CPU backend), measured now on
    ``backend``, on the same seeded inputs for every step: the relative error norm (what the
    checks compare with the tolerance) and the largest error of one output over the largest
    output (max |y - ref| / max |ref|)."""
    be = get_backend(backend)
    rows = []
    for layer in layers or [layer for layer in LAYERS if winograd.applies(layer)]:
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
    frames = []
    for step in STEPS:
        if step.kind == "wgmma" and wgmma_refusal(step):
            continue                  # its sm_90a cubin does not load here
        options = wgmma.GPU_OPTIONS if step.kind == "wgmma" else ()
        table = resource_table(load_module(step.file, "gpu", options=options)).reset_index()
        frames.append(table.assign(step=step.number))
    return pd.concat(frames, ignore_index=True)


# The kernel files' predictions as claims a run can check (gpulab.predictions states the rules):
# on the five layers' time at N = MAIN_N ("all"), or on the layers a prediction names ("layer 1",
# "layers 2-5", "layers 3-5", or "one image"); a reason is shown only when the run says the
# claim failed in that direction (the chapter's "What we learned" cells give the evidence).
def _predicted():
    p = predictions
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
            "write-back, which the 96-row tiles do not shorten")), p.about(1.25, "19", "layer 5", because=(
            "layer 5 is a short call (13 x 13 outputs), and this ratio moves between recorded runs of the same "
            "kernels by as much as its gap to the prediction: two H200 runs put it on either side of the band's "
            "lower edge"), because_faster=(
            "besides fuller waves, the swizzled rows free shared memory for larger tiles (four warps "
            "of 64 x 64, slices of 64 k: half the barriers)"))),
        "21": p.about_ms(2),
        "22": p.ms_between(3.3, 3.6, because=(
            "the second set of sums takes registers (one block of 8 warps per SM), and the tensor pipe "
            "is busy only part of the time (see the profile): it costs less than three times step 20, "
            "but more than predicted")),
        "23": p.about_ms(2, "layers 3-5"),
        "24": p.about(1.3, "23", "layers 3-5"),
        "25": (p.about_ms(0.9, because=(
            "the tiles of 128 pixels waste rows on the small images (layer 3-5's 13 x 13 fills 169 of 256 "
            "rows), and each call still copies x to channels-last before its GEMM")),
               p.about_ms(0.6, "layers 2-5")),
        "26": (p.about_ms(1.85, because_faster=(
                   "this prediction counts step 25's tiles; the flat tiles that steps 26 and 27 now use on layers "
                   "3-5 waste fewer rows (169 of 196 against 169 of 256), and the kernel file's second prediction, "
                   "which counts them, is about 1.40 ms")),
               p.about(1 / 2, "25", "layers 2-5", claim="layers 2-5 take about twice step 25's time", because_faster=(
                   "step 25 left the tensor pipe idle more than a third of the time, and step 26 keeps it busier "
                   "(see the profile), so half the rate cost less than twice the time; and step 26's layers 3-5 "
                   "run in flat tiles (169 of 196 rows real), step 25's in rectangles (169 of 256)")),
               p.about(1.2, "21", because_faster="layers 2-5 took less than twice step 25's time (the claim above)")),
        "27": (p.about_ms(5.4, because_faster=(
                   "step 26's layers 2-5, which the prediction scaled by convpool's 3.25, took less than predicted, "
                   "step 27 took less than 3.25x of them, and its layers 2-5 now run in flat tiles, which the "
                   "prediction did not count")),
               p.about(1 / 3.25, "26", "layers 2-5", claim="layers 2-5 take about 3.25x step 26's time")),
        "28": (p.about_ms(0.96), p.about(1.25, "25", "layer 1"), p.same("25", "layers 2-5")),
    }


#: step number -> the checkable claim(s) of its kernel file's prediction (see gpulab.predictions)
PREDICTED = _predicted()

#: The cases a claim may name: (name, batch size, layers summed).
PREDICTION_CASES = (("all", MAIN_N, (1, 2, 3, 4, 5)), ("layers 2-5", MAIN_N, (2, 3, 4, 5)),
                    ("layers 3-5", MAIN_N, (3, 4, 5)), ("layer 1", MAIN_N, (1,)), ("layer 5", MAIN_N, (5,)),
                    ("one image", 1, (1, 2, 3, 4, 5)))

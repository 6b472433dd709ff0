"""The ladder: one kernel file per step, how each is launched per layer, and the forward pass.

Every step computes both convolution layers. Steps 1-9 write the convolution's
pre-pool output ``y`` and finish the layer with the shared ``relu_pool``
kernel; from step 10 on, ReLU and the pool are in the convolution kernel's
epilogue and only the pooled output is written. The fully-connected layers
(``kernels/lenet/fc_layers.cu``) are the same for every step: they complete
the network, so that every step's predictions can be compared with the
reference's. Step 2 changes only the host code (chunks on streams), step 12
only how the forward pass is launched (one CUDA graph). Step 13 goes back to the kernels:
conv2 on ``mma.sync`` fed by ``ldmatrix`` from a channels-last copy of each image; step 13g
launches its forward pass as one CUDA graph, as step 12 does steps 10 and 11's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from ... import ladder
from ...check import compare
from ...errors import CheckFailed
from ...kernels import Backend, get_backend, load_module
from .network import CONV1, CONV2, FLAT, HIDDEN, LAYERS, Conv, forward

CLASSES = 10
TILE = 16                 # the report's TILE_WIDTH (steps 1-9)
IM2COL_CHUNK = 1000       # step 4: images unrolled at a time (the report's mini-batch)
RELU_POOL_BLOCK = 256
FC2_BLOCK = 128
#: Step 10's block shape per layer: pooled rows per block (BY), pooled columns per thread (PX).
FUSED_SHAPE = {"conv1": {"BY": 8, "PX": 2}, "conv2": {"BY": 17, "PX": 1}}
#: Step 11's padded K and warps per block; the warp counts it may be compiled with, largest first.
WMMA_KP, WMMA_WARPS = 208, 8
WMMA_WARP_CHOICES = (8, 4, 2)


def wmma_shared(warps: int = WMMA_WARPS) -> int:
    """Step 11's dynamic shared memory with ``warps`` warps per block (SMEM_BYTES in its kernel
    file): the weights, a 16 x 208 tile and a 16 x 16 result per warp, the offsets, the image."""
    return 2 * 16 * WMMA_KP + 2 * warps * 16 * WMMA_KP + 4 * warps * 256 + 4 * WMMA_KP + 2 * 4 * 40 * 40


#: 81,728 bytes with 8 warps: more than a T4 allows a block (65,536), so there it runs 4 warps.
WMMA_SHARED = wmma_shared()


def wmma_warps(limits=None) -> int:
    """Warps per block for step 11 on this device (or the simulated one, see
    :func:`gpulab.device.simulate`): the most of :data:`WMMA_WARP_CHOICES` whose shared memory
    fits a block; 8 where no limit is known (the CPU backend)."""
    from ...device import limits as device_limits
    here = limits if limits is not None else device_limits()
    if here is None:
        return WMMA_WARPS
    for warps in WMMA_WARP_CHOICES:
        if here.shared_fits(wmma_shared(warps)) is None:
            return warps
    raise ValueError(f"step 11 needs at least {wmma_shared(WMMA_WARP_CHOICES[-1]):,} bytes of shared memory per "
                     f"block; {here.name} allows {here.shared_per_block:,}")


def adaptations(limits=None) -> list[dict]:
    """What the ladder changes to fit this device (or the simulated one), one row per change,
    with the reason: empty where every step runs as the chapter describes it."""
    from ...device import limits as device_limits
    here = limits if limits is not None else device_limits()
    warps = wmma_warps(here)
    if warps == WMMA_WARPS:
        return []
    return [{"step": "11", "change": f"conv2 kernel compiled with {warps} warps per block instead of {WMMA_WARPS}",
             "reason": f"{WMMA_WARPS} warps {here.shared_fits(WMMA_SHARED)}; {warps} warps need "
                       f"{wmma_shared(warps):,}"}]
CONSTANT_FLOATS = 16 * 4 * 7 * 7
COMMON_FILES = {"relu_pool": "lenet/relu_pool.cu", "fc": "lenet/fc_layers.cu"}
#: Sizes of the correctness checks: 1, odd, and a full conv2 block count not a multiple of anything.
CHECK_SIZES = (1, 7, 100)


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung of the ladder. ``kind`` says how its kernels are launched (see
    :func:`layer_launch`); ``fused``: the kernel writes the pooled output itself."""

    kind: str
    fused: bool = False
    streams: int = 0            # step 2: chunks on this many streams (host code only)
    graph: bool = False         # step 12: the forward pass captured in a CUDA graph
    report_name: str = ""

    @property
    def act_dtype(self):
        """The dtype of the pooled activations between layers."""
        return np.float16 if self.precision == "fp16" else np.float32


STEPS = [
    Step("01", "lenet/01_direct_global.cu", "direct, global memory", "direct", report_name="baseline"),
    Step("02", "lenet/02_streams.cu", "+ 4 streams (host side)", "direct", streams=4, report_name="streams"),
    Step("03", "lenet/03_shared_tiled.cu", "shared-memory tiles", "tiled", report_name="tiled"),
    Step("04", "lenet/04_im2col_matmul.cu", "im2col + tiled matmul", "im2col", report_name="unroll + matmul"),
    Step("05", "lenet/05_implicit_gemm.cu", "implicit GEMM (fused unroll)", "gemm", report_name="fusion"),
    Step("06", "lenet/06_constant_weights.cu", "weights in constant memory", "constant",
         report_name="constant memory"),
    Step("07", "lenet/07_restrict_unroll.cu", "+ __restrict__, unrolled loops", "unrolled",
         report_name="restrict + unroll"),
    Step("08", "lenet/08_channel_tree.cu", "channel sum: tree reduction", "tree", report_name="tree reduction"),
    Step("09", "lenet/09_channel_atomics.cu", "channel sum: atomics", "atomic", report_name="atomics"),
    Step("10", "lenet/10_fused_relu_pool.cu", "ReLU + pool fused, register tiles", "fused", fused=True),
    Step("11", "lenet/11_tensor_cores.cu", "conv2 on tensor cores (fp16)", "wmma", precision="fp16", fused=True),
    Step("12", "lenet/10_fused_relu_pool.cu", "fp32 forward pass in one CUDA graph", "fused", fused=True,
         graph=True),
    Step("12h", "lenet/11_tensor_cores.cu", "fp16 forward pass in one CUDA graph", "wmma", precision="fp16",
         fused=True, graph=True),
    Step("13", "lenet/13_both_layers_mma.cu", "both layers on mma.sync, fed from shared memory (fp16)", "mma",
         precision="fp16", fused=True),
    Step("13g", "lenet/13_both_layers_mma.cu", "step 13's forward pass in one CUDA graph", "mma",
         precision="fp16", fused=True, graph=True),
]
STEP = {s.number: s for s in STEPS}
#: Exercise 3 (lenet.1a): step 7 with ReLU and pool in the epilogue (one pooled output per thread).
EXERCISE = Step("E1", "lenet/exercise_01_pool_epilogue.cu", "exercise: step 7 + fused ReLU and pool",
                "exercise", fused=True)


# ----------------------------------------------------------------- launching one layer
def _tiles(layer: Conv) -> int:
    side = -(-layer.E // TILE)
    return side * side


def _module(step: Step, layer: Conv, be: Backend):
    """The step's kernel file compiled for ``layer`` (steps 6-11 specialise per layer)."""
    if step.streams:        # step 2's file includes step 1's kernel unchanged
        return load_module(STEP["01"].file, be)
    if step.kind == "constant":
        return load_module(step.file, be, options=(f"-DLENET_LAYER={layer.name[-1]}",))
    if step.kind in ("unrolled", "tree", "atomic", "exercise"):
        return load_module(step.file, be, options=(f"-DCONV_C={layer.C}",))
    if step.kind in ("fused", "wmma") and (step.kind == "fused" or layer is CONV1):
        shape = FUSED_SHAPE[layer.name]
        opts = [f"-DCH={layer.C}", f"-DMF={layer.M}", f"-DIH={layer.H}", f"-DBY={shape['BY']}",
                f"-DPX={shape['PX']}"]
        return load_module(STEP["10"].file, be, options=tuple(opts))
    if step.kind == "wmma":
        warps = wmma_warps()
        return load_module(step.file, be, options=() if warps == WMMA_WARPS else (f"-DWARPS={warps}",))
    return load_module(step.file, be)


#: The one kernel each kind of step launches for a layer, where it is the same for both layers
#: and both precisions.
_KERNEL = {"direct": "conv_direct_global", "tiled": "conv_shared_tiled", "gemm": "conv_implicit_gemm",
           "constant": "conv_constant_weights", "unrolled": "conv_restrict_unroll", "tree": "conv_channel_tree",
           "atomic": "conv_channel_atomics", "exercise": "conv_relu_pool_direct"}


def layer_kernels(step: Step, layer: Conv) -> tuple[str, ...]:
    """The kernels of ``step``'s module (:func:`_module`) that :func:`layer_launch` launches for
    ``layer``, in launch order: a file may hold others (step 13's holds both layers' kernels,
    step 10's an fp32 and an fp16-output one)."""
    half = step.precision == "fp16"
    if step.kind in _KERNEL:
        return (_KERNEL[step.kind],)
    if step.kind == "im2col":
        return ("im2col", "matmul_tiled")
    if step.kind == "mma":
        return ("conv1_mma_relu_pool",) if layer is CONV1 else ("conv2_mma_nhwc_relu_pool",)
    if step.kind == "fused" or (step.kind == "wmma" and layer is CONV1):
        return ("conv_relu_pool_half" if half else "conv_relu_pool",)
    if step.kind == "wmma":
        return ("conv2_wmma_relu_pool_half" if half else "conv2_wmma_relu_pool",)
    raise ValueError(f"step {step.number}: unknown kind {step.kind!r}")


def layer_launch(step: Step, layer: Conv, N: int, x, w, out, be: Backend, scratch: dict | None = None) -> Callable:
    """A no-argument function computing ``step``'s convolution of ``layer`` on device
    arrays: into ``out`` = y (N x M x E x E, pre-pool) for unfused steps, into the pooled
    output (N x M x P x P) for fused ones. ``w`` is float32 (fp16 for step 11's conv2)."""
    module = _module(step, layer, be)
    kernel = getattr(module, layer_kernels(step, layer)[0])
    dims = (N, layer.M, layer.C, layer.H, layer.W, layer.K)
    grid, block = (N, layer.M, _tiles(layer)), (TILE, TILE)
    if step.kind == "direct":
        return kernel.bind(grid, block, (out, x, w, *dims))
    if step.kind == "tiled":
        shared = 4 * ((TILE + layer.K - 1) ** 2 + layer.K ** 2)
        return kernel.bind(grid, block, (out, x, w, *dims), shared)
    if step.kind == "im2col":
        return _im2col_launch(module, layer, N, x, w, out, be, scratch)
    if step.kind == "gemm":
        return kernel.bind((-(-layer.E * layer.E // TILE), -(-layer.M // TILE), N), block, (x, w, out, *dims))
    if step.kind in ("constant", "unrolled", "tree", "atomic", "exercise"):
        padded = np.zeros(CONSTANT_FLOATS, np.float32)
        padded[:w.size] = be.to_host(w).ravel()
        module.set_constant("w_const", padded)
        args = (out, x, N, layer.M, layer.H, layer.W)
        if step.kind == "constant":
            return kernel.bind(grid, block, (out, x, *dims))
        if step.kind == "unrolled":
            return kernel.bind(grid, block, args)
        if step.kind == "tree":
            return kernel.bind(grid, (TILE, TILE, layer.C), args)
        if step.kind == "exercise":
            return kernel.bind((N, layer.M, (-(-layer.P // TILE)) ** 2), (TILE, TILE), args)
        return _zero_then(out, kernel.bind(grid, (TILE, TILE, layer.C), args), be)
    if step.kind == "mma":
        pack = pack_conv1_filters if layer is CONV1 else pack_conv2_filters
        packed = be.to_device(pack(be.to_host(w)))
        return kernel.bind((BANDS, N) if layer is CONV1 else (N,), (MMA_WARPS * 32,), (x, packed, out, N))
    if step.kind == "fused" or layer is CONV1:
        shape = FUSED_SHAPE[layer.name]
        return kernel.bind((-(-layer.P // shape["BY"]), N), (layer.P // shape["PX"], shape["BY"]), (x, w, out, N))
    warps = wmma_warps()               # step 11's conv2: 8, or fewer where a block may have less shared memory
    kernel.allow_shared_memory(wmma_shared(warps))
    return kernel.bind((N,), (warps * 32,), (x, w, out, N), wmma_shared(warps))


#: Step 13's warps per block (WARPS in its kernel file) and conv1's blocks per image (BANDS).
MMA_WARPS, BANDS = 4, 5
#: Step 13's mma.m16n8k16 instructions per image, from its kernel file's tiles: conv1 5 bands x
#: 40 tiles x 4 k-steps; conv2 37 tiles x 56 (8 input rows x 2 k-halves x 2 filter tiles x 2
#: output rows, less the 8 that would use filter rows -1 and 7). Each is 16 x 8 x 16
#: multiply-adds, padding included.
MMA_PER_IMAGE = {"conv1": BANDS * 40 * 4, "conv2": 37 * 56}
MMA_FLOPS = 2 * 16 * 8 * 16


def pack_conv2_filters(w: np.ndarray) -> np.ndarray:
    """conv2's filters (16 x 4 x 7 x 7) as step 13's kernel reads them: uint32 registers of two
    fp16 halves (the lower k in the low bits), in the order of the mma.m16n8k16 B fragments each
    lane holds, [r][k-half h][n-tile j][lane][register q].
    Within filter row r, k = 16 h + kl orders the 32 halves a channels-last pixel run gives:
    s = 4 h + kl // 4, c = kl % 4 (s = 7 is the next pixel: weight 0). Lane 4 g + t holds
    filter 8 j + g at kl = 2 t + 8 q and 2 t + 8 q + 1 (the fragment layout in common/ptx.h)."""
    w = np.asarray(w)
    if w.shape != CONV2.w_shape:
        raise ValueError(f"conv2's filters should have shape {CONV2.w_shape}, got {w.shape}")
    padded = np.zeros((CONV2.M, CONV2.C, CONV2.K, 8), np.float16)          # s padded to 8
    padded[..., :CONV2.K] = w
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    out = np.empty((CONV2.K, 2, 2, 32, 2, 2), np.float16)
    for h in range(2):
        for j in range(2):
            for q in range(2):
                for e in range(2):
                    kl = 2 * t + 8 * q + e
                    out[:, h, j, :, q, e] = padded[8 * j + g, kl % 4, :, 4 * h + kl // 4].T   # (r, lane)
    return out.view(np.uint32)[..., 0]


def pack_conv1_filters(w: np.ndarray) -> np.ndarray:
    """conv1's filters (4 x 1 x 7 x 7) as step 13's conv1 kernel reads them: uint32 registers of
    two fp16 halves, [k-step p][lane][register q]. The product's 8 columns are (filter m, output
    row offset d), column 2 m + d; k-step p covers input rows 2 p (q = 0) and 2 p + 1 (q = 1),
    8 taps each. Lane 4 g + t holds column g at taps s = 2 t, 2 t + 1 of input row 2 p + q:
    w[g // 2][2 p + q - g % 2][s], zero where the filter row is outside 0-6 or s = 7."""
    w = np.asarray(w)
    if w.shape != CONV1.w_shape:
        raise ValueError(f"conv1's filters should have shape {CONV1.w_shape}, got {w.shape}")
    padded = np.zeros((CONV1.M, CONV1.K + 2, 8), np.float16)          # rows -1..7, s padded to 8
    padded[:, 1:CONV1.K + 1, :CONV1.K] = w[:, 0]
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    out = np.empty((4, 32, 2, 2), np.float16)
    for p in range(4):
        for q in range(2):
            for e in range(2):
                out[p, :, q, e] = padded[g // 2, 1 + 2 * p + q - g % 2, 2 * t + e]
    return out.view(np.uint32)[..., 0]

def _zero_then(out, kernel: Callable, be: Backend) -> Callable:
    if be.name == "gpu":
        def launch():
            out.data.memset_async(0, out.nbytes)       # the atomic sums start from zero
            kernel()
    else:
        def launch():
            out[...] = 0
            kernel()
    return launch


def _im2col_launch(module, layer: Conv, N: int, x, w, y, be: Backend, scratch: dict | None) -> Callable:
    chunk = min(N, IM2COL_CHUNK)
    key = f"unroll_{layer.name}"
    plane = layer.E * layer.E
    if scratch is not None and key in scratch and scratch[key].shape[0] >= chunk:
        unrolled = scratch[key]
    else:
        unrolled = be.xp.empty((chunk, layer.taps, plane), np.float32)
        if scratch is not None:
            scratch[key] = unrolled
    calls = []
    for n0 in range(0, N, chunk):
        nb = min(chunk, N - n0)
        calls.append(module.im2col.bind((-(-layer.C * plane // 256), nb), (256,),
                                        (x, unrolled, n0, layer.C, layer.H, layer.W, layer.K)))
        calls.append(module.matmul_tiled.bind((-(-plane // TILE), -(-layer.M // TILE), nb), (TILE, TILE),
                                              (w, unrolled, y, n0, layer.M, layer.taps, plane)))

    def launch():
        for call in calls:
            call()
    return launch


# ----------------------------------------------------------------- the forward pass
FC1_SLICES = FLAT // 16          # k-slices of 16 in fc1's sum
FC1_TARGET_BLOCKS = 2 * 132      # enough blocks for two per SM on the H100


def fc1_split(N: int) -> tuple[int, int]:
    """(slices per split, splits) for fc1: the sum over 4624 inputs is cut so that there are
    about FC1_TARGET_BLOCKS blocks (image tiles x splits), each with at least 8 slices."""
    tiles = -(-N // 64)
    splits = max(1, min(FC1_SLICES // 8, -(-FC1_TARGET_BLOCKS // tiles)))
    per_split = -(-FC1_SLICES // splits)
    return per_split, -(-FC1_SLICES // per_split)


class Forward:
    """Every buffer and launch of one step's forward pass for N images, allocated once.

    ``layers["conv1"]`` / ``layers["conv2"]``: the layer (conv, ReLU, pool) into the pooled
    activations; ``convs``: the convolution kernel alone (unfused steps); ``fc``: the two
    fully-connected layers and the argmax; ``run()``: all of it, in order."""

    def __init__(self, step: Step, N: int, x, weights: dict, backend=None, scratch: dict | None = None):
        be = self.be = get_backend(backend)
        self.step, self.N = step, N
        xp = be.xp
        half = step.precision == "fp16"
        act = np.float16 if half else np.float32
        self.x = x
        self.w = {"conv1": be.to_device(weights["conv1"]),
                  "conv2": be.to_device(weights["conv2"].astype(np.float16 if half else np.float32))}
        self.fc = {k: be.to_device(weights[k]) for k in ("fc1", "fc1_bias", "fc2", "fc2_bias")}
        self.pooled = {"conv1": be.poisoned(CONV1.pooled_shape(N), act), "conv2": be.poisoned(CONV2.pooled_shape(N), act)}
        self.pre_pool = {} if step.fused else {layer.name: be.poisoned(layer.y_shape(N), np.float32)
                                               for layer in LAYERS}
        self.hidden = be.poisoned((N, HIDDEN), np.float32)
        self.logits = be.poisoned((N, CLASSES), np.float32)
        self.predictions = xp.full(N, -1, dtype=np.int32)
        inputs = {"conv1": x, "conv2": self.pooled["conv1"]}
        self.convs, self.layers = {}, {}
        pool_module = load_module(COMMON_FILES["relu_pool"], be)
        for layer in LAYERS:
            if step.fused:
                self.layers[layer.name] = layer_launch(step, layer, N, inputs[layer.name], self.w[layer.name],
                                                       self.pooled[layer.name], be, scratch)
                continue
            conv = layer_launch(step, layer, N, inputs[layer.name], self.w[layer.name],
                                self.pre_pool[layer.name], be, scratch)
            planes = N * layer.M
            pool = pool_module.relu_pool.bind((-(-planes * layer.P ** 2 // RELU_POOL_BLOCK),), (RELU_POOL_BLOCK,),
                                              (self.pre_pool[layer.name], self.pooled[layer.name], planes, layer.E))
            self.convs[layer.name] = conv
            self.layers[layer.name] = _chain(conv, pool)
        fc = load_module(COMMON_FILES["fc"], be)
        per_split, splits = fc1_split(N)
        fc1 = (fc.fc1_half if half else fc.fc1).bind(
            (-(-N // 64), splits), (256,), (self.pooled["conv2"], self.fc["fc1"], self.hidden, N, per_split))
        fc2 = fc.fc2_argmax.bind((-(-N // FC2_BLOCK),), (FC2_BLOCK,),
                                 (self.hidden, self.fc["fc1_bias"], self.fc["fc2"], self.fc["fc2_bias"], self.logits,
                                  self.predictions, N))
        self.fc_layers = _chain(_zero_then(self.hidden, fc1, be), fc2)
        self.run = _chain(self.layers["conv1"], self.layers["conv2"], self.fc_layers)


def _chain(*calls: Callable) -> Callable:
    def run():
        for call in calls:
            call()
    return run


def run_forward(step: Step, x: np.ndarray, weights: dict, backend=None) -> dict:
    """One forward pass of ``step`` on host inputs (N x 1 x 86 x 86 float32); every
    intermediate back on the host (pre-pool outputs for unfused steps; ``hidden`` is fc1's
    sum before its bias and ReLU, which fc2's kernel applies)."""
    be = get_backend(backend)
    fwd = Forward(step, len(x), be.to_device(np.ascontiguousarray(x, dtype=np.float32)), weights, be)
    fwd.run()
    be.synchronize()
    out = {f"pool{i + 1}": be.to_host(fwd.pooled[layer.name]) for i, layer in enumerate(LAYERS)}
    out.update({layer.name: be.to_host(y) for layer, y in zip(LAYERS, fwd.pre_pool.values())})
    out.update(hidden=be.to_host(fwd.hidden), logits=be.to_host(fwd.logits),
               predictions=be.to_host(fwd.predictions))
    return out


def run_layer(step: Step, layer: Conv, x: np.ndarray, w: np.ndarray, backend=None) -> np.ndarray:
    """One layer of ``step`` on host arrays, output poisoned first: the pooled output for
    fused steps, the pre-pool convolution otherwise."""
    be = get_backend(backend)
    N = len(x)
    half = step.precision == "fp16"
    in_dtype = np.float16 if (half and layer is CONV2) else np.float32
    dx = be.to_device(np.ascontiguousarray(x, dtype=in_dtype))
    dw = be.to_device(w.astype(np.float16 if (half and layer is CONV2) else np.float32))
    shape = layer.pooled_shape(N) if step.fused else layer.y_shape(N)
    out = be.poisoned(shape, np.float16 if half else np.float32)
    layer_launch(step, layer, N, dx, dw, out, be)()
    be.synchronize()
    return be.to_host(out)


# ----------------------------------------------------------------- checks
def layer_inputs(layer: Conv, N: int, seed: int) -> np.ndarray:
    """Random inputs of a layer's shape, in [0, 1) (images, or activations after a ReLU)."""
    rng = np.random.default_rng(np.random.SeedSequence((seed, layer.C)))
    return rng.random(layer.x_shape(N), dtype=np.float32)


def layer_reference(layer: Conv, x, w) -> np.ndarray:
    """The float64 pre-pool convolution (the pooled output is :func:`network.pool2` of its ReLU)."""
    from .network import conv
    return conv(x, w)


def check_steps(backend=None, steps=None, sizes=CHECK_SIZES, weights: dict | None = None,
                seed: int | None = None) -> pd.DataFrame:
    """Every step's two layers against the float64 reference on random inputs of each size
    (fresh seed per call unless given, written in the table), outputs poisoned with NaN.
    Unfused steps are checked on the convolution's output, fused ones on the pooled output.
    Host-side steps (streams, a CUDA graph) are left out: their kernels are checked as steps 1, 10, 11."""
    from .network import load_weights, pool2
    weights = weights or load_weights()
    seed = int(np.random.SeedSequence().entropy % 2**31) if seed is None else seed

    def check_one(step, be):
        for N in sizes:
            for layer in LAYERS:
                x = layer_inputs(layer, N, seed + N)
                if step.precision == "fp16" and layer is CONV2:
                    x = x.astype(np.float16).astype(np.float32)   # what the step actually reads
                w = weights[layer.name]
                y64 = layer_reference(layer, x, w)
                what, ref = ("pooled", pool2(np.maximum(y64, 0))) if step.fused else ("conv", y64)
                yield ({"layer": layer.name, "output": what, "N": N, "precision": step.precision, "seed": seed},
                       compare(run_layer(step, layer, x, w, be), ref, step.precision,
                               name=f"{step.label} {layer.name} {what} N={N}"))
    kernel_steps = [s for s in (steps or STEPS) if not (s.graph or s.streams)]
    return ladder.check_steps(kernel_steps, check_one, backend)


def check_forward(step: Step, x: np.ndarray, weights: dict, backend=None) -> dict:
    """A whole forward pass of ``step`` against the float64 reference: the logits'
    relative error and how many predictions agree."""
    out = run_forward(step, x, weights, backend)
    ref = forward(x, weights)
    result = compare(out["logits"], ref["logits"], step.precision, name=f"{step.label} logits")
    ref_pred = ref["logits"].argmax(axis=1)
    return {"step": step.number, "N": len(x), "rel_error": result.rel_error, "passed": result.passed,
            "unwritten": result.unwritten, "agree": int((out["predictions"] == ref_pred).sum()),
            "predictions": out["predictions"]}


# ------------------------------------------------------------ what each step's prediction claims
# The kernel files' predictions as claims a run can check (gpulab.predictions states the rules),
# on both layers' time ("both"), or on one layer, at N = 10,000; a reason is shown only when the
# run says the claim failed in that direction. Steps 12, 12h and 13g reuse steps 10, 11 and 13's kernels.
def _predicted():
    from ... import predictions as p
    conflicts = ("its tiles cost shared-memory bank conflicts and two barriers per channel, and step 1 "
                 "was limited by issuing instructions, not by memory (see the profile below)")
    tensor_b = ("building the B tiles element by element through shared memory costs more than the "
                "products, and the tensor pipe is mostly idle (see the profile)")
    return {
        "01": p.unjudged("the baseline: every later step is measured against it"),
        "02": p.unjudged("not in this table: step 2 changes only the host side (copies on four streams); "
                         "the section on overlapping copies measures it"),
        "03": p.Expect(1 / 1.2, 1.2, "01", claim="within 20% of step 1", because=conflicts),
        "04": (p.slower("01", "conv1"), p.same("01", "conv2", because_faster=(
            "with 16 filters conv2 fills the product's tiles, and each unrolled input then serves all "
            "16 filters, where step 1 re-reads it for each"))),
        "05": (p.times(2, 4, "04", because=(
            "fusing the unrolling removed the matrix's round trip, but the product's tiles stay "
            "mostly empty (M = 4 or 16 rows of 16)")), p.slower("01", "conv1")),
        "06": p.times(1.1, 1.3, "01", because=(
            "step 1's weight loads were already uniform across a warp and cached, so constant memory "
            "had nothing left to save")),
        "07": p.about(2, "06"),
        "08": (p.times(1 / 1.3, 1 / 1.1, "07", "conv2", claim="conv2 10-30% slower than step 7", because=(
            "the tree's shared-memory rounds and barriers cost more than predicted, and the batch of "
            "10,000 images never needed the channels' extra parallelism")),
               p.same("07", "conv1", because="one channel still pays for the tree's barriers")),
        "09": (p.times(1 / 2, 1 / 1.5, "07", "conv2", claim="conv2 1.5-2x slower than step 7", because=(
            "atomics to the same outputs serialise more than predicted")),
               p.slower("07", "conv1", claim="conv1: step 7's time plus the zeroing of y")),
        "10": (p.about_ms(0.6, "conv1", because=(
            "its float2 loads of the image rows conflict two-way in shared memory (the kernel file says "
            "why: close to half of its shared wavefronts in the profile), and the FMA pipe is busy only "
            "about half the time")), p.about_ms(1.8, "conv2", because=(
            "conv2's threads need so many registers for their 64 sums that one block fills an SM, "
            "and too few warps are left to cover the shared-memory loads (see the profile)"))),
        "11": (p.about_ms(0.4, "conv2", because=tensor_b),
               p.about(4, "10", "conv2", because=tensor_b)),
        "13": (p.ms_between(0.15, 0.2, "conv1", because=(
                   "conv1 is held by issuing instructions, not by the tensor pipe: each of its products "
                   "needs 16 four-byte shared loads and their addresses, and the profile has the issue slots "
                   "far busier than the tensor pipe, and it moves its bytes at about half the measured bandwidth")),
               p.ms_between(0.15, 0.2, "conv2", because=(
                   "at 91 registers a thread only 5 blocks of 4 warps fit an SM, too few to cover the wait "
                   "for each ldmatrix: shared-memory stalls lead the profile and the tensor pipe is busy "
                   "about half the time"))),
    }


#: step number -> the checkable claim(s) of its kernel file's prediction (see gpulab.predictions)
PREDICTED = _predicted()

"""How a step is launched: the chapter's launch families, each a :class:`gpulab.ladder.Launcher`
that binds a step to a :class:`.problem.LayerBatch` (the device arrays x, w and the output of one
layer at a batch size), and the whole forward pass built from them (:class:`Forward`: both layers,
the shared ``relu_pool`` after an unfused step's convolution, and the fully-connected layers).

The families, in ladder order: :class:`Direct` (a thread per output from global memory: steps
1-2), :class:`SharedTiles` (3), :class:`Im2colMatmul` (4), :class:`ImplicitGemm` (5),
:class:`ConstantWeights` (6) and its variants with the channel count compiled in,
:class:`Unrolled` (7), :class:`ChannelTree` (8), :class:`ChannelAtomics` (9) and
:class:`PoolEpilogue` (the exercise), :class:`RegisterTiles` (10 and 12), :class:`TensorCores`
(11 and 12h: conv1 is :class:`RegisterTiles`') and :class:`Mma` (13 and 13g). Steps 1-9 write the
convolution ``y``; the others are ``fused``: ReLU and the pool are in their epilogue and they
write only the pooled output. A step's family is data (``Step(..., launcher=...)``), never a
string that functions switch on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ... import ladder
from ...check import compare
from ...kernels import Backend, get_backend, load_module
from .data import CLASSES
from .network import CONV1, CONV2, FLAT, HIDDEN, LAYERS, Conv, forward
from .problem import LayerBatch

TILE = 16                 # the report's TILE_WIDTH (steps 1-9)
IM2COL_CHUNK = 1000       # step 4: images unrolled at a time (the report's mini-batch)
RELU_POOL_BLOCK = 256
FC2_BLOCK = 128
#: Step 10's block shape per layer: pooled rows per block (BY), pooled columns per thread (PX).
FUSED_SHAPE = {"conv1": {"BY": 8, "PX": 2}, "conv2": {"BY": 17, "PX": 1}}
#: Step 10's file: steps 11 and 12h run its kernel for conv1, compiled per layer.
FUSED_FILE = "lenet/10_fused_relu_pool.cu"
#: Step 11's padded K and warps per block; the warp counts it may be compiled with, largest first.
WMMA_KP, WMMA_WARPS = 208, 8
WMMA_WARP_CHOICES = (8, 4, 2)
#: The constant-memory steps' weight array (w_const): conv2's 16 x 4 x 7 x 7, conv1's fits in it.
CONSTANT_FLOATS = 16 * 4 * 7 * 7
COMMON_FILES = {"relu_pool": "lenet/relu_pool.cu", "fc": "lenet/fc_layers.cu"}
#: Step 13's warps per block (WARPS in its kernel file) and conv1's blocks per image (BANDS).
MMA_WARPS, BANDS = 4, 5
#: Step 13's mma.m16n8k16 instructions per image, from its kernel file's tiles: conv1 5 bands x
#: 40 tiles x 4 k-steps; conv2 37 tiles x 56 (8 input rows x 2 k-halves x 2 filter tiles x 2
#: output rows, less the 8 that would use filter rows -1 and 7). Each is 16 x 8 x 16
#: multiply-adds, padding included.
MMA_PER_IMAGE = {"conv1": BANDS * 40 * 4, "conv2": 37 * 56}
MMA_FLOPS = 2 * 16 * 8 * 16


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


def _tiles(layer: Conv) -> int:
    side = -(-layer.E // TILE)
    return side * side


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


def _chain(*calls: Callable) -> Callable:
    def run():
        for call in calls:
            call()
    return run


# ------------------------------------------------------------------ the families
@dataclass(frozen=True)
class Family(ladder.Launcher):
    """What every family of the chapter says of a step on a layer, beside :meth:`bind`: its kernel
    file compiled for the layer (:meth:`module`; steps 6-11 specialise it per layer) and the
    kernels of it that a launch of the layer runs, in order (:meth:`kernels`). ``kernel``: the
    one kernel the family launches, where it is the same for both layers and precisions;
    ``fused``: a step of it writes the pooled output (ReLU and the pool in its epilogue), not the
    convolution's. A host-side step (chunks on streams, a CUDA graph) runs another step's kernels
    and is checked as that step."""

    kernel: str = ""
    fused = False

    def module(self, step, layer: Conv, backend=None):
        return load_module(step.file, get_backend(backend))

    def kernels(self, step, layer: Conv) -> tuple[str, ...]:
        return (self.kernel,)

    def unfit(self, step, backend) -> str | None:
        if step.streams or step.graph:
            return (f"host side only: {'chunks on streams' if step.streams else 'one CUDA graph'}; its kernels "
                    f"are step {step.kernels_of}'s, checked there")
        return None

    def _kernel(self, step, layer: Conv, be: Backend):
        return self.module(step, layer, be).get_function(self.kernels(step, layer)[0])


@dataclass(frozen=True)
class Direct(Family):
    """A thread per output of a 16 x 16 tile, from global memory: grid (N, M, tiles), the output
    first in the arguments (steps 1 and 2)."""

    def shared_bytes(self, layer: Conv) -> int:
        return 0

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        layer = case.layer
        dims = (case.N, layer.M, layer.C, layer.H, layer.W, layer.K)
        return self._kernel(step, layer, be).bind((case.N, layer.M, _tiles(layer)), (TILE, TILE),
                                                  (arrays[case.output_name], arrays["x"], arrays["w"], *dims),
                                                  self.shared_bytes(layer))


@dataclass(frozen=True)
class SharedTiles(Direct):
    """Step 1's launch with the tile's input patch and the filter in shared memory (step 3)."""

    def shared_bytes(self, layer: Conv) -> int:
        return 4 * ((TILE + layer.K - 1) ** 2 + layer.K ** 2)


@dataclass(frozen=True)
class Im2colMatmul(Family):
    """Step 4: per chunk of :data:`IM2COL_CHUNK` images, ``im2col`` unrolls the inputs into a
    matrix (the ``unrolled`` scratch, shared by the steps of one batch when the arrays hold a
    ``scratch`` dict) and ``matmul_tiled`` multiplies the filters by it."""

    def kernels(self, step, layer):
        return ("im2col", "matmul_tiled")

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        layer, N, y = case.layer, case.N, arrays[case.output_name]
        module = self.module(step, layer, be)
        chunk = min(N, IM2COL_CHUNK)
        plane = layer.E * layer.E
        scratch, key = arrays.get("scratch"), f"unroll_{layer.name}"
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
                                            (arrays["x"], unrolled, n0, layer.C, layer.H, layer.W, layer.K)))
            calls.append(module.matmul_tiled.bind((-(-plane // TILE), -(-layer.M // TILE), nb), (TILE, TILE),
                                                  (arrays["w"], unrolled, y, n0, layer.M, layer.taps, plane)))
        return _chain(*calls)


@dataclass(frozen=True)
class ImplicitGemm(Family):
    """Step 5: the unrolling fused into the product: grid (tiles of E x E, tiles of M, N)."""

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        layer, N = case.layer, case.N
        dims = (N, layer.M, layer.C, layer.H, layer.W, layer.K)
        return self._kernel(step, layer, be).bind(
            (-(-layer.E * layer.E // TILE), -(-layer.M // TILE), N), (TILE, TILE),
            (arrays["x"], arrays["w"], arrays[case.output_name], *dims))


@dataclass(frozen=True)
class ConstantWeights(Family):
    """Step 6: the layer's filters in ``__constant__`` memory (``w_const``, sized for conv2's; the
    file compiled per layer), step 1's grid and block, no filter argument."""

    def module(self, step, layer, backend=None):
        return load_module(step.file, get_backend(backend), options=self.options(layer))

    def options(self, layer: Conv) -> tuple[str, ...]:
        return (f"-DLENET_LAYER={layer.name[-1]}",)

    def grid(self, layer: Conv, N: int) -> tuple:
        return (N, layer.M, _tiles(layer))

    def block(self, layer: Conv) -> tuple:
        return (TILE, TILE)

    def args(self, case, arrays) -> tuple:
        layer = case.layer
        return (arrays[case.output_name], arrays["x"], case.N, layer.M, layer.C, layer.H, layer.W, layer.K)

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        layer = case.layer
        module = self.module(step, layer, be)
        padded = np.zeros(CONSTANT_FLOATS, np.float32)
        w = be.to_host(arrays["w"])
        padded[:w.size] = w.ravel()
        module.set_constant("w_const", padded)
        kernel = module.get_function(self.kernels(step, layer)[0])
        return kernel.bind(self.grid(layer, case.N), self.block(layer), self.args(case, arrays))


@dataclass(frozen=True)
class Unrolled(ConstantWeights):
    """Step 7: the channel count compiled in (``-DCONV_C``), so the loops unroll; the kernel takes
    the output, the input and N, M, H, W."""

    def options(self, layer):
        return (f"-DCONV_C={layer.C}",)

    def args(self, case, arrays):
        layer = case.layer
        return (arrays[case.output_name], arrays["x"], case.N, layer.M, layer.H, layer.W)


@dataclass(frozen=True)
class ChannelTree(Unrolled):
    """Step 8: a thread per channel too (block 16 x 16 x C), the channels' sums added by a tree."""

    def block(self, layer):
        return (TILE, TILE, layer.C)


@dataclass(frozen=True)
class ChannelAtomics(ChannelTree):
    """Step 9: step 8's threads add their channel's sum into y atomically, y zeroed first."""

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        return _zero_then(arrays[case.output_name], super().bind(step, case, arrays, be), be)


@dataclass(frozen=True)
class PoolEpilogue(Unrolled):
    """The exercise: step 7 with ReLU and the pool in its epilogue, a thread per pooled output
    (grid N x M x pooled tiles)."""

    fused = True

    def grid(self, layer, N):
        return (N, layer.M, (-(-layer.P // TILE)) ** 2)


@dataclass(frozen=True)
class RegisterTiles(Family):
    """Step 10 (and 12): step 10's file compiled per layer (channels, filters, input side and the
    block shape :data:`FUSED_SHAPE`), each thread a register tile of PX pooled columns, grid
    (pooled rows / BY, N); the kernel writing half-precision output for an fp16 step."""

    fused = True

    def module(self, step, layer, backend=None):
        shape = FUSED_SHAPE[layer.name]
        options = (f"-DCH={layer.C}", f"-DMF={layer.M}", f"-DIH={layer.H}", f"-DBY={shape['BY']}",
                   f"-DPX={shape['PX']}")
        return load_module(FUSED_FILE, get_backend(backend), options=options)

    def kernels(self, step, layer):
        return ("conv_relu_pool_half" if step.precision == "fp16" else "conv_relu_pool",)

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        layer, shape = case.layer, FUSED_SHAPE[case.layer.name]
        return self._kernel(step, layer, be).bind((-(-layer.P // shape["BY"]), case.N),
                                                  (layer.P // shape["PX"], shape["BY"]),
                                                  (arrays["x"], arrays["w"], arrays[case.output_name], case.N))


REGISTER_TILES = RegisterTiles()


@dataclass(frozen=True)
class TensorCores(Family):
    """Step 11 (and 12h): conv2 on wmma, a block per image with :func:`wmma_warps` warps (8, or
    fewer where a block may not have its shared memory); conv1 as ``conv1``'s family runs it."""

    conv1: Family = REGISTER_TILES
    fused = True

    def module(self, step, layer, backend=None):
        if layer is CONV1:
            return self.conv1.module(step, layer, backend)
        warps = wmma_warps()
        return load_module(step.file, get_backend(backend), options=() if warps == WMMA_WARPS else (f"-DWARPS={warps}",))

    def kernels(self, step, layer):
        if layer is CONV1:
            return self.conv1.kernels(step, layer)
        return ("conv2_wmma_relu_pool_half" if step.precision == "fp16" else "conv2_wmma_relu_pool",)

    def bind(self, step, case, arrays, backend):
        if case.layer is CONV1:
            return self.conv1.bind(step, case, arrays, backend)
        be = get_backend(backend)
        kernel = self._kernel(step, case.layer, be)
        warps = wmma_warps()
        kernel.allow_shared_memory(wmma_shared(warps))
        return kernel.bind((case.N,), (warps * 32,), (arrays["x"], arrays["w"], arrays[case.output_name], case.N),
                           wmma_shared(warps))


@dataclass(frozen=True)
class Mma(Family):
    """Step 13 (and 13g): both layers on mma.sync, the filters packed in the fragment layout
    (:func:`pack_conv1_filters`, :func:`pack_conv2_filters`); conv1 :data:`BANDS` blocks per image,
    conv2 one, :data:`MMA_WARPS` warps each."""

    fused = True

    def kernels(self, step, layer):
        return ("conv1_mma_relu_pool",) if layer is CONV1 else ("conv2_mma_nhwc_relu_pool",)

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        layer, N = case.layer, case.N
        pack = pack_conv1_filters if layer is CONV1 else pack_conv2_filters
        packed = be.to_device(pack(be.to_host(arrays["w"])))
        return self._kernel(step, layer, be).bind((BANDS, N) if layer is CONV1 else (N,), (MMA_WARPS * 32,),
                                                  (arrays["x"], packed, arrays[case.output_name], N))


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


DIRECT = Direct(kernel="conv_direct_global")
SHARED_TILES = SharedTiles(kernel="conv_shared_tiled")
IM2COL_MATMUL = Im2colMatmul()
IMPLICIT_GEMM = ImplicitGemm(kernel="conv_implicit_gemm")
CONSTANT_WEIGHTS = ConstantWeights(kernel="conv_constant_weights")
UNROLLED = Unrolled(kernel="conv_restrict_unroll")
CHANNEL_TREE = ChannelTree(kernel="conv_channel_tree")
CHANNEL_ATOMICS = ChannelAtomics(kernel="conv_channel_atomics")
POOL_EPILOGUE = PoolEpilogue(kernel="conv_relu_pool_direct")
TENSOR_CORES = TensorCores()
MMA = Mma()


# ------------------------------------------------------------------ the forward pass
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
    """Every buffer and launch of one step's forward pass for N images, allocated once, each layer
    bound by the step's family.

    ``layers["conv1"]`` / ``layers["conv2"]``: the layer (conv, ReLU, pool) into the pooled
    activations; ``convs``: the convolution kernel alone (unfused steps); ``fc_layers``: the two
    fully-connected layers and the argmax; ``run()``: all of it, in order. ``scratch``: buffers
    the steps of one batch share (step 4's unrolled inputs)."""

    def __init__(self, step, N: int, x, weights: dict, backend=None, scratch: dict | None = None):
        be = self.be = get_backend(backend)
        self.step, self.N = step, N
        xp = be.xp
        half = step.precision == "fp16"
        act = np.float16 if half else np.float32
        fused = step.launcher.fused
        self.x = x
        self.w = {"conv1": be.to_device(weights["conv1"]),
                  "conv2": be.to_device(weights["conv2"].astype(np.float16 if half else np.float32))}
        self.fc = {k: be.to_device(weights[k]) for k in ("fc1", "fc1_bias", "fc2", "fc2_bias")}
        self.pooled = {"conv1": be.poisoned(CONV1.pooled_shape(N), act), "conv2": be.poisoned(CONV2.pooled_shape(N), act)}
        self.pre_pool = {} if fused else {layer.name: be.poisoned(layer.y_shape(N), np.float32) for layer in LAYERS}
        self.hidden = be.poisoned((N, HIDDEN), np.float32)
        self.logits = be.poisoned((N, CLASSES), np.float32)
        self.predictions = xp.full(N, -1, dtype=np.int32)
        inputs = {"conv1": x, "conv2": self.pooled["conv1"]}
        self.convs, self.layers = {}, {}
        pool_module = load_module(COMMON_FILES["relu_pool"], be)
        for layer in LAYERS:
            case = LayerBatch(layer, N, pooled=fused)
            out = self.pooled[layer.name] if fused else self.pre_pool[layer.name]
            arrays = {"x": inputs[layer.name], "w": self.w[layer.name], case.output_name: out, "scratch": scratch}
            conv = step.launcher.bind(step, case, arrays, be)
            if fused:
                self.layers[layer.name] = conv
                continue
            planes = N * layer.M
            pool = pool_module.relu_pool.bind((-(-planes * layer.P ** 2 // RELU_POOL_BLOCK),), (RELU_POOL_BLOCK,),
                                              (out, self.pooled[layer.name], planes, layer.E))
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


def run_forward(step, x: np.ndarray, weights: dict, backend=None) -> dict:
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


def check_forward(step, x: np.ndarray, weights: dict, backend=None) -> dict:
    """A whole forward pass of ``step`` against the float64 reference: the logits'
    relative error and how many predictions agree."""
    out = run_forward(step, x, weights, backend)
    ref = forward(x, weights)
    result = compare(out["logits"], ref["logits"], step.precision, name=f"{step.label} logits")
    ref_pred = ref["logits"].argmax(axis=1)
    return {"step": step.number, "N": len(x), "rel_error": result.rel_error, "passed": result.passed,
            "unwritten": result.unwritten, "agree": int((out["predictions"] == ref_pred).sum()),
            "predictions": out["predictions"]}

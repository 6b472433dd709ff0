"""The ladder: one kernel file per step, how each is launched, and the checks.

Every step reads the same layer (:mod:`.shapes`) and writes the same y; they differ in the
input's layout (NCHW, or channels-last for the tensor-core steps, as cuDNN's channels-last path
gets it), in the form the filters are read in (re-laid out once "when the model is loaded", as
every framework does) and in whether the pre-pool tensor is written (steps 1-4, then
``relu_maxpool``) or never exists (steps 5-8).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from ... import ladder, predictions, tensormap
from ...check import compare
from ...device import limits as device_limits
from ...errors import CheckFailed, KernelArgumentError
from ...kernels import DEFAULT_SHARED_LIMIT, Backend, get_backend, load_module
from .shapes import CHECK, RS, Shape, make_inputs, reference

POOL_FILE = "convpool/relu_maxpool.cu"
POOL_BLOCK = 256
POOL_MAX_GRID = 65535
GEMM_TILE = 128          # step 6: filters and pixels per block tile
TC_THREADS = 256
TC_ROW_BYTES = 64 + 16   # steps 7-8: a slice row of 64 bytes plus 16 of padding


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung of the ladder.

    kind: "outputs" (one thread per output, grid over E x F x N*M), "rows8" (8 outputs per
    thread), "pooled8" (the exercise: 2 x 8 outputs per thread, pooled), "strips" (grid-stride over strips, threads over filters: any grid and block),
    "gemm" (step 6's tiles), "tc" (steps 7-8's tensor-core tiles), "wgmma" (step 9: tensor maps,
    one persistent block per SM).
    weights: the form the kernel reads -- "w" (M x C x 5 x 5 as given), "wt" (C*25 x M),
    "wt_gemm" (K x Mp and the offset table), "wr" (M x 25*C in (r, s, c) order), "wp" (half,
    M x 25*Cp in (r, s, c) order, the channels padded with zeros to Cp, a multiple of 64).
    options: compile-time settings (``-D`` flags) the ladder uses; sweeps vary them.
    """

    kernel: str
    kind: str
    weights: str
    fused: bool = True
    layout: str = "nchw"
    options: tuple = ()
    strip_outputs: int = 0      # "strips": conv outputs per thread along a row (for the grid)
    strip_rows: int = 1         # "strips": conv rows per strip


STEPS = [
    Step("01", "convpool/01_global_only.cu", "global memory only", "conv_global", "outputs", "w",
         fused=False),
    Step("02", "convpool/02_registers.cu", "weights and inputs in registers", "conv_registers", "rows8", "w",
         fused=False),
    Step("03", "convpool/03_shared_tiles.cu", "input strips in shared memory, thread per filter", "conv_shared_tiles",
         "strips", "wt", fused=False, strip_outputs=16),
    Step("04", "convpool/04_two_rows_float4.cu", "two output rows per thread, float4", "conv_two_rows_float4",
         "strips", "wt", fused=False, strip_outputs=16, strip_rows=2),
    Step("05", "convpool/05_fused_relu_pool.cu", "ReLU and max-pool fused", "conv_relu_pool_fused", "strips", "wt",
         options=("-DQ=8",), strip_outputs=16, strip_rows=2),
    Step("06", "convpool/06_implicit_gemm_fused.cu", "implicit GEMM, 8x8 register tiles, fused", "conv_igemm_pool",
         "gemm", "wt_gemm"),
    Step("07", "convpool/07_tensor_cores_tf32.cu", "tensor cores tf32, channels-last, fused", "conv_tc_tf32_pool",
         "tc", "wr", precision="tf32", layout="nhwc"),
    Step("08", "convpool/08_tensor_cores_fp16.cu", "tensor cores fp16, channels-last, fused", "conv_tc_fp16_pool",
         "tc", "wr", precision="fp16", layout="nhwc"),
    Step("09", "convpool/09_wgmma_tma.cu", "wgmma fed by TMA, warp-specialized, persistent", "conv_wgmma_pool",
         "wgmma", "wp", precision="fp16", layout="nhwc", options=("-arch=sm_90a",)),
    Step("10", "convpool/10_wgmma_tf32.cu", "step 9 in tf32", "conv_wgmma_tf32_pool",
         "wgmma", "wp32b", precision="tf32", layout="nhwc", options=("-arch=sm_90a",)),
    Step("11", "convpool/11_wgmma_3xtf32.cu", "3xTF32 on wgmma: fp32 accuracy", "conv_wgmma_3xtf32_pool",
         "wgmma", "wp32b", precision="fp32", layout="nhwc", options=("-arch=sm_90a",)),
]
STEP = {s.number: s for s in STEPS}
#: Exercise 2: step 2 with the ReLU and the pool fused (2 x 8 outputs per thread, 4 windows).
EXERCISE = Step("E2", "convpool/exercise_pooled_registers.cu", "exercise: step 2 with the pool fused",
                "conv_registers_pooled", "pooled8", "w")
#: The steps timed at every batch size (the first four take 10-100 ms per image: batch 1 only).
BATCH_STEPS = ("05", "06", "07", "08", "09", "10", "11")
#: Step 9 (kernels/common/hopper_conv.cuh): a tile of TILE_H x TILE_W pixels (its input box
#: {64 channels, TILE_W, TILE_H, 1}) times 256 filters, slices of 64 channels of one tap, a ring
#: of 4 slices, 384 threads, one block per SM.
WGMMA_TILE_H, WGMMA_TILE_W, WGMMA_FILTERS, WGMMA_BK, WGMMA_STAGES, WGMMA_THREADS = 16, 8, 256, 64, 4, 384
WGMMA_SHARED = WGMMA_STAGES * (WGMMA_TILE_H * WGMMA_TILE_W + WGMMA_FILTERS) * WGMMA_BK * 2 + 1024
#: Steps 10-11 (float operands, read as tf32): 32 channels per slice (one 128-byte row), so the
#: input box is {32, TILE_W, TILE_H, 1} and the filters' channels are padded to a multiple of 32.
#: Their rings hold the same bytes as step 9's (4 slots of xb, wb; step 11: 3 slots of xb, xs, wb,
#: ws of 128 filters), so WGMMA_SHARED is theirs too.
WGMMA_BK32 = 32
#: Step 11's filters per tile (two partial accumulators beside the sums: 3 x 64 floats per thread).
WGMMA_FILTERS_3XTF32 = 128


def wgmma_filters(step: Step) -> int:
    """Filters per tile of a wgmma step: 256, or 128 for step 11 (3xTF32)."""
    return WGMMA_FILTERS_3XTF32 if step.precision == "fp32" else WGMMA_FILTERS


def wgmma_bk(step: Step) -> int:
    """Channels per slice of a wgmma step: one 128-byte row of its elements (64 halves, 32 floats)."""
    return WGMMA_BK if step.itemsize == 2 else WGMMA_BK32


def tf32_split(a, xp=np):
    """(big, small): ``a`` (float32) rounded to the nearest tf32, ties away from zero, and the
    remainder a - big (exact in float32) -- step 11's split_tf32, the same bit arithmetic."""
    a = xp.ascontiguousarray(xp.asarray(a, dtype=xp.float32))
    big = ((a.view(xp.uint32) + xp.uint32(0x1000)) & xp.uint32(0xFFFFE000)).view(xp.float32)
    return big, a - big


def option(step: Step, name: str, options=None, default: int | None = None) -> int | None:
    """The value of ``-Dname=value`` among ``options`` (the step's own when None)."""
    for opt in (step.options if options is None else options):
        if opt.startswith(f"-D{name}="):
            return int(opt.split("=", 1)[1])
    return default


def stages(step: Step, options=None) -> int:
    """Steps 7-8: shared-memory slices in flight (STAGES; the kernel's default is 3)."""
    return option(step, "STAGES", options, 3)


def tc_pixels(step: Step, options=None) -> int:
    """Steps 7-8: pixels per block tile (TC_BN: 128 or 256; the kernel's default is 128)."""
    return option(step, "TC_BN", options, 128)


def tc_shared_bytes(step: Step, options=None) -> int:
    """Steps 7-8: dynamic shared memory, STAGES x (128 + TC_BN rows) x 80 bytes."""
    return stages(step, options) * (GEMM_TILE + tc_pixels(step, options)) * TC_ROW_BYTES


def strips(step: Step, shape: Shape, options=None) -> int:
    """How many strips (blocks' units of work) a "strips" step has at ``shape``."""
    if step.kind != "strips":
        raise ValueError(f"step {step.number} is not a strip kernel")
    if step.fused:
        q = option(step, "Q", options, 8)
        return shape.N * shape.PE * -(-shape.PF // q)
    per_row = -(-shape.F // step.strip_outputs)
    return shape.N * (shape.E // step.strip_rows) * per_row


def launch_config(step: Step, shape: Shape, options=None, blocks: int | None = None,
                  threads: int | None = None) -> dict:
    """The main kernel's grid, block and dynamic shared memory as the ladder launches it;
    ``blocks`` and ``threads`` override a strip kernel's (any values compute the same y)."""
    if step.kind == "outputs":
        return {"grid": (-(-shape.F // 32), -(-shape.E // 8), shape.N * shape.M), "block": (32, 8), "shared": 0}
    if step.kind == "pooled8":
        return {"grid": (-(-shape.PF // 128), -(-shape.PE // 8), shape.N * shape.M), "block": (32, 8), "shared": 0}
    if step.kind == "rows8":
        return {"grid": (-(-shape.F // 256), -(-shape.E // 8), shape.N * shape.M), "block": (32, 8), "shared": 0}
    if step.kind == "strips":
        return {"grid": (blocks or strips(step, shape, options),), "block": (threads or 256,), "shared": 0}
    if step.kind == "wgmma":
        return {"grid": (max(1, min(blocks or 1, wgmma_tiles(shape, wgmma_filters(step)))),), "block": (WGMMA_THREADS,),
                "shared": WGMMA_SHARED}
    pixels = tc_pixels(step, options) if step.kind == "tc" else GEMM_TILE
    grid = (-(-shape.N * shape.PE * shape.PF // (pixels // 4)), -(-shape.M // GEMM_TILE))
    if step.kind == "gemm":
        return {"grid": grid, "block": (256,), "shared": 0}
    return {"grid": grid, "block": (TC_THREADS,), "shared": tc_shared_bytes(step, options)}


def wgmma_tiles(shape: Shape, filters: int = WGMMA_FILTERS) -> int:
    """Steps 9-11's tiles: images x tile rows x tile columns x filter tiles (of ``filters``)."""
    return (shape.N * -(-shape.E // WGMMA_TILE_H) * -(-shape.F // WGMMA_TILE_W) * -(-shape.M // filters))


def padded_channels(shape: Shape, bk: int = WGMMA_BK) -> int:
    """Steps 9-11's Cp: C rounded up to their slices of ``bk`` channels (64 halves, 32 floats)."""
    return -(-shape.C // bk) * bk


def persistent_blocks(backend) -> int:
    """Step 9's grid: one block per SM on a GPU; on the CPU backend 1, so that the check shape's
    few tiles still make the block walk over several (as the hopper chapter's persistent steps)."""
    if backend.name == "gpu":
        import cupy
        return int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    return 1


#: Steps 7-8 copy with cp.async and step 7 multiplies in tf32: both need compute capability 8.0
#: (a T4 has 7.5).
TC_CAPABILITY = "8.0"
#: The share of the device's memory one batch of the record may use (the rest: PyTorch's cache,
#: cuDNN's workspaces). Larger batches are skipped, and listed with the reason.
MEMORY_FRACTION = 0.5


def footprint_bytes(shape: Shape, fused: bool = True, split: bool = False) -> int:
    """Device memory the record holds at once for ``shape``: x in NCHW float and channels-last
    float and half, the float64 convolution and pooled references, y, the filters' forms, and
    (unfused steps, ``fused=False``) the pre-pool tensor, or (step 11, ``split=True``) its split
    of the channels-last input, two more floats per element. At N = 32: 8.8 GB fused, 12.2 GB
    with step 11's split."""
    x = shape.N * shape.C * shape.Hp * shape.Wp
    conv = shape.N * shape.M * shape.E * shape.F
    pooled = shape.N * shape.M * shape.PE * shape.PF
    return (x * (4 + 4 + 2 + (8 if split else 0)) + 8 * conv + (8 + 4) * pooled + (0 if fused else 4 * conv)
            + 8 * 4 * shape.M * shape.K)


def unfit_reason(step: Step, shape: Shape, options=None, limits=None) -> str | None:
    """Why ``step`` (compiled with ``options``) cannot run ``shape`` on this device, or on the
    simulated one (:func:`gpulab.device.simulate`): too old a compute capability for its
    instructions, more dynamic shared memory per block than the device allows, or more device
    memory than :data:`MEMORY_FRACTION` of it. None when it can (and always on the CPU backend
    with no profile simulated)."""
    here = limits if limits is not None else device_limits()
    if here is None:
        return None
    if step.kind == "tc":
        why = here.capability_fits(TC_CAPABILITY, f"step {step.number}'s cp.async copies and {step.precision} "
                                                  "tensor cores")
        if why:
            return why
    if step.kind == "wgmma" and here.compute_capability is not None and \
            not str(here.compute_capability).startswith("9."):
        return (f"step {step.number} is built for sm_90a (wgmma, TMA, setmaxnreg): it runs on compute "
                f"capability 9.x (Hopper) only; {here.name} has {here.compute_capability}")
    shared = launch_config(step, shape, tuple(step.options if options is None else options))["shared"]
    why = here.shared_fits(shared)
    if why:
        return f"step {step.number} {why}"
    return here.memory_fits(footprint_bytes(shape, step.fused, split=step.number == "11"), MEMORY_FRACTION)


def requirements(step: Step, shape: Shape) -> str | None:
    """Why ``step`` cannot run ``shape`` (None when it can)."""
    if step.kind == "gemm" and shape.K % 8:
        return f"step {step.number} slides along K = 25 C in slices of 8: C must be a multiple of 8, got {shape.C}"
    if step.kind in ("tc", "wgmma") and shape.C % (16 // step.itemsize):
        return (f"step {step.number} copies 16 bytes of channels at a time: C must be a multiple of "
                f"{16 // step.itemsize}, got {shape.C}")
    return None


# --------------------------------------------------------------------------- the weights' forms
def koff_table(shape: Shape) -> np.ndarray:
    """Step 6: for k = (c, r, s), the offset (c*Hp + r)*Wp + s of its input from the window's corner."""
    k = np.arange(shape.K)
    c, r, s = k // (RS * RS), (k // RS) % RS, k % RS
    return ((c * shape.Hp + r) * shape.Wp + s).astype(np.int32)


def weight_forms(w, shape: Shape, xp=np) -> dict:
    """Every form the kernels read the filters in, made once (as a framework does when it loads
    a model): wt (C*25 x M), wt_gemm (K x Mp, zero columns past M), wr32 and wr16 (M x 25*C,
    k in (r, s, c) order)."""
    w = xp.asarray(w, dtype=xp.float32)
    M, K = shape.M, shape.K
    mp = -(-M // GEMM_TILE) * GEMM_TILE
    flat = w.reshape(M, K)
    wt_gemm = xp.zeros((K, mp), dtype=xp.float32)
    wt_gemm[:, :M] = flat.T
    wr = xp.ascontiguousarray(w.transpose(0, 2, 3, 1).reshape(M, K))
    cp = padded_channels(shape)
    wp = xp.zeros((M, RS * RS, cp), dtype=xp.float16)
    wp[:, :, :shape.C] = w.transpose(0, 2, 3, 1).reshape(M, RS * RS, shape.C)
    cp32 = padded_channels(shape, WGMMA_BK32)
    wp32 = xp.zeros((M, RS * RS, cp32), dtype=xp.float32)
    wp32[:, :, :shape.C] = w.transpose(0, 2, 3, 1).reshape(M, RS * RS, shape.C)
    wp32b, wp32s = tf32_split(wp32.reshape(M, RS * RS * cp32), xp)
    return {"w": xp.ascontiguousarray(w), "wt": xp.ascontiguousarray(flat.T), "wt_gemm": wt_gemm,
            "koff": xp.asarray(koff_table(shape)), "wr32": wr, "wr16": wr.astype(xp.float16),
            "wp": wp.reshape(M, RS * RS * cp), "wp32b": wp32b, "wp32s": wp32s}


def input_forms(x, steps, xp=np) -> dict:
    """The input in each layout and precision ``steps`` read: x (NCHW float), xt32 / xt16
    (channels-last float / half). Made before timing, as cuDNN's channels-last inputs are."""
    forms = {"x": x}
    for step in steps:
        if step.layout == "nhwc":
            name = "xt16" if step.precision == "fp16" else "xt32"
            if name not in forms:
                forms[name] = xp.ascontiguousarray(x.transpose(0, 2, 3, 1)).astype(step.dtype)
    return forms


def input_name(step: Step) -> str:
    if step.layout == "nhwc":
        return "xt16" if step.precision == "fp16" else "xt32"
    return "x"


def weight_name(step: Step) -> str:
    if step.weights == "wr":
        return "wr16" if step.precision == "fp16" else "wr32"
    return step.weights


# --------------------------------------------------------------------------- launching
def make_launch(step: Step, shape: Shape, x, forms: dict, b, y, backend: str | Backend | None = None,
                options=None, blocks: int | None = None, threads: int | None = None) -> Callable[[], None]:
    """A no-argument function that runs ``step`` on device arrays: the input ``x`` in the step's
    layout and precision, the filters' ``forms`` (:func:`weight_forms`), the bias, and y (N x M x
    PE x PF float). Steps 1-4 get a scratch buffer for the pre-pool tensor here (NaN at first, so
    that an element they never write shows in y). What the checks, the timers and the sweeps call."""
    be = get_backend(backend)
    why = requirements(step, shape)
    if why:
        raise ValueError(why)
    opts = tuple(step.options if options is None else options)
    why = unfit_reason(step, shape, opts)
    if why:                   # refused here, with the reason, rather than by the driver at launch
        raise KernelArgumentError(why)
    module = load_module(step.file, be, options=opts)
    kernel = module.get_function(step.kernel)
    cfg = launch_config(step, shape, opts, blocks, threads)
    if cfg["shared"] > DEFAULT_SHARED_LIMIT:
        kernel.allow_shared_memory(cfg["shared"])
    if be.name == "gpu":
        _check_block_fits(kernel, cfg["block"])
    weights = forms[weight_name(step)]
    if step.kind == "wgmma":
        return _wgmma_launch(step, shape, x, forms, weights, b, y, be, kernel, module, opts, blocks, threads)
    if step.kind == "gemm":
        args = (x, weights, forms["koff"], b, y, *shape.dims()[:5], weights.shape[1], shape.E, shape.F)
    else:
        args = (x, weights, b, y if step.fused else None, *shape.dims())
    if step.fused:
        return kernel.bind(cfg["grid"], cfg["block"], args, cfg["shared"])
    conv_out = be.poisoned(shape.conv_shape, np.float32)
    conv = kernel.bind(cfg["grid"], cfg["block"], args[:3] + (conv_out,) + args[4:], cfg["shared"])
    pool_fn = load_module(POOL_FILE, be).get_function("relu_maxpool")
    outputs = shape.N * shape.M * shape.PE * shape.PF
    pool = pool_fn.bind(min(POOL_MAX_GRID, -(-outputs // POOL_BLOCK)), POOL_BLOCK,
                        (conv_out, y, shape.N * shape.M, shape.E, shape.F))

    def launch():
        conv()
        pool()
    launch.conv_out = conv_out
    return launch


def _wgmma_launch(step: Step, shape: Shape, x, forms: dict, weights, b, y, be: Backend, kernel, module, opts,
                  blocks, threads) -> Callable[[], None]:
    """Steps 9-11: tensor maps of the channels-last input and the filters, one persistent block
    per SM. Step 11 (fp32 on tf32 tensor cores) splits x into its tf32 big part and remainder
    first (split_tf32, in the launch: it is part of the step's time) and passes four maps."""
    bk = wgmma_bk(step)
    box_x, box_w = (bk, WGMMA_TILE_W, WGMMA_TILE_H, 1), (bk, wgmma_filters(step))
    cfg = launch_config(step, shape, opts, blocks or persistent_blocks(be), threads)
    sizes = (np.int32(shape.N), np.int32(shape.C), np.int32(padded_channels(shape, bk)), np.int32(shape.M),
             np.int32(shape.E), np.int32(shape.F))
    if step.precision != "fp32":
        maps = (tensormap.encode_4d(x, box_x), tensormap.encode_2d(weights, box_w))
        return kernel.bind(cfg["grid"], cfg["block"], (*maps, b, y, *sizes), cfg["shared"])
    big, small = be.poisoned(x.shape, np.float32), be.poisoned(x.shape, np.float32)
    n4 = x.size // 4
    split = module.get_function("split_tf32").bind(
        (max(1, min(SPLIT_MAX_BLOCKS, -(-n4 // SPLIT_THREADS))),), (SPLIT_THREADS,), (x, big, small, np.int64(n4)))
    maps = (tensormap.encode_4d(big, box_x), tensormap.encode_4d(small, box_x),
            tensormap.encode_2d(weights, box_w), tensormap.encode_2d(forms["wp32s"], box_w))
    conv = kernel.bind(cfg["grid"], cfg["block"], (*maps, b, y, *sizes), cfg["shared"])

    def launch():
        split()
        conv()
    launch.split = (big, small)
    return launch


#: Step 11's split_tf32: threads per block, and at most this many blocks (grid-stride beyond).
SPLIT_THREADS, SPLIT_MAX_BLOCKS = 256, 4096


def _check_block_fits(kernel, block) -> None:
    """On the GPU: a block larger than the compiled kernel allows (registers x threads over the
    SM's 65,536) is refused here with the reason, instead of failing at launch."""
    threads = int(np.prod(block))
    attrs = kernel.raw.attributes
    if threads > attrs["max_threads_per_block"]:
        raise KernelArgumentError(
            f"{threads} threads per block: '{kernel.name}' uses {attrs['num_regs']} registers per thread, so "
            f"a block holds at most {attrs['max_threads_per_block']} threads (65,536 registers per SM)")


def run(step: Step, shape: Shape, x: np.ndarray, w: np.ndarray, b: np.ndarray, backend=None,
        options=None, blocks=None, threads=None) -> np.ndarray:
    """Run one step on host inputs (x NCHW float32) with a NaN-poisoned output; y on the host."""
    be = get_backend(backend)
    inputs = input_forms(x, [step])
    dx = be.to_device(inputs[input_name(step)])
    forms = {k: be.to_device(v) for k, v in weight_forms(w, shape).items()}
    y = be.poisoned(shape.y_shape, np.float32)
    make_launch(step, shape, dx, forms, be.to_device(b), y, be, options, blocks, threads)()
    be.synchronize()
    return be.to_host(y)


def check_steps(backend: str | Backend | None = None, steps=None, shape: Shape = CHECK,
                seed: int | None = None) -> pd.DataFrame:
    """Every step against the float64 reference on the reduced shape, with fresh random inputs
    (``seed=None``: a new seed per call, written in the table) and a NaN-poisoned output (and
    pre-pool buffer). A step this device (or the simulated one) cannot run is listed with status
    "skipped: <reason>"."""
    seed = int(np.random.SeedSequence().entropy % 2**31) if seed is None else seed
    x, w, b = make_inputs(shape, seed)
    ref = reference(x, w, b)

    def check_one(step, be):
        yield ({"kernel": step.kernel, "precision": step.precision, "N": shape.N, "seed": seed},
               compare(run(step, shape, x, w, b, be), ref, step.precision, name=step.label))
    return ladder.check_steps(steps or STEPS, check_one, backend, skip=lambda step: unfit_reason(step, shape))


# ------------------------------------------------------------ what each step's prediction claims
# The kernel files' predictions as claims a run can check at one image (gpulab.predictions states
# the rules); a reason is shown only when the run says the claim failed in that direction.
def _predicted():
    p = predictions
    return {
        "01": p.about_ms(60, because_faster=(
            "the estimate's ceiling of about 3 issued instructions per FMA was pessimistic: step 1's "
            "loads are coalesced and mostly hit L1, and the kernel needs fewer instructions than that "
            "(step 1 is not profiled, so the run does not say how many)")),
        "02": p.times(3, 4, "01", because=(
            "consecutive threads now start 8 floats apart, so each warp-wide load touches 32 sectors "
            "instead of 4, and L1 serves them one request at a time: fewer loads, each dearer")),
        "03": p.times(2, 3, "02", because_faster=(
            "it is measured from step 2, itself slower than step 1; the broadcast input and coalesced "
            "weights beat both")),
        "04": p.times(1.5, 2, "03", because=(
            "step 3 already spent most of its issue slots on FMAs (its FMA pipe is busy most of the "
            "time, see the profile): two rows per thread removed only the instructions that were not")),
        "05": p.same("04"),
        "06": p.about(5, "05", because=(
            "step 5 did not spend many instructions on loads and addressing, as the prediction assumed: "
            "both kernels execute about the same warp instructions, nearly all FMAs; step 6 gains only by "
            "issuing them more often (see the profile)")),
        "07": p.times(4, 6, "06", because=(
            "the tensor pipe is busy only a small share of the time: the warps load wmma fragments from "
            "shared memory and wait on them, one mma.sync at a time (see the profile)")),
        "08": p.times(1.5, 2, "07", because_faster=(
            "tf32 needs several times fp16's instructions for the same product (half the k per fragment, "
            "a rounding per fragment element; see the profile), so fp16 saved more than the doubled "
            "tensor rate")),
        "10": p.about(4, "07", claim="about 4x faster than step 7 (the file's estimate, made for batch 32)",
                      because_faster=(
            "the claim is judged at one image, where step 10 takes less time per image than at batch 32 (the "
            "case the file's estimate was made for; the batch table has both) and step 7 takes more")),
        "11": p.about(2, "06", claim="about 2x faster than step 6 (the file's estimate, made for batch 32)",
                      because_faster=(
            "the claim is judged at one image, where step 11 takes less time per image than at batch 32 (the "
            "case the file's estimate was made for; the batch table has both) while step 6 takes about the "
            "same per image at both")),
        "09": p.about(2.3, "08", claim="about 2.3x faster than step 8 (the file's estimate, made for batch 32)",
                      because_faster=(
            "the claim is judged at one image, where step 9 takes less time per image than at batch 32 (the "
            "case the file's estimate was made for; the batch table has both) while step 8 takes about the "
            "same per image at both")),
    }


#: step number -> the checkable claim(s) of its kernel file's prediction (see gpulab.predictions)
PREDICTED = _predicted()

"""How a step is launched: the chapter's launch families, each a :class:`gpulab.ladder.Launcher`
that binds a step to a :class:`.problem.Conv` (the device arrays of the layer at a shape, by the
names :func:`.problem.layer_arrays` gives them) and says what a step of it asks of the device.

The families, in ladder order: :class:`OutputGrid` (a grid over an output plane, block 32 x 8:
steps 1-2 and exercise 2), :class:`Strips` (grid-stride over strips of a row, a thread per
filter: any grid and block, steps 3-5), :class:`ImplicitGemm` (step 6's tiles),
:class:`TensorCoreTiles` (steps 7-8's cp.async ring on wmma) and :class:`Wgmma` (steps 9-11:
tensor maps, one persistent block per SM). Each says which form of the input and of the filters
its kernels read (:meth:`Family.input_name`, :meth:`Family.weight_name`), its launch shape
(:meth:`Family.config`: grid, block, dynamic shared bytes), which shapes its kernels cannot
tile (:meth:`Family.requirements`) and why this device, or the simulated one
(:func:`gpulab.device.simulate`), refuses a step (:meth:`Family.refusal`). A step that is not
``fused`` writes the pre-pool tensor to a scratch buffer, and ``relu_maxpool`` pools it.

A step's launch shape beyond the ladder's (the sweeps') is data of the step, not an argument:
``dataclasses.replace(step, options=("-DQ=4",), blocks=56, threads=64)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ... import ladder, tensormap
from ...device import limits as device_limits
from ...errors import KernelArgumentError
from ...kernels import DEFAULT_SHARED_LIMIT, Backend, get_backend, load_module
from .problem import CHANNELS_LAST, FILTER_TILE, SLICE_FLOATS, SLICE_HALVES, Conv, Shape, padded_channels

POOL_FILE = "convpool/relu_maxpool.cu"
POOL_BLOCK = 256
POOL_MAX_GRID = 65535
GEMM_TILE = FILTER_TILE  # step 6: filters and pixels per block tile
TC_THREADS = 256
TC_ROW_BYTES = 64 + 16   # steps 7-8: a slice row of 64 bytes plus 16 of padding
#: Steps 7-8 copy with cp.async and step 7 multiplies in tf32: both need compute capability 8.0
#: (a T4 has 7.5).
TC_CAPABILITY = "8.0"
#: Step 9 (kernels/common/hopper_conv.cuh): a tile of TILE_H x TILE_W pixels (its input box
#: {64 channels, TILE_W, TILE_H, 1}) times 256 filters, slices of 64 channels of one tap, a ring
#: of 4 slices, 384 threads, one block per SM.
WGMMA_TILE_H, WGMMA_TILE_W, WGMMA_FILTERS, WGMMA_BK, WGMMA_STAGES, WGMMA_THREADS = 16, 8, 256, SLICE_HALVES, 4, 384
WGMMA_SHARED = WGMMA_STAGES * (WGMMA_TILE_H * WGMMA_TILE_W + WGMMA_FILTERS) * WGMMA_BK * 2 + 1024
#: Steps 10-11 (float operands, read as tf32): 32 channels per slice (one 128-byte row), so the
#: input box is {32, TILE_W, TILE_H, 1} and the filters' channels are padded to a multiple of 32.
#: Their rings hold the same bytes as step 9's (4 slots of xb, wb; step 11: 3 slots of xb, xs, wb,
#: ws of 128 filters), so WGMMA_SHARED is theirs too.
WGMMA_BK32 = SLICE_FLOATS
#: Step 11's filters per tile (two partial accumulators beside the sums: 3 x 64 floats per thread).
WGMMA_FILTERS_3XTF32 = 128
#: Step 11's split_tf32: threads per block, and at most this many blocks (grid-stride beyond).
SPLIT_THREADS, SPLIT_MAX_BLOCKS = 256, 4096
#: The share of the device's memory one batch of the record may use (the rest: PyTorch's cache,
#: cuDNN's workspaces). Larger batches are skipped, and listed with the reason.
MEMORY_FRACTION = 0.5


def option(step, name: str, default: int | None = None) -> int | None:
    """The value of ``-Dname=value`` among the step's compile options."""
    for opt in step.options:
        if opt.startswith(f"-D{name}="):
            return int(opt.split("=", 1)[1])
    return default


def stages(step) -> int:
    """Steps 7-8: shared-memory slices in flight (STAGES; the kernel's default is 3)."""
    return option(step, "STAGES", 3)


def tc_pixels(step) -> int:
    """Steps 7-8: pixels per block tile (TC_BN: 128 or 256; the kernel's default is 128)."""
    return option(step, "TC_BN", 128)


def tc_shared_bytes(step) -> int:
    """Steps 7-8: dynamic shared memory, STAGES x (128 + TC_BN rows) x 80 bytes."""
    return stages(step) * (GEMM_TILE + tc_pixels(step)) * TC_ROW_BYTES


def wgmma_filters(step) -> int:
    """Filters per tile of a wgmma step: 256, or 128 for step 11 (3xTF32)."""
    return WGMMA_FILTERS_3XTF32 if step.precision == "fp32" else WGMMA_FILTERS


def wgmma_bk(step) -> int:
    """Channels per slice of a wgmma step: one 128-byte row of its elements (64 halves, 32 floats)."""
    return WGMMA_BK if step.itemsize == 2 else WGMMA_BK32


def wgmma_tiles(shape: Shape, filters: int = WGMMA_FILTERS) -> int:
    """Steps 9-11's tiles: images x tile rows x tile columns x filter tiles (of ``filters``)."""
    return (shape.N * -(-shape.E // WGMMA_TILE_H) * -(-shape.F // WGMMA_TILE_W) * -(-shape.M // filters))


def persistent_blocks(backend) -> int:
    """Step 9's grid: one block per SM on a GPU; on the CPU backend 1, so that the check shape's
    few tiles still make the block walk over several (as the hopper chapter's persistent steps)."""
    if backend.name == "gpu":
        import cupy
        return int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    return 1


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


def _check_block_fits(kernel, block) -> None:
    """On the GPU: a block larger than the compiled kernel allows (registers x threads over the
    SM's 65,536) is refused here with the reason, instead of failing at launch."""
    threads = int(np.prod(block))
    attrs = kernel.raw.attributes
    if threads > attrs["max_threads_per_block"]:
        raise KernelArgumentError(
            f"{threads} threads per block: '{kernel.name}' uses {attrs['num_regs']} registers per thread, so "
            f"a block holds at most {attrs['max_threads_per_block']} threads (65,536 registers per SM)")


# ------------------------------------------------------------------ the families
class Family(ladder.Launcher):
    """What every family of the chapter says of a step, beside :meth:`bind`: the forms of the
    input and filters its kernels read, its launch shape on a shape (:meth:`config`), the shapes
    it cannot tile (:meth:`requirements`) and why a device refuses it (:meth:`refusal`).
    ``channels_last``: its kernels read the input channels-last (in the step's element type)."""

    channels_last = False

    def input_name(self, step) -> str:
        return CHANNELS_LAST[np.dtype(step.dtype)] if self.channels_last else "x"

    def weight_name(self, step) -> str:
        raise NotImplementedError(f"{type(self).__name__} names the form of the filters its kernels read")

    def shared_bytes(self, step) -> int:
        """Dynamic shared memory per block (the same on every shape)."""
        return 0

    def config(self, step, shape: Shape, backend=None) -> dict:
        """The main kernel's grid, block and dynamic shared memory on ``shape`` (``backend``: the
        device a persistent grid is sized for; None, one block)."""
        raise NotImplementedError(f"{type(self).__name__} gives its launch shape")

    def requirements(self, step, shape: Shape) -> str | None:
        """Why the step's kernels cannot tile ``shape`` (None when they can)."""
        return None

    def device_refusal(self, step, here) -> str | None:
        """Why a device with limits ``here`` lacks the instructions the step uses (None: it has them)."""
        return None

    def splits_input(self, step) -> bool:
        """Whether each call first splits the input into two more float copies (step 11)."""
        return False

    def refusal(self, step, shape: Shape | None = None, here=None) -> str | None:
        """Why ``step`` cannot run on this device, or on the simulated one (``here``: other
        limits): too old a compute capability for its instructions, more dynamic shared memory
        per block than the device allows or (given a ``shape``) more device memory than
        :data:`MEMORY_FRACTION` of it. None when it can (and always on the CPU backend with no
        profile simulated)."""
        here = here if here is not None else device_limits()
        if here is None:
            return None
        why = self.device_refusal(step, here)
        if why:
            return why
        why = here.shared_fits(self.shared_bytes(step))
        if why:
            return f"step {step.number} {why}"
        if shape is None:
            return None
        return here.memory_fits(footprint_bytes(shape, step.fused, split=self.splits_input(step)), MEMORY_FRACTION)

    def unfit(self, step, backend) -> str | None:
        return self.refusal(step)

    def arguments(self, step, shape: Shape, arrays: dict, out) -> tuple:
        """The main kernel's arguments, writing ``out`` (y, or the pre-pool scratch of an unfused step)."""
        return (arrays[self.input_name(step)], arrays[self.weight_name(step)], arrays["b"], out, *shape.dims())

    def bind(self, step, case: Conv, arrays: dict, backend) -> Callable[[], None]:
        """The step on the case's device arrays (y among them): refused with the reason, rather
        than by the driver at launch, where the shape or the device does not fit it. An unfused
        step gets a scratch buffer for the pre-pool tensor here (NaN at first, so that an element
        it never writes shows in y)."""
        be = get_backend(backend)
        shape = case.shape
        why = self.requirements(step, shape)
        if why:
            raise ValueError(why)
        why = self.refusal(step, shape)
        if why:
            raise KernelArgumentError(why)
        module = load_module(step.file, be, options=tuple(step.options))
        kernel = module.get_function(step.kernel)
        cfg = self.config(step, shape, be)
        if cfg["shared"] > DEFAULT_SHARED_LIMIT:
            kernel.allow_shared_memory(cfg["shared"])
        if be.name == "gpu":
            _check_block_fits(kernel, cfg["block"])
        return self.launch(step, shape, arrays, be, module, kernel, cfg)

    def launch(self, step, shape: Shape, arrays: dict, be: Backend, module, kernel, cfg) -> Callable[[], None]:
        y = arrays[Conv.output_name]
        if step.fused:
            return kernel.bind(cfg["grid"], cfg["block"], self.arguments(step, shape, arrays, y), cfg["shared"])
        conv_out = be.poisoned(shape.conv_shape, np.float32)
        conv = kernel.bind(cfg["grid"], cfg["block"], self.arguments(step, shape, arrays, conv_out), cfg["shared"])
        pool_fn = load_module(POOL_FILE, be).get_function("relu_maxpool")
        outputs = shape.N * shape.M * shape.PE * shape.PF
        pool = pool_fn.bind(min(POOL_MAX_GRID, -(-outputs // POOL_BLOCK)), POOL_BLOCK,
                            (conv_out, y, shape.N * shape.M, shape.E, shape.F))

        def launch():
            conv()
            pool()
        launch.conv_out = conv_out
        return launch


@dataclass(frozen=True)
class OutputGrid(Family):
    """A grid over an output plane, 32 x 8 threads a block, ``columns`` outputs of a row per block
    (32: one thread per output, step 1; 256: 8 a thread, step 2), rows of 8 per block, and a
    plane per image and filter; ``pooled``: the plane is the pooled one (exercise 2: 2 x 8
    outputs a thread, pooled). The filters as given (M x C x 5 x 5)."""

    columns: int
    pooled: bool = False

    def weight_name(self, step) -> str:
        return "w"

    def config(self, step, shape: Shape, backend=None) -> dict:
        rows, cols = (shape.PE, shape.PF) if self.pooled else (shape.E, shape.F)
        return {"grid": (-(-cols // self.columns), -(-rows // 8), shape.N * shape.M), "block": (32, 8), "shared": 0}


@dataclass(frozen=True)
class Strips(Family):
    """Grid-stride over strips, threads over filters: any grid and block compute the same y (the
    ladder's: one block of 256 per strip; a step's ``blocks`` and ``threads`` change them). A
    strip is ``outputs`` conv outputs of ``rows`` rows (steps 3-4), or, fused (step 5), 2 rows
    pooled to Q outputs (its option ``-DQ``, 8 by default). The filters transposed (C*25 x M)."""

    outputs: int = 16
    rows: int = 1

    def weight_name(self, step) -> str:
        return "wt"

    def strips(self, step, shape: Shape) -> int:
        """How many strips (blocks' units of work) ``step`` has at ``shape``."""
        if step.fused:
            return shape.N * shape.PE * -(-shape.PF // option(step, "Q", 8))
        return shape.N * (shape.E // self.rows) * -(-shape.F // self.outputs)

    def config(self, step, shape: Shape, backend=None) -> dict:
        return {"grid": (step.blocks or self.strips(step, shape),), "block": (step.threads or 256,), "shared": 0}


class ImplicitGemm(Family):
    """Step 6: tiles of 128 filters x 128 pixels (32 pooling windows), k in slices of 8, the
    filters as K x Mp with the offset table of each k's input."""

    def weight_name(self, step) -> str:
        return "wt_gemm"

    def pixels(self, step) -> int:
        return GEMM_TILE

    def config(self, step, shape: Shape, backend=None) -> dict:
        grid = (-(-shape.N * shape.PE * shape.PF // (self.pixels(step) // 4)), -(-shape.M // GEMM_TILE))
        return {"grid": grid, "block": (256,), "shared": 0}

    def requirements(self, step, shape: Shape) -> str | None:
        if shape.K % 8:
            return (f"step {step.number} slides along K = 25 C in slices of 8: C must be a multiple of 8, "
                    f"got {shape.C}")
        return None

    def arguments(self, step, shape: Shape, arrays: dict, out) -> tuple:
        weights = arrays[self.weight_name(step)]
        return (arrays[self.input_name(step)], weights, arrays["koff"], arrays["b"], out, *shape.dims()[:5],
                weights.shape[1], shape.E, shape.F)


def _copies_whole_chunks(step, shape: Shape) -> str | None:
    if shape.C % (16 // step.itemsize):
        return (f"step {step.number} copies 16 bytes of channels at a time: C must be a multiple of "
                f"{16 // step.itemsize}, got {shape.C}")
    return None


class TensorCoreTiles(ImplicitGemm):
    """Steps 7-8: step 6's tiles on wmma, channels-last, a ring of STAGES cp.async slices (options
    ``-DSTAGES``, ``-DTC_BN``: the tile's pixels); the filters as M x 25*C in (r, s, c) order."""

    channels_last = True

    def weight_name(self, step) -> str:
        return "wr16" if step.precision == "fp16" else "wr32"

    def pixels(self, step) -> int:
        return tc_pixels(step)

    def shared_bytes(self, step) -> int:
        return tc_shared_bytes(step)

    def config(self, step, shape: Shape, backend=None) -> dict:
        return {**super().config(step, shape), "block": (TC_THREADS,), "shared": self.shared_bytes(step)}

    def requirements(self, step, shape: Shape) -> str | None:
        return _copies_whole_chunks(step, shape)

    def device_refusal(self, step, here) -> str | None:
        return here.capability_fits(TC_CAPABILITY, f"step {step.number}'s cp.async copies and {step.precision} "
                                                   "tensor cores")

    def arguments(self, step, shape: Shape, arrays: dict, out) -> tuple:
        return Family.arguments(self, step, shape, arrays, out)


class Wgmma(Family):
    """Steps 9-11: tensor maps of the channels-last input and the filters (M x 25*Cp in (r, s, c)
    order, half or float), one persistent block per SM (a step's ``blocks`` changes the grid, cut
    to the tiles). Step 11 (fp32 on tf32 tensor cores) splits x into its tf32 big part and
    remainder first (split_tf32, in the launch: it is part of the step's time) and passes four maps."""

    channels_last = True

    def weight_name(self, step) -> str:
        return "wp" if step.precision == "fp16" else "wp32b"

    def shared_bytes(self, step) -> int:
        return WGMMA_SHARED

    def splits_input(self, step) -> bool:
        return step.precision == "fp32"

    def config(self, step, shape: Shape, backend=None) -> dict:
        blocks = step.blocks or (persistent_blocks(backend) if backend is not None else 1)
        return {"grid": (max(1, min(blocks, wgmma_tiles(shape, wgmma_filters(step)))),), "block": (WGMMA_THREADS,),
                "shared": WGMMA_SHARED}

    def requirements(self, step, shape: Shape) -> str | None:
        return _copies_whole_chunks(step, shape)

    def device_refusal(self, step, here) -> str | None:
        if here.compute_capability is not None and not str(here.compute_capability).startswith("9."):
            return (f"step {step.number} is built for sm_90a (wgmma, TMA, setmaxnreg): it runs on compute "
                    f"capability 9.x (Hopper) only; {here.name} has {here.compute_capability}")
        return None

    def launch(self, step, shape: Shape, arrays: dict, be: Backend, module, kernel, cfg) -> Callable[[], None]:
        x, weights, b, y = (arrays[self.input_name(step)], arrays[self.weight_name(step)], arrays["b"],
                            arrays[Conv.output_name])
        bk = wgmma_bk(step)
        box_x, box_w = (bk, WGMMA_TILE_W, WGMMA_TILE_H, 1), (bk, wgmma_filters(step))
        sizes = (np.int32(shape.N), np.int32(shape.C), np.int32(padded_channels(shape, bk)), np.int32(shape.M),
                 np.int32(shape.E), np.int32(shape.F))
        if not self.splits_input(step):
            maps = (tensormap.encode_4d(x, box_x), tensormap.encode_2d(weights, box_w))
            return kernel.bind(cfg["grid"], cfg["block"], (*maps, b, y, *sizes), cfg["shared"])
        big, small = be.poisoned(x.shape, np.float32), be.poisoned(x.shape, np.float32)
        n4 = x.size // 4
        split = module.get_function("split_tf32").bind(
            (max(1, min(SPLIT_MAX_BLOCKS, -(-n4 // SPLIT_THREADS))),), (SPLIT_THREADS,), (x, big, small, np.int64(n4)))
        maps = (tensormap.encode_4d(big, box_x), tensormap.encode_4d(small, box_x),
                tensormap.encode_2d(weights, box_w), tensormap.encode_2d(arrays["wp32s"], box_w))
        conv = kernel.bind(cfg["grid"], cfg["block"], (*maps, b, y, *sizes), cfg["shared"])

        def launch():
            split()
            conv()
        launch.split = (big, small)
        return launch


#: The chapter's families, as its steps name them.
ONE_PER_OUTPUT = OutputGrid(columns=32)
EIGHT_PER_THREAD = OutputGrid(columns=256)
POOLED_EIGHT_PER_THREAD = OutputGrid(columns=128, pooled=True)
STRIPS = Strips(outputs=16, rows=1)
TWO_ROW_STRIPS = Strips(outputs=16, rows=2)
IMPLICIT_GEMM = ImplicitGemm()
TENSOR_CORE_TILES = TensorCoreTiles()
WGMMA = Wgmma()


# ------------------------------------------------------------------ a step's facts, by its family
def config(step, shape: Shape, backend=None) -> dict:
    """``step``'s main kernel's grid, block and dynamic shared memory on ``shape``, as its family
    launches it (:meth:`Family.config`)."""
    return step.launcher.config(step, shape, backend)


def strips(step, shape: Shape) -> int:
    """How many strips (blocks' units of work) a strip step has at ``shape``."""
    if not isinstance(step.launcher, Strips):
        raise ValueError(f"step {step.number} is not a strip kernel")
    return step.launcher.strips(step, shape)


def unfit_reason(step, shape: Shape | None = None, limits=None) -> str | None:
    """Why ``step`` (at its options) cannot run ``shape`` on this device, or on the simulated one,
    or on one with ``limits`` (:meth:`Family.refusal`); None when it can."""
    return step.launcher.refusal(step, shape, limits)


def input_name(step) -> str:
    """The form of the input ``step``'s kernels read (:func:`.problem.input_forms`)."""
    return step.launcher.input_name(step)

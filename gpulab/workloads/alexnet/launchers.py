"""How a step is launched: the chapter's launch families, each a :class:`gpulab.ladder.Launcher`
that binds a step to a :class:`.problem.Conv` (the device arrays x, w and y of one layer at a
batch size) and says what a step of it asks of the device on a layer (its main kernel, grid,
block and shared memory: :meth:`Family.config`; its scratch: :meth:`Family.scratch_bytes`).

The families, in ladder order: :class:`Direct` (one block per filter and image: steps 1-6, 10,
and exercise 1 with four filters a block), :class:`Channels` (a block per channel, then a
reduction: 7-9, 11, 12), :class:`Atomic` (13), :class:`ImplicitGemm` (14, and 15 on wmma with its
k table), :class:`WmmaNhwc` (16), :class:`TunedGemm` (17), :class:`Mma` (18-22, the geometry in
:mod:`.tc`), :class:`Winograd` (23-24, :mod:`.winograd`), :class:`Wgmma` (25, :mod:`.wgmma`) and
:class:`Wgmma32` (26-27, :mod:`.wgmma32`). Two wrappers compose them: :class:`Where` runs a
family on the layers it applies to and hands the others to another step (Winograd's 3 x 3
layers, wgmma's stride-1 ones), :class:`ChunkCopy` is a family's launch with layer 1's copy to
channels-last replaced (step 28). A step's family is data (``Step(..., launcher=...)``), never a
string that functions switch on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from ... import ladder, tensormap
from ...device import limits
from ...errors import KernelArgumentError
from ...kernels import DEFAULT_SHARED_LIMIT, Backend, get_backend, load_module
from . import tc, wgmma, wgmma32, winograd
from .problem import MEMORY_FRACTION, Conv, Layer, block_shape, k_table, memory_limit

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
#: The compute capability steps 25-28's kernels are compiled for (wgmma, TMA, setmaxnreg: sm_90a).
WGMMA_CAPABILITY = "9."
#: Step 28's copy: halves per thread (one 16-byte store) and threads per block (any multiple of
#: the warp does; 8 warps, a common default).
CHUNK = 8
CHUNK_BLOCK = 256
CHUNK_COPY_FILE = "alexnet/28_vector_copies.cu"
CHUNK_COPY_KERNEL = "to_nhwc_chunks_half"


# ------------------------------------------------------------------ the direct kernels' shared memory
# What a direct step keeps in dynamic shared memory per block (a step's ``shared``).
def no_shared(layer: Layer) -> int:
    return 0


def filter_shared(layer: Layer) -> int:
    """Steps 3-4: the block's filter."""
    return 4 * layer.K


def filter_and_sums_shared(layer: Layer) -> int:
    """Step 5: the filter and the block's sums."""
    bx, by = block_shape(layer)
    return 4 * (layer.K + bx * by)


def filter_slice_shared(layer: Layer) -> int:
    """Step 8: one channel's R x S slice of the filter."""
    return 4 * layer.R * layer.S


def slice_and_patch_shared(layer: Layer) -> int:
    """Step 9: the slice and the input patch the block's outputs read."""
    bx, by = block_shape(layer)
    return 4 * (layer.R * layer.S + ((by - 1) * layer.U + layer.R) * ((bx - 1) * layer.U + layer.S))


def vector_rows_shared(layer: Layer) -> int:
    """Steps 11-13: the slice and the patch in rows padded to whole float4s."""
    bx, by = block_shape(layer)
    s4 = -(-layer.S // 4) * 4
    pitch = -(-((bx - 1) * layer.U + s4) // 4) * 4
    return 4 * (layer.R * s4 + ((by - 1) * layer.U + layer.R) * pitch)


# ------------------------------------------------------------------ the families
class Family(ladder.Launcher):
    """What every family of the chapter says of a step on a layer, beside :meth:`bind`: the step
    whose kernel runs it (:meth:`ran`; itself but in :class:`Where`), why (:meth:`note`), its
    main kernel, its launch shape (:meth:`config`: grid, block, dynamic shared bytes), its device
    memory beyond x, w and y, and why this device refuses it (:meth:`refusal`; on one ``layer``,
    or the whole step). ``gpu_options``: the NVRTC options its files build with; ``copies_input``:
    each call starts with a copy of x to channels-last (the recorded run also times it given that
    copy: ``launch.parts["gemm"]``)."""

    gpu_options = ()
    copies_input = False

    def ran(self, step, layer: Layer):
        return step

    def note(self, step, layer: Layer) -> str:
        return ""

    def kernel(self, step, layer: Layer) -> str:
        return step.kernels[0]

    def config(self, step, layer: Layer, N: int) -> dict:
        return {"grid": (-(-N * layer.E * layer.F // GEMM_TILE), -(-layer.M // GEMM_TILE)),
                "block": (GEMM_THREADS,), "shared_bytes": 0}

    def scratch_bytes(self, step, layer: Layer, N: int) -> int:
        return 0

    def refusal(self, step, layer: Layer | None = None, here=None) -> str | None:
        return None

    def sets_up_once(self, step, layer: Layer) -> bool:
        """Whether binding ``step`` on ``layer`` runs work once per model that its calls leave out
        (Winograd's filter transform: the recorded run times it apart)."""
        return False

    def unfit(self, step, backend) -> str | None:
        return self.refusal(step)

    def _main(self, step, case: Conv, be: Backend):
        """The step's module, its main kernel (its shared memory opted in past 48 KB) and config."""
        module = load_module(step.file, be)
        main = module.get_function(step.kernels[0])
        cfg = self.config(step, case.layer, case.N)
        if cfg["shared_bytes"] > DEFAULT_SHARED_LIMIT:
            main.allow_shared_memory(cfg["shared_bytes"])   # layer 1's patch: 55-57 KB
        return module, main, cfg


def _zeroing(y, be: Backend) -> Callable[[], None]:
    """y set to zero (the start of a sum of atomic adds), as a call."""
    if be.name == "gpu":
        return lambda: y.data.memset_async(0, y.nbytes)

    def zero():
        y[...] = 0
    return zero


def _in_turn(*calls) -> Callable[[], None]:
    def launch():
        for call in calls:
            call()
    return launch


@dataclass(frozen=True)
class Direct(Family):
    """One kernel on x, w -> y: a block of :func:`.problem.block_shape` threads covers an output
    plane, the grid one block per ``filters_per_block`` filters and image (steps 1-6 and 10: one;
    exercise 1: four)."""

    filters_per_block: int = 1

    def config(self, step, layer, N):
        return {"grid": (-(-layer.M // self.filters_per_block), N), "block": block_shape(layer),
                "shared_bytes": step.shared(layer)}

    def bind(self, step, case, arrays, backend):
        _, main, cfg = self._main(step, case, get_backend(backend))
        return main.bind(cfg["grid"], cfg["block"], (arrays["x"], arrays["w"], arrays["y"], *case.layer.dims(case.N)),
                         cfg["shared_bytes"])


class Channels(Family):
    """A block per filter, image and channel writes its channel's partial sums (grid M x N x C),
    then the step's second kernel sums them over the channels into y (steps 7-9, 11, 12)."""

    def config(self, step, layer, N):
        return {"grid": (layer.M, N, layer.C), "block": block_shape(layer), "shared_bytes": step.shared(layer)}

    def scratch_bytes(self, step, layer, N):
        return N * layer.C * layer.M * layer.E * layer.F * step.itemsize

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        layer, N = case.layer, case.N
        module, main, cfg = self._main(step, case, be)
        partial = be.xp.empty((N, layer.C, layer.M, layer.E, layer.F), dtype=step.dtype)
        first = main.bind(cfg["grid"], cfg["block"], (arrays["x"], arrays["w"], partial, *layer.dims(N)),
                          cfg["shared_bytes"])
        outputs = N * layer.M * layer.E * layer.F
        second = module.get_function(step.kernels[1]).bind(
            -(-outputs // REDUCE_BLOCK), REDUCE_BLOCK, (partial, arrays["y"], N, layer.C, layer.M, layer.E * layer.F))
        return _in_turn(first, second)


class Atomic(Family):
    """One kernel: a block sums :data:`CHANNELS_PER_BLOCK` channels and adds them into y, zeroed
    first (grid M x N x C / CB: step 13)."""

    def config(self, step, layer, N):
        return {"grid": (layer.M, N, -(-layer.C // CHANNELS_PER_BLOCK)), "block": block_shape(layer),
                "shared_bytes": step.shared(layer)}

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        _, main, cfg = self._main(step, case, be)
        kernel = main.bind(cfg["grid"], cfg["block"],
                           (arrays["x"], arrays["w"], arrays["y"], *case.layer.dims(case.N), CHANNELS_PER_BLOCK),
                           cfg["shared_bytes"])
        return _in_turn(_zeroing(arrays["y"], be), kernel)


@dataclass(frozen=True)
class ImplicitGemm(Family):
    """Tiles of :data:`GEMM_TILE` filters x outputs, :data:`GEMM_THREADS` threads (step 14), with
    the k table of (c, r, s) offsets (:func:`.problem.k_table`, step 15's wmma) when ``k_table``."""

    k_table: bool = False

    def scratch_bytes(self, step, layer, N):
        return 8 * layer.K if self.k_table else 0

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        _, main, cfg = self._main(step, case, be)
        x, w, y = arrays["x"], arrays["w"], arrays["y"]
        if not self.k_table:
            return main.bind(cfg["grid"], cfg["block"], (x, w, y, *case.layer.dims(case.N)), 0)
        table = be.to_device(k_table(case.layer))
        return main.bind(cfg["grid"], cfg["block"], (x, w, table, y, *case.layer.dims(case.N)), 0)


def padded_channels(layer: Layer) -> int:
    """Step 16's channel count Cp: C itself when it is a multiple of 8 (one 16-byte load of
    halves), 4 when C <= 4 (layer 1: two 8-byte loads), else C rounded up to a multiple of 8."""
    return 4 if layer.C <= 4 else -(-layer.C // 8) * 8


def padded_filter_row(layer: Layer) -> int:
    """Step 16's filter row Kp: R*S*Cp halves rounded up to a multiple of 8 (16 bytes)."""
    return -(-layer.R * layer.S * padded_channels(layer) // 8) * 8


class WmmaNhwc(Family):
    """Step 16: copies of x to channels-last and of the filters to (r, s, c) rows (its second and
    third kernels), then implicit GEMM tiles on wmma."""

    def scratch_bytes(self, step, layer, N):
        return 2 * (N * layer.H * layer.W * padded_channels(layer) + layer.M * padded_filter_row(layer))

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        layer, N = case.layer, case.N
        module, main, cfg = self._main(step, case, be)
        cp = padded_channels(layer)
        hw = layer.H * layer.W
        xt = be.xp.empty((N, hw, cp), dtype=np.float16)
        wt = be.xp.empty((layer.M, padded_filter_row(layer)), dtype=np.float16)
        tile = 32                                       # the transpose kernel's tile
        to_nhwc = module.get_function(step.kernels[1]).bind(
            (-(-hw // tile), -(-cp // tile), N), (tile, 8), (arrays["x"], xt, N, layer.C, hw, cp))
        to_rsc = module.get_function(step.kernels[2]).bind(
            -(-wt.size // 256), 256, (arrays["w"], wt, layer.M, layer.C, layer.R, layer.S, cp))
        gemm = main.bind(cfg["grid"], cfg["block"],
                         (xt, wt, arrays["y"], N, cp, layer.H, layer.W, layer.M, layer.R, layer.S, layer.U,
                          layer.P, layer.E, layer.F), 0)
        return _in_turn(to_nhwc, to_rsc, gemm)


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


class TunedGemm(Family):
    """Step 17: pad x (when P > 0), transpose the filters, zero y (when K is split over
    :func:`gemm_splits` blocks along the grid's z), then the implicit GEMM tiles."""

    def config(self, step, layer, N):
        return {"grid": (-(-N * layer.E * layer.F // GEMM_TILE), -(-layer.M // GEMM_TILE), gemm_splits(layer, N)),
                "block": (GEMM_THREADS,), "shared_bytes": 0}

    def scratch_bytes(self, step, layer, N):
        Hp, Wp = layer.H + 2 * layer.P, layer.W + 2 * layer.P
        padded = 4 * N * layer.C * Hp * Wp if layer.P else 0
        Kp, Mp = gemm_padded_k(layer), -(-layer.M // GEMM_TILE) * GEMM_TILE
        return padded + 4 * Kp * Mp + 4 * Kp

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        layer, N = case.layer, case.N
        x, w, y = arrays["x"], arrays["w"], arrays["y"]
        module, main, cfg = self._main(step, case, be)
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
        calls = []
        if P:
            calls.append(module.get_function("pad_input").bind(
                -(-xp.size // (pad_block * pad_items)), pad_block, (x, xp, N * layer.C, layer.H, layer.W, P)))
        tile = 32                                            # the transpose's tile
        calls.append(module.get_function("filters_to_kxm").bind(
            (-(-Kp // tile), Mp // tile), (tile, 8), (w, wt, M, K, Mp, Kp)))
        if splits > 1:
            calls.append(_zeroing(y, be))                     # the split sums start from zero
        calls.append(main.bind(cfg["grid"], cfg["block"],
                               (xp, wt, table, y, N, layer.C, Hp, Wp, M, Mp, Kp, layer.U, layer.E, layer.F,
                                per_split, int(splits > 1)), 0))
        return _in_turn(*calls)


@dataclass(frozen=True)
class Mma(Family):
    """Steps 18-22: a padded channels-last copy of x (its border written out) and the filters as
    runs (:mod:`.tc`), then mma.sync tiles, the tile the step picks per layer (``tile``: one
    kernel for every layer instead, to check or tune each)."""

    tile: str | None = None
    copies_input = True

    def kernel(self, step, layer):
        return self.tile or tc.kernel_for(step.number, layer)

    def config(self, step, layer, N):
        tile = tc.TILES[self.kernel(step, layer)]
        return {"grid": (-(-N * layer.E * layer.F // tile.BN), -(-layer.M // tile.BM)), "block": (tile.threads,),
                "shared_bytes": tile.shared_bytes(step.itemsize)}

    def scratch_bytes(self, step, layer, N):
        return tc.scratch_bytes(step, layer, N)

    def bind(self, step, case, arrays, backend):
        """Binding lays the filters out as runs once (they are the network's constants); each
        call then copies x to the padded channels-last layout and runs the GEMM."""
        be = get_backend(backend)
        layer, N = case.layer, case.N
        dtype, suffix, blocks = tc.copy_layout(step)
        itemsize = np.dtype(dtype).itemsize
        g = tc.geometry(layer, itemsize, blocks)
        if N * g.Hp * g.Wp * g.Cp >= 2**31:
            raise ValueError(f"step {step.number} indexes the channels-last copy with 32-bit integers: N = {N} "
                             f"makes it {N * g.Hp * g.Wp * g.Cp} elements for {layer.name}, over 2^31")
        module = load_module(step.file, be)
        name = self.kernel(step, layer)
        tile = tc.TILES[name]
        Kp = g.Kp(tile, itemsize)
        gemm = module.get_function(name)
        shared = tile.shared_bytes(np.dtype(step.dtype).itemsize)
        if shared > DEFAULT_SHARED_LIMIT:
            gemm.allow_shared_memory(shared)
        xt = be.xp.empty((N, g.Hp, g.Wp, g.Cp), dtype=dtype)
        wt = be.xp.empty((layer.M, Kp), dtype=dtype)
        module.get_function(f"to_filter_runs_{suffix}")(
            (-(-layer.M * Kp // tc.FILTER_BLOCK),), (tc.FILTER_BLOCK,),
            (arrays["w"], wt, layer.M, layer.C, layer.R, layer.S, g.block, g.L, Kp))
        to_nhwc = module.get_function(f"to_padded_nhwc_{suffix}").bind(
            (g.Hp, N), tc.LAYOUT_BLOCK, (arrays["x"], xt, layer.C, layer.H, layer.W, g.block, g.Hp, g.Wp, layer.P),
            tc.layout_shared_bytes(layer, np.dtype(step.dtype).itemsize))
        grid = (-(-N * layer.E * layer.F // tile.BN), -(-layer.M // tile.BM))
        run = gemm.bind(grid, (tile.threads,),
                        (xt, wt, arrays["y"], N, layer.M, Kp, layer.R * g.Lc, g.Lc, g.Wp * g.Cp, g.Cp, g.Hp, g.Wp,
                         layer.U, layer.E, layer.F), shared)
        launch = _in_turn(to_nhwc, run)
        launch.keep = (xt, wt)       # the scratch lives as long as the launch
        launch.parts = {"layout": (to_nhwc,), "gemm": run}
        return launch


def filter_transform(step, layer: Layer, w, be: Backend) -> tuple[Callable[[], None], object]:
    """(launch, U): a Winograd step's filter transform G g G^T of ``layer``'s filters ``w`` (a
    device array) into a new U, bound but not yet run -- to run once per model, and to time."""
    g = winograd.geometry(step.number, layer, 1)
    module = load_module(step.file, be)
    U = be.xp.empty((g.points, g.Kp, g.Mp), dtype=np.float32)
    run = module.get_function(f"winograd_filter_{winograd.suffix(step)}").bind(
        (g.Mp // winograd.TRANSFORM_BLOCK, g.Kp), winograd.TRANSFORM_BLOCK, (w, U, layer.M, layer.C, g.Mp, g.Kp), 0)
    return run, U


class Winograd(Family):
    """Steps 23-24 on NCHW floats (:mod:`.winograd`), on the 3 x 3, stride-1 layers only: binding
    transforms the filters once (a constant of the model); each call then transforms the input,
    runs the batched GEMM and transforms the products back into y."""

    def config(self, step, layer, N):
        return winograd.launch_config(step, layer, N)

    def sets_up_once(self, step, layer):
        return True

    def scratch_bytes(self, step, layer, N):
        return winograd.scratch_bytes(step, layer, N)

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        layer, N, x, y = case.layer, case.N, arrays["x"], arrays["y"]
        g = winograd.geometry(step.number, layer, N)
        cfg = winograd.launch_config(step, layer, N)      # refuses a layer Winograd does not compute
        module = load_module(step.file, be)
        set_up, U = filter_transform(step, layer, arrays["w"], be)
        set_up()
        V = be.xp.empty((g.points, g.Kp, g.Pp), dtype=np.float32)
        Mt = be.xp.empty((g.points, g.Mp, g.Pp), dtype=np.float32)
        suffix = winograd.suffix(step)
        to_tiles = module.get_function(f"winograd_input_{suffix}").bind(
            (g.Pp // winograd.TRANSFORM_BLOCK, g.Kp), winograd.TRANSFORM_BLOCK,
            (x, V, N, layer.C, layer.H, layer.W, layer.P, g.TH, g.TW, g.Kp, g.Pp), 0)
        gemm = module.get_function("conv_winograd_gemm").bind(cfg["grid"], cfg["block"], (U, V, Mt, g.Mp, g.Pp, g.Kp), 0)
        from_tiles = module.get_function(f"winograd_output_{suffix}").bind(
            (-(-g.P // winograd.TRANSFORM_BLOCK), layer.M), winograd.TRANSFORM_BLOCK,
            (Mt, y, N, layer.M, layer.E, layer.F, g.TH, g.TW, g.Mp, g.Pp), 0)
        launch = _in_turn(to_tiles, gemm, from_tiles)
        launch.keep = (U, V, Mt)       # the scratch lives as long as the launch
        launch.parts = {"input transform": to_tiles, "gemm": gemm, "output transform": from_tiles}
        return launch


def wgmma_refusal(step, here=None) -> str | None:
    """Why steps 25-28 cannot run on this GPU (None on Hopper, on the CPU backend, or where the
    capability is not known): their kernels use wgmma, TMA and setmaxnreg, compiled for sm_90a."""
    here = limits() if here is None else here
    if here is None or here.compute_capability is None or str(here.compute_capability).startswith(WGMMA_CAPABILITY):
        return None
    return (f"step {step.number} is built for sm_90a (wgmma, TMA, setmaxnreg): it runs on compute capability "
            f"9.x (Hopper) only; {here.name} has {here.compute_capability}")


def _stride_one(step, layer: Layer) -> None:
    if not wgmma.applies(layer):
        raise KernelArgumentError(f"{layer.name} has stride {layer.U}: step {step.number} runs stride-1 layers only "
                                  "(a tap's pixels are then one box of the input)")


@dataclass(frozen=True)
class Wgmma(Family):
    """Step 25 on a stride-1 layer (:mod:`.wgmma`): y (half) = conv(x, w) from half NCHW / MCRS.
    Binding lays the filters out and makes both tensor maps; each call copies x to channels-last
    and runs the persistent GEMM. ``tile``: (TW, BN[, BK]) for every layer instead of
    :data:`.wgmma.DEFAULT_TILES`; ``blocks``: the grid (default one block per SM)."""

    tile: tuple | None = None
    blocks: int | None = None
    gpu_options = wgmma.GPU_OPTIONS
    copies_input = True

    def kernel(self, step, layer):
        return wgmma.kernel_for(layer, self.tile)

    def config(self, step, layer, N):
        return wgmma.launch_config(layer, N, self.tile)

    def scratch_bytes(self, step, layer, N):
        return wgmma.scratch_bytes(layer, N, self.tile)

    def refusal(self, step, layer=None, here=None):
        return wgmma_refusal(step, here)

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        layer, N = case.layer, case.N
        why = self.refusal(step)
        if why:               # refused here, with the reason, rather than by the driver at launch
            raise KernelArgumentError(why)
        _stride_one(step, layer)
        tw, bn, bk = wgmma.tile_shape(self.tile or wgmma.DEFAULT_TILES[layer.index])
        if (tw, bn, bk) not in wgmma.CANDIDATES:
            raise KernelArgumentError(f"tile {(tw, bn, bk)} is not compiled; the kernel file has {wgmma.CANDIDATES}")
        module = load_module(wgmma.FILE, be, options=self.gpu_options if be.name == "gpu" else ())
        cin, cp = wgmma.padded_channels(layer, bk)
        xt = be.xp.empty((N, layer.H, layer.W, cin), dtype=np.float16)
        wp = wgmma.filter_rows(arrays["w"], layer, be.xp, bk)
        map_x = tensormap.encode_4d(xt, (bk, tw, wgmma.BM // tw, 1), swizzle=2 * bk)
        map_w = tensormap.encode_2d(wp, (bk, bn), swizzle=2 * bk)
        gemm = module.get_function(wgmma.kernel_for(layer, (tw, bn, bk)))
        gemm.allow_shared_memory(wgmma.shared_bytes(bn))
        hw = layer.H * layer.W
        to_nhwc = module.get_function("to_nhwc_half").bind(
            (-(-hw // 32), -(-cin // 32), N), (32, 8),
            (arrays["x"], xt, np.int32(layer.C), np.int32(hw), np.int32(cin)))
        grid = (max(1, min(self.blocks or wgmma.blocks_here(be), wgmma.tiles(layer, N, (tw, bn)))),)
        run = gemm.bind(grid, (wgmma.THREADS,), (map_x, map_w, arrays["y"], *(np.int32(v) for v in (
            N, layer.C, cp, layer.M, layer.E, layer.F, layer.R, layer.S, layer.P))), wgmma.shared_bytes(bn))
        launch = _in_turn(to_nhwc, run)
        launch.keep = (xt, wp, map_x, map_w)
        launch.parts = {"layout": (to_nhwc,), "gemm": run}
        return launch


@dataclass(frozen=True)
class Wgmma32(Family):
    """Steps 26 and 27 on a stride-1 layer (:mod:`.wgmma32`): step 25's GEMM on float data, step
    26 reading it as tf32, step 27 as two tf32 parts each (3xTF32). Binding lays the filters out
    and makes the tensor maps; each call copies x to channels-last (step 27: split into its two
    parts on the way) and runs the GEMM. ``tile`` (TW, BN) and ``blocks`` as :class:`Wgmma`'s."""

    tile: tuple | None = None
    blocks: int | None = None
    gpu_options = wgmma.GPU_OPTIONS
    copies_input = True

    def kernel(self, step, layer):
        return wgmma32.kernel_for(step.number, layer, self.tile)

    def config(self, step, layer, N):
        return wgmma32.launch_config(step.number, layer, N, self.tile)

    def scratch_bytes(self, step, layer, N):
        return wgmma32.scratch_bytes(step.number, layer, N, self.tile)

    def refusal(self, step, layer=None, here=None):
        return wgmma_refusal(step, here)

    def bind(self, step, case, arrays, backend):
        be = get_backend(backend)
        layer, N, number = case.layer, case.N, step.number
        why = self.refusal(step)
        if why:
            raise KernelArgumentError(why)
        wgmma32.check_step(number)
        _stride_one(step, layer)
        tw, bn = wgmma32.tile_for(number, layer, self.tile)
        module = load_module(wgmma32.FILES[number], be, options=self.gpu_options if be.name == "gpu" else ())
        cin, cp = wgmma32.padded_channels(layer)
        wb, ws = wgmma32.filter_rows(arrays["w"], layer, be.xp)
        hw = layer.H * layer.W
        tensors, BK, BM = wgmma32.TENSORS[number], wgmma32.BK, wgmma.BM
        if tw <= 0:
            # the zero rows and columns are written here, once: each call's copy writes the pixels only
            hp, wp = wgmma32.flat_dims(layer)
            copies = [be.xp.zeros((N * hp * wp, cin), dtype=np.float32) for _ in range(tensors)]
            maps = [tensormap.encode_2d(c, (BK, BM)) for c in copies]
            name, extra = ("to_flat_float" if number == "26" else "to_flat_split"), (layer.W, hp, wp)
        else:
            copies = [be.xp.empty((N, layer.H, layer.W, cin), dtype=np.float32) for _ in range(tensors)]
            maps = [tensormap.encode_4d(c, (BK, tw, BM // tw, 1)) for c in copies]
            name, extra = ("to_nhwc_float" if number == "26" else "to_nhwc_split"), ()
        # pairs: each block's copy brings half of a B tile (into both blocks)
        maps_w = [tensormap.encode_2d(part, (BK, bn // 2 if tw == wgmma32.PAIR else bn))
                  for part in (wb, ws)[:tensors]]
        gemm = module.get_function(wgmma32.kernel_for(number, layer, (tw, bn)))
        gemm.allow_shared_memory(wgmma32.shared_bytes(number, bn, tw))
        layout = module.get_function(name).bind(
            (-(-hw // 32), -(-cin // 32), N), (32, 8),
            (arrays["x"], *copies, *(np.int32(v) for v in (layer.C, hw, cin, *extra))))
        grid = (wgmma32.grid_blocks(layer, N, (tw, bn), self.blocks or wgmma.blocks_here(be)),)
        # step 26: (x, w); step 27: (xb, xs, wb, ws), the order of conv_wgmma_3xtf32's maps
        run = gemm.bind(grid, (wgmma.THREADS,), (*maps, *maps_w, arrays["y"], *(np.int32(v) for v in (
            N, layer.C, cp, layer.M, layer.E, layer.F, layer.R, layer.S, layer.P))), wgmma32.shared_bytes(number, bn, tw))
        launch = _in_turn(layout, run)
        launch.keep = (copies, wb, ws, maps, maps_w)
        launch.parts = {"layout": (layout,), "gemm": run}
        return launch


@dataclass(frozen=True, eq=False)
class Where(Family):
    """``family`` on the layers it ``applies`` to; on the others the step is ``otherwise``'s (a
    step, or one per layer index), bound, sized and refused as that step is: the fallbacks of
    Winograd (3 x 3, stride 1) and of wgmma (stride 1). ``because`` says why in a check's note
    (``{number}``: the step's number)."""

    family: Family
    applies: Callable[[Layer], bool]
    otherwise: object
    because: str

    @property
    def gpu_options(self) -> tuple:
        return self.family.gpu_options

    @property
    def copies_input(self) -> bool:
        return self.family.copies_input

    def ran(self, step, layer):
        if self.applies(layer):
            return step
        return self.otherwise[layer.index] if isinstance(self.otherwise, Mapping) else self.otherwise

    def _on(self, step, layer):
        """(the family, the step) that run ``layer``."""
        ran = self.ran(step, layer)
        return (self.family, step) if ran is step else (ladder.launcher(ran), ran)

    def note(self, step, layer):
        ran = self.ran(step, layer)
        return "" if ran is step else f"step {ran.number}'s kernel: " + self.because.format(number=step.number)

    def kernel(self, step, layer):
        family, ran = self._on(step, layer)
        return family.kernel(ran, layer)

    def config(self, step, layer, N):
        family, ran = self._on(step, layer)
        return family.config(ran, layer, N)

    def scratch_bytes(self, step, layer, N):
        family, ran = self._on(step, layer)
        return family.scratch_bytes(ran, layer, N)

    def refusal(self, step, layer=None, here=None):
        if layer is None:
            return self.family.refusal(step, None, here)
        family, ran = self._on(step, layer)
        return family.refusal(ran, layer, here)

    def sets_up_once(self, step, layer):
        family, ran = self._on(step, layer)
        return family.sets_up_once(ran, layer)

    def bind(self, step, case, arrays, backend):
        family, ran = self._on(step, case.layer)
        return family.bind(ran, case, arrays, backend)


@dataclass(frozen=True)
class ChunkCopy(Family):
    """``inner``'s launches (step 25's family) with layer 1's copy to channels-last made by one
    kernel of 16-byte stores (the step's file, :func:`chunk_copy`) into the same buffer; the
    GEMMs, and the other layers' copies (where the chunked copy was slower), are ``inner``'s."""

    inner: Family

    @property
    def gpu_options(self) -> tuple:
        return self.inner.gpu_options

    copies_input = True

    def ran(self, step, layer):
        return self.inner.ran(step, layer)

    def note(self, step, layer):
        return self.inner.note(step, layer)

    def kernel(self, step, layer):
        return self.inner.kernel(step, layer)

    def config(self, step, layer, N):
        return self.inner.config(step, layer, N)

    def scratch_bytes(self, step, layer, N):
        return self.inner.scratch_bytes(step, layer, N)

    def refusal(self, step, layer=None, here=None):
        return self.inner.refusal(step, layer, here)

    def sets_up_once(self, step, layer):
        return self.inner.sets_up_once(step, layer)

    def bind(self, step, case, arrays, backend):
        launch = self.inner.bind(step, case, arrays, backend)
        if self.inner.ran(step, case.layer) is step:
            return launch
        layer = case.layer
        # layer 1 runs step 20's kernel, whose layout has the layer's zero border written out
        copy = chunk_copy(arrays["x"], launch.keep[0], layer.C, layer.H, layer.W, layer.P, backend, file=step.file)
        gemm = launch.parts["gemm"]
        run = _in_turn(copy, gemm)
        run.keep = launch.keep
        run.parts = {"layout": (copy,), "gemm": gemm}
        return run


def chunks(xt_shape) -> int:
    """The 16-byte chunks of a channels-last copy of shape (N, Hp, Wp, Cp): one thread each."""
    N, Hp, Wp, Cp = xt_shape
    return N * Hp * Wp * Cp // CHUNK


def chunk_copy(x, xt, C: int, H: int, W: int, P: int, backend=None, file: str = CHUNK_COPY_FILE) -> Callable[[], None]:
    """Step 28's copy of NCHW halves ``x`` (N x C x H x W) into ``xt`` (N x Hp x Wp x Cp halves):
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
        raise KernelArgumentError(f"{CHUNK_COPY_KERNEL} indexes with 32-bit integers: {xt.shape} is too large")
    kernel = load_module(file, be).get_function(CHUNK_COPY_KERNEL)
    return kernel.bind((-(-chunks(xt.shape) // CHUNK_BLOCK),), (CHUNK_BLOCK,),
                       (x, xt, *(np.int32(v) for v in (N, C, H, W, Cp, Hp, Wp, P))))


DIRECT = Direct()
CHANNELS = Channels()
ATOMIC = Atomic()
GEMM = ImplicitGemm()
WMMA = ImplicitGemm(k_table=True)
WMMA_NHWC = WmmaNhwc()
TUNED_GEMM = TunedGemm()
MMA = Mma()
WINOGRAD = Winograd()
WGMMA = Wgmma()
WGMMA32 = Wgmma32()


# ------------------------------------------------------------------ a step on a layer
def shared_bytes(step, layer: Layer) -> int:
    """Dynamic shared memory per block of a direct step (its ``shared``) on ``layer``."""
    return step.shared(layer)


def scratch_bytes(step, layer: Layer, N: int) -> int:
    """Device memory ``step`` needs on ``layer`` at batch N beyond x, w and y (its family's)."""
    return step.launcher.scratch_bytes(step, layer, N)


def footprint_bytes(step, layer: Layer, N: int) -> int:
    """Device memory for one layer's run of ``step``: x, w, y in the step's precision plus
    its scratch buffers."""
    return layer.bytes(N, step.itemsize) + scratch_bytes(step, layer, N)


def launch_config(step, layer: Layer, N: int) -> dict:
    """The main kernel's grid, block and dynamic shared memory, as the chapter launches it."""
    return step.launcher.config(step, layer, N)


def main_kernel(step, layer: Layer) -> str:
    """The name of the kernel that does ``step``'s arithmetic on ``layer`` (the tile a step from
    18 on picks for it; on a layer its family does not apply to, the other step's kernel)."""
    return step.launcher.kernel(step, layer)


def fallback_step(step, layer: Layer):
    """The step whose kernel runs ``layer`` for ``step``: itself, or (Winograd's and wgmma's
    layers they do not apply to) the step :class:`Where` hands the layer to."""
    return step.launcher.ran(step, layer)


def unfit_reason(step, layer: Layer, N: int) -> str | None:
    """Why ``step`` cannot run ``layer`` at batch size ``N`` here (a GPU without its kernels'
    instructions, too much shared memory per block, or more device memory than the budget),
    or None when it can."""
    here = limits()
    why = step.launcher.refusal(step, layer, here)
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

"""The ladder: one kernel file per step, how each is launched, and the check.

Every step computes the same GEMM, C (M x N, half) = A (M x K, half) times B^T with B stored
N x K (both operands K-major, the layout wgmma reads without a transpose), accumulated in float.
Steps 1 on take tensor maps of A and B (gpulab.tensormap) instead of their addresses.

Step 7, the best, also comes in bfloat16 and in tf32 (kernels/hopper/07_tma_store_bf16.cu and
_tf32.cu, the same persistent_gemm.cuh): ``in_precision(step, "bf16")`` is that step in that type.
A, B and C are then bfloat16 (held as uint16 bit patterns: NumPy and CuPy have no bfloat16) or
float32.
"""
from __future__ import annotations

import dataclasses
from dataclasses import KW_ONLY, dataclass

import numpy as np

from ... import ladder
from ... import predictions as expect
from ...check import CheckResult, CheckTable, compare
from ...errors import KernelArgumentError
from ...kernels import get_backend, load_module
from ... import tensormap

#: k per slice: one 128-byte row of halves, the width of the 128-byte swizzle.
BK = 64
#: Every kernel of the chapter is built for Hopper's sm_90a target (wgmma and setmaxnreg exist
#: only there; steps 0 and 1 would build for sm_90 too, but the chapter compares like with like).
GPU_OPTIONS = ("-arch=sm_90a",)
#: Step 7's C leaves in boxes of STORE_BOX x STORE_BOX (kernels/hopper/persistent_gemm.cuh), two
#: at a time per consumer warpgroup.
STORE_BOX = 64
#: Sizes the CPU backend checks every step at: none a multiple of its tile, so the edges are tested.
CHECK_SHAPES = ((200, 136, 712), (72, 264, 200))
#: Bytes of an element of A, B and C in each precision. A slice is one 128-byte row whatever the
#: type: BK = 64 halves or bfloat16s, 32 floats.
ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "tf32": 4}


def to_bf16_bits(x, xp=np):
    """float32 values -> bfloat16 bit patterns (uint16), rounded to nearest, ties to even, as the
    GPU's cvt.rn.bf16.f32 and the CPU backend's cuda_bf16.h do; NaN -> 0x7FFF."""
    u = xp.ascontiguousarray(x, dtype=xp.float32).view(xp.uint32)
    rounded = ((u + xp.uint32(0x7FFF) + ((u >> 16) & xp.uint32(1))) >> 16).astype(xp.uint16)
    return xp.where((u & xp.uint32(0x7FFFFFFF)) > xp.uint32(0x7F800000), xp.uint16(0x7FFF), rounded)


def from_bf16_bits(bits, xp=np):
    """bfloat16 bit patterns (uint16) -> float32, exactly."""
    return (xp.asarray(bits).astype(xp.uint32) << 16).view(xp.float32)


def storage_dtype(precision: str):
    """The array type of A, B and C in ``precision``."""
    return {"fp16": np.float16, "bf16": np.uint16, "tf32": np.float32}[precision]


def as_float(x, precision: str, xp=np):
    """Values of an array held in ``precision``'s storage type, as float32 (bfloat16 decoded)."""
    return from_bf16_bits(x, xp) if precision == "bf16" else xp.asarray(x).astype(xp.float32)


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung: its kernel, its block tile (bm x bn), its threads and its ring of slices.

    tma: the kernel takes tensor maps (boxes of 64 k x bm rows of A, 64 k x bn rows of B).
    persistent: the grid is one block per SM (each block loops over tiles), not one per tile.
    tma_store: the kernel also takes a tensor map of C (boxes of 64 x 64, before C) and writes C
    through ``store_stage_bytes`` of shared memory after the ring.
    cluster: blocks per thread-block cluster (the kernel's ``__cluster_dims__``), stacked along M:
    a cluster's blocks compute tiles that share B, each loading 1/cluster of B's rows for all of
    them (the map of B in boxes of bn / cluster rows); the grid is whole clusters, and the ring's
    barriers live after the staging of C (``barrier_bytes``).
    """

    _: KW_ONLY
    kernel: str
    bm: int
    bn: int
    threads: int
    stages: int
    tma: bool
    persistent: bool = False
    tma_store: bool = False
    store_stage_bytes: int = 0
    cluster: int = 1
    precision: str = "fp16"
    #: Other element types: precision -> (kernel file, kernel) of the same step in that type.
    variants: tuple = ()

    @property
    def precisions(self) -> tuple:
        return ("fp16",) + tuple(p for p, _, _ in self.variants)

    @property
    def element_bytes(self) -> int:
        return ELEMENT_BYTES[self.precision]

    @property
    def slice_k(self) -> int:
        """k per slice: one 128-byte row (BK for 2-byte types, 32 for tf32's floats)."""
        return 128 // self.element_bytes

    @property
    def barrier_bytes(self) -> int:
        """A cluster step's full and empty mbarriers (8 bytes each per stage) in dynamic shared
        memory, where the other blocks of the cluster reach them; the others' are static."""
        return 2 * 8 * self.stages if self.cluster > 1 else 0

    @property
    def shared_bytes(self) -> int:
        """The ring of slices (and any staging of C and barriers after it), plus 1 KiB to align it
        to the swizzle's 1 KiB period."""
        return self.stages * (self.bm + self.bn) * BK * 2 + self.store_stage_bytes + self.barrier_bytes + 1024

    def tiles(self, M: int, N: int) -> int:
        """Tiles of C; a cluster step's clusters of tiles (tile-rows in groups of ``cluster``)."""
        return -(-N // self.bn) * -(-M // (self.bm * self.cluster))

    def grid(self, M: int, N: int, blocks: int | None = None) -> tuple[int, ...]:
        """One block per tile; a persistent step: ``blocks`` (one per SM), never more than tiles
        (a cluster step: whole clusters, at least one, never more than its clusters of tiles)."""
        if self.persistent:
            clusters = max(1, min(int(blocks) // self.cluster, self.tiles(M, N)))
            return (clusters * self.cluster,)
        return (-(-N // self.bn), -(-M // self.bm))


STEPS = [
    Step("00", "hopper/00_mma_sync.cu", "mma.sync, cp.async ring (baseline)", kernel="gemm_mma_sync",
         bm=128, bn=128, threads=256, stages=3, tma=False),
    Step("01", "hopper/01_tma_mbarrier.cu", "TMA loads completing on mbarriers", kernel="gemm_tma_mma_sync",
         bm=128, bn=128, threads=256, stages=3, tma=True),
    Step("02", "hopper/02_wgmma.cu", "wgmma from shared-memory descriptors", kernel="gemm_wgmma",
         bm=128, bn=128, threads=128, stages=3, tma=True),
    Step("03", "hopper/03_full_empty_ring.cu", "full/empty mbarrier ring, one wgmma group in flight",
         kernel="gemm_wgmma_ring", bm=128, bn=128, threads=128, stages=5, tma=True),
    Step("04", "hopper/04_warp_specialized.cu", "producer warpgroup + 2 consumer warpgroups, setmaxnreg",
         kernel="gemm_warp_specialized", bm=128, bn=256, threads=384, stages=4, tma=True),
    Step("05", "hopper/05_persistent.cu", "persistent blocks over grouped tiles", kernel="gemm_persistent",
         bm=128, bn=256, threads=384, stages=4, tma=True, persistent=True),
    Step("06", "hopper/06_groups_in_flight.cu", "each consumer keeps a group of products in flight",
         kernel="gemm_persistent_in_flight", bm=128, bn=256, threads=384, stages=4, tma=True, persistent=True),
    Step("07", "hopper/07_tma_store.cu", "epilogue through shared memory and a TMA store", kernel="gemm_tma_store",
         bm=128, bn=256, threads=384, stages=4, tma=True, persistent=True, tma_store=True,
         store_stage_bytes=2 * 2 * STORE_BOX * STORE_BOX * 2,
         variants=(("bf16", "hopper/07_tma_store_bf16.cu", "gemm_tma_store_bf16"),
                   ("tf32", "hopper/07_tma_store_tf32.cu", "gemm_tma_store_tf32"))),
    Step("08", "hopper/08_cluster_multicast.cu", "2x1 cluster, B shared by TMA multicast",
         kernel="gemm_cluster_multicast", bm=128, bn=256, threads=384, stages=4, tma=True, persistent=True,
         tma_store=True, store_stage_bytes=2 * 2 * STORE_BOX * STORE_BOX * 2, cluster=2),
]
#: The step that also comes in bf16 and tf32 (its own files): the chapter times it in every type.
TYPED_STEP = next(s for s in STEPS if s.variants)


def in_precision(step: Step, precision: str) -> Step:
    """``step`` built for ``precision`` (fp16, bf16 or tf32), where its file takes that type."""
    if precision == step.precision:
        return step
    for name, file, kernel in step.variants:
        if name == precision:
            return dataclasses.replace(step, precision=precision, file=file, kernel=kernel, variants=())
    raise KernelArgumentError(f"step {step.number} comes in {list(step.precisions)}, not {precision!r} "
                              f"(step {TYPED_STEP.number} has bf16 and tf32 files)")


#: The size the ladder is judged at (n^3: M = N = K = n), as the kernel files' predictions are.
MAIN_SIZE = 4096


def _about_tflops(tflops: float, **why) -> expect.Expect:
    """A prediction written as a rate at MAIN_SIZE^3, judged as the time that rate gives."""
    ms = 2.0 * MAIN_SIZE ** 3 / (tflops * 1e12) * 1e3
    claim = dataclasses.replace(expect.about_ms(ms, **why), claim=f"about {tflops:g} TFLOP/s at {MAIN_SIZE}^3 "
                                f"({ms:.3f} ms)")
    return claim


#: What each kernel file's prediction claims, in numbers a run can check (gpulab.predictions);
#: the reasons say why a claim failed, from the run's profile.
PREDICTED = {
    "00": _about_tflops(300, because="mma.sync from every warp, fed by cp.async, leaves the tensor cores "
                                     "idle most of the time (the profile's SM busy is under half)"),
    "01": expect.same(claim="within 10% of step 0",
                      because_faster="the copy engine took the copies' address arithmetic and issue off the "
                                     "warps (the profile's issue slots busy fell), so the warps issue more "
                                     "mma.sync between waits"),
    "02": expect.times(1.5, 2),
    "03": expect.times(1.2, 1.4, because="step 2's three-slice ring lets two blocks share an SM, so one "
                                         "block's products already ran while the other waited for its copies; "
                                         "step 3's five-slice ring leaves room for one block, and the overlap "
                                         "it adds inside the block replaces the one the two blocks gave"),
    "04": _about_tflops(650, because="the epilogue writes C from the accumulators while the tensor cores "
                                     "wait"),
    "05": expect.times(1.05, 1.10, because="at 4096^3 the tiles fill nearly four whole waves of the SMs, "
                                           "so step 4's last wave left few SMs idle, and the epilogue, "
                                           "which persistence does not overlap with the next tile's "
                                           "products, still stalls the tensor cores"),
    "06": expect.times(1.01, 1.05, claim="a few percent faster than step 5",
                       because="two consumer warpgroups already take turns: while one waits for its group of "
                               "products the other's runs, so the wait step 6 removes was hidden (the "
                               "profile's SM busy does not move)"),
    "07": expect.times(1.02, 1.04, claim="2-4% faster than step 6",
                       because_faster="step 6's epilogue cost more than its estimate: each consumer issued "
                                      "every store of its tile's C from registers before its next tile's "
                                      "products, while through shared memory and the copy engine its part "
                                      "is a few stores and a barrier (the profile's SM busy rose to "
                                      "cuBLAS's)"),
    "08": expect.times(1.0, 1.05, than="07", claim="0-5% faster than step 7",
                       because="step 7 was bound by the tensor pipe, not by its L2 reads (the profile's SM busy "
                               "barely moves): the third of the L2 reads the cluster saves was not what the tensor "
                               "cores waited for, and the pair now runs in lockstep, each ring slot refilled only "
                               "once the slower of the two blocks' consumers has released it, through an arrival "
                               "on the other SM"),
    # Step 7 in the other element types, against step 7 in fp16 (the prediction table's rows
    # "07 bf16" and "07 tf32", from the run's hopper_gemm_bf16 and _tf32 experiments).
    "07 bf16": expect.same(than="07", claim="about step 7's fp16 time",
                           because_faster="Hopper's tensor cores multiply fp16 and bf16 at one rate, yet in this "
                                          "run every fp16 GEMM was slower than its bf16 twin, cuBLAS's by as "
                                          "much as step 7's: the GPU, not the type, was slower while the fp16 "
                                          "experiment (the run's first) ran, with about twice the bf16 "
                                          "experiment's spread"),
    "07 tf32": expect.about(0.5, than="07", claim="twice step 7's fp16 time (half the tensor cores' rate)"),
}


def variant_key(step: Step) -> str:
    """How the prediction table and PREDICTED name a step in another element type: "07 bf16"."""
    return step.number if step.precision == "fp16" else f"{step.number} {step.precision}"


#: The element types step 7 comes in besides fp16 (its own files), in the order the chapter shows them.
OTHER_PRECISIONS = ("bf16", "tf32")


def prediction_steps() -> list:
    """(key, what changed, kernel file) of every row of the prediction table: the ladder, then
    step 7 in each other element type (key "07 bf16", ...)."""
    variants = [in_precision(TYPED_STEP, p) for p in OTHER_PRECISIONS]
    return [(s.number, s.title, s.file) for s in STEPS] + \
        [(variant_key(v), f"step 7 with A, B and C in {v.precision}", v.file) for v in variants]


def needs_hopper(backend) -> str | None:
    """Why ``backend`` cannot run the chapter's kernels (a GPU of compute capability below 9.0),
    or None (Hopper, or the CPU backend, which emulates what the kernels use)."""
    be = get_backend(backend)
    if be.name != "gpu":
        return None
    import cupy
    cc = cupy.cuda.Device().compute_capability          # "90" on an H100
    if int(cc) >= 90:
        return None
    return (f"needs compute capability 9.0 (TMA, mbarrier transaction counts, wgmma and setmaxnreg exist "
            f"only in sm_90a); this GPU is {cc[:-1]}.{cc[-1]}")


def check_shape(M: int, N: int, K: int, element_bytes: int = 2) -> None:
    """The shapes every step accepts: positive sizes, K a multiple of 8 halves (4 floats): rows
    of 16 bytes."""
    for name, v in (("M", M), ("N", N), ("K", K)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise KernelArgumentError(f"{name} must be a positive int, got {v!r}")
    if (K * element_bytes) % 16:
        raise KernelArgumentError(f"K = {K}: the chapter's GEMMs need K a multiple of {16 // element_bytes} "
                                  f"({element_bytes}-byte elements), so that every row of A and B starts 16-byte "
                                  "aligned (what cp.async's 16-byte copies and a tensor map require)")


def make_inputs(M: int, N: int, K: int, seed: int = 0, precision: str = "fp16"):
    """A (M x K) and B (N x K), uniform in [-1, 1), in ``precision``'s storage type (host
    arrays; bf16 as bit patterns)."""
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (N, K)).astype(np.float32)
    if precision == "bf16":
        return to_bf16_bits(A), to_bf16_bits(B)
    return A.astype(storage_dtype(precision)), B.astype(storage_dtype(precision))


def reference(A, B, precision: str = "fp16") -> np.ndarray:
    """C = A B^T in float64 (host), of the inputs' values (tf32: of the full floats, so the
    error includes the operands' rounding to tf32, as cuBLAS's tf32 GEMM's is measured)."""
    return as_float(A, precision).astype(np.float64) @ as_float(B, precision).astype(np.float64).T


def persistent_blocks(backend) -> int:
    """Blocks of a persistent step: one per SM on a GPU; on the CPU backend 1 (a cluster step:
    one cluster), so that the check sizes' few tiles still make a block loop over several."""
    if backend.name == "gpu":
        import cupy
        return int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    return 1


def make_launch(step: Step, A, B, C, backend=None, blocks: int | None = None):
    """Check the shapes, build the tensor maps a TMA step takes, and return a no-argument
    function that launches the step once (what the timers call). ``blocks``: a persistent
    step's grid (default :func:`persistent_blocks`)."""
    be = get_backend(backend)
    M, K = (int(n) for n in A.shape)
    N = int(B.shape[0])
    check_shape(M, N, K, step.element_bytes)
    for name, x in (("A", A), ("B", B), ("C", C)):
        if np.dtype(x.dtype) != np.dtype(storage_dtype(step.precision)):
            raise KernelArgumentError(f"step {step.number} in {step.precision} takes {name} as "
                                      f"{np.dtype(storage_dtype(step.precision))}, got {x.dtype}")
    if B.shape != (N, K) or C.shape != (M, N):
        raise KernelArgumentError(f"expected A (M, K), B (N, K), C (M, N); got A {A.shape}, B {B.shape}, "
                                  f"C {C.shape}")
    module = load_module(step.file, be, options=GPU_OPTIONS if be.name == "gpu" else ())
    kernel = module.get_function(step.kernel)
    kernel.allow_shared_memory(step.shared_bytes)
    if step.tma_store and (N * step.element_bytes) % 16:
        raise KernelArgumentError(f"N = {N}: step {step.number} writes C through a tensor map, whose rows must "
                                  f"start 16-byte aligned: N must be a multiple of {16 // step.element_bytes}")
    if step.tma:
        element = "bf16" if step.precision == "bf16" else None
        inputs = (tensormap.encode_2d(A, (step.slice_k, step.bm), element=element),
                  tensormap.encode_2d(B, (step.slice_k, step.bn // step.cluster), element=element))
        if step.tma_store:      # boxes of 64 rows x 128 bytes
            inputs += (tensormap.encode_2d(C, (128 // step.element_bytes, STORE_BOX), element=element),)
    else:
        inputs = (A, B)
    blocks = persistent_blocks(be) if blocks is None else blocks
    return kernel.bind(step.grid(M, N, blocks), (step.threads,), (*inputs, C, np.int32(M), np.int32(N), np.int32(K)),
                       shared_mem=step.shared_bytes)


def poisoned(xp, shape, precision: str):
    """An output of ``precision``'s storage type filled with NaN (bfloat16's 0xFFFF)."""
    if precision == "bf16":
        return xp.full(shape, 0xFFFF, dtype=np.uint16)
    return xp.full(shape, np.nan, dtype=storage_dtype(precision))


def run(step: Step, A, B, backend=None):
    """C = A B^T by ``step`` (arrays of the backend); the output is poisoned with NaN first."""
    be = get_backend(backend)
    C = poisoned(be.xp, (A.shape[0], B.shape[0]), step.precision)
    make_launch(step, A, B, C, be)()
    be.synchronize()
    return C


def check(step: Step, M: int, N: int, K: int, backend=None, seed: int = 0) -> CheckResult:
    """Run ``step`` on fresh random inputs of M x N x K and compare with the float64 reference."""
    be = get_backend(backend)
    A, B = make_inputs(M, N, K, seed, step.precision)
    C = run(step, be.to_device(A), be.to_device(B), be)
    name = f"step {step.number}{'' if step.precision == 'fp16' else ' ' + step.precision} C ({M}x{N}x{K})"
    return compare(as_float(C, step.precision, be.xp), reference(A, B, step.precision), precision=step.precision,
                   name=name)


def check_steps(backend=None, steps=None, shapes=CHECK_SHAPES, seed=None) -> CheckTable:
    """Every step (or ``steps``) against the float64 reference at each of ``shapes`` (M, N, K),
    in the ladder's one check table."""
    def check_one(step, be):
        typed = {} if step.precision == "fp16" else {"precision": step.precision}
        for M, N, K in shapes:
            yield {**typed, "M": M, "N": N, "K": K}, check(step, M, N, K, be, seed=seed)
    be = get_backend(backend)
    why = needs_hopper(be)
    return ladder.check_steps(STEPS if steps is None else steps, check_one, be, skip=lambda step: why)

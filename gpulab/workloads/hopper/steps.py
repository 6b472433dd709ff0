"""The ladder: one kernel file per step, how each is launched, and the check.

Every step computes the same GEMM, C (M x N, half) = A (M x K, half) times B^T with B stored
N x K (both operands K-major, the layout wgmma reads without a transpose), accumulated in float.
Steps 1 on take tensor maps of A and B (gpulab.tensormap) instead of their addresses.
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


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung: its kernel, its block tile (bm x bn), its threads and its ring of slices.

    tma: the kernel takes tensor maps (boxes of 64 k x bm rows of A, 64 k x bn rows of B).
    persistent: the grid is one block per SM (each block loops over tiles), not one per tile.
    tma_store: the kernel also takes a tensor map of C (boxes of 64 x 64, before C) and writes C
    through ``store_stage_bytes`` of shared memory after the ring.
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
    precision: str = "fp16"

    @property
    def shared_bytes(self) -> int:
        """The ring of slices (and any staging of C after it), plus 1 KiB to align it to the
        swizzle's 1 KiB period."""
        return self.stages * (self.bm + self.bn) * BK * 2 + self.store_stage_bytes + 1024

    def tiles(self, M: int, N: int) -> int:
        return -(-N // self.bn) * -(-M // self.bm)

    def grid(self, M: int, N: int, blocks: int | None = None) -> tuple[int, ...]:
        """One block per tile; a persistent step: ``blocks`` (one per SM), never more than tiles."""
        if self.persistent:
            return (max(1, min(int(blocks), self.tiles(M, N))),)
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
         store_stage_bytes=2 * 2 * STORE_BOX * STORE_BOX * 2),
]


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
}


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


def check_shape(M: int, N: int, K: int) -> None:
    """The shapes every step accepts: positive sizes, K a multiple of 8 (16-byte rows)."""
    for name, v in (("M", M), ("N", N), ("K", K)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise KernelArgumentError(f"{name} must be a positive int, got {v!r}")
    if K % 8:
        raise KernelArgumentError(f"K = {K}: the chapter's GEMMs need K a multiple of 8, so that every row of A "
                                  "and B starts 16-byte aligned (what cp.async's 16-byte copies and a tensor map "
                                  "require)")


def make_inputs(M: int, N: int, K: int, seed: int = 0):
    """A (M x K) and B (N x K), half, uniform in [-1, 1) (host arrays)."""
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    B = rng.uniform(-1, 1, (N, K)).astype(np.float16)
    return A, B


def reference(A, B) -> np.ndarray:
    """C = A B^T in float64 (host)."""
    return np.asarray(A, np.float64) @ np.asarray(B, np.float64).T


def persistent_blocks(backend) -> int:
    """Blocks of a persistent step: one per SM on a GPU; on the CPU backend 1, so that the
    check sizes' few tiles still make a block loop over several."""
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
    check_shape(M, N, K)
    if B.shape != (N, K) or C.shape != (M, N):
        raise KernelArgumentError(f"expected A (M, K), B (N, K), C (M, N); got A {A.shape}, B {B.shape}, "
                                  f"C {C.shape}")
    module = load_module(step.file, be, options=GPU_OPTIONS if be.name == "gpu" else ())
    kernel = module.get_function(step.kernel)
    kernel.allow_shared_memory(step.shared_bytes)
    if step.tma_store and N % 8:
        raise KernelArgumentError(f"N = {N}: step {step.number} writes C through a tensor map, whose rows must "
                                  "start 16-byte aligned: N must be a multiple of 8")
    if step.tma:
        inputs = (tensormap.encode_2d(A, (BK, step.bm)), tensormap.encode_2d(B, (BK, step.bn)))
        if step.tma_store:
            inputs += (tensormap.encode_2d(C, (STORE_BOX, STORE_BOX)),)
    else:
        inputs = (A, B)
    blocks = persistent_blocks(be) if blocks is None else blocks
    return kernel.bind(step.grid(M, N, blocks), (step.threads,), (*inputs, C, np.int32(M), np.int32(N), np.int32(K)),
                       shared_mem=step.shared_bytes)


def run(step: Step, A, B, backend=None):
    """C = A B^T by ``step`` (arrays of the backend); the output is poisoned with NaN first."""
    be = get_backend(backend)
    C = be.xp.full((A.shape[0], B.shape[0]), np.nan, dtype=np.float16)
    make_launch(step, A, B, C, be)()
    be.synchronize()
    return C


def check(step: Step, M: int, N: int, K: int, backend=None, seed: int = 0) -> CheckResult:
    """Run ``step`` on fresh random inputs of M x N x K and compare with the float64 reference."""
    be = get_backend(backend)
    A, B = make_inputs(M, N, K, seed)
    C = run(step, be.to_device(A), be.to_device(B), be)
    return compare(C, reference(A, B), precision="fp16", name=f"step {step.number} C ({M}x{N}x{K})")


def check_steps(backend=None, steps=None, shapes=CHECK_SHAPES, seed=None) -> CheckTable:
    """Every step (or ``steps``) against the float64 reference at each of ``shapes`` (M, N, K),
    in the ladder's one check table."""
    def check_one(step, be):
        for M, N, K in shapes:
            yield {"M": M, "N": N, "K": K}, check(step, M, N, K, be, seed=seed)
    be = get_backend(backend)
    why = needs_hopper(be)
    return ladder.check_steps(STEPS if steps is None else steps, check_one, be, skip=lambda step: why)

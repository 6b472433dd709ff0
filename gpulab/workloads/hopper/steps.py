"""The ladder, as data: one kernel file per step, its block tile, threads and ring of slices,
its launch family (:mod:`.launchers`), and what each kernel file predicts.

Steps 1 on take tensor maps of A and B (gpulab.tensormap) instead of their addresses. Step 7, the
best, also comes in bfloat16 and in tf32 (kernels/hopper/07_tma_store_bf16.cu and _tf32.cu, the
same persistent_gemm.cuh): ``in_precision(step, "bf16")`` is that step in that type.
"""
from __future__ import annotations

import dataclasses
from dataclasses import KW_ONLY, dataclass, field

from ... import ladder
from ... import predictions as expect
from ...errors import KernelArgumentError
from .launchers import FP8_E5M2_MAPS, FP8_MAPS, POINTERS, STORE_BOX, TENSOR_MAPS
from .problem import ELEMENT_BYTES, MAIN_SIZE

#: k per slice: one 128-byte row of halves, the width of the 128-byte swizzle.
BK = 64


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung: its kernel, its block tile (bm x bn), its threads and its ring of slices.

    launcher: how its kernel takes A and B (gpulab.workloads.hopper.launchers): by address
    (:data:`POINTERS`) or as tensor maps (:data:`TENSOR_MAPS`, the default: boxes of 64 k x bm
    rows of A, 64 k x bn rows of B).
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
    persistent: bool = False
    tma_store: bool = False
    store_stage_bytes: int = 0
    cluster: int = 1
    precision: str = "fp16"
    #: Other element types: precision -> (kernel file, kernel) of the same step in that type.
    variants: tuple = ()
    #: An FP8 step's partial sums start from zero every this many wgmma and are added into float
    #: accumulators (step 10: every slice, 4 instructions of k32); None: the accumulator is handed
    #: to every instruction (step 9). What :func:`gpulab.fp8.tensor_core_gemm` models.
    promote_every: int | None = None
    launcher: ladder.Launcher = field(default=TENSOR_MAPS, compare=False)

    @property
    def tma(self) -> bool:
        """Whether the kernel takes tensor maps of A and B (its launcher's family)."""
        return self.launcher.tensor_maps

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
         bm=128, bn=128, threads=256, stages=3, launcher=POINTERS),
    Step("01", "hopper/01_tma_mbarrier.cu", "TMA loads completing on mbarriers", kernel="gemm_tma_mma_sync",
         bm=128, bn=128, threads=256, stages=3),
    Step("02", "hopper/02_wgmma.cu", "wgmma from shared-memory descriptors", kernel="gemm_wgmma",
         bm=128, bn=128, threads=128, stages=3),
    Step("03", "hopper/03_full_empty_ring.cu", "full/empty mbarrier ring, one wgmma group in flight",
         kernel="gemm_wgmma_ring", bm=128, bn=128, threads=128, stages=5),
    Step("04", "hopper/04_warp_specialized.cu", "producer warpgroup + 2 consumer warpgroups, setmaxnreg",
         kernel="gemm_warp_specialized", bm=128, bn=256, threads=384, stages=4),
    Step("05", "hopper/05_persistent.cu", "persistent blocks over grouped tiles", kernel="gemm_persistent",
         bm=128, bn=256, threads=384, stages=4, persistent=True),
    Step("06", "hopper/06_groups_in_flight.cu", "each consumer keeps a group of products in flight",
         kernel="gemm_persistent_in_flight", bm=128, bn=256, threads=384, stages=4, persistent=True),
    Step("07", "hopper/07_tma_store.cu", "epilogue through shared memory and a TMA store", kernel="gemm_tma_store",
         bm=128, bn=256, threads=384, stages=4, persistent=True, tma_store=True,
         store_stage_bytes=2 * 2 * STORE_BOX * STORE_BOX * 2,
         variants=(("bf16", "hopper/07_tma_store_bf16.cu", "gemm_tma_store_bf16"),
                   ("tf32", "hopper/07_tma_store_tf32.cu", "gemm_tma_store_tf32"))),
    Step("08", "hopper/08_cluster_multicast.cu", "2x1 cluster, B shared by TMA multicast",
         kernel="gemm_cluster_multicast", bm=128, bn=256, threads=384, stages=4, persistent=True,
         tma_store=True, store_stage_bytes=2 * 2 * STORE_BOX * STORE_BOX * 2, cluster=2),
]
#: The step that also comes in bf16 and tf32 (its own files): the chapter times it in every type.
TYPED_STEP = next(s for s in STEPS if s.variants)
#: The FP8 rung (kernels/hopper/09_fp8.cu, 10_fp8_promotion.cu): step 7's persistent kernel with A
#: and B in FP8 (e4m3; one kernel of step 9 takes B in e5m2) and per-tensor scales, C in bfloat16;
#: step 10 promotes the partial sums to float registers every slice. Checked beside the ladder
#: (``CHAPTER.check(steps=FP8_STEPS)``, on the FP8 cases) until a recorded run times them.
_FP8_GEOMETRY = dict(bm=128, bn=256, threads=384, stages=4, persistent=True, tma_store=True,
                     store_stage_bytes=2 * 2 * STORE_BOX * STORE_BOX * 2, precision="fp8")
FP8_STEPS = [
    Step("09", "hopper/09_fp8.cu", "FP8 (e4m3) operands with per-tensor scales", kernel="gemm_fp8",
         launcher=FP8_MAPS, **_FP8_GEOMETRY),
    Step("09", "hopper/09_fp8.cu", "FP8, B in e5m2", kernel="gemm_fp8_e4m3_e5m2", launcher=FP8_E5M2_MAPS,
         **_FP8_GEOMETRY),
    Step("10", "hopper/10_fp8_promotion.cu", "FP8, partial sums promoted to float every slice",
         kernel="gemm_fp8_promotion", launcher=FP8_MAPS, promote_every=4, **_FP8_GEOMETRY),
]

#: The chapter's kernel exercise (hopper.3): step 3 with the student's producer
#: (``kernels/hopper/exercise_03_producer.cu``), the same launch, tile, ring and check.
EXERCISE = dataclasses.replace(next(s for s in STEPS if s.number == "03"), number="E3",
                               file="hopper/exercise_03_producer.cu", kernel="gemm_ring_exercise",
                               title="exercise: step 3's producer")


def in_precision(step: Step, precision: str) -> Step:
    """``step`` built for ``precision`` (fp16, bf16 or tf32), where its file takes that type."""
    if precision == step.precision:
        return step
    for name, file, kernel in step.variants:
        if name == precision:
            return dataclasses.replace(step, precision=precision, file=file, kernel=kernel, variants=())
    raise KernelArgumentError(f"step {step.number} comes in {list(step.precisions)}, not {precision!r} "
                              f"(step {TYPED_STEP.number} has bf16 and tf32 files)")


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

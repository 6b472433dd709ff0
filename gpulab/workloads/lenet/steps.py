"""The ladder as data: one kernel file per step, the family that launches it (a
:class:`~.launchers.Family` of :mod:`.launchers`), and what each kernel file predicted.

Every step computes both convolution layers. Steps 1-9 write the convolution's pre-pool output
``y`` and finish the layer with the shared ``relu_pool`` kernel; from step 10 on, ReLU and the
pool are in the convolution kernel's epilogue and only the pooled output is written. The
fully-connected layers (``kernels/lenet/fc_layers.cu``) are the same for every step: they
complete the network, so that every step's predictions can be compared with the reference's.
Step 2 changes only the host code (chunks on streams), step 12 only how the forward pass is
launched (one CUDA graph). Step 13 goes back to the kernels: conv2 on ``mma.sync`` fed by
``ldmatrix`` from a channels-last copy of each image; step 13g launches its forward pass as one
CUDA graph, as step 12 does steps 10 and 11's.
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import ladder
from .launchers import (CHANNEL_ATOMICS, CHANNEL_TREE, CONSTANT_WEIGHTS, DIRECT, IM2COL_MATMUL, IMPLICIT_GEMM,
                        MMA, POOL_EPILOGUE, REGISTER_TILES, SHARED_TILES, TENSOR_CORES, UNROLLED)


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung of the ladder, launched by its ``launcher``. A host-side step runs the kernels of
    step ``kernels_of`` in another way: ``streams``, chunks of the batch on this many streams
    (step 2); ``graph``, the forward pass captured in one CUDA graph (steps 12, 12h, 13g).
    ``report_name``: the student report's name for the step."""

    streams: int = 0
    graph: bool = False
    kernels_of: str = ""
    report_name: str = ""


STEPS = [
    Step("01", "lenet/01_direct_global.cu", "direct, global memory", launcher=DIRECT, report_name="baseline"),
    Step("02", "lenet/02_streams.cu", "+ 4 streams (host side)", launcher=DIRECT, streams=4, kernels_of="01",
         report_name="streams"),
    Step("03", "lenet/03_shared_tiled.cu", "shared-memory tiles", launcher=SHARED_TILES, report_name="tiled"),
    Step("04", "lenet/04_im2col_matmul.cu", "im2col + tiled matmul", launcher=IM2COL_MATMUL,
         report_name="unroll + matmul"),
    Step("05", "lenet/05_implicit_gemm.cu", "implicit GEMM (fused unroll)", launcher=IMPLICIT_GEMM,
         report_name="fusion"),
    Step("06", "lenet/06_constant_weights.cu", "weights in constant memory", launcher=CONSTANT_WEIGHTS,
         report_name="constant memory"),
    Step("07", "lenet/07_restrict_unroll.cu", "+ __restrict__, unrolled loops", launcher=UNROLLED,
         report_name="restrict + unroll"),
    Step("08", "lenet/08_channel_tree.cu", "channel sum: tree reduction", launcher=CHANNEL_TREE,
         report_name="tree reduction"),
    Step("09", "lenet/09_channel_atomics.cu", "channel sum: atomics", launcher=CHANNEL_ATOMICS,
         report_name="atomics"),
    Step("10", "lenet/10_fused_relu_pool.cu", "ReLU + pool fused, register tiles", launcher=REGISTER_TILES),
    Step("11", "lenet/11_tensor_cores.cu", "conv2 on tensor cores (fp16)", launcher=TENSOR_CORES, precision="fp16"),
    Step("12", "lenet/10_fused_relu_pool.cu", "fp32 forward pass in one CUDA graph", launcher=REGISTER_TILES,
         graph=True, kernels_of="10"),
    Step("12h", "lenet/11_tensor_cores.cu", "fp16 forward pass in one CUDA graph", launcher=TENSOR_CORES,
         precision="fp16", graph=True, kernels_of="11"),
    Step("13", "lenet/13_both_layers_mma.cu", "both layers on mma.sync, fed from shared memory (fp16)", launcher=MMA,
         precision="fp16"),
    Step("13g", "lenet/13_both_layers_mma.cu", "step 13's forward pass in one CUDA graph", launcher=MMA,
         precision="fp16", graph=True, kernels_of="13"),
]
#: Exercise 3 (lenet.1a): step 7 with ReLU and pool in the epilogue (one pooled output per thread).
EXERCISE = Step("E1", "lenet/exercise_01_pool_epilogue.cu", "exercise: step 7 + fused ReLU and pool",
                launcher=POOL_EPILOGUE)


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

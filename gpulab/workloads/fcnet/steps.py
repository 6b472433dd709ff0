"""The fcnet chapter's ladder, as data: each step a kernel file and the launches one inference
takes (the launch declarations say which form of the weights each kernel reads), the exercise's
step, and what each kernel file predicts."""
from __future__ import annotations

from dataclasses import dataclass, field

from ... import ladder, predictions
from .launchers import SEQUENCE, Launch
from .problem import HID, IN, OUT, TC_K1, TC_SHARED_BYTES


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung of the ladder: a kernel file and the launches one inference takes (its family:
    :data:`~.launchers.SEQUENCE`)."""

    launches: tuple[Launch, ...]
    #: The cases this kernel was written for (a prediction: the ladder shows, per
    #: case, whichever of a step's kernels the run measured fastest).
    sizes: tuple[str, ...] = ("small", "large")
    launcher: ladder.Launcher = field(default=SEQUENCE, kw_only=True, compare=False)

    @property
    def kernels(self) -> list[str]:
        return list(dict.fromkeys(launch.kernel for launch in self.launches))


_FUSED = ("n", "x", "w1", "w2", "w3", "y")
_FUSED_T = ("n", "x", "w1t", "w2t", "w3t", "y")
_HALF = ("n", "x", "w1h", "w2h", "w3h", "y")
_HALF_T = ("n", "x", "w1th", "w2th", "w3h", "y")   # W3 stays row-major: its reads were coalesced
_MMA = ("n", "x", "w1tc", "w2tc", "w3tc", "y")


def tf32x3_shared_bytes(tile: int, warps: int) -> int:
    """Step 18's dynamic shared memory: W1 and W2 split into tf32 hi and lo parts (64 rows of
    36 float4), then two input buffers of 72 x (tile + 4) floats per warp."""
    return 2 * HID * 36 * 16 + warps * 2 * IN * (tile + 4) * 4


def mma_shared_bytes(tile: int, warps: int = 8, stages: int = 2) -> int:
    """Step 17's dynamic shared memory: the half weights in padded rows (W1 64 x 88, W2 64 x 72,
    W3 8 x 72), then ``stages`` input buffers of 72 x (tile + 4) floats per warp."""
    return 2 * (HID * (TC_K1 + 8) + HID * (HID + 8) + 8 * (HID + 8)) + warps * stages * IN * (tile + 4) * 4


def _matmul(m: int, k: int, a: str, b: str, c: str) -> Launch:
    return Launch("matmul", (str(m), "n", str(k), a, b, c), block=(16, 16), vectors_per_block=16,
                  rows=-(-m // 16))


def _relu(buffer: str) -> Launch:
    return Launch("relu", ("hid_n", buffer), vectors_per_block=256 // HID)


STEPS = [
    Step(1, "fcnet/01_matmul_relu.cu", "matmul + relu, five launches",
         (_matmul(HID, IN, "w1", "x", "h1"), _relu("h1"), _matmul(HID, HID, "w2", "h1", "h2"),
          _relu("h2"), _matmul(OUT, HID, "w3", "h2", "y"))),
    Step(2, "fcnet/02_fused_global.cu", "fused, hidden layers in global memory",
         (Launch("fused_global", ("n", "x", "w1", "w2", "w3", "h1", "h2", "y"), vectors_per_block=4),)),
    Step(3, "fcnet/03_fused_shared.cu", "fused, shared memory",
         (Launch("fused_shared", _FUSED, vectors_per_block=4),)),
    Step(4, "fcnet/04_whole_net_shared.cu", "whole net in shared memory",
         (Launch("whole_net_shared", _FUSED, vectors_per_block=4, persistent=True),)),
    Step(5, "fcnet/05_shared_and_registers.cu", "shared memory + registers",
         (Launch("shared_and_registers", _FUSED, vectors_per_block=4, persistent=True),)),
    Step(6, "fcnet/06_last_layer_shuffle.cu", "last layer by warp shuffles",
         (Launch("last_layer_shuffle", _FUSED, vectors_per_block=4, persistent=True),)),
    Step(7, "fcnet/07_whole_net_registers.cu", "whole net in registers",
         (Launch("whole_net_registers", _FUSED, vectors_per_block=2, persistent=True),)),
    Step(8, "fcnet/08_half_precision.cu", "half precision",
         (Launch("half_precision", _HALF, vectors_per_block=2, persistent=True),), precision="fp16"),
    Step(9, "fcnet/09_conflict_free_tile.cu", "32-vector tiles, conflict-free fill",
         (Launch("conflict_free_tile", _HALF, vectors_per_block=32, persistent=True),), precision="fp16"),
    Step(10, "fcnet/10_coalesced_weights.cu", "coalesced reads of transposed weights",
         (Launch("coalesced_weights", _HALF_T, vectors_per_block=32, persistent=True),), precision="fp16"),
    Step(11, "fcnet/11_hide_input_loads.cu", "hiding input loads",
         (Launch("hide_input_loads", _HALF_T, vectors_per_block=32, persistent=True),), precision="fp16"),
    Step(12, "fcnet/12_fewer_registers.cu", "fewer registers, more warps",
         (Launch("fewer_registers", _HALF_T, vectors_per_block=32, persistent=True),), precision="fp16"),
    Step(13, "fcnet/13_best_per_size.cu", "one-warp outputs + tile loop",
         (Launch("best_large", _HALF_T, vectors_per_block=32, persistent=True),), precision="fp16",
         sizes=("large",)),
    Step(13, "fcnet/13_best_per_size.cu", "one-warp outputs + one tile per block",
         (Launch("best_small", _HALF_T, vectors_per_block=32),), precision="fp16", sizes=("small",)),
    Step(14, "fcnet/14_register_tiles_fp32.cu", "fp32 register tiles (large)",
         (Launch("tiled_fp32_large", _FUSED_T, block=(128,), vectors_per_block=128, persistent=True,
                 shared_mem=4 * (IN * HID + HID * HID + HID * OUT + (IN + HID) * 128)),),
         sizes=("large",)),
    Step(14, "fcnet/14_register_tiles_fp32.cu", "fp32 register tiles (small)",
         (Launch("tiled_fp32_small", _FUSED_T, block=(128,), vectors_per_block=64, persistent=True,
                 shared_mem=4 * (IN * HID + HID * HID + HID * OUT + (IN + HID) * 64)),),
         sizes=("small",)),
    Step(15, "fcnet/15_tensor_cores.cu", "tensor cores (wmma fp16)",
         (Launch("tensor_cores", ("n", "x", "w1tc", "w2tc", "w3tc", "y"), vectors_per_block=128,
                 persistent=True, shared_mem=TC_SHARED_BYTES),), precision="fp16"),
]
#: Steps beyond wmma (16 is the exercise): mma.sync with the activations in registers and
#: cp.async input streams.
MMA_STEPS = [
    Step(17, "fcnet/17_mma_registers.cu", "mma.sync, activations in registers (large)",
         (Launch("mma_fp16_large", _MMA, block=(256,), vectors_per_block=8 * 32, persistent=True,
                 shared_mem=mma_shared_bytes(32)),), precision="fp16", sizes=("large",)),
    Step(17, "fcnet/17_mma_registers.cu", "mma.sync, activations in registers (small)",
         (Launch("mma_fp16_small", _MMA, block=(256,), vectors_per_block=8 * 16, persistent=True,
                 shared_mem=mma_shared_bytes(16)),), precision="fp16", sizes=("small",)),
    Step(18, "fcnet/18_tf32x3_fp32.cu", "fp32 accuracy on tensor cores (3xTF32)",
         (Launch("tf32x3", _FUSED, block=(256,), vectors_per_block=8 * 16, persistent=True,
                 shared_mem=tf32x3_shared_bytes(16, 8)),)),
]
STEPS += MMA_STEPS

#: Exercise 2 (fcnet.1): step 1 with the ReLU fused into the matmul, three launches instead of five.
EXERCISE = Step(16, "fcnet/16_exercise_matmul_relu.cu", "exercise: matmul with fused relu, three launches",
                (Launch("matmul_relu", (str(HID), "n", str(IN), "1", "w1", "x", "h1"), block=(16, 16),
                        vectors_per_block=16, rows=HID // 16),
                 Launch("matmul_relu", (str(HID), "n", str(HID), "1", "w2", "h1", "h2"), block=(16, 16),
                        vectors_per_block=16, rows=HID // 16),
                 Launch("matmul_relu", (str(OUT), "n", str(HID), "0", "w3", "h2", "y"), block=(16, 16),
                        vectors_per_block=16, rows=1)))


# The kernel files' predictions as claims a run can check (gpulab.predictions states the rules),
# on the large case unless a claim names the small one; a reason is shown only when the run says
# the claim failed in that direction (the chapter's "What we learned" cells give the evidence).
def _predicted():
    p = predictions
    conflicts = ("the bank conflicts of its shared-memory weight reads and the per-block weight copy "
                 "(1.28 million copies on the large case) cost more than the re-reads they saved")
    return {
        1: p.unjudged("the baseline: every later step is measured against it"),
        2: (p.times(1 / 2, 1 / 1.5, 1, claim="1.5-2x slower than step 1 (large case)", because=(
                "its hidden layers' scattered reads and writes in global memory touch many more sectors per "
                "request than step 1's (see the profile)")),
            p.times(1 / 2, 1 / 1.5, 1, "small", claim="1.5-2x slower than step 1 (small case)", because=(
                "its hidden layers' scattered reads and writes in global memory touch many more sectors per "
                "request than step 1's (see the profile)"))),
        3: p.times(2, 3, 1, because=conflicts),
        4: (p.faster(3), p.same(3, "small", because_faster=(
            "one copy of the weights per block instead of per group of vectors pays on the small case too"))),
        5: p.times(1.3, 1.6, 4, because_faster=(
            "the bank conflicts dropped with the 32-way conflicted reads of W2s, which were most of "
            "them (see the profile)")),
        6: p.same(5, claim="a few percent at most faster than step 5", because_faster=(
            "the 64-long serial loop in 4 threads was the critical path of every group, and the other "
            "60 threads waited for it at the next barrier: a serial tail costs more than its operations")),
        7: p.times(1.5, 2, 6, because=(
            "occupancy stays where step 5 left it (registers), and the input loads touch more sectors per "
            "request (see the profile)")),
        8: p.times(1.3, 1.6, 7, because=(
            "fewer registers did not buy more warps (the occupancy is unchanged) and the scattered input "
            "loads are unchanged")),
        9: p.times(1.5, 2, 8),
        10: (p.same(9), p.times(1.1, 1.25, 9, "small", claim="10-25% faster than step 9 on the small case",
                                because=("with several tiles per block the weight prologue is a smaller share of "
                                         "a block's life than the prediction assumed, and the weights come "
                                         "from L2"))),
        11: (p.times(1.1, 1.2, 10), p.same(10, "small")),
        12: p.Expect(None, p.FASTER, 11, claim="no faster than step 11", because_faster=(
            "occupancy was part of what held step 11 back, the exception the prediction allowed")),
        13: p.unjudged("two kernels, one written for each case; the ladder shows the faster on each case, "
                       "and the step's section sets each against its own prediction"),
        14: p.times(2, 3, 13, because=(
            "the prediction asked for nearly all of the rate cuBLAS's SGEMM measured")),
        15: p.ms_between(0.6, 0.7),
        17: p.ms_between(0.57, 0.59, because=(
            "what it removed from step 15 (shared-memory round trips, barriers) was not the limit; the "
            "stream of reads of X from DRAM was, and a kernel that only reads gets somewhat less out of "
            "memory than the copy ceiling's equal reads and writes"), because_faster=(
            "the prediction was made for an H100's memory; this GPU's reads X faster")),
        18: p.ms_between(1.0, 1.2, because=(
            "each product's three tensor-core instructions depend on one another through the accumulator, "
            "and one block of 8 warps per SM is too few to cover that latency (see the profile)")),
    }


#: step number -> the checkable claim(s) of its kernel file's prediction (see gpulab.predictions)
PREDICTED = _predicted()

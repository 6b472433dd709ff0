"""The ladder, as data: each step's kernel file, what changed, and its launch family (a
:class:`~.launchers.Sgd` launcher, which lists the step's kernel launches); and what each kernel
file predicted."""
from __future__ import annotations

from dataclasses import dataclass

from ... import ladder
from .launchers import (F1, F2, F3, F4, F5, F6, F7, F8, F9, F10, FLOAT4_UPDATE, FUSED, ONE_KERNEL_PER_OP,
                        READ_ONLY, REGISTER_TILES, SPARSE, STREAMS, TENSOR_CORES, TILED, UNROLLED, Config, Op)
from .problem import Dims
from .reference import LEARNING_RATE


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung of the ladder. ``block`` (the element-wise launches' block shape) and ``options``
    (compile options: ``("-DREPORT_GUARD",)`` builds steps 4-6 with the report's bounds test) are
    its launch configuration, which the sweep varies; ``graph``: the step is timed as a captured
    CUDA graph."""

    block: tuple[int, int] = (16, 16)
    options: tuple[str, ...] = ()
    graph: bool = False

    @property
    def input(self) -> str:
        """The form of the batch the step's kernels read: "dense", "dense16" or "sparse"."""
        return self.launcher.input

    def config(self, lr: float = LEARNING_RATE) -> Config:
        return Config(block=self.block, lr=lr, options=self.options)

    def ops(self, dims: Dims, config: Config | None = None) -> list[Op]:
        """The kernel launches of one SGD step at ``dims`` (its family's list)."""
        return self.launcher.ops(self, dims, config)


STEPS = [
    Step(1, F1, "one kernel per operation", launcher=ONE_KERNEL_PER_OP),
    Step(2, F2, "fused element-wise chains", launcher=FUSED),
    Step(3, F3, "independent kernels on three streams", launcher=STREAMS),
    Step(4, F4, "4x unrolled", launcher=UNROLLED),
    Step(5, F5, "shared-memory tiles, padded", launcher=TILED),
    Step(6, F6, "__restrict__ and read-only loads", launcher=READ_ONLY),
    Step(7, F7, "register tiles, no transposes, fused epilogues", launcher=REGISTER_TILES),
    Step(8, F8, "mixed precision: fp16 tensor cores, fp32 master weights", precision="fp16", launcher=TENSOR_CORES),
    Step(9, F9, "sparse first layer (gather, scatter-add)", launcher=SPARSE),
    Step(10, F10, "sparse, whole step in a CUDA graph", graph=True, launcher=SPARSE),
]
#: Exercise 3 (training.1): step 6 with every parameter updated by the student's float4 kernel.
EXERCISE = Step(11, "training/exercise_01_sgd_update_float4.cu", "exercise: SGD update with float4",
                launcher=FLOAT4_UPDATE)
#: The report's ladder (steps 1-6) and the steps whose kernels the sweep runs.
REPORT_STEPS = [s for s in STEPS if s.ordinal <= 6]


# ------------------------------------------------------------ what each step's prediction claims
# Each kernel file states its prediction in words; these are the same claims in numbers a run can
# check (gpulab.predictions states the rules), and, for a claim that can fail, why it did: the
# verdict shows the reason only when the run says the claim failed in that direction.
def _predicted():
    from ... import predictions as p
    return {
        1: p.unjudged("the baseline: every later step is measured against it"),
        2: p.Expect(1.0, p.SAME, 1, claim="faster than step 1 by a few percent at most",
                    because="fusing removed launches but added work to the remaining kernels"),
        3: p.faster(2, because=(
            "the kernels put beside the forward product on other streams compete with it for the same "
            "SMs and memory bandwidth: the product itself got slower by more than the transpose it was "
            "to hide (see the breakdown); streams help only where work leaves resources idle")),
        4: p.same(3),
        5: p.times(3, 5, 4, because=(
            "the two products, most of the step, got faster by far less than several times: one "
            "shared-memory load per multiply-add is still their limit, the one the prediction named")),
        6: p.same(5),
        7: p.times(10, None, 6, claim="tens of times faster than step 6", because=(
            "\"tens of times\" overstated the prediction's own estimate (about half a millisecond), which "
            "is less than ten times below step 6's time; compare the step's time in the table with it")),
        8: p.times(4, 5, 7, because=(
            "the two tensor-core products ran well below the few hundred TFLOP/s assumed and still take "
            "most of the step (see the breakdown)")),
        9: p.times(10, 20, 7, claim="10-20x faster than step 7, the best dense fp32 step", because=(
            "each of the two kernels (the gather with the head, the updates with the scatter-add) takes "
            "tens of microseconds by itself, not the few tens in all the prediction assumed")),
        10: p.times(1.5, 2, 9, because=(
            "step 9's time was already close to the sum of its two kernels' durations (see the "
            "breakdown): launching them from Python cost less than predicted, so the graph had little "
            "to remove")),
    }


#: step number -> the checkable claim of its kernel file's prediction (see gpulab.predictions)
PREDICTED = _predicted()

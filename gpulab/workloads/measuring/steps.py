"""The measuring chapter's ladder, as data: each step a kernel file, its kernel and how many
elements a thread takes (its family: :data:`~.launchers.SAXPY`), the exercise's step, and what
each kernel file's prediction claims."""
from __future__ import annotations

from dataclasses import dataclass, field

from ... import ladder
from ... import predictions as expect
from .launchers import BLOCK, SAXPY
from .problem import MAIN_SIZE, SIZES


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung of the ladder: a kernel file, its kernel, and its grid."""

    kernel: str
    elements_per_thread: int = 1
    fixed_grid: int | None = None   # grid-stride kernels launch a fixed grid
    launcher: ladder.Launcher = field(default=SAXPY, kw_only=True, compare=False)

    def grid(self, n: int) -> int:
        if self.fixed_grid is not None:
            return self.fixed_grid
        threads = -(-n // self.elements_per_thread)
        return max(1, -(-threads // BLOCK))


STEPS = [
    Step("01", "measuring/01_saxpy.cu", "one element per thread", "saxpy"),
    Step("02", "measuring/02_saxpy_float4.cu", "float4: 16-byte accesses", "saxpy_float4", 4),
]
#: The exercise kernel, launched on a deliberately small grid so the loop must stride.
EXERCISE = Step("03", "measuring/03_saxpy_grid_stride.cu", "grid-stride loop (exercise)", "saxpy_grid_stride",
                fixed_grid=8)


# ------------------------------------------------------------ what each step's prediction claims
#: step -> the checkable claim(s) of its kernel file's prediction (gpulab.predictions states the
#: rules), at the chapter's main size ("large") and the smallest ("small"); a reason is shown only
#: when the run says the claim failed in that direction.
PREDICTED = {
    "1": expect.unjudged("the baseline: step 2 is measured against it"),
    "2": (expect.same("1", claim=f"within about 10% of step 1 at n = {MAIN_SIZE:,}", because_faster=(
              "on this GPU step 1 was still short of the bandwidth floor at this size, and a quarter of "
              "the requests brought float4 closer to it (the roofline below shows how close each gets)")),
          expect.same("1", "small", claim=f"no gain at n = {SIZES[0]:,}, where the launch dominates")),
}

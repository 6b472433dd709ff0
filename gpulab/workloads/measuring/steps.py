"""The measuring chapter's ladder: SAXPY, z = a*x + y, its sizes, FLOP and byte counts, the
float64 reference, the steps with their launch configurations and their checks, whether an
array fits in the L2, and what each kernel file's prediction claims."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ... import datasheet, device, ladder
from ... import predictions as expect
from ...check import CheckTable, compare
from ...kernels import Backend, Kernel, get_backend, load_module

CHAPTER = "measuring"
BLOCK = 256
A = np.float32(2.5)
#: Sizes for the scaling study: 4 K to 64 M elements (256 KB to 768 MB moved).
SIZES = [2**k for k in range(12, 27, 2)]
#: The size the single-size experiments use: 16 M elements, 201 MB moved.
MAIN_SIZE = 2**24
#: Correctness sizes: 1 element, less than a block, not multiples of 256 or of 4.
CHECK_SIZES = [1, 3, 255, 1000, 4099, 100_003]
FLOPS_PER_ELEMENT = 2      # one multiply, one add
BYTES_PER_ELEMENT = 12     # read x, read y, write z: 3 x 4 bytes


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung of the ladder: a kernel file, its kernel, and how to launch it."""

    kernel: str
    elements_per_thread: int = 1
    fixed_grid: int | None = None   # grid-stride kernels launch a fixed grid

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


def make_inputs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x and y: float32 in [-1, 1) from a fixed seed (never zeros, which can
    hide unwritten outputs)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, n).astype(np.float32)
    y = rng.uniform(-1, 1, n).astype(np.float32)
    return x, y


def reference(a, x, y) -> np.ndarray:
    """z = a*x + y in float64."""
    return np.float64(a) * x.astype(np.float64) + y.astype(np.float64)


def work(n: int) -> dict:
    return {"flops": FLOPS_PER_ELEMENT * n, "bytes": BYTES_PER_ELEMENT * n}


def kernel(step: Step, backend: str | Backend | None = None) -> Kernel:
    return load_module(step.file, backend).get_function(step.kernel)


def launcher(step: Step, fn: Kernel) -> Callable:
    """``launch(inputs, output)`` for :mod:`gpulab.transfers`: SAXPY on device arrays."""
    def launch(inputs, output):
        x, y = inputs
        fn(step.grid(output.size), BLOCK, (output.size, A, x, y, output))
    return launch


def run(step: Step, x: np.ndarray, y: np.ndarray, backend: str | Backend | None = None) -> np.ndarray:
    """Run one step on host inputs with a NaN-poisoned output; return z on the host."""
    be = get_backend(backend)
    fn = kernel(step, be)
    dx, dy = be.to_device(x), be.to_device(y)
    z = be.poisoned(x.shape, np.float32)
    fn(step.grid(x.size), BLOCK, (x.size, A, dx, dy, z))
    return be.to_host(z)


def check_steps(backend: str | Backend | None = None, steps=None, sizes=CHECK_SIZES,
                seed: int = 0) -> CheckTable:
    """Every step against the reference at every check size, fresh inputs each time."""
    def check_one(step, be):
        for i, n in enumerate(sizes):
            x, y = make_inputs(n, seed + i)
            yield {"kernel": step.kernel, "n": n}, compare(run(step, x, y, be), reference(A, x, y), step.precision,
                                                           name=f"{step.kernel} n={n}")
    return ladder.check_steps(steps or STEPS, check_one, backend)


# ------------------------------------------------------------ the working set against the L2
def l2_bytes(gpu: str | None = None) -> float | None:
    """The L2 cache's size: of ``gpu`` (a recorded run's GPU) from the datasheet table, else of
    this device; None where neither is known."""
    sheet = datasheet.lookup(gpu) if gpu else None
    if sheet is not None:
        return sheet.l2_mb * 2**20          # the datasheet's "50 MB" is the 50 MiB CUDA reports
    here = device.limits()
    return here.l2_bytes if here and here.l2_bytes else None


def fits_in_l2(n: int, gpu: str | None = None) -> bool:
    """Whether SAXPY's arrays at ``n`` (x, y and z: 12 bytes per element) fit in the L2 cache
    (of ``gpu``, or of this device), so that a warm and a cold (L2-flushed) timing can differ."""
    size = l2_bytes(gpu)
    return bool(size and BYTES_PER_ELEMENT * n <= size)


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

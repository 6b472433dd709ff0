"""The measuring chapter's workload, declared once: SAXPY, z = a*x + y, over n float32 elements:
its sizes, the FLOP and byte counts, the seeded inputs, the float64 reference, whether the arrays
fit in the L2, and a :class:`Vectors` case, one size of a check."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import datasheet, device, ladder

NAME = "measuring"
TITLE = "Measuring a GPU kernel"
A = np.float32(2.5)
#: Sizes for the scaling study: 4 K to 64 M elements (256 KB to 768 MB moved).
SIZES = [2**k for k in range(12, 27, 2)]
#: The size the single-size experiments use: 16 M elements, 201 MB moved.
MAIN_SIZE = 2**24
#: Correctness sizes: 1 element, less than a block, not multiples of 256 or of 4.
CHECK_SIZES = [1, 3, 255, 1000, 4099, 100_003]
FLOPS_PER_ELEMENT = 2      # one multiply, one add
BYTES_PER_ELEMENT = 12     # read x, read y, write z: 3 x 4 bytes


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


@dataclass(frozen=True)
class Vectors(ladder.Case):
    """SAXPY over ``n`` elements: x and y from the check's seed plus ``offset`` (each check size
    its own inputs), z (n float32) the output. A check row names the kernel that ran."""

    n: int
    offset: int = 0
    output_name = "z"

    @property
    def columns(self) -> dict:
        return {"n": self.n}

    def inputs(self, seed, precision="fp32") -> dict:
        x, y = make_inputs(self.n, None if seed is None else seed + self.offset)
        return {"x": x, "y": y}

    def reference(self, inputs, precision="fp32") -> np.ndarray:
        return reference(A, inputs["x"], inputs["y"])

    def output(self, precision="fp32"):
        return (self.n,), np.float32

    def check_columns(self, step, inputs, out) -> dict:
        return {"kernel": step.kernel, "n": self.n}

    def label(self, step) -> str:
        return f"{step.kernel} n={self.n}"


def cases(sizes=CHECK_SIZES) -> list[Vectors]:
    """The check's cases: one per size, each its own inputs (the seed plus the size's index)."""
    return [Vectors(int(n), i) for i, n in enumerate(sizes)]


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

"""Short kernel exercises in the style of GPU-Puzzles, for a chapter with no ladder (basics).

Each puzzle is a :class:`Step` (the :mod:`gpulab.ladder` protocol: number, file, title, plus
its kernel, its block and which check it gets) and :func:`check_steps` runs one on seeded random
inputs against a NumPy reference, in the one check-table schema. :mod:`gpulab.exercises` finds
them through the exercise's ``module``; the grader's hidden checks pass other sizes, seeds and
``races=True``.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from . import ladder
from .check import CheckTable, compare
from .kernels import Backend, get_backend, load_module

CHECKS = ("map", "broadcast", "histogram")


@dataclass(frozen=True)
class Step(ladder.Step):
    """One puzzle kernel: its name, the check it gets and its block shape."""

    kernel: str
    check: str                 # one of CHECKS: which inputs and reference
    block: tuple

    def __post_init__(self):
        super().__post_init__()
        if self.check not in CHECKS:
            raise ValueError(f"puzzle {self.number}: check must be one of {CHECKS}, got {self.check!r}")


GUARDED_MAP = Step("E1", "basics/exercise_01_relu.cu", "a map with a guard", kernel="relu", check="map",
                   block=(256,))
TWO_D = Step("E2", "basics/exercise_02_broadcast_add.cu", "two dimensions", kernel="broadcast_add",
             check="broadcast", block=(32, 8))
HISTOGRAM = Step("E3", "basics/exercise_03_histogram.cu", "a histogram with atomics", kernel="histogram",
                 check="histogram", block=(256,))
STEPS = [GUARDED_MAP, TWO_D, HISTOGRAM]
#: The checks' sizes when none are given: n for the map, (H, W) for the broadcast, (n, bins) for the histogram.
CHECK_SIZES = {"map": [1, 255, 1000, 4099], "broadcast": [(1, 1), (5, 70), (33, 17)],
               "histogram": [(1000, 16), (257, 3)]}


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def run(step: Step, size, seed: int, backend: str | Backend | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Run ``step`` once on seeded random inputs of ``size``: (the kernel's output, the
    float64 reference). Outputs start as NaN (counts at zero, which atomicAdd adds to)."""
    be = get_backend(backend)
    fn = load_module(step.file, be).get_function(step.kernel)
    rng = np.random.default_rng(seed)
    if step.check == "map":
        n = int(size)
        x = rng.uniform(-1, 1, n).astype(np.float32)
        y = be.poisoned(n)
        fn((_ceil(n, step.block[0]),), step.block, (n, be.to_device(x), y))
        return be.to_host(y), np.maximum(x.astype(np.float64), 0.0)
    if step.check == "broadcast":
        H, W = (int(v) for v in size)
        a, b = rng.uniform(-1, 1, H).astype(np.float32), rng.uniform(-1, 1, W).astype(np.float32)
        out = be.poisoned((H, W))
        fn((_ceil(W, step.block[0]), _ceil(H, step.block[1])), step.block,
           (H, W, be.to_device(a), be.to_device(b), out))
        return be.to_host(out), a.astype(np.float64)[:, None] + b.astype(np.float64)[None, :]
    n, bins = (int(v) for v in size)
    # Skewed: bin 0 gets about a third of the values, so many lanes of a warp collide.
    values = np.where(rng.random(n) < 0.3, 0, rng.integers(0, bins, n)).astype(np.int32)
    counts = be.to_device(np.zeros(bins, np.uint32))
    fn((_ceil(n, step.block[0]),), step.block, (n, bins, be.to_device(values), counts))
    return be.to_host(counts).astype(np.float64), np.bincount(values, minlength=bins).astype(np.float64)


def check_steps(backend: str | Backend | None = None, steps=None, sizes=None, seed: int = 0,
                races: bool = False) -> CheckTable:
    """Every step at every size against its reference, fresh inputs each time: a row per
    (step, size). ``races=True`` runs the CPU backend's race checker on each launch (a
    histogram without atomics fails it)."""
    def check_one(step, be):
        for i, size in enumerate(CHECK_SIZES[step.check] if sizes is None else sizes):
            if races and be.name == "cpu":
                from . import cpu
                guard = cpu.checking(races=True)
            else:
                guard = contextlib.nullcontext()
            with guard:
                got, want = run(step, size, seed + i, be)
            # Counts are whole numbers: exact; the maps, float32 against float64.
            yield {"kernel": step.kernel, "size": str(size)}, compare(
                got, want, step.precision, tolerance=0.0 if step.check == "histogram" else None,
                name=f"{step.kernel} {size}")
    return ladder.check_steps(steps or STEPS, check_one, backend)

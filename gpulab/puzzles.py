"""Short kernel exercises in the style of GPU-Puzzles, for a chapter with no ladder (basics).

The puzzles are a :class:`gpulab.ladder.Chapter` like every ladder: each puzzle is a step with
its launch family (a map over a vector, a 2-D broadcast, a histogram), each family's cases are
sizes of its kind, and :data:`CHAPTER`'s ``check`` runs a puzzle on seeded random inputs of
every case of its kind against a NumPy reference, in the one check-table schema.
:mod:`gpulab.exercises` finds them through the exercise's ``module``; the grader's hidden checks
pass other sizes, seeds and ``races=True``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import ladder
from .check import compare
from .kernels import load_module

NAME = "basics"


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


# ------------------------------------------------------------------ the cases, one kind per family
@dataclass(frozen=True)
class Vector(ladder.Case):
    """A map's case: ``n`` floats in [-1, 1), y = relu(x)."""

    n: int
    output_name = "y"

    @property
    def columns(self) -> dict:
        return {"size": str(self.n)}

    def inputs(self, seed, precision="fp32"):
        return {"x": np.random.default_rng(seed).uniform(-1, 1, self.n).astype(np.float32)}

    def reference(self, inputs, precision="fp32"):
        return np.maximum(inputs["x"].astype(np.float64), 0.0)

    def output(self, precision="fp32"):
        return (self.n,), np.float32


@dataclass(frozen=True)
class Grid(ladder.Case):
    """A broadcast's case: out[r, c] = a[r] + b[c] over H rows and W columns."""

    H: int
    W: int

    @property
    def columns(self) -> dict:
        return {"size": str((self.H, self.W))}

    def inputs(self, seed, precision="fp32"):
        rng = np.random.default_rng(seed)
        return {"a": rng.uniform(-1, 1, self.H).astype(np.float32), "b": rng.uniform(-1, 1, self.W).astype(np.float32)}

    def reference(self, inputs, precision="fp32"):
        return inputs["a"].astype(np.float64)[:, None] + inputs["b"].astype(np.float64)[None, :]

    def output(self, precision="fp32"):
        return (self.H, self.W), np.float32


@dataclass(frozen=True)
class Values(ladder.Case):
    """A histogram's case: ``n`` bin numbers below ``bins``, skewed: bin 0 gets about a third of
    them, so many lanes of a warp add to one bin at once. The counts start at zero (what
    atomicAdd adds to), an input the kernel updates, and are compared exactly."""

    n: int
    bins: int
    updated = ("counts",)

    @property
    def columns(self) -> dict:
        return {"size": str((self.n, self.bins))}

    def inputs(self, seed, precision="fp32"):
        rng = np.random.default_rng(seed)
        values = np.where(rng.random(self.n) < 0.3, 0, rng.integers(0, self.bins, self.n)).astype(np.int32)
        return {"values": values, "counts": np.zeros(self.bins, np.uint32)}

    def reference(self, inputs, precision="fp32"):
        return np.bincount(inputs["values"], minlength=self.bins).astype(np.float64)

    def outputs(self, precision="fp32"):
        return {}                    # the counts are an input, updated in place

    def comparisons(self, step, inputs, arrays):
        result = compare(arrays["counts"].astype(np.float64), self.reference(inputs), step.precision,
                         tolerance=0.0, name=self.label(step))     # counts are whole numbers: exact
        return [(self.check_columns(step, inputs, arrays["counts"]), result)]


# ------------------------------------------------------------------ the launch families
@dataclass(frozen=True)
class Family(ladder.Launcher):
    """A puzzle's launch family: the case kind it runs on, the default sizes of its check and
    how its kernel is launched (one thread per element, the block given by the step)."""

    case_type = ladder.Case
    sizes: tuple = ()

    def accepts(self, case) -> bool:
        return isinstance(case, self.case_type)

    def case(self, size):
        """The case of ``size``: n, or a pair (H, W) or (n, bins), the case type's fields in order."""
        return self.case_type(*(int(v) for v in np.atleast_1d(size)))

    def cases(self, sizes=None) -> list:
        return [self.case(size) for size in (self.sizes if sizes is None else sizes)]


@dataclass(frozen=True)
class Map(Family):
    case_type = Vector

    def bind(self, step, case, arrays, backend):
        fn = load_module(step.file, backend).get_function(step.kernel)
        return fn.bind((_ceil(case.n, step.block[0]),), step.block, (case.n, arrays["x"], arrays["y"]))


@dataclass(frozen=True)
class Broadcast(Family):
    case_type = Grid

    def bind(self, step, case, arrays, backend):
        fn = load_module(step.file, backend).get_function(step.kernel)
        return fn.bind((_ceil(case.W, step.block[0]), _ceil(case.H, step.block[1])), step.block,
                       (case.H, case.W, arrays["a"], arrays["b"], arrays["out"]))


@dataclass(frozen=True)
class Histogram(Family):
    case_type = Values

    def bind(self, step, case, arrays, backend):
        fn = load_module(step.file, backend).get_function(step.kernel)
        return fn.bind((_ceil(case.n, step.block[0]),), step.block,
                       (case.n, case.bins, arrays["values"], arrays["counts"]))


#: The families and their checks' sizes when none are given: n for the map, (H, W) for the
#: broadcast, (n, bins) for the histogram.
MAP = Map(sizes=(1, 255, 1000, 4099))
BROADCAST = Broadcast(sizes=((1, 1), (5, 70), (33, 17)))
HISTOGRAM_FAMILY = Histogram(sizes=((1000, 16), (257, 3)))
FAMILIES = (MAP, BROADCAST, HISTOGRAM_FAMILY)


@dataclass(frozen=True)
class Step(ladder.Step):
    """One puzzle kernel: its kernel's name and its block shape (its family is its launcher)."""

    kernel: str = ""
    block: tuple = (256,)
    launcher: ladder.Launcher = field(default=MAP, kw_only=True)


GUARDED_MAP = Step("E1", "basics/exercise_01_relu.cu", "a map with a guard", kernel="relu", block=(256,))
TWO_D = Step("E2", "basics/exercise_02_broadcast_add.cu", "two dimensions", kernel="broadcast_add",
             block=(32, 8), launcher=BROADCAST)
HISTOGRAM = Step("E3", "basics/exercise_03_histogram.cu", "a histogram with atomics", kernel="histogram",
                 block=(256,), launcher=HISTOGRAM_FAMILY)
STEPS = [GUARDED_MAP, TWO_D, HISTOGRAM]


def cases(sizes=None) -> list:
    """The cases ``sizes`` names, of every kind a size can be (an int: a vector; a pair: a grid
    and a histogram's values and bins); each puzzle is checked on its own kind's
    (``Launcher.accepts``). None: every family's default sizes."""
    if sizes is None:
        return [case for family in FAMILIES for case in family.cases()]
    made = []
    for size in sizes:
        pair = np.ndim(size) == 1 and len(size) == 2
        if not pair and np.ndim(size) != 0:
            raise ValueError(f"a puzzle's size is n (an int) or a pair (H, W) or (n, bins), got {size!r}")
        made += [BROADCAST.case(size), HISTOGRAM_FAMILY.case(size)] if pair else [MAP.case(size)]
    return made


CHAPTER = ladder.Chapter(NAME, "The puzzles of the basics chapter", STEPS, cases(), cases=cases, seed=0)

"""The hopper chapter's kernel exercise: step 3's producer (``kernels/hopper/exercise_03_producer.cu``),
written by the student and checked on the CPU backend's emulation of TMA and mbarriers.

:data:`EXERCISE` is step 3 with the exercise's file and kernel; :func:`check_steps` checks it as
the chapter checks its steps (C against the float64 product at sizes that are not multiples of
the tile), optionally under another order of the block's threads (``schedule``: a producer that
refills a slot before every warp has read it may pass in one order and not in another). The
exercise's declaration (``book/hopper/exercises.py``) names this module, as basics' names
:mod:`gpulab.puzzles`, so that the chapter's workload package is not changed for it.
"""
from __future__ import annotations

import contextlib
import dataclasses

import pandas as pd

from .workloads import hopper

#: Step 3 with the student's producer: the same launch, tile, ring and check.
EXERCISE = dataclasses.replace(hopper.CHAPTER.step("03"),
                               file="hopper/exercise_03_producer.cu", kernel="gemm_ring_exercise",
                               title="exercise: step 3's producer")
#: Sizes the public check runs: K of 11 and 3 slices (more and fewer slices than the ring's 5
#: slots), M and N not multiples of the 128 x 128 tile.
CHECK_SHAPES = ((200, 136, 712), (72, 264, 200))


def check_steps(backend=None, steps=None, shapes=CHECK_SHAPES, seed=None, schedule: str | None = None):
    """``steps`` (default: :data:`EXERCISE`) at each of ``shapes`` against the float64 product, in
    the ladder's check table; ``schedule`` ("in_order", "reverse", "shuffle") runs the CPU backend's
    blocks with their threads in that order."""
    from .kernels import get_backend
    be = get_backend(backend)
    guard = contextlib.nullcontext()
    if schedule is not None and be.name == "cpu":
        from . import cpu
        guard = cpu.checking(schedule=schedule, seed=seed or 0)
    with guard:
        return hopper.CHAPTER.check(be, steps=steps or [EXERCISE], shapes=[tuple(s) for s in shapes], seed=seed)


def your_prediction(numbers: dict, blocks_02=None, blocks_03=None, speedup_03=None) -> pd.DataFrame:
    """The reader's prediction for step 3 (made before its time is shown) beside the run:
    blocks of steps 2 and 3 per SM (from the run's resources, by the SM's limits) and step 2's
    time over step 3's. ``numbers`` is the chapter's ``views.numbers(run)``; a prediction not
    made (None) reads "not made"."""
    rows = [("blocks of step 2 per SM", blocks_02, numbers["blocks02"]),
            ("blocks of step 3 per SM", blocks_03, numbers["blocks03"]),
            ("step 2's time / step 3's", speedup_03, numbers["t02"] / numbers["t03"])]
    out = pd.DataFrame([{"": what, "your prediction": "not made" if mine is None else mine,
                         "the run": round(float(run), 2) if isinstance(run, float) else run}
                        for what, mine, run in rows]).set_index("")
    return out

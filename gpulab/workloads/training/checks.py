"""A short training run's loss curve with a step's kernels against the float64 reference's (the
one-step check of every quantity is the chapter's case: :class:`.problem.SgdStep`, checked by
``CHAPTER.check``), and the sweep's test of a configuration that broke training."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ... import ladder
from ...check import CheckTable
from ...kernels import get_backend
from . import data, reference
from .launchers import buffers
from .problem import Dims, SgdStep
from .steps import STEPS, Step

#: The loss curves' learning rate: with a 1,001-word vocabulary every word is
#: ~30x more frequent than in the chapter's, so the chapter's rate would be too large.
CURVE_LR = 0.1
#: Loss-curve tolerance: largest relative difference per SGD step.
CURVE_TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2}


def loss_curve(step_: Step, backend=None, dims: Dims = Dims(B=64, V=1001), steps: int = 6,
               lr: float = CURVE_LR, seed: int = 0, **launch) -> np.ndarray:
    """The loss of ``steps`` consecutive SGD steps run with ``step_``'s
    kernels from the reference's initial weights, on consecutive batches
    (``launch``: a launch configuration other than the step's, ``block=`` or ``options=``)."""
    be = get_backend(backend)
    step_ = replace(step_, **launch)
    case = SgdStep(dims, lr=lr).for_step(step_)
    corpus_ = data.sample(dims.B * steps, dims.V, stream=200 + seed)
    params = reference.init_params(dims.V, dims.H)
    losses = np.empty(steps)
    for s in range(steps):
        batch = corpus_.rows(s * dims.B, (s + 1) * dims.B)
        bufs = buffers(be, step_, dims, batch, params)
        ladder.bind(step_, case, bufs, be)()
        be.synchronize()
        losses[s] = float(be.to_host(bufs["loss"])[0])
        params = {k: be.to_host(bufs[k]) for k in reference.PARAMS}
    return losses


def reference_curve(dims: Dims = Dims(B=64, V=1001), steps: int = 6, lr: float = CURVE_LR,
                    seed: int = 0) -> np.ndarray:
    corpus_ = data.sample(dims.B * steps, dims.V, stream=200 + seed)
    return reference.train(corpus_, reference.init_params(dims.V, dims.H), dims.B, steps, lr)[1]


#: A configuration is broken when its loss curve leaves the reference
#: configuration's by more than this (relative, at any step), or is not finite.
BROKEN_DEVIATION = 1e-3


def curve_deviation(curve, ref) -> float:
    """Largest relative difference between two loss curves (inf if ``curve`` is not finite)."""
    curve, ref = np.asarray(curve, np.float64), np.asarray(ref, np.float64)
    if curve.shape != ref.shape:
        raise ValueError(f"loss curves of different lengths: {curve.shape} and {ref.shape}")
    if not np.isfinite(curve).all():
        return float("inf")
    return float(np.max(np.abs(curve - ref) / np.abs(ref)))


def is_broken(curve, ref, tolerance: float = BROKEN_DEVIATION) -> bool:
    """Whether a configuration's training diverged from the reference configuration's."""
    return curve_deviation(curve, ref) > tolerance


def check_curves(backend=None, steps=None, dims: Dims = Dims(B=64, V=1001), n: int = 6) -> pd.DataFrame:
    """Each step's loss curve against the float64 reference's: the largest
    relative difference over ``n`` SGD steps, and whether it is within
    :data:`CURVE_TOLERANCE`."""
    ref = reference_curve(dims, n)
    rows = []
    for s in steps or STEPS:
        curve = loss_curve(s, backend, dims, n)
        worst = curve_deviation(curve, ref)
        rows.append({"step": s.number, "first loss": curve[0], f"loss after {n} steps": curve[-1],
                     "reference": ref[-1], "largest relative difference": worst,
                     "tolerance": CURVE_TOLERANCE[s.precision],
                     "status": ladder.OK if worst <= CURVE_TOLERANCE[s.precision] else ladder.FAILED})
    return CheckTable(rows, caption=get_backend(backend).caption)

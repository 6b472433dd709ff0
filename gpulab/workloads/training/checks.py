"""Every step against the float64 reference: one SGD step (every intermediate
and every parameter update) and a short training run's loss curve."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ... import ladder
from ...check import CheckTable, compare
from ...kernels import get_backend
from . import data, reference
from .steps import STEPS, BoundStep, Config, Dims, Step, buffers, step_kernels

#: Check sizes: an odd batch (no block shape divides it) and an odd vocabulary.
CHECK_DIMS = (Dims(B=37, V=1001), Dims(B=130, V=2999))
#: The learning rate of the one-step check: large, so that the update
#: W_new - W_old stands well above float32's rounding of W itself.
CHECK_LR = 16.0
#: The loss curves' learning rate: with a 1,001-word vocabulary every word is
#: ~30x more frequent than in the chapter's, so the chapter's rate would be too large.
CURVE_LR = 0.1
#: Loss-curve tolerance: largest relative difference per SGD step.
CURVE_TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2}


def _labels_for(batch, d: Dims):
    """The batch with its topics folded into d.C classes (checks of networks with fewer outputs)."""
    return batch if d.C == data.TOPICS else replace(batch, labels=(batch.labels % d.C).astype(np.int32))


def check_params(d: Dims, seed: int = 0) -> dict:
    """Glorot weights with non-zero biases (so every bias path is exercised)."""
    params = reference.init_params(d.V, d.H, seed=seed + 1)
    rng = np.random.default_rng(seed + 2)
    params["b1"] = rng.normal(0, 0.5, d.H).astype(np.float32)
    params["b2"] = rng.normal(0, 0.5, d.C).astype(np.float32)
    params["W2"] = params["W2"][:, :d.C]
    return params


def check_step(step_: Step, backend=None, dims: Dims = CHECK_DIMS[0], seed: int = 0,
               config: Config | None = None) -> CheckTable:
    """One SGD step of ``step_`` from fresh weights on a fresh batch against
    the float64 reference: the loss, the intermediates the step stores, and
    the update of every parameter (new - old against -lr x gradient)."""
    return ladder.check_steps([step_], lambda s, be: _compare_sgd_step(s, be, dims, seed, config), backend)


def _compare_sgd_step(step_: Step, be, dims: Dims, seed: int, config: Config | None = None):
    """(columns, result) per quantity of one SGD step (see :func:`gpulab.ladder.check_steps`)."""
    config = config or Config(lr=CHECK_LR)
    batch = _labels_for(data.sample(dims.B, dims.V, stream=100 + seed), dims)
    params = check_params(dims, seed)
    bufs = buffers(be, step_, dims, batch, params)
    BoundStep(step_, dims, bufs, config, be)()
    be.synchronize()
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    acts = reference.forward(batch, p64)
    grads = reference.backward(batch, batch.labels, p64, acts)
    refs = {"loss": np.array([reference.loss(acts["P"], batch.labels)]), "p": acts["P"], "h": acts["H"],
            "dz2": grads["dZ2"], "dz1": grads["dZ1"]}
    quantities = [(name, be.to_host(bufs[name]), ref) for name, ref in refs.items() if name in bufs]
    quantities += [(f"update of {k}", be.to_host(bufs[k]).astype(np.float64) - p64[k], -config.lr * grads["d" + k])
                   for k in reference.PARAMS]
    for name, out, ref in quantities:
        yield ({"B": dims.B, "V": dims.V, "quantity": name},
               compare(np.asarray(out).reshape(np.shape(ref)), ref, step_.precision, name=f"{step_.label}: {name}"))


def check_steps(backend=None, steps=None, dims=CHECK_DIMS, seed: int = 0) -> CheckTable:
    """:func:`check_step` for every step and check size; one row per quantity."""
    def check_one(step_, be):
        for i, d in enumerate(dims):
            yield from _compare_sgd_step(step_, be, d, seed + i)
    return ladder.check_steps(steps or STEPS, check_one, backend)


def loss_curve(step_: Step, backend=None, dims: Dims = Dims(B=64, V=1001), steps: int = 6,
               lr: float = CURVE_LR, seed: int = 0, config: Config | None = None) -> np.ndarray:
    """The loss of ``steps`` consecutive SGD steps run with ``step_``'s
    kernels from the reference's initial weights, on consecutive batches
    (``config``: a launch configuration other than the default)."""
    be = get_backend(backend)
    config = replace(config, lr=lr) if config is not None else Config(lr=lr)
    corpus_ = data.sample(dims.B * steps, dims.V, stream=200 + seed)
    params = reference.init_params(dims.V, dims.H)
    fns = step_kernels(step_, dims, config, be)
    losses = np.empty(steps)
    for s in range(steps):
        batch = corpus_.rows(s * dims.B, (s + 1) * dims.B)
        bufs = buffers(be, step_, dims, batch, params)
        BoundStep(step_, dims, bufs, config, be, fns)()
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

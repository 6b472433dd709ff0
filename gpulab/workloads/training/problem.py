"""The problem every step solves, declared once: one SGD step of the 32,754-128-4 classifier on a
batch of B documents (:class:`Dims`), the seeded inputs a check runs on and their float64
reference (:mod:`.reference`). An :class:`SgdStep` (a batch's dimensions, and the input form and
buffers a step's family uses) is one case; a check compares every quantity the step stores and
the update of every parameter, one check row each.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ... import ladder
from ...check import CheckResult, compare
from . import data, reference
from .reference import CLASSES, HIDDEN, PARAMS

NAME = "training"
TITLE = "Training a one-hidden-layer classifier on the GPU, from one kernel per operation to a fused step"
#: The batch sizes the run times every step at, and the one the chapter's figures quote.
BATCHES = (32, 64, 128, 256, 512, 1024, 2048)
MAIN_BATCH = 1024


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Dims:
    """The batch's documents B, the vocabulary V, hidden units H, classes C."""

    B: int
    V: int
    H: int = HIDDEN
    C: int = CLASSES

    def __post_init__(self):
        for name in ("B", "V", "H", "C"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive size, got {getattr(self, name)}")
        if self.C > 8:
            raise ValueError(f"the kernels handle at most 8 classes, got C = {self.C}")

    @property
    def Vp(self) -> int:
        """The vocabulary padded to a multiple of 8 (the fp16 copies of step 8)."""
        return _cdiv(self.V, 8) * 8


#: Check sizes: an odd batch (no block shape divides it) and an odd vocabulary.
CHECK_DIMS = (Dims(B=37, V=1001), Dims(B=130, V=2999))
#: The learning rate of the one-step check: large, so that the update
#: W_new - W_old stands well above float32's rounding of W itself.
CHECK_LR = 16.0
#: The intermediates a check compares, where the step stores them, and their reference's name.
STORED = {"p": "P", "h": "H", "dz2": "dZ2", "dz1": "dZ1"}


def labels_for(batch: data.Corpus, d: Dims) -> data.Corpus:
    """The batch with its topics folded into d.C classes (checks of networks with fewer outputs)."""
    return batch if d.C == data.TOPICS else dataclasses.replace(batch, labels=(batch.labels % d.C).astype(np.int32))


def check_params(d: Dims, seed: int = 0) -> dict:
    """Glorot weights with non-zero biases (so every bias path is exercised)."""
    params = reference.init_params(d.V, d.H, seed=seed + 1)
    rng = np.random.default_rng(seed + 2)
    params["b1"] = rng.normal(0, 0.5, d.H).astype(np.float32)
    params["b2"] = rng.normal(0, 0.5, d.C).astype(np.float32)
    params["W2"] = params["W2"][:, :d.C]
    return params


def half_copy(w1: np.ndarray, rows: int) -> np.ndarray:
    """W1 in fp16, zero-padded to ``rows`` rows (step 8's W1h)."""
    out = np.zeros((rows, w1.shape[1]), np.float16)
    out[:len(w1)] = w1
    return out


def scratch_shapes(d: Dims) -> dict[str, tuple]:
    """Every intermediate a step may use, by name (float32)."""
    B, V, H, C = d.B, d.V, d.H, d.C
    return {"z1": (B, H), "h": (B, H), "z2": (B, C), "e": (B, C), "p": (B, C), "logp": (B, C), "prod": (B, C),
            "dz2": (B, C), "hT": (H, B), "dW2": (H, C), "db2": (C,), "W2T": (C, H), "dh": (B, H),
            "t1": (B, H), "t2": (B, H), "dz1": (B, H), "xT": (V, B), "dW1": (V, H), "db1": (H,),
            "loss_terms": (B,), "loss": (1,)}


def batch_inputs(batch: data.Corpus, d: Dims, params: dict, form: str, uses=frozenset(), x: bool = True) -> dict:
    """The host arrays a step of input form ``form`` ("dense": X is B x V; "dense16": B x Vp in
    fp16; "sparse": CSR rows) reads for ``batch``: the parameters (float32 copies: the step updates
    them in place), the labels (one-hot too where the step reads ``yhot``), the batch (unless
    ``x`` is False: the caller supplies it), and step 8's fp16 copy of W1."""
    if batch.docs != d.B or batch.vocab != d.V:
        raise ValueError(f"the batch has {batch.docs} documents over {batch.vocab} words; "
                         f"the dimensions say B = {d.B}, V = {d.V}")
    arrays = {k: np.ascontiguousarray(v, np.float32) for k, v in params.items()}
    arrays["labels"] = batch.labels.astype(np.int32)
    if "yhot" in uses:
        arrays["yhot"] = np.eye(d.C, dtype=np.float32)[batch.labels]
    if not x:
        pass
    elif form == "sparse":
        arrays["indptr"] = batch.indptr.astype(np.int32)
        arrays["indices"] = batch.indices.astype(np.int32)
        arrays["values"] = batch.values
    elif form == "dense16":
        x16 = np.zeros((d.B, d.Vp), np.float16)
        x16[:, :d.V] = batch.dense(np.float32)
        arrays["x16"] = x16
    else:
        arrays["x"] = batch.dense(np.float32)
    if "W1h" in uses:
        arrays["W1h"] = half_copy(params["W1"], d.Vp)
    return arrays


def scratch(d: Dims, uses) -> dict[str, tuple[tuple, np.dtype]]:
    """The intermediates a step whose launches use the buffers ``uses`` writes: (shape, dtype) by name."""
    out = {name: (shape, np.float32) for name, shape in scratch_shapes(d).items() if name in uses}
    if "dz1h" in uses:
        out["dz1h"] = ((d.B, d.H), np.float16)
    return out


@dataclass(frozen=True)
class SgdStep(ladder.Case):
    """One SGD step on a batch of ``dims.B`` documents over ``dims.V`` words, at learning rate
    ``lr``, from Glorot weights with non-zero biases. The batch, the weights and the step's input
    form (``form``) and buffers (``uses``) come with the step (:meth:`for_step`); check case
    ``index`` of seed s reads the inputs of seed s + index (each size its own). Its check compares
    the loss, the intermediates the step stores and the update of every parameter (new - old
    against -lr x gradient) with the float64 reference."""

    dims: Dims
    index: int = 0
    lr: float = CHECK_LR
    form: str = "dense"
    uses: frozenset = frozenset()
    output_name = "loss"
    updated = PARAMS

    @property
    def columns(self) -> dict:
        return {"B": self.dims.B, "V": self.dims.V}

    def for_step(self, step) -> "SgdStep":
        return dataclasses.replace(self, form=step.launcher.input, uses=frozenset(step.launcher.uses(step, self.dims)))

    def _seed(self, seed: int | None) -> int:
        return self.index + (int(np.random.default_rng().integers(1 << 30)) if seed is None else seed)

    def inputs(self, seed, precision="fp32") -> dict:
        seed = self._seed(seed)
        batch = labels_for(data.sample(self.dims.B, self.dims.V, stream=100 + seed), self.dims)
        arrays = batch_inputs(batch, self.dims, check_params(self.dims, seed), self.form, self.uses)
        # The reference reads the batch itself (the counts, not the rounded inputs of any form).
        return {**arrays, "indptr": batch.indptr.astype(np.int32), "indices": batch.indices.astype(np.int32),
                "values": batch.values, "counts": batch.counts}

    def batch(self, inputs: dict) -> data.Corpus:
        return data.Corpus(inputs["indptr"].astype(np.int64), inputs["indices"], inputs["counts"], inputs["labels"],
                           self.dims.V)

    def reference(self, inputs, precision="fp32") -> dict:
        """The float64 reference of every quantity a check compares, by the check's name for it."""
        batch = self.batch(inputs)
        p64 = {k: inputs[k].astype(np.float64) for k in PARAMS}
        acts = reference.forward(batch, p64)
        grads = reference.backward(batch, batch.labels, p64, acts)
        refs = {"loss": np.array([reference.loss(acts["P"], batch.labels)])}
        refs.update({name: (acts if ref in acts else grads)[ref] for name, ref in STORED.items()})
        refs.update({f"update of {k}": -self.lr * grads["d" + k] for k in PARAMS})
        return refs

    def output(self, precision="fp32"):
        return (1,), np.float32

    def outputs(self, precision="fp32") -> dict:
        return scratch(self.dims, self.uses | {"loss"})

    def comparisons(self, step, inputs, arrays) -> list[tuple[dict, CheckResult]]:
        rows = []
        for name, ref in self.reference(inputs, step.precision).items():
            if name.startswith("update of "):
                k = name.removeprefix("update of ")
                out = arrays[k].astype(np.float64) - inputs[k].astype(np.float64)
            elif name in arrays:
                out = arrays[name]
            else:                      # an intermediate this step does not store
                continue
            rows.append(({**self.columns, "quantity": name},
                         compare(np.asarray(out).reshape(np.shape(ref)), ref, step.precision,
                                 name=f"{step.label}: {name}")))
        return rows

    def label(self, step) -> str:
        return f"{step.label} B={self.dims.B} V={self.dims.V}"


def cases(dims=CHECK_DIMS) -> list[SgdStep]:
    """The check's cases: one SGD step at each of ``dims`` (the i-th reads the inputs of seed + i)."""
    return [SgdStep(d, index=i) for i, d in enumerate(dims)]

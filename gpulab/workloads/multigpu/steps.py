"""The multigpu chapter's ladder: the six kernels a replica adds to the training chapter's
step 9 (``kernels/multigpu/NN_*.cu``), declared as steps (:mod:`gpulab.ladder`), and one check
loop that runs each on one replica's share of a small batch against the float64 reference.

The data-parallel step itself (replicas, buckets, the all-reduce, the GPU streams) is declared in
:mod:`.replicas` and :mod:`.workers`; each of its forms launches these kernels, so checking them
here, kernel by kernel, is what :func:`gpulab.ladder.check_steps` does for every chapter. The
variants the run compares (plain, bucketed, overlapped) are launch configurations of these
kernels, :data:`~.workers.OVERLAPS`, each checked again by the record against the plain step.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import ladder
from ...check import CheckTable, compare
from ..training import data, reference
from ..training.reference import LEARNING_RATE, PARAMS
from .replicas import Bucket, Layout, Replica, row_work, split_batch

CHAPTER = "multigpu"
#: The check's sizes: a 1,001-word vocabulary and 74 documents split over two replicas (37 each,
#: odd: no kernel may assume a multiple of its block or of 2).
CHECK_V, CHECK_B, REPLICAS = 1001, 74, 2
#: W1's buckets in the check (cut at equal work, rarest words first, as the record cuts them).
CHECK_BUCKETS = 3


@dataclass(frozen=True)
class Step(ladder.Step):
    """One kernel of the chapter: its file, its kernel and what the check compares."""

    kernel: str
    checks: str


STEPS = [
    Step("01", "multigpu/01_w1_gradient_buckets.cu", "W1's gradient one bucket of rows at a time", "w1_gradient_rows",
         "each bucket's rows of dW1 (the other rows untouched)"),
    Step("02", "multigpu/02_update_and_zero.cu", "the update of a flat range, its gradient zeroed", "sgd_update_zero",
         "w - lr g over the range, and g = 0 there"),
    Step("03", "multigpu/03_small_gradients.cu", "the small parameters' gradient, coalesced", "small_gradients",
         "dW2, db1, db2 and the loss"),
    Step("04", "multigpu/04_first_bucket_and_small.cu", "the first bucket and the small gradients in one launch",
         "first_bucket_and_small", "the first bucket's rows of dW1 and dW2, db1, db2"),
    Step("05", "multigpu/05_forward_and_first_bucket.cu", "the first bucket's gradient in the forward kernel",
         "forward_and_first_bucket", "dZ1 and the first bucket's rows of dW1"),
    Step("06", "multigpu/06_peer_update.cu", "the all-reduce fused with the update, reading the peer's gradient",
         "peer_sgd_update", "w - lr (g + g_peer) over two ranges (one unaligned), w elsewhere untouched"),
]


def check_batch(seed_stream: int = 300) -> data.Corpus:
    return data.sample(CHECK_B, CHECK_V, stream=seed_stream)


def _replica(batch: data.Corpus, be) -> Replica:
    """Replica 0 of REPLICAS on ``batch`` (gradient form), after its forward pass, gradient zeroed."""
    cut = Layout(batch.vocab).buckets(CHECK_BUCKETS, row_work(batch))
    r = Replica(split_batch(batch, REPLICAS)[0], reference.init_params(batch.vocab), batch.docs, be, buckets=cut)
    r.forward_backward()
    r.zero_gradient()
    return r


def _reference(r: Replica, batch: data.Corpus) -> dict:
    """Replica 0's share of the whole batch's float64 gradient (its documents' terms, divided by
    the whole batch's size: the mean over its documents times its share of them), and the mean
    loss over its documents, which the kernels write."""
    part = split_batch(batch, REPLICAS)[0]
    p64 = {k: v.astype(np.float64) for k, v in reference.init_params(batch.vocab).items()}
    acts = reference.forward(part, p64)
    grads = reference.backward(part, part.labels, p64, acts)
    share = part.docs / batch.docs
    out = {k: grads["d" + k] * share for k in (*PARAMS, "Z1")}
    out["loss"] = reference.loss(acts["P"], part.labels)
    return out


def check_steps(backend=None, steps=None, seed_stream: int = 300) -> CheckTable:
    """Every step against the float64 reference on replica 0's share of a small batch."""
    def check_one(step: Step, be):
        batch = check_batch(seed_stream)
        r = _replica(batch, be)
        ref = _reference(r, batch)
        g = r.layout.views(r.grad)
        if step.number == "01":
            for k, bucket in enumerate(r.buckets[1:], start=1):
                r.zero_gradient()
                r.backward_bucket(k)
                a, b = bucket.rows
                want = np.zeros_like(ref["W1"])
                want[a:b] = ref["W1"][a:b]
                yield {"case": bucket.name}, compare(be.to_host(g["W1"]), want, step.precision,
                                                     name=f"{step.kernel}, {bucket.name}")
        elif step.number == "05":
            r.scratch["dz1"][...] = np.nan
            r.forward_and_first_bucket()
            yield {"case": "dZ1"}, compare(be.to_host(r.scratch["dz1"]), ref["Z1"], step.precision,
                                           name=f"{step.kernel}: dZ1")
            a, b = r.buckets[1].rows
            want = np.zeros_like(ref["W1"])
            want[a:b] = ref["W1"][a:b]
            yield {"case": r.buckets[1].name}, compare(be.to_host(g["W1"]), want, step.precision,
                                                       name=f"{step.kernel}: {r.buckets[1].name}")
        elif step.number == "06":
            # Without its flags (sync off: no other GPU here) the kernel reads both gradients and writes w alone.
            rng = np.random.default_rng(seed_stream)
            w, d, e = (rng.uniform(-1, 1, r.layout.size).astype(np.float32) for _ in range(3))
            r.flat[...], r.grad[...] = be.to_device(w), be.to_device(d)
            spans = [Bucket("rows", 128, 128 + 40 * r.layout.H), Bucket("tail", r.layout.size - 645, r.layout.size - 1)]
            flags = be.xp.zeros(16, np.uint32)
            r.peer_update(spans, be.to_device(e), flags, flags, flags, 0, 7, sync=False)()
            want = w.astype(np.float64)
            for b in spans:
                want[b.start:b.stop] -= np.float64(np.float32(LEARNING_RATE)) * (d[b.start:b.stop].astype(np.float64)
                                                                                 + e[b.start:b.stop])
            yield {"case": "w over two ranges"}, compare(be.to_host(r.flat), want, step.precision,
                                                         name=f"{step.kernel}: w")
        elif step.number == "02":
            rng = np.random.default_rng(seed_stream)
            for lo, hi in ((0, r.layout.size), (3, 3 + 1001)):     # the whole buffer; an unaligned range
                w = rng.uniform(-1, 1, r.layout.size).astype(np.float32)
                d = rng.uniform(-1, 1, r.layout.size).astype(np.float32)
                r.flat[...] = be.to_device(w)
                r.grad[...] = be.to_device(d)
                r.update(Bucket(f"[{lo}, {hi})", lo, hi))()
                want = w.astype(np.float64)
                want[lo:hi] -= np.float64(np.float32(LEARNING_RATE)) * d[lo:hi]
                left = d.astype(np.float64)
                left[lo:hi] = 0.0
                yield {"case": f"w over [{lo}, {hi})"}, compare(be.to_host(r.flat), want, step.precision,
                                                                  name=f"{step.kernel}: w")
                # g must be 0 over the range and untouched outside it: 1 + g against 1 + the expected g
                yield {"case": f"g over [{lo}, {hi})"}, compare(1.0 + be.to_host(r.grad).astype(np.float64),
                                                                  1.0 + left, step.precision,
                                                                  name=f"{step.kernel}: g")
        else:
            if step.number == "03":
                r.small_gradients()
                first = None
            else:
                r.first_bucket_and_small()
                first = r.buckets[1]
            for k in ("W2", "b1", "b2"):
                yield {"case": k}, compare(be.to_host(g[k]), ref[k], step.precision, name=f"{step.kernel}: d{k}")
            yield {"case": "loss"}, compare(np.array([r.loss]), np.array([ref["loss"]]), step.precision,
                                            name=f"{step.kernel}: loss")
            if first is not None:
                a, b = first.rows
                want = np.zeros_like(ref["W1"])
                want[a:b] = ref["W1"][a:b]
                yield {"case": first.name}, compare(be.to_host(g["W1"]), want, step.precision,
                                                    name=f"{step.kernel}: {first.name}")
    return ladder.check_steps(steps or STEPS, check_one, backend)

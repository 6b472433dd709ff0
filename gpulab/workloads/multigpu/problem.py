"""The problem the chapter's kernels are checked on, declared once: replica 0 of two on a small
batch (a 1,001-word vocabulary, 74 documents: 37 each, odd, so that no kernel may assume a
multiple of its block or of 2), W1's gradient cut into 3 buckets as the record cuts them, its
seeded inputs and the float64 reference of what its kernels compute.

A :class:`ReplicaShare` is the one check case. What a step's kernel writes differs from family to
family (W1's rows of one bucket, the small parameters' gradient and the loss, an updated flat
range), so the case a step is checked on carries its family (:meth:`ReplicaShare.for_step`), which
names the arrays it writes and compares them (:mod:`.launchers`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ... import ladder
from ..training import data, reference
from ..training.reference import PARAMS
from .replicas import Bucket, Layout, Replica, row_work, split_batch

NAME = "multigpu"
TITLE = "When one GPU is not enough: data-parallel training on two GPUs with NCCL"
#: The check's sizes: a 1,001-word vocabulary and 74 documents split over two replicas (37 each,
#: odd: no kernel may assume a multiple of its block or of 2).
CHECK_V, CHECK_B, REPLICAS = 1001, 74, 2
#: W1's buckets in the check (cut at equal work, rarest words first, as the record cuts them).
CHECK_BUCKETS = 3
#: The check's seed: the batch's stream of the corpus, and the seed of the random buffers the
#: update kernels read.
SEED = 300
#: The batch's arrays in a case's inputs (as :class:`~..training.data.Corpus` holds them).
BATCH = ("indptr", "indices", "counts", "labels")


@dataclass(frozen=True)
class ReplicaShare(ladder.Case):
    """Replica 0 of ``replicas`` on a batch of ``docs`` documents over ``vocab`` words (stream s of
    the training chapter's corpus for seed s), from the training chapter's initial weights, W1's
    gradient in ``buckets`` buckets. ``family`` is the launch family of the step checked on it (set
    by :meth:`for_step`): what it writes (``outputs``, poisoned; ``updated``, inputs of known values
    the kernel writes in place) and what a check compares."""

    vocab: int = CHECK_V
    docs: int = CHECK_B
    replicas: int = REPLICAS
    buckets: int = CHECK_BUCKETS
    family: ladder.Launcher | None = None

    @property
    def columns(self) -> dict:
        return {"V": self.vocab, "B": self.docs, "replicas": self.replicas}

    @property
    def layout(self) -> Layout:
        return Layout(self.vocab)

    def for_step(self, step) -> "ReplicaShare":
        return dataclasses.replace(self, family=step.launcher)

    def _family(self):
        if self.family is None:
            raise TypeError("a ReplicaShare writes what its step's family writes: take case.for_step(step)")
        return self.family

    def inputs(self, seed, precision="fp32") -> dict:
        """The batch (its CSR, counts and labels) and the arrays the family reads or writes in place,
        the random ones from ``seed`` (None: fresh ones)."""
        seed = int(np.random.default_rng().integers(1 << 30)) if seed is None else seed
        batch = data.sample(self.docs, self.vocab, stream=seed)
        own = {"indptr": batch.indptr, "indices": batch.indices, "counts": batch.counts, "labels": batch.labels}
        return {**own, **self._family().inputs(self, np.random.default_rng(seed))}

    def batch(self, inputs: dict) -> data.Corpus:
        """The whole batch, from a case's (host) inputs."""
        return data.Corpus(*(np.asarray(inputs[k]) for k in BATCH), self.vocab)

    def part(self, batch: data.Corpus) -> data.Corpus:
        """Replica 0's share of the batch."""
        return split_batch(batch, self.replicas)[0]

    def cut(self, batch: data.Corpus) -> list[Bucket]:
        """The gradient's buckets: the small parameters, then W1's rows at equal work, rarest first."""
        return self.layout.buckets(self.buckets, row_work(batch))

    def replica(self, batch: data.Corpus, backend) -> Replica:
        """Replica 0 on ``batch`` (gradient form), its gradient zeroed, its intermediates poisoned."""
        return Replica(self.part(batch), reference.init_params(self.vocab), batch.docs, backend,
                       buckets=self.cut(batch))

    def reference(self, inputs, precision="fp32") -> dict:
        """Replica 0's share of the whole batch's float64 gradient (its documents' terms, divided by
        the whole batch's size: the mean over its documents times its share of them) by parameter,
        with ``Z1`` (dZ1), and the mean loss over its documents, which the kernels write."""
        batch = self.batch(inputs)
        part = self.part(batch)
        p64 = {k: v.astype(np.float64) for k, v in reference.init_params(self.vocab).items()}
        acts = reference.forward(part, p64)
        grads = reference.backward(part, part.labels, p64, acts)
        share = part.docs / batch.docs
        out = {k: grads["d" + k] * share for k in (*PARAMS, "Z1")}
        out["loss"] = reference.loss(acts["P"], part.labels)
        return out

    def output(self, precision="fp32"):
        raise TypeError("a ReplicaShare's step writes several arrays: case.for_step(step).outputs() names them")

    def outputs(self, precision="fp32") -> dict:
        return self._family().outputs(self)

    @property
    def updated(self) -> tuple[str, ...]:
        return self._family().updated(self)

    def comparisons(self, step, inputs, arrays) -> list:
        return self._family().comparisons(step, self, inputs, arrays)

    def label(self, step) -> str:
        return f"{step.label} V={self.vocab} B={self.docs}, replica 0 of {self.replicas}"


def cases() -> list[ReplicaShare]:
    """The check's one case."""
    return [ReplicaShare()]

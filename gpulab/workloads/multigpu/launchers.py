"""How the chapter's kernels are checked: one launch family per kernel of a replica's step, each
binding a step to the check case's arrays (:class:`~.problem.ReplicaShare`) as a no-argument launch
and comparing what it writes with the float64 reference, one check row per quantity.

The kernels are launched as the data-parallel step launches them, through a :class:`~.replicas.Replica`
(its bound launches are the ones :class:`~.gpustep.GpuStep` captures), moved onto the check's arrays
(:meth:`~.replicas.Replica.use_buffers`): what a kernel must write is poisoned (NaN) before the launch,
or, where it accumulates (W1's scatter-add into a zeroed gradient) or updates in place (w -= lr g),
holds known values (zeros, seeded random floats) that a check compares where the kernel must not
write as well as where it must.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ... import ladder
from ...check import compare
from ..training.reference import LEARNING_RATE
from . import replicas
from .problem import BATCH
from .replicas import Bucket, Replica


def _lr64() -> np.float64:
    """The learning rate as the kernels apply it (float32), in float64."""
    return np.float64(np.float32(LEARNING_RATE))


def _zeros(case) -> np.ndarray:
    return np.zeros(case.layout.size, np.float32)


def _only_rows(w1: np.ndarray, bucket: Bucket) -> np.ndarray:
    """``w1``'s rows of ``bucket``, zero elsewhere: a zeroed gradient after that bucket's scatter."""
    a, b = bucket.rows
    out = np.zeros_like(w1)
    out[a:b] = w1[a:b]
    return out


@dataclass(frozen=True)
class Family(ladder.Launcher):
    """A launch family of the chapter: the arrays a step of it reads beyond the batch
    (:meth:`inputs`, seeded), writes (:meth:`outputs`, poisoned) and updates in place
    (:meth:`updated`), its launch on replica 0 moved onto them (:meth:`launch`), and the check rows
    of what it wrote (:meth:`comparisons`). The replica launches its kernels from its own files
    (:mod:`.replicas`): a step of the family names that file (``file``)."""

    #: The kernel file the replica launches the family's kernel from.
    file: ClassVar[str] = ""
    #: Whether the kernel reads the forward pass's intermediates (bind runs the forward pass first).
    after_forward: ClassVar[bool] = True

    def inputs(self, case, rng: np.random.Generator) -> dict:
        return {}

    def outputs(self, case) -> dict:
        return {}

    def updated(self, case) -> tuple[str, ...]:
        return ()

    def launch(self, replica: Replica, case, arrays: dict):
        raise NotImplementedError(f"{type(self).__name__} launches its kernel on a replica")

    def comparisons(self, step, case, inputs: dict, arrays: dict) -> list:
        raise NotImplementedError(f"{type(self).__name__} compares what its kernel wrote")

    def bind(self, step, case, arrays, backend):
        if step.file != self.file:
            raise ValueError(f"step {step.number} names {step.file}, but its family ({type(self).__name__}) "
                             f"launches the replica's {self.file}")
        replica = case.replica(case.batch({k: backend.to_host(arrays[k]) for k in BATCH}), backend)
        if self.after_forward:
            replica.forward_backward()
        return self.launch(replica, case, arrays)


@dataclass(frozen=True)
class BucketGradients(Family):
    """Step 1: W1's gradient one bucket of rows at a time, each W1 bucket's scatter into a zeroed
    gradient of its own; a check row per bucket: its rows of dW1, every other row still zero."""

    file: ClassVar[str] = replicas.BUCKETS

    def _names(self, case) -> list[str]:
        return [f"grad {k}" for k in range(1, case.buckets + 1)]

    def inputs(self, case, rng):
        return {name: _zeros(case) for name in self._names(case)}

    def updated(self, case):
        return tuple(self._names(case))

    def launch(self, replica, case, arrays):
        launches = []
        for k, name in enumerate(self._names(case), start=1):
            replica.use_buffers(grad=arrays[name])
            launches.append(replica.bucket_gradients[k - 1])
        return lambda: [launch() for launch in launches]

    def comparisons(self, step, case, inputs, arrays):
        ref = case.reference(inputs)
        buckets = case.cut(case.batch(inputs))[1:]
        return [({"case": bucket.name},
                 compare(case.layout.views(arrays[name])["W1"], _only_rows(ref["W1"], bucket), step.precision,
                         name=f"{step.kernel}, {bucket.name}"))
                for name, bucket in zip(self._names(case), buckets)]


@dataclass(frozen=True)
class UpdateAndZero(Family):
    """Step 2: ``w -= lr g`` over a flat range and ``g = 0`` there, on seeded random w and g, for
    each of ``ranges`` (``[lo, hi)``; ``hi`` None: the buffer's end): the whole buffer, and an
    unaligned range. Two check rows per range: w, and g (zero over the range, untouched outside)."""

    file: ClassVar[str] = replicas.UPDATE
    after_forward: ClassVar[bool] = False
    ranges: tuple[tuple[int, int | None], ...] = ((0, None), (3, 3 + 1001))

    def spans(self, case) -> list[tuple[int, int]]:
        return [(lo, case.layout.size if hi is None else hi) for lo, hi in self.ranges]

    def inputs(self, case, rng):
        out = {}
        for lo, hi in self.spans(case):       # w then g of each range, in the order of the ranges
            out[f"w over [{lo}, {hi})"] = rng.uniform(-1, 1, case.layout.size).astype(np.float32)
            out[f"g over [{lo}, {hi})"] = rng.uniform(-1, 1, case.layout.size).astype(np.float32)
        return out

    def updated(self, case):
        return tuple(f"{q} over [{lo}, {hi})" for lo, hi in self.spans(case) for q in ("w", "g"))

    def launch(self, replica, case, arrays):
        launches = []
        for lo, hi in self.spans(case):
            replica.use_buffers(flat=arrays[f"w over [{lo}, {hi})"], grad=arrays[f"g over [{lo}, {hi})"])
            launches.append(replica.update(Bucket(f"[{lo}, {hi})", lo, hi)))
        return lambda: [launch() for launch in launches]

    def comparisons(self, step, case, inputs, arrays):
        rows = []
        for lo, hi in self.spans(case):
            w, g = (f"{q} over [{lo}, {hi})" for q in ("w", "g"))
            d = inputs[g]
            want = inputs[w].astype(np.float64)
            want[lo:hi] -= _lr64() * d[lo:hi]
            left = d.astype(np.float64)
            left[lo:hi] = 0.0
            rows.append(({"case": w}, compare(arrays[w], want, step.precision, name=f"{step.kernel}: w")))
            # g must be 0 over the range and untouched outside it: 1 + g against 1 + the expected g
            rows.append(({"case": g}, compare(1.0 + arrays[g].astype(np.float64), 1.0 + left, step.precision,
                                              name=f"{step.kernel}: g")))
        return rows


@dataclass(frozen=True)
class SmallGradients(Family):
    """Steps 3 and 4: the small parameters' gradient (dW2, db1, db2) into a zeroed gradient and the
    loss (poisoned), a check row each; with ``first_bucket``, in the launch that also scatters the
    first W1 bucket's rows, a row for those too."""

    first_bucket: bool = False

    @property
    def file(self) -> str:
        return replicas.FIRST if self.first_bucket else replicas.SMALL

    def inputs(self, case, rng):
        return {"grad": _zeros(case)}

    def outputs(self, case):
        return {"loss": ((1,), np.float32)}

    def updated(self, case):
        return ("grad",)

    def launch(self, replica, case, arrays):
        replica.use_buffers(grad=arrays["grad"], loss=arrays["loss"])
        return replica.first_bucket_and_small if self.first_bucket else replica.small_gradients

    def comparisons(self, step, case, inputs, arrays):
        ref = case.reference(inputs)
        g = case.layout.views(arrays["grad"])
        rows = [({"case": k}, compare(g[k], ref[k], step.precision, name=f"{step.kernel}: d{k}"))
                for k in ("W2", "b1", "b2")]
        rows.append(({"case": "loss"}, compare(arrays["loss"], np.array([ref["loss"]]), step.precision,
                                               name=f"{step.kernel}: loss")))
        if self.first_bucket:
            first = case.cut(case.batch(inputs))[1]
            rows.append(({"case": first.name}, compare(g["W1"], _only_rows(ref["W1"], first), step.precision,
                                                       name=f"{step.kernel}: {first.name}")))
        return rows


@dataclass(frozen=True)
class ForwardAndFirstBucket(Family):
    """Step 5: step 9's forward kernel with, in each document's block, its rows of the first W1
    bucket's gradient: dZ1 (poisoned) and those rows (into a zeroed gradient), a check row each."""

    file: ClassVar[str] = replicas.FORWARD
    after_forward: ClassVar[bool] = False      # the kernel is the forward pass

    def inputs(self, case, rng):
        return {"grad": _zeros(case)}

    def outputs(self, case):
        return {"dz1": ((case.docs // case.replicas, case.layout.H), np.float32)}

    def updated(self, case):
        return ("grad",)

    def launch(self, replica, case, arrays):
        replica.use_buffers(grad=arrays["grad"], dz1=arrays["dz1"])
        return replica.forward_and_first_bucket

    def comparisons(self, step, case, inputs, arrays):
        ref = case.reference(inputs)
        first = case.cut(case.batch(inputs))[1]
        return [({"case": "dZ1"}, compare(arrays["dz1"], ref["Z1"], step.precision, name=f"{step.kernel}: dZ1")),
                ({"case": first.name}, compare(case.layout.views(arrays["grad"])["W1"], _only_rows(ref["W1"], first),
                                               step.precision, name=f"{step.kernel}: {first.name}"))]


@dataclass(frozen=True)
class PeerUpdate(Family):
    """Step 6: ``w -= lr (g + g_peer)`` over two ranges (one unaligned), on seeded random w and both
    gradients, without its flags (sync off: no other GPU here, so the kernel reads both gradients
    and writes w alone); one check row: w, updated over the ranges and untouched elsewhere."""

    file: ClassVar[str] = replicas.PEER
    after_forward: ClassVar[bool] = False
    blocks: int = 7

    def spans(self, case) -> list[Bucket]:
        size, H = case.layout.size, case.layout.H
        return [Bucket("rows", 128, 128 + 40 * H), Bucket("tail", size - 645, size - 1)]

    def inputs(self, case, rng):
        n = case.layout.size
        return {name: rng.uniform(-1, 1, n).astype(np.float32) for name in ("w", "g", "peer g")}

    def updated(self, case):
        return ("w",)

    def launch(self, replica, case, arrays):
        replica.use_buffers(flat=arrays["w"], grad=arrays["g"])
        flags = replica.backend.xp.zeros(16, np.uint32)       # untouched without sync
        return replica.peer_update(self.spans(case), arrays["peer g"], flags, flags, flags, 0, self.blocks, sync=False)

    def comparisons(self, step, case, inputs, arrays):
        want = inputs["w"].astype(np.float64)
        d, e = inputs["g"], inputs["peer g"]
        for b in self.spans(case):
            want[b.start:b.stop] -= _lr64() * (d[b.start:b.stop].astype(np.float64) + e[b.start:b.stop])
        return [({"case": "w over two ranges"}, compare(arrays["w"], want, step.precision, name=f"{step.kernel}: w"))]


BUCKET_GRADIENTS = BucketGradients()
UPDATE_AND_ZERO = UpdateAndZero()
SMALL_GRADIENTS = SmallGradients()
FIRST_BUCKET_AND_SMALL = SmallGradients(first_bucket=True)
FORWARD_AND_FIRST_BUCKET = ForwardAndFirstBucket()
PEER_UPDATE = PeerUpdate()

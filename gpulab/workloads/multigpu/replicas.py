"""Data-parallel SGD of the training chapter's classifier: the logic, on any backend.

Each replica holds a full copy of the parameters and one slice of the batch.
One step:

1. every replica runs the training chapter's step-9 kernels on its slice
   (``sparse_forward_backward``, then ``sparse_update`` in *gradient mode*: its
   "parameters" are a zeroed gradient buffer and ``lr = -1``, so it writes
   ``+gradient`` instead of updating), with ``inv_batch = 1 / (global batch)``,
   so each replica's gradient is its share of the whole batch's mean-loss gradient;
2. the gradients are summed across replicas by an all-reduce (NCCL on the
   GPUs, :func:`numpy_allreduce` on the CPU backend);
3. every replica applies the same SGD update (the training chapter's
   ``sgd_update``) to its own copy: the copies stay bit-identical.

The parameters and the gradients each live in one flat float32 buffer, laid
out by :class:`Layout` (W1 row by row, then the small parameters), so an
all-reduce covers any contiguous range: the whole gradient, or one *bucket*.
The bucketed variant forms W1's gradient one bucket of rows at a time
(``kernels/multigpu/01_w1_gradient_buckets.cu``) so that each bucket's
all-reduce can overlap the next bucket's computation (on the GPUs, see
:mod:`.record`).

The *parameter-averaging* form (``form="parameters"``) reaches the same step
with no gradient buffer: plain SGD's update is linear in the gradient, so
with ``p`` replicas each applies ``p`` times the learning rate to its own copy
(step 9's kernels unchanged, W1 updated in the scatter), and the all-reduce
*averages* the copies: ``(1/p) sum_r (W - p lr g_r) = W - lr sum_r g_r``, the
same step in exact arithmetic. NCCL's float average multiplies each input by
``1/p`` before summing (exact for p = 2, 4, ...: rows no replica touched come
back unchanged bit for bit). The all-reduce moves the same bytes as the
gradient's; what goes is the gradient buffer's traffic (its zeroing and a
separate update pass). It holds for SGD without momentum only: an optimiser
whose update is not linear in the gradient (momentum's state, Adam) needs the
summed gradient itself.

This module runs the replicas one after another on one backend: what the CPU
backend and the tests use. :class:`~.record.TwoGpus` drives two GPUs with the
same :class:`Replica` objects.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...kernels import Backend, get_backend, load_module
from ..training import reference
from ..training.data import Corpus
from ..training.reference import CLASSES, HIDDEN, LEARNING_RATE, PARAMS

SPARSE = "training/09_sparse_first_layer.cu"       # the lab's best training-step kernels
BUCKETS = "multigpu/01_w1_gradient_buckets.cu"     # W1's gradient for a range of rows
UPDATE = "multigpu/02_update_and_zero.cu"          # w -= lr * g; g = 0 over a flat range
SMALL = "multigpu/03_small_gradients.cu"           # W2, b1, b2's gradient, coalesced
FIRST = "multigpu/04_first_bucket_and_small.cu"    # the first bucket's scatter and the small gradients, one launch
FORWARD = "multigpu/05_forward_and_first_bucket.cu"  # step 9's forward kernel, then one bucket's gradient rows
PEER = "multigpu/06_peer_update.cu"                # the all-reduce fused with the update, reading the peer's gradient
#: Threads per block of the peer update (06_peer_update.cu); flag slots per call site (its PEER_MAX_BLOCKS).
PEER_THREADS = 512
PEER_MAX_BLOCKS = 1024
#: Blocks of the small parameters' gradient (each sums its documents, then adds with atomics):
#: two per SM of an H100.
SMALL_BLOCKS = 264
THREADS = 128                                      # threads per block, one per hidden unit
UPDATE_THREADS = 256
#: Blocks of the update: enough to fill an H100 (132 SMs x 8 blocks of 256), each
#: thread then loops over the rest (a grid-stride loop).
UPDATE_BLOCKS_MAX = 132 * 8
#: What the replicas all-reduce: their gradients (then each updates its copy), or
#: their copies after each applied p times the step to its own (see the module's text).
FORMS = ("gradient", "parameters")


@dataclass(frozen=True)
class Bucket:
    """A contiguous range ``[start, stop)`` of the flat gradient: the small
    parameters (``rows`` None), or W1's rows ``rows[0]`` to ``rows[1] - 1``."""

    name: str
    start: int
    stop: int
    rows: tuple[int, int] | None = None

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def nbytes(self) -> int:
        return 4 * self.size


@dataclass(frozen=True)
class Layout:
    """Where each parameter sits in the flat buffers: W1 (V x H, 16.8 MB)
    first, at the buffer's start, then W2, b1, b2 (644 floats for the
    chapter's network) after W1's last row.

    W1 at offset 0 lies in its buffer as step 9's W1 lies in its own
    allocation: the scatter-add's atomics, the step's longest kernel, are
    sensitive to where W1's rows fall (they were 45% slower with W1 at 644
    floats, rows straddling cache lines; with W1 at 2,688 bytes, 128-byte
    aligned, the recorded H100 run still timed step 9's own kernel 5% slower
    into the replica's buffer than into step 9's W1: 0.855 against 0.809 ms
    at 32,768 documents). The small parameters after W1's last row (the
    rarest word) travel with the first bucket's all-reduce (see
    :meth:`buckets`)."""

    V: int
    H: int = HIDDEN
    C: int = CLASSES

    @property
    def shapes(self) -> dict:
        return {"W1": (self.V, self.H), "W2": (self.H, self.C), "b1": (self.H,), "b2": (self.C,)}

    @property
    def offsets(self) -> dict:
        out, at = {}, 0
        for name, shape in self.shapes.items():
            n = int(np.prod(shape))
            out[name] = (at, at + n)
            at += n
        return out

    @property
    def size(self) -> int:
        return self.offsets["b2"][1]

    @property
    def small(self) -> int:
        """Floats of the small parameters (W2, b1, b2), which follow W1."""
        return self.size - self.offsets["W1"][1]

    def views(self, flat) -> dict:
        """Each parameter as a view of ``flat`` (NumPy or CuPy), in its own shape."""
        if flat.shape != (self.size,):
            raise ValueError(f"the flat buffer must hold {self.size} floats, got shape {flat.shape}")
        return {k: flat[a:b].reshape(self.shapes[k]) for k, (a, b) in self.offsets.items()}

    def flatten(self, params: dict) -> np.ndarray:
        """``params`` (W1, b1, W2, b2 as the training chapter stores them) as one flat float32 array."""
        out = np.zeros(self.size, np.float32)
        for k, (a, b) in self.offsets.items():
            p = np.asarray(params[k], np.float32)
            if p.shape != self.shapes[k]:
                raise ValueError(f"parameter {k}: expected shape {self.shapes[k]}, got {p.shape}")
            out[a:b] = p.ravel()
        return out

    def unflatten(self, flat) -> dict:
        return {k: np.array(v) for k, v in self.views(np.asarray(flat)).items()}

    def buckets(self, n: int, row_work=None, rare_share: float | None = None) -> list[Bucket]:
        """The small parameters as one bucket, then W1's rows in ``n`` buckets,
        the rarest words' rows first (the small parameters follow W1's last
        row, so the first W1 bucket and they form one contiguous range: the
        GPU step sends them in one all-reduce).

        Word ids are frequency ranks (id 0 is the most frequent word), so the
        scatter-add's work per row falls steeply with the id: cut into equal
        row ranges, the first quarter of the rows holds ~85% of a batch's
        non-zeros. With ``row_work`` (the batch's non-zeros per row, length V)
        the rows are cut at equal cumulative work instead; either way the
        buckets come highest ids first, so the all-reduce of the rare-word rows
        -- nearly all of W1's bytes and little of its work -- runs while the
        frequent words' rows are still being computed, and the last bucket
        (the most frequent words: much work, few rows) has little left to
        send.

        ``rare_share`` (with ``row_work``, ``n`` >= 2): the first bucket (the
        rarest words) gets this share of the work instead of ``1 / n``, the
        other buckets equal shares of the rest. A small share starts the
        all-reduce of nearly all of W1's bytes after little of the scatter."""
        if n < 1:
            raise ValueError(f"the number of W1 buckets must be at least 1, got {n}")
        if n > self.V:
            raise ValueError(f"W1 has {self.V} rows; it cannot be split into {n} buckets")
        if rare_share is not None:
            if row_work is None or n < 2:
                raise ValueError("rare_share needs row_work (the batch's non-zeros per row) and at least 2 buckets, "
                                 f"got row_work={'None' if row_work is None else 'given'} and {n} bucket(s)")
            if not 0.0 < rare_share < 1.0:
                raise ValueError(f"rare_share must lie strictly between 0 and 1, got {rare_share}")
        if row_work is None:
            edges = [round(i * self.V / n) for i in range(n + 1)]
        else:
            work = np.asarray(row_work, np.float64)
            if work.shape != (self.V,) or np.any(work < 0):
                raise ValueError(f"row_work must hold {self.V} non-negative counts (one per row of W1), "
                                 f"got shape {work.shape}")
            cum = np.concatenate([[0.0], np.cumsum(work)])
            # Cumulative work from row 0 (the most frequent word) at each inner edge; the rare
            # bucket is the last range of ids, so it holds 1 minus the last edge's share.
            rest = 1.0 - (1.0 / n if rare_share is None else rare_share)
            targets = cum[-1] * rest * np.arange(1, n) / (n - 1) if n > 1 else np.zeros(0)
            inner = np.searchsorted(cum, targets, side="left")
            edges = [0]
            for e in inner:             # every bucket keeps at least one row
                edges.append(int(min(max(e, edges[-1] + 1), self.V - (n - len(edges)))))
            edges.append(self.V)
        rows = [Bucket(f"W1 rows {a}-{b - 1}", a * self.H, b * self.H, (a, b)) for a, b in zip(edges[:-1], edges[1:])]
        return [Bucket("W2, b1, b2", self.offsets["W1"][1], self.size)] + rows[::-1]

    def whole(self) -> Bucket:
        return Bucket("whole gradient", 0, self.size)


def row_work(batch: Corpus) -> np.ndarray:
    """Non-zeros of ``batch`` in each row of W1 (word id): the scatter-add's work per row."""
    return np.bincount(np.asarray(batch.indices), minlength=batch.vocab)[:batch.vocab]


def bucket_ranges(part: Corpus, rows: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Where each document's words in rows ``[a, b)`` of W1 sit in the CSR:
    (first, last), int32 arrays of length ``part.docs``, document i's words
    of the bucket being ``indices[first[i]:last[i]]``. Needs every CSR row's
    word ids in ascending order (what the corpus gives); found once per batch
    on the host, as the CSR itself is."""
    indptr, indices = np.asarray(part.indptr, np.int64), np.asarray(part.indices)
    a, b = rows
    starts = np.repeat(np.arange(part.docs), np.diff(indptr))
    if np.any((np.diff(indices) <= 0) & (np.diff(starts) == 0)):
        raise ValueError("the bucketed scatter needs each document's word ids in ascending order in the CSR")
    below = lambda w: np.concatenate([[0], np.cumsum(indices < w)])    # noqa: E731 -- non-zeros before n with id < w
    ca, cb = below(a), below(b)
    # document i's words with id < a are its first ca[indptr[i+1]] - ca[indptr[i]] (ascending ids)
    first = indptr[:-1] + ca[indptr[1:]] - ca[indptr[:-1]]
    last = indptr[:-1] + cb[indptr[1:]] - cb[indptr[:-1]]
    return first.astype(np.int32), last.astype(np.int32)


def split_batch(batch: Corpus, replicas: int) -> list[Corpus]:
    """The batch cut into ``replicas`` consecutive slices of equal size."""
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, got {replicas}")
    if batch.docs % replicas:
        raise ValueError(f"a batch of {batch.docs} documents cannot be split evenly over {replicas} replicas; "
                         f"use a multiple of {replicas}")
    per = batch.docs // replicas
    return [batch.rows(r * per, (r + 1) * per) for r in range(replicas)]


class Replica:
    """One replica: its copy of the parameters, its slice of the batch, its
    gradient, and the launches of one step, on ``backend`` (on the GPU, the
    arrays are allocated on the current device: create it under
    ``cupy.cuda.Device(d)``)."""

    def __init__(self, part: Corpus, params: dict, global_batch: int, backend: Backend | str | None = None,
                 lr: float = LEARNING_RATE, buckets: int | list = 4, scatter_blocks: int | None = None,
                 ranges: list | None = None, form: str = "gradient", replicas: int = 1):
        be = self.backend = get_backend(backend)
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        if replicas < 1:
            raise ValueError(f"replicas must be at least 1, got {replicas}")
        #: "gradient": the backward pass writes the gradient buffer, :meth:`update` applies the sum;
        #: "parameters": it writes -replicas * lr * gradient straight into this copy, and the
        #: all-reduce averages the copies (no update launch, no gradient buffer in the step).
        self.form, self.replicas = form, replicas
        self.layout = Layout(part.vocab, params["W1"].shape[1], params["W2"].shape[1])
        if part.docs < 1:
            raise ValueError("a replica needs at least one document")
        if global_batch < part.docs:
            raise ValueError(f"the global batch ({global_batch}) is smaller than this replica's slice ({part.docs})")
        self.B, self.lr = part.docs, float(lr)
        self.inv_batch = 1.0 / global_batch
        L, B, H, C = self.layout, self.B, self.layout.H, self.layout.C
        self.flat = be.to_device(L.flatten(params))
        self.grad = be.xp.zeros(L.size, np.float32)
        self.p, self.g = L.views(self.flat), L.views(self.grad)
        self.batch = {"indptr": be.to_device(part.indptr.astype(np.int32)),
                      "indices": be.to_device(part.indices.astype(np.int32)),
                      "values": be.to_device(part.values), "labels": be.to_device(part.labels.astype(np.int32))}
        self.scratch = {"h": be.poisoned((B, H)), "dz2": be.poisoned((B, C)), "dz1": be.poisoned((B, H)),
                        "loss_terms": be.poisoned((B,)), "loss": be.poisoned((1,))}
        sparse = load_module(SPARSE, be)
        self._fb, self._su = sparse.get_function("sparse_forward_backward"), sparse.get_function("sparse_update")
        self._rows = load_module(BUCKETS, be).get_function("w1_gradient_rows")
        self._upd = load_module(UPDATE, be).get_function("sgd_update_zero")
        self._small = load_module(SMALL, be).get_function("small_gradients")
        self._first = load_module(FIRST, be).get_function("first_bucket_and_small")
        self._forward = load_module(FORWARD, be).get_function("forward_and_first_bucket")
        self._peer = load_module(PEER, be).get_function("peer_sgd_update")
        # Every replica must use the same buckets (their all-reduces must match):
        # pass the list that Layout.buckets made from the whole batch.
        self.buckets = L.buckets(buckets) if isinstance(buckets, int) else list(buckets)
        # Blocks of each W1 bucket's scatter (a grid-stride loop over the documents; None: one per
        # document): one number for every bucket, or one per W1 bucket (a bucket scattered beside an
        # all-reduce may leave SMs to it; the first bucket, scattered before any, need not).
        per_bucket = list(scatter_blocks) if isinstance(scatter_blocks, (list, tuple)) else \
            [scatter_blocks] * (len(self.buckets) - 1)
        if len(per_bucket) != len(self.buckets) - 1 or any(b is not None and b < 1 for b in per_bucket):
            raise ValueError(f"scatter_blocks must be at least 1 (or None: one block per document), one number or one "
                             f"per W1 bucket ({len(self.buckets) - 1}), got {scatter_blocks}")
        self.scatter_blocks = per_bucket
        # Each W1 bucket's range of every document's words (host arrays, found once per batch:
        # ``ranges`` may pass them in, as bucket_ranges gives them for self.buckets[1:]).
        ranges = ranges if ranges is not None else [bucket_ranges(part, k.rows) for k in self.buckets[1:]]
        if len(ranges) != len(self.buckets) - 1:
            raise ValueError(f"ranges must hold one (first, last) pair per W1 bucket ({len(self.buckets) - 1}), "
                             f"got {len(ranges)}")
        self.ranges = [tuple(be.to_device(np.asarray(r, np.int32)) for r in pair) for pair in ranges]
        self._bind()

    @property
    def reduced(self):
        """The flat buffer the all-reduce combines: the gradient (summed), or the parameters (averaged)."""
        return self.flat if self.form == "parameters" else self.grad

    @property
    def op(self) -> str:
        """The all-reduce's operation on :attr:`reduced`: ``"sum"`` or ``"avg"``."""
        return "avg" if self.form == "parameters" else "sum"

    def _bind(self):
        b, s, p, g = self.batch, self.scratch, self.p, self.g
        B, H, C = self.B, self.layout.H, self.layout.C
        csr = (b["indptr"], b["indices"], b["values"])
        self.forward_backward = self._fb.bind((B,), (THREADS,), (
            B, H, C, self.inv_batch, *csr, b["labels"], p["W1"], p["b1"], p["W2"], p["b2"],
            s["h"], s["dz2"], s["dz1"], s["loss_terms"]))
        # The backward pass's target and scale: the zeroed gradient buffer, +1 (step 9's
        # sparse_update in gradient mode: "lr" = -1); or this copy's parameters, -replicas * lr.
        if self.form == "parameters":
            t, lr_arg = p, self.replicas * self.lr
        else:
            t, lr_arg = g, -1.0
        head = (*csr, s["h"], s["dz2"], s["dz1"], s["loss_terms"], t["W1"], t["W2"], t["b1"], t["b2"], s["loss"])
        # Step 9's sparse_update: blocks 0..H-1 the small parameters and the loss, blocks H.. W1's rows.
        self.gradients = self._su.bind((H + B,), (THREADS,), (B, H, C, lr_arg, *head))
        # The same kernel with only its first H blocks: the small gradients alone, as step 9 forms them.
        self.small_gradients_step9 = self._su.bind((H,), (THREADS,), (B, H, C, lr_arg, *head))
        # The small gradients with coalesced reads (kernels/multigpu/03_small_gradients.cu).
        self.small_gradients = self._small.bind((min(B, SMALL_BLOCKS),), (THREADS,), (
            B, H, C, -lr_arg, s["h"], s["dz2"], s["dz1"], s["loss_terms"], t["W2"], t["b1"], t["b2"], s["loss"]))
        # W1's whole gradient alone (every document's whole CSR row), for the split form of the step.
        grids = [B if k is None else min(B, k) for k in self.scatter_blocks]
        self.w1_gradient = self._rows.bind((grids[0],), (THREADS,), (B, H, -lr_arg, b["indptr"][:-1], b["indptr"][1:],
                                                                     b["indices"], b["values"], s["dz1"], t["W1"]))
        self.bucket_gradients = [self._rows.bind((grid,), (THREADS,), (
            B, H, -lr_arg, first, last, b["indices"], b["values"], s["dz1"], t["W1"]))
            for grid, (first, last) in zip(grids, self.ranges)]
        # Each W1 bucket's scatter and the small gradients in one launch (04_first_bucket_and_small.cu): the
        # small parameters follow W1's last row, so they go in the first bucket's all-reduce (the step that
        # forms the first bucket in the forward kernel sends them with the last).
        small_blocks = min(B, SMALL_BLOCKS)
        self.bucket_and_small = [self._first.bind((small_blocks + grid,), (THREADS,), (
            small_blocks, B, H, C, -lr_arg, s["h"], s["dz2"], s["dz1"], s["loss_terms"], t["W2"], t["b1"], t["b2"],
            s["loss"], first, last, b["indices"], b["values"], t["W1"])) for grid, (first, last) in zip(grids, self.ranges)]
        self.first_bucket_and_small = self.bucket_and_small[0]
        # Step 9's forward kernel followed, in each document's block, by its gradient rows of the first W1
        # bucket, or of every row (05_forward_and_first_bucket.cu): into the gradient buffer, which the
        # forward pass does not read, so the gradient form only (W1 itself is being read by other blocks).
        self.forward_and_first_bucket = self.forward_and_w1_gradient = None
        if self.form == "gradient":
            fwd = (B, H, C, self.inv_batch, *csr, b["labels"], p["W1"], p["b1"], p["W2"], p["b2"], s["h"], s["dz2"],
                   s["dz1"], s["loss_terms"])
            first, last = self.ranges[0]
            self.forward_and_first_bucket = self._forward.bind((B,), (THREADS,), (*fwd, first, last, g["W1"]))
            self.forward_and_w1_gradient = self._forward.bind((B,), (THREADS,), (
                *fwd, b["indptr"][:-1], b["indptr"][1:], g["W1"]))
        self._updates = {}

    def update(self, bucket: Bucket):
        """The launch that applies ``W -= lr * g`` to the parameters in ``bucket``
        and zeroes the bucket's gradient, ready for the next step's scatter-add."""
        if bucket not in self._updates:
            if not 0 <= bucket.start < bucket.stop <= self.layout.size:
                raise ValueError(f"bucket {bucket.name} [{bucket.start}, {bucket.stop}) is outside the "
                                 f"{self.layout.size}-float buffers")
            blocks = max(1, min(UPDATE_BLOCKS_MAX, -(-bucket.size // (4 * UPDATE_THREADS))))
            self._updates[bucket] = self._upd.bind((blocks,), (UPDATE_THREADS,), (
                bucket.size, self.lr, self.flat[bucket.start:bucket.stop], self.grad[bucket.start:bucket.stop]))
        return self._updates[bucket]

    def zero_gradient(self):
        self.grad.fill(0)

    def use_gradient_buffer(self, grad) -> None:
        """Move the gradient into ``grad`` (a zeroed buffer of the same size, e.g. one the other
        GPU's process maps through CUDA IPC) and bind every launch to it."""
        self.use_buffers(grad=grad)

    def use_buffers(self, flat=None, grad=None, **scratch) -> None:
        """Move the parameters into ``flat``, the gradient into ``grad`` and the intermediates named
        in ``scratch`` (``dz1=``, ``loss=``) into the given device arrays, each of its buffer's shape
        and type, and bind every launch to them: a check's arrays, poisoned or of known values where
        a kernel must not write (:mod:`.launchers`), or a gradient the other GPU's process maps."""
        def same(name, new, old):
            if new.shape != old.shape or new.dtype != old.dtype:
                raise ValueError(f"the {name} buffer must be {old.dtype} of shape {old.shape}, "
                                 f"got {new.dtype} {new.shape}")
            return new
        unknown = sorted(set(scratch) - set(self.scratch))
        if unknown:
            raise KeyError(f"a replica's intermediates are {sorted(self.scratch)}; it has no {unknown}")
        if flat is not None:
            self.flat = same("parameter", flat, self.flat)
            self.p = self.layout.views(flat)
        if grad is not None:
            self.grad = same("gradient", grad, self.grad)
            self.g = self.layout.views(grad)
        for name, array in scratch.items():
            self.scratch[name] = same(name, array, self.scratch[name])
        self._bind()

    def peer_update(self, spans, peer_grad, flags, peer_flags, epochs, slot: int, blocks: int, sync: bool = True):
        """The launch of ``kernels/multigpu/06_peer_update.cu`` over ``spans`` (one or two
        :class:`Bucket`): ``W -= lr * (g + peer_grad)`` on this copy, the sum of the two replicas'
        gradients read straight from the other GPU's buffer (``peer_grad``); with ``sync``, the
        flags order it against the other GPU's launch of the same ``slot`` and this gradient is
        zeroed once the other GPU has read it. Without (the CPU backend, replicas one after the
        other): no flags are touched and the gradient is left for the caller to zero after every
        replica's launch. The gradient form only (it reads gradients)."""
        if self.form != "gradient":
            raise ValueError("the peer update reads the replicas' gradients: it needs form='gradient'")
        spans = list(spans)
        if not 1 <= len(spans) <= 2:
            raise ValueError(f"the peer update covers one or two ranges, got {len(spans)}")
        if not 1 <= blocks <= PEER_MAX_BLOCKS:
            raise ValueError(f"the peer update takes 1 to {PEER_MAX_BLOCKS} blocks (its flag slots), got {blocks}")
        if peer_grad.shape != self.grad.shape:
            raise ValueError(f"the peer's gradient must have shape {self.grad.shape}, got {peer_grad.shape}")
        for b in spans:
            if not 0 <= b.start < b.stop <= self.layout.size:
                raise ValueError(f"bucket {b.name} [{b.start}, {b.stop}) is outside the {self.layout.size}-float buffers")
        a, b = spans[0], spans[1] if len(spans) == 2 else Bucket("none", 0, 0)
        return self._peer.bind((blocks,), (PEER_THREADS,), (
            a.size, a.start, b.size, b.start, self.lr, self.flat, self.grad, peer_grad, flags, peer_flags, epochs,
            int(slot), int(bool(sync))))

    def backward_plain(self):
        """The whole gradient in one launch (after :attr:`forward_backward`), into
        the gradient buffer, which the previous step's updates left at zero."""
        self.gradients()

    def backward_split(self):
        """The whole gradient in two launches: the small parameters' (coalesced)
        and W1's (the bucket kernel over every row); the GPU step runs them on
        two streams."""
        self.small_gradients()
        self.w1_gradient()

    def backward_bucket(self, k: int):
        """Bucket ``k``'s gradient (0: the small parameters, with the loss; then
        W1's row ranges in the order of :attr:`buckets`)."""
        if k == 0:
            self.small_gradients()
        else:
            self.bucket_gradients[k - 1]()

    @property
    def loss(self) -> float:
        """This replica's mean loss over its slice, before the step's update."""
        return float(self.backend.to_host(self.scratch["loss"])[0])

    def params(self) -> dict:
        return self.layout.unflatten(self.backend.to_host(self.flat))


def numpy_allreduce(buffers: list, bucket: Bucket, op: str = "sum") -> None:
    """Sum ``buffers[r][bucket]`` over the replicas r and write the sum into
    every one (what NCCL's all-reduce with ``ncclSum`` does), in float32, in
    replica order; ``op="avg"``: the average as NCCL computes it for floats
    (``ncclAvg``: each input multiplied by ``1/p`` in float32, then summed).
    NumPy arrays on the CPU backend (CuPy arrays of one GPU also work: the sum
    then runs there)."""
    if op not in ("sum", "avg"):
        raise ValueError(f"op must be 'sum' or 'avg', got {op!r}")
    lo, hi = bucket.start, bucket.stop
    scale = np.float32(1.0 / len(buffers)) if op == "avg" else None
    part = (lambda b: b[lo:hi] * scale) if scale is not None else (lambda b: b[lo:hi].copy())   # noqa: E731
    total = part(buffers[0])
    for b in buffers[1:]:
        total += part(b)
    for b in buffers:
        b[lo:hi] = total


class DataParallel:
    """``replicas`` replicas on one backend (run one after another) with the
    all-reduce in NumPy: the CPU backend's stand-in for :class:`~.record.TwoGpus`
    (on one GPU it runs too, replicas and sum on that GPU: a check, not a speed-up).

    ``step(batch)`` runs one data-parallel SGD step on the whole batch and
    returns its mean loss; ``bucketed`` forms and reduces the gradient bucket
    by bucket (the same sums; the bucketed scatter adds them in another order)."""

    def __init__(self, params: dict, replicas: int = 2, backend=None, lr: float = LEARNING_RATE,
                 buckets: int = 4, bucketed: bool = False, form: str = "gradient"):
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        self.backend = get_backend(backend)
        self.params0 = {k: np.asarray(params[k], np.float32) for k in PARAMS}
        self.n, self.lr, self.nbuckets, self.bucketed, self.form = replicas, lr, buckets, bucketed, form
        self.replicas: list[Replica] = []

    def step(self, batch: Corpus) -> float:
        parts = split_batch(batch, self.n)
        # A replica's buffers fit one batch's non-zeros: rebuilt every step, each
        # from its own parameters (so the copies are never re-synchronised by hand).
        own = [r.params() for r in self.replicas] or [self.params0] * self.n
        buckets = Layout(batch.vocab, *self.params0["W2"].shape).buckets(self.nbuckets, row_work(batch))
        self.replicas = [Replica(p, w, batch.docs, self.backend, self.lr, buckets, form=self.form, replicas=self.n)
                         for p, w in zip(parts, own)]
        for r in self.replicas:
            r.forward_backward()
        reduced, op = [r.reduced for r in self.replicas], self.replicas[0].op
        # In the parameter form the backward pass has already stepped each copy: the all-reduce
        # (an average) is the whole update; in the gradient form the update follows the sum.
        apply = (lambda bucket: None) if self.form == "parameters" else \
            (lambda bucket: [r.update(bucket)() for r in self.replicas])           # noqa: E731
        if self.bucketed:
            for k, bucket in enumerate(self.replicas[0].buckets):
                for r in self.replicas:
                    r.backward_bucket(k)
                numpy_allreduce(reduced, bucket, op)
                apply(bucket)
        else:
            for r in self.replicas:
                r.backward_plain()
            whole = self.replicas[0].layout.whole()
            numpy_allreduce(reduced, whole, op)
            apply(whole)
        return float(np.mean([r.loss for r in self.replicas]))

    def identical(self) -> bool:
        """Whether every replica's parameters are bit-identical to replica 0's."""
        first = self.backend.to_host(self.replicas[0].flat)
        return all(np.array_equal(first.view(np.uint32), self.backend.to_host(r.flat).view(np.uint32))
                   for r in self.replicas[1:])

    def params(self) -> dict:
        return self.replicas[0].params() if self.replicas else dict(self.params0)


def compare_forms(forms: dict, backend=None, vocab: int = 1001, batch: int = 74, steps: int = 3,
                  lr: float = 0.1, stream: int = 300):
    """Train each data-parallel form ``{name: (replicas, bucketed, form)}`` (see :class:`DataParallel`)
    for ``steps`` SGD steps of ``batch`` documents from one corpus of a ``vocab``-word vocabulary, from
    the same initial parameters, and compare every parameter's total update (after less before) with the
    float64 reference's (``training.reference.train``) and with the first form's, which should be one
    replica on the whole batch: one row per form, with its last loss, the two largest relative errors
    and whether its replicas stayed bit-identical after every step."""
    import pandas as pd

    from ..training import data
    corpus = data.sample(batch * steps, vocab, stream=stream)
    p0 = reference.init_params(vocab)
    ref_params, _ = reference.train(corpus, p0, batch, steps, lr=lr)
    backend = get_backend(backend)

    def train(n, bucketed, form):
        dp = DataParallel(p0, n, backend, lr=lr, bucketed=bucketed, form=form)
        losses, identical = [], True
        for s in range(steps):
            losses.append(dp.step(corpus.rows(s * batch, (s + 1) * batch)))
            identical &= dp.identical()
        return dp.params(), np.array(losses), identical

    def update_error(params, ref):
        # the largest relative error of any parameter's total update W_after - W_before
        return max(np.linalg.norm(params[k].astype(np.float64) - ref[k]) / np.linalg.norm(ref[k] - p0[k])
                   for k in PARAMS)

    results = {name: train(*args) for name, args in forms.items()}
    first = {k: v.astype(np.float64) for k, v in next(iter(results.values()))[0].items()}
    return pd.DataFrame([{"variant": name, f"loss after {steps} steps": losses[-1],
                          "update vs float64 reference": update_error(params, ref_params),
                          "update vs 1 replica": update_error(params, first), "replicas bit-identical": same}
                         for name, (params, losses, same) in results.items()])

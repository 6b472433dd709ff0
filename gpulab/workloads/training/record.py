"""The recorded run: everything ``python -m gpulab record training`` measures on the GPU.

Experiments (the ``experiment`` column of the timing rows):

* ``ladder``: one SGD step of every ladder step at batch sizes 32 to 2,048,
  eager (``mode`` "eager") and captured in a CUDA graph ("graph"), each step
  first checked against the float64 reference at full size (V = 32,754);
* ``vendor``: PyTorch on the same batch (dense; sparse first layer), eager, in
  a CUDA graph and through ``torch.compile``, checked the same way (:mod:`.baselines`);
* ``breakdown``: each kernel of one step at batch 1,024, timed alone with
  events inside the step (the report's nvprof table);
* ``ceilings``: the measured copy bandwidth and SGEMM rate.

Side tables: ``timeline`` (steps 2 and 3 at batch 1,024, from CUDA events),
``sweep`` (batch size x block shape, the report's bounds test and ours, with
loss and accuracy and a ``broken`` flag), ``curves`` (training runs to
convergence: loss per step; test accuracy and loss, and the same on 8,192 training
documents, per epoch), ``checks``; ``fit`` (each step checked against this GPU's
limits: :mod:`.fit`), with ``fit_notes`` and ``skipped`` (step, batch size, reason)
where something did not fit.
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd

from dataclasses import replace

from ... import ladder, recorder, roofline, timing
from ...check import compare
from ...errors import CheckFailed
from ...kernels import get_backend
from ...ladder import find
from ...recorder import Variant
from ...timing import event_region, span_samples
from . import baselines, data, fit, reference
from .checks import curve_deviation, is_broken
from .launchers import buffers
from .problem import BATCHES, MAIN_BATCH, NAME, Dims, SgdStep
from .steps import STEPS, Step
#: The full-size check's learning rate: large, so the update stands above fp32 rounding of W1.
CHECK_LR = 300.0
SWEEP_BLOCKS = ((8, 8), (16, 16), (32, 8), (32, 32), (64, 4), (128, 2))
SWEEP_DOCS = 8192          # every sweep point trains on the same 8,192 documents
EPOCHS = 20
#: Time one variant may take to be timed (ms): slow ones get fewer repeats.
TIMING_BUDGET_MS = 500.0
#: Steps timed eagerly are also timed in a CUDA graph (of this many steps) when an eager step
#: takes less than this (the graph removes launch costs, which a long step hides).
GRAPH_LAUNCHES = 10
GRAPH_BELOW_MS = 5.0


def bind_step(step_: Step, arrays: dict, d: Dims, lr: float = reference.LEARNING_RATE):
    """``step_`` bound on the GPU to ``arrays`` (a batch's buffers) through its launch family."""
    return ladder.bind(step_, SgdStep(d, lr=lr).for_step(step_), arrays, "gpu")


def flops_per_step(d: Dims, sparse_nnz: int | None = None) -> float:
    """The step's multiply-adds x 2: the dense products X W1 and X^T dZ1
    (or, sparse, the gather and scatter over the non-zeros), plus the output layer's."""
    first = 2 * 2 * (sparse_nnz if sparse_nnz is not None else d.B * d.V) * d.H
    return float(first + 3 * 2 * d.B * d.H * d.C)


def bytes_per_step(d: Dims, sparse_nnz: int | None = None) -> float:
    """The fewest bytes: read the batch once, read and write W1 once (fp32)."""
    x = sparse_nnz * 8 + (d.B + 1) * 4 if sparse_nnz is not None else d.B * d.V * 4
    return float(x + 2 * 4 * d.V * d.H)


class GpuData:
    """The training set on the GPU: CSR arrays for every document, and dense
    rows for the dense steps (built on the device, 5.4 GB for 40,960 documents)."""

    def __init__(self, train: data.Corpus, dense_docs: int):
        import cupy
        self.train = train
        self.indptr = cupy.asarray(train.indptr.astype(np.int32))
        self.indices = cupy.asarray(train.indices)
        self.values = cupy.asarray(train.values)
        self.labels = cupy.asarray(train.labels)
        n = min(dense_docs, train.docs)
        part = train.rows(0, n)
        self.dense = cupy.zeros((n, train.vocab), cupy.float32)
        rows = cupy.asarray(np.repeat(np.arange(n), np.diff(part.indptr)))
        self.dense[rows, self.indices[:part.nnz]] = self.values[:part.nnz]
        self.dense16 = cupy.zeros((n, Dims(1, train.vocab).Vp), cupy.float16)
        self.dense16[rows, self.indices[:part.nnz]] = self.values[:part.nnz].astype(cupy.float16)

    def batch_buffers(self, step_: Step, d: Dims, first: int, params: dict, bufs: dict | None = None) -> dict:
        """Buffers for the batch of documents first..first+B-1: views into the
        device copies (the sparse steps read the CSR arrays with absolute offsets)."""
        be = get_backend("gpu")
        if bufs is None:
            bufs = buffers(be, step_, d, self.train.rows(0, d.B), params, inputs=False)
        bufs["labels"] = self.labels[first:first + d.B]
        if "yhot" in bufs:           # step 1 reads the labels one-hot
            import cupy
            bufs["yhot"] = cupy.eye(d.C, dtype=cupy.float32)[bufs["labels"]]
        if step_.input == "sparse":
            bufs["indptr"] = self.indptr[first:first + d.B + 1]
            bufs["indices"], bufs["values"] = self.indices, self.values
        elif step_.input == "dense16":
            bufs["x16"] = self.dense16[first:first + d.B]
        else:
            bufs["x"] = self.dense[first:first + d.B]
        return bufs


def _check_full_size(step_: Step, gd: GpuData, params: dict, batch_ref: dict) -> dict:
    d = Dims(MAIN_BATCH, data.VOCAB)
    bufs = gd.batch_buffers(step_, d, 0, params)
    bind_step(step_, bufs, d, CHECK_LR)()
    import cupy
    cupy.cuda.get_current_stream().synchronize()
    out = {"loss": compare(bufs["loss"], batch_ref["loss"], step_.precision).rel_error,
           "update of W1": compare(bufs["W1"].astype(cupy.float64) - cupy.asarray(params["W1"], cupy.float64),
                                   batch_ref["dW1"], step_.precision).rel_error,
           "update of W2": compare(bufs["W2"].astype(cupy.float64) - cupy.asarray(params["W2"], cupy.float64),
                                   batch_ref["dW2"], step_.precision).rel_error}
    tol = compare(np.ones(1), np.ones(1), step_.precision).tolerance
    if max(out.values()) > tol:
        raise CheckFailed(f"{step_.label} at B = {MAIN_BATCH}, V = {data.VOCAB}: relative errors {out}, "
                          f"tolerance {tol}")
    return out


def graph_timer(launch, *, repeats: int, **options):
    """A step timed as a captured CUDA graph of :data:`GRAPH_LAUNCHES` steps (half the repeats, at
    least 20: each repeat replays the whole graph)."""
    return timing.graph_benchmark(launch, launches=GRAPH_LAUNCHES, repeats=max(20, repeats // 2), **options)


def step_variants(rec, run: "_Run", step_: Step) -> list[Variant]:
    """``step_`` at every batch size this device's :class:`~.fit.Plan` lets it run (a pair it
    skips is not measured; the plan lists it), each a :class:`Variant` the ladder loop checks
    (the step's full-size check, :func:`full_size_check`, run once) and times: eagerly, and also
    in a graph where an eager step takes less than :data:`GRAPH_BELOW_MS` (a graph step: only in
    its graph)."""
    check = full_size_check(run, step_)
    variants = []
    for b in run.batches:
        why = run.plan.skip_reason(step_.ordinal, b)
        if why:
            rec.progress(f"{step_.label:55s} B={b:5d} skipped: {why}")
            continue
        d = Dims(b, data.VOCAB)
        nnz = int(run.gd.train.indptr[b]) if step_.input == "sparse" else None
        launch = bind_step(step_, run.gd.batch_buffers(step_, d, 0, {k: v.copy() for k, v in run.params.items()}), d)
        labels = {"flops": flops_per_step(d, nnz), "bytes": bytes_per_step(d, nnz), "step": step_.ordinal,
                  "batch": b, "precision": step_.precision, "input": step_.input, "kernels": len(launch.ops)}

        def rows(measured, _checked, _medians, b=b, launch=launch, labels=labels) -> list[dict]:
            if step_.graph:
                return [measured.row("ladder", step_.label, b, mode="graph", **labels)]
            out = [measured.row("ladder", step_.label, b, mode="eager", **labels)]
            if measured.median_ms < GRAPH_BELOW_MS:
                graph = graph_timer(launch, repeats=rec.repeats, budget_ms=rec.variant_budget_ms)
                out.append(graph.row("ladder", step_.label, b, mode="graph", **labels))
            return out
        variants.append(Variant(step_.label, launch, check, rows, where={"step": step_.ordinal},
                                timer=graph_timer if step_.graph else None))
    return variants


def time_vendor(gd: GpuData, params: dict, repeats: int, batches=(MAIN_BATCH,), log=print,
                compile_modes=baselines.COMPILE_MODES):
    """PyTorch's paths on the same batch, each checked, then timed: eager, in CUDA
    graphs where they can be captured, and through ``torch.compile`` (compiled and
    warmed first; the compilation's seconds in the ``compile_s`` column)."""
    from ... import baselines as vendor
    rows, skipped = [], []
    for b in batches:
        d = Dims(b, data.VOCAB)
        batch = gd.train.rows(0, b)
        ref = baselines.reference_output(params, batch, CHECK_LR)
        paths = baselines.torch_paths(params, batch, gd.dense[:b], lr=CHECK_LR)
        paths += vendor.graph_paths(paths, launches=10)
        compile_times = {}
        paths += baselines.compiled_paths(params, batch, gd.dense[:b], lr=CHECK_LR, modes=compile_modes,
                                          compile_times=compile_times)
        if gd.dense.shape[0] < b:            # the device's plan kept fewer dense documents than a batch
            skipped += [{"variant": p.label, "library": p.library, "precision": p.precision, "size": b,
                         "reason": f"skipped: {gd.dense.shape[0]:,} documents kept dense on this device, "
                                   f"fewer than the batch"} for p in paths if "dense X" in p.label]
            paths = [p for p in paths if "dense X" not in p.label]
        for p in paths:
            sparse = "dense" not in p.label
            nnz = batch.nnz if sparse else None
            result = vendor.measure([p], reference=ref, experiment="vendor", size=b, repeats=repeats,
                                    flops=flops_per_step(d, nnz), bytes=bytes_per_step(d, nnz),
                                    labels={"batch": b, "input": "sparse" if sparse else "dense"},
                                    on_failure="skip", log=log)
            for row in result.rows:
                row["compile_s"] = compile_times.get(p.label, np.nan)
                if p.label in compile_times:
                    log(f"  {p.label}: compiled and warmed in {compile_times[p.label]:.1f} s (not in its time)")
            rows += result.rows
            skipped += result.skipped
        skipped += [{**entry, "size": b} for entry in baselines.NOT_COMPILED]
    return rows, skipped


def breakdown(gd: GpuData, params: dict, numbers=None, repeats: int = 30, plan=None) -> list[dict]:
    """Each op of a step at batch 1,024 timed with events around it, inside the running step."""
    import cupy
    rows = []
    d = Dims(MAIN_BATCH, data.VOCAB)
    for step_ in STEPS:
        if numbers is not None and step_.ordinal not in numbers:
            continue
        if plan is not None and plan.skip_reason(step_.ordinal, MAIN_BATCH):
            continue
        bufs = gd.batch_buffers(step_, d, 0, {k: v.copy() for k, v in params.items()})
        launch = bind_step(step_, bufs, d)

        def run(span, launch=launch):
            launch(lambda op, stream: span(op.name, stream))
        samples = span_samples(run, cupy.cuda.get_current_stream(), repeats=repeats, warmup=3)
        for i, op in enumerate(launch.ops):
            s = np.asarray(samples[op.name])
            rows.append({"experiment": "breakdown", "variant": step_.label, "size": MAIN_BATCH, "phase": "kernel",
                         "median_ms": float(np.median(s)), "q1_ms": float(np.percentile(s, 25)),
                         "q3_ms": float(np.percentile(s, 75)), "min_ms": float(s.min()), "max_ms": float(s.max()),
                         "repeats": len(s), "flops": 0.0, "bytes": 0.0, "step": step_.ordinal, "op": op.name,
                         "kernel": op.kernel, "order": i, "stream": op.stream})
    return rows


def timeline(gd: GpuData, params: dict, numbers=(2, 3), plan=None) -> pd.DataFrame:
    """One SGD step of each of ``numbers`` at batch 1,024 as a timeline: a lane per stream."""
    import cupy
    from ... import timeline as tl_mod
    frames = []
    d = Dims(MAIN_BATCH, data.VOCAB)
    for number in numbers:
        if plan is not None and plan.skip_reason(number, MAIN_BATCH):
            continue
        step_ = find(STEPS, number)
        bufs = gd.batch_buffers(step_, d, 0, {k: v.copy() for k, v in params.items()})
        launch = bind_step(step_, bufs, d)
        for _ in range(3):
            launch()
        cupy.cuda.Device().synchronize()
        tl = tl_mod.Timeline()
        main = tl.stream("stream 0")
        for s, stream in getattr(launch, "_streams", {}).items():
            tl.stream(f"stream {s}", stream)
        with main:
            launch(lambda op, stream: tl.span(stream, "kernel", op.name))
        frames.append(tl.rows().assign(step=number, variant=step_.label))
    return pd.concat(frames, ignore_index=True)


# ----------------------------------------------------------------- training runs
def evaluate(W: dict, test_dense):
    """The logits of the dense test set under parameters W (CuPy arrays)."""
    import cupy
    z1 = test_dense @ W["W1"] + W["b1"]
    h = 1.0 / (1.0 + cupy.exp(-z1))
    return h @ W["W2"] + W["b2"]


def scores(W: dict, dense, labels) -> tuple[float, float]:
    """Accuracy and mean cross-entropy (nats) of parameters W on dense documents."""
    import cupy
    z = evaluate(W, dense)
    z = z - z.max(axis=1, keepdims=True)
    log_p = z - cupy.log(cupy.exp(z).sum(axis=1, keepdims=True))
    return (float((z.argmax(axis=1) == labels).mean()),
            float(-log_p[cupy.arange(len(labels)), labels].mean()))


#: Training documents the curves evaluate after each epoch (beside the test set):
#: the same number as the test set, so train and test figures are comparable.
TRAIN_EVAL_DOCS = 8192


class Trainer:
    """Trains with one ladder step (its launch configuration: the step's ``block`` and
    ``options``) at learning rate ``lr`` over consecutive batches of the training set: every
    batch bound once (the graph step: captured once per batch)."""

    def __init__(self, step_: Step, gd: GpuData, params: dict, b: int, lr: float = reference.LEARNING_RATE,
                 docs=None):
        import cupy
        self.step, self.b = step_, b
        d = Dims(b, data.VOCAB)
        self.batches = (docs or gd.train.docs) // b
        if step_.input != "sparse" and self.batches * b > gd.dense.shape[0]:
            self.batches = gd.dense.shape[0] // b
        self.params = {k: cupy.asarray(v) for k, v in params.items()}
        base = gd.batch_buffers(step_, d, 0, params)
        base.update(self.params)
        if "W1h" in base:          # step 8's fp16 copy of W1 must follow the master weights
            self.params["W1h"] = base["W1h"]
        self.loss = base["loss"]
        self.bound = []
        for i in range(self.batches):
            bufs = gd.batch_buffers(step_, d, i * b, params, dict(base))
            self.bound.append(bind_step(step_, bufs, d, lr))
        self.graphs = None
        self.replay_check = None
        if step_.graph:
            # The graphs run on a stream of their own, and a non-blocking one: it does not wait
            # for the legacy default stream, where everything above was written (the parameters
            # copied from the host, the scratch buffers filled with NaN by ``poisoned``). Nothing
            # on the host waits for those writes either, so a replay ordered only by time could
            # read W1 before its copy landed (reading whatever the memory pool held: NaN poison
            # from earlier experiments) or have its scratch poisoned mid-step: 20 epochs of NaN
            # on a busy GPU (the notebook run on 2026-11-25), identical curves on an idle one.
            # Every replay is ordered after the caller's stream with an event (_wait_for_caller).
            self.stream = cupy.cuda.Stream(non_blocking=True)
            self.graphs = []
            with self.stream:
                for bound in self.bound:
                    self.stream.begin_capture()
                    try:
                        bound()
                    finally:
                        self.graphs.append(self.stream.end_capture())
            self._wait_for_caller()
            # Checked before used: the first batch replayed from the graph against the same
            # step run eagerly from the same state; the state is then put back.
            with self.stream:
                state = {k: v for k, v in self.params.items() if k in reference.PARAMS}
                self.replay_check = check_replay(
                    step_.label, state, self.loss, eager=self.bound[0],
                    replay=lambda: self.graphs[0].launch(self.stream), precision=step_.precision)
            self.stream.synchronize()

    def _wait_for_caller(self) -> None:
        """Order what is launched on ``self.stream`` next after everything already
        launched on the caller's (current) stream."""
        import cupy
        self.stream.wait_event(cupy.cuda.get_current_stream().record())

    def epoch(self, losses) -> None:
        """One pass; the loss of every step is copied (on the device) into ``losses``."""
        import cupy
        if self.graphs is not None:
            self._wait_for_caller()      # ``losses`` was zeroed, and the weights read, there
            with self.stream:
                for i, g in enumerate(self.graphs):
                    g.launch(self.stream)
                    losses[i:i + 1] = self.loss
                done = self.stream.record()
            cupy.cuda.get_current_stream().wait_event(done)
            self.stream.synchronize()
            return
        for i, bound in enumerate(self.bound):
            bound()
            losses[i:i + 1] = self.loss
        cupy.cuda.get_current_stream().synchronize()


class ReplayMismatch(RuntimeError):
    """A step's captured graph, replayed, does not do what the same step run eagerly does."""


class NonFiniteLoss(RuntimeError):
    """A training run's loss became NaN or infinite."""


def check_replay(label: str, state: dict, loss, eager, replay, precision: str = "fp32") -> dict:
    """Run one step eagerly and replayed (from a graph) from the same ``state``
    (the parameters, updated in place by either) and compare the parameters
    after it and the loss; the state is restored afterwards. Raises
    :class:`ReplayMismatch` naming the step when they differ beyond
    ``precision``'s tolerance (a NaN anywhere differs). The parameters, not their
    updates, are compared: the scatter-add's atomics may add in another order,
    which moves W1 by rounding (tiny beside W1, not beside one small update).
    NumPy or CuPy arrays: on the GPU, call it on the stream both run on.
    Returns the relative errors."""
    start = {k: v.copy() for k, v in state.items()}

    def restore():
        for k, v in state.items():
            v[...] = start[k]
    eager()
    want = {k: v.copy() for k, v in state.items()}
    want_loss = loss.copy()
    restore()
    replay()
    errs = {"loss": compare(loss, want_loss, precision, name="loss").rel_error}
    errs.update({k: compare(v, want[k], precision, name=k).rel_error for k, v in state.items()})
    restore()
    tol = compare(np.ones(1), np.ones(1), precision).tolerance
    if not all(e <= tol for e in errs.values()):      # a NaN error fails too
        raise ReplayMismatch(f"{label}: the first batch replayed from its CUDA graph differs from the same "
                             f"step run eagerly from the same weights: relative errors {errs}, tolerance {tol}")
    return errs


def require_finite(label: str, epoch: int, losses) -> None:
    """Raise :class:`NonFiniteLoss` naming the run when any loss of the epoch is NaN or infinite."""
    losses = np.asarray(losses)
    bad = np.flatnonzero(~np.isfinite(losses))
    if bad.size:
        raise NonFiniteLoss(f"{label}: the training loss is not finite in epoch {epoch} (first at batch "
                            f"{bad[0]}, {bad.size} of {losses.size} batches): the run is stopped, its curve "
                            "would be meaningless")


def train_curves(gd: GpuData, test: data.Corpus, params: dict, numbers=(7, 8, 9, 10), epochs: int = EPOCHS,
                 b: int = MAIN_BATCH, lr: float = reference.LEARNING_RATE, log=print) -> pd.DataFrame:
    """Training runs to convergence: our steps and PyTorch fp32 (the fp32
    reference), same initial weights, same batches, same learning rate."""
    import cupy
    test_dense = cupy.zeros((test.docs, test.vocab), cupy.float32)
    rows_ = cupy.asarray(np.repeat(np.arange(test.docs), np.diff(test.indptr)))
    test_dense[rows_, cupy.asarray(test.indices)] = cupy.asarray(test.values)
    test_labels = cupy.asarray(test.labels)
    n_eval = min(TRAIN_EVAL_DOCS, gd.dense.shape[0])
    # Every run trains on the same documents: all of them, or as many as the device keeps dense.
    docs = min(gd.train.docs, gd.dense.shape[0]) // b * b
    if docs < b:
        raise RuntimeError(f"{gd.dense.shape[0]:,} documents kept dense on this device: fewer than one batch of {b:,}")
    out = []
    runs = [(n, find(STEPS, n)) for n in numbers] + [("torch", None)]
    for name, step_ in runs:
        if step_ is not None:
            tr = Trainer(step_, gd, params, b, lr, docs=docs)
            n_batches, label = tr.batches, step_.label
        else:
            tr = _TorchTrainer(gd, params, b, lr)
            n_batches, label = tr.batches, "PyTorch eager fp32, dense X"
        losses = cupy.zeros(n_batches, cupy.float32)
        start = time.perf_counter()
        for e in range(epochs):
            # An epoch end to end (the host enqueues its steps while the GPU runs them): the
            # host's part is in it by intent, as it is in any training loop's wall time.
            ms = event_region(lambda: tr.epoch(losses))
            acc, test_loss = scores(tr.params, test_dense, test_labels)
            # The same measurement on training documents the run has trained on: with the test
            # figures, what shows over-fitting (train and test diverging) epoch by epoch.
            train_acc, train_loss = scores(tr.params, gd.dense[:n_eval], gd.labels[:n_eval])
            host_losses = cupy.asnumpy(losses)
            require_finite(label, e + 1, host_losses)
            for i, l in enumerate(host_losses):
                out.append({"variant": label, "epoch": e + 1, "batch_index": i, "loss": float(l),
                            "test_accuracy": acc, "test_loss": test_loss, "train_accuracy": train_acc,
                            "train_eval_loss": train_loss, "epoch_ms": ms})
            log(f"{label:55s} epoch {e + 1}: loss {float(losses[-5:].mean()):.4f}, test accuracy {acc:.4f} "
                f"(train {train_acc:.4f}), test loss {test_loss:.4f} (train {train_loss:.4f}), {ms:.1f} ms",
                flush=True)
        log(f"  ({time.perf_counter() - start:.1f} s)")
    return pd.DataFrame(out)


class _TorchTrainer:
    """PyTorch eager fp32 on dense X, in place: the fp32 reference training run."""

    def __init__(self, gd: GpuData, params: dict, b: int, lr: float):
        import cupy
        import torch
        import torch.nn.functional as F
        self.b, self.lr = b, lr
        self.batches = min(gd.train.docs, gd.dense.shape[0]) // b
        self.x = torch.from_dlpack(gd.dense)
        self.y = torch.as_tensor(gd.train.labels.astype(np.int64), device="cuda")
        self.w = {k: torch.as_tensor(v, device="cuda").clone().requires_grad_(True) for k, v in params.items()}
        self.F = F
        self.params = {k: cupy.from_dlpack(v.detach()) for k, v in self.w.items()}

    def epoch(self, losses):
        import cupy
        import torch
        w, F = self.w, self.F
        for i in range(self.batches):
            x = self.x[i * self.b:(i + 1) * self.b]
            h = torch.sigmoid(torch.addmm(w["b1"], x, w["W1"]))
            loss = F.cross_entropy(torch.addmm(w["b2"], h, w["W2"]), self.y[i * self.b:(i + 1) * self.b])
            grads = torch.autograd.grad(loss, [w[k] for k in reference.PARAMS])
            with torch.no_grad():
                for k, g in zip(reference.PARAMS, grads):
                    w[k].sub_(g, alpha=self.lr)
            losses[i:i + 1] = cupy.from_dlpack(loss.detach().view(1))
        torch.cuda.synchronize()


# ----------------------------------------------------------------- the sweep
def sweep(gd: GpuData, test: data.Corpus, params: dict, number: int = 6, batches=BATCHES,
          blocks=SWEEP_BLOCKS, lr: float = reference.LEARNING_RATE, log=print,
          deadline: float = float("inf")) -> pd.DataFrame:
    """Batch size x block shape for step ``number``'s kernels, with our bounds
    test and with the report's: each point trains on the same SWEEP_DOCS
    documents from the same weights; its loss curve is compared with the
    reference configuration's (block 16 x 16, our test) at that batch size."""
    import cupy
    test_dense = cupy.zeros((test.docs, test.vocab), cupy.float32)
    rows_ = cupy.asarray(np.repeat(np.arange(test.docs), np.diff(test.indptr)))
    test_dense[rows_, cupy.asarray(test.indices)] = cupy.asarray(test.values)
    test_labels = cupy.asarray(test.labels)
    out = []
    for b in batches:
        if b > min(SWEEP_DOCS, gd.dense.shape[0]):
            log(f"sweep: batch {b} skipped: {gd.dense.shape[0]:,} documents kept dense on this device")
            continue
        ref_curve = None
        for guard, options in (("ours", ()), ("report's", ("-DREPORT_GUARD",))):
            for blk in ((16, 16),) + tuple(x for x in blocks if x != (16, 16)):
                if time.perf_counter() > deadline:
                    log("sweep: time budget spent; the remaining points are not measured")
                    return pd.DataFrame(out)
                tr = Trainer(replace(find(STEPS, number), block=blk, options=options), gd, params, b, lr,
                             docs=min(SWEEP_DOCS, gd.dense.shape[0]))
                losses = cupy.zeros(tr.batches, cupy.float32)
                epoch_ms = event_region(lambda: tr.epoch(losses))          # end to end, as above
                curve = cupy.asnumpy(losses).astype(np.float64)
                with np.errstate(all="ignore"):
                    logits = evaluate(tr.params, test_dense)
                    acc = float((logits.argmax(axis=1) == test_labels).mean())
                if ref_curve is None:
                    ref_curve = curve
                dev = curve_deviation(curve, ref_curve)
                out.append({"batch": b, "block": f"{blk[0]} x {blk[1]}", "threads": blk[0] * blk[1], "guard": guard,
                            "steps": tr.batches, "step_ms": epoch_ms / tr.batches,
                            "final_loss": curve[-1], "test_accuracy": acc, "loss_deviation": dev,
                            "broken": is_broken(curve, ref_curve)})
                loss = f"loss {curve[-1]:.4f}" if np.isfinite(curve[-1]) else "loss not finite"
                log(f"sweep B={b:5d} block {blk} {guard:9s}: {loss} acc {acc:.4f} "
                    f"dev {dev:.2e} {'BROKEN' if out[-1]['broken'] else ''}", flush=True)
                del tr
    return pd.DataFrame(out)


# ----------------------------------------------------------------- the profiler's view
#: The steps Nsight Compute profiles at batch 1,024, and what it reads for each kernel.
PROFILE_STEPS = (6, 7, 8, 9)
PROFILE_METRICS = [
    "gpu__time_duration.sum",
    "sm__inst_executed_pipe_fma.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
]
# ... and the profiler module's stall reasons (profiler.STALL_METRICS), where this ncu knows them
# (the run recorded on 2026-11-23 has none).


def profile_driver() -> None:
    """Launch one SGD step of each of PROFILE_STEPS at batch 1,024, for Nsight
    Compute to watch (``python -m gpulab profile-driver training``)."""
    import cupy
    train, _ = data.corpus()
    gd = GpuData(train.rows(0, MAIN_BATCH), dense_docs=MAIN_BATCH)
    params = reference.init_params()
    d = Dims(MAIN_BATCH, data.VOCAB)
    for n in PROFILE_STEPS:
        step_ = find(STEPS, n)
        bind_step(step_, gd.batch_buffers(step_, d, 0, params), d)()
        cupy.cuda.Device().synchronize()


def profile_steps() -> pd.DataFrame | None:
    """The profiler's figures for each kernel launch of PROFILE_STEPS, labelled with step and op
    (None where ncu is missing or fails: the reason is printed)."""
    from ... import profiler
    ops = [(n, op) for n in PROFILE_STEPS for op in find(STEPS, n).ops(Dims(MAIN_BATCH, data.VOCAB))]
    names = sorted({op.kernel for _, op in ops})
    driver = profiler.driver(NAME)
    regex = "^(" + "|".join(names) + ")$"
    table = profiler.profile_launches(NAME, driver, PROFILE_METRICS, kernel_regex=regex, timeout=90,
                                      stalls=list(profiler.STALL_METRICS))
    if table is None:
        return None
    if len(table) == len(ops):
        table.insert(0, "step", [n for n, _ in ops])
        table.insert(1, "op", [op.name for _, op in ops])
    return table


# ----------------------------------------------------------------- the whole run
#: Seconds the whole run may take before the optional experiments still to come are skipped
#: (and listed in the run's ``problems`` table): the sweep comes last.
RUN_BUDGET_S = 330.0


class _Run:
    """What every experiment reads: the corpus, the initial weights, what this GPU can run (or the
    profile simulated: :func:`gpulab.device.simulate`; what does not fit is skipped and listed),
    the training set on the device, and the float64 reference for the full-size check."""

    def __init__(self, rec):
        self.train, self.test = data.corpus()
        self.params = reference.init_params()
        self.batches = BATCHES if not rec.quick else (32, 1024)
        self.plan = fit.plan(batches=self.batches, train=self.train)
        for note in self.plan.notes:
            rec.progress(f"fit: {note}")
        self.gd = GpuData(self.train, dense_docs=self.plan.dense_docs if not rec.quick
                          else min(8192, self.plan.dense_docs))
        batch = self.train.rows(0, MAIN_BATCH)
        p64 = {k: v.astype(np.float64) for k, v in self.params.items()}
        acts = reference.forward(batch, p64)
        grads = reference.backward(batch, batch.labels, p64, acts)
        self.batch_ref = {"loss": np.array([reference.loss(acts["P"], batch.labels)]),
                          "dW1": -CHECK_LR * grads["dW1"], "dW2": -CHECK_LR * grads["dW2"]}
        self.checks: list[dict] = []
        self.progress = rec.progress


def full_size_check(run: _Run, step_: Step):
    """The check every variant of ``step_`` runs before it is timed: the step at full size
    (B = 1,024, V = 32,754) against the float64 reference, run at the first call only, its result
    (or its failure, raised again) kept for the others, and its row in the ``checks`` table."""
    outcome: dict = {}

    def check() -> dict:
        if not outcome:
            try:
                outcome["errors"] = _check_full_size(step_, run.gd, run.params, run.batch_ref)
            except Exception as exc:      # noqa: BLE001 (the ladder loop lists it; its row says why)
                outcome["failure"] = exc
            errors = outcome.get("errors", {})
            failure = outcome.get("failure")
            run.checks.append({"step": step_.ordinal, "variant": step_.label, "passed": failure is None,
                               "error": f"{type(failure).__name__}: {failure}"[:500] if failure else "",
                               **{f"rel_error {k}": v for k, v in errors.items()}})
            run.progress(f"checked {step_.label}: {errors if failure is None else run.checks[-1]['error']}")
        if "failure" in outcome:
            raise outcome["failure"]
        return outcome["errors"]
    return check


def time_ladder(rec, run: _Run):
    """Every step at every batch size through the ladder loop (:meth:`Recorder.ladder`), each
    step checked at full size before it is timed and each a part of its own (one failing leaves
    the others); a step this device cannot run at B = 1,024 is neither checked nor timed
    (``skipped``). The ``checks`` table: each step checked, passed, error."""
    for s in STEPS:
        why = run.plan.skip_reason(s.ordinal, MAIN_BATCH)
        if why:               # not checked at full size on this device, so not timed either
            rec.progress(f"not checked or timed on this device: {s.label}: {why}")
            for b in run.batches:
                rec.skip(f"not checked at batch {MAIN_BATCH:,} here ({why}), so not timed", step=s.ordinal, batch=b)
            continue
        rec.attempt(f"ladder {s.ordinal}", lambda: rec.ladder(step_variants(rec, run, s)))
    rec.table("checks", pd.DataFrame(run.checks))


def vendor(rec, run: _Run):
    rows, skipped = time_vendor(run.gd, run.params, rec.repeats, log=rec.progress)
    rec.add(rows)
    if skipped:
        rec.table("vendor_skipped", pd.DataFrame(skipped))


def curves(rec, run: _Run):
    rec.table("curves", train_curves(run.gd, run.test, run.params, epochs=EPOCHS if not rec.quick else 2,
                                     log=rec.progress))


def time_breakdown(rec, run: _Run):
    rec.add(breakdown(run.gd, run.params, plan=run.plan))


def time_timeline(rec, run: _Run):
    rec.table("timeline", timeline(run.gd, run.params, plan=run.plan))


def ceilings(rec, run: _Run):
    rec.add(roofline.measure_ceilings(repeats=20))


def time_sweep(rec, run: _Run):
    rec.table("sweep", sweep(run.gd, run.test, run.params, batches=run.batches if not rec.quick else (64, 1024),
                             log=rec.progress, deadline=rec.deadline))


def profile_counters(rec, run: _Run):
    table = profile_steps()
    if table is not None:
        rec.table("profile", table)


def side_tables(rec, run: _Run):
    """The plan (each step against this GPU's limits, and its notes), the pairs it skips, the
    corpus's Bayes-optimal accuracy; then the training set leaves the device."""
    import cupy
    rec.table("fit", run.plan.summary())
    if run.plan.notes:
        rec.table("fit_notes", pd.DataFrame({"note": run.plan.notes}))
    for r in run.plan.skipped().to_dict("records"):
        rec.skip(r.pop("reason"), **r)
    bayes, err = data.bayes_accuracy()
    rec.table("bayes", pd.DataFrame([{"bayes_accuracy": bayes, "standard_error": err,
                                      "bayes_on_test_set": float((data.bayes_predict(run.test)
                                                                  == run.test.labels).mean())}]))
    run.gd = None           # the training set on the device (8 GB) can go
    cupy.get_default_memory_pool().free_all_blocks()


#: Every experiment of the chapter on the GPU, in order. A failing experiment is listed in the
#: ``problems`` table and the run goes on; the optional ones are not started once the run's
#: budget (:data:`RUN_BUDGET_S`) is spent.
benchmark_all = recorder.Recording(NAME, [
    recorder.Experiment("ladder", time_ladder),
    recorder.Experiment("vendor", vendor),
    recorder.Experiment("curves", curves, optional=True),
    recorder.Experiment("breakdown", time_breakdown, optional=True),
    recorder.Experiment("timeline", time_timeline, optional=True),
    recorder.Experiment("ceilings", ceilings, optional=True),
    recorder.Experiment("sweep", time_sweep, optional=True),
    recorder.Experiment("profile", profile_counters, optional=True),
    recorder.Experiment("side tables", side_tables),
], setup=_Run, skipped_key=("step", "batch"), budget_s=RUN_BUDGET_S, keep_going=True,
    crosscheck=lambda row: row["experiment"] in ("ladder", "vendor") and row["size"] == MAIN_BATCH,
    variant_budget_ms=TIMING_BUDGET_MS)

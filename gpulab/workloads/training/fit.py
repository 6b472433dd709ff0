"""Fitting the chapter's live paths to the GPU they find (or to a simulated smaller one).

A reader may run the chapter on a T4 (64 KiB of shared memory per block, 16 GB)
or an L4 (99 KiB, 24 GB) instead of the H100 it was recorded on. Before
measuring, :func:`plan` checks, against :func:`gpulab.device.limits` (the real
device's, or a profile's under :func:`gpulab.device.simulate`):

* every kernel of every step: the compute capability it needs (step 8's tensor
  cores: 7.0), the threads of its block shape (at most 1,024) and its shared
  memory per block (all of this chapter's kernels use static
  shared memory, which CUDA caps at 48 KiB, so every current GPU fits them;
  the check says so with each kernel's figure, as compiled);
* device memory: the training set kept dense on the device for the dense steps
  (fp32 and fp16 copies: 196 KB per document), the dense test set, the CSR
  arrays, and each step's buffers at each batch size, against
  :data:`MEMORY_FRACTION` of the device's memory. Fewer documents are kept
  dense where all 40,960 do not fit (every training run then uses that many,
  so the curves stay comparable); a (step, batch size) whose buffers do not fit
  is skipped, with the reason, as is a step whose kernel cannot launch.

Without a GPU and with no profile simulated there are no limits: everything fits.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...cpu import resources
from ...device import limits as device_limits
from ...kernels import get_backend, load_module
from . import data
from .launchers import Config
from .problem import BATCHES, Dims, scratch_shapes
from .steps import STEPS, Step

#: The share of the device's memory the chapter's data and buffers may use (the rest:
#: PyTorch's caching allocator and workspaces, CuPy's pool, the CUDA context).
MEMORY_FRACTION = 0.5
#: The most threads a block may have on every GPU since compute capability 2.0.
MAX_THREADS_PER_BLOCK = 1024
#: Static ``__shared__`` memory per block is capped at 48 KiB by CUDA itself.
STATIC_SHARED_LIMIT = 48 * 1024
#: Kernels that need a newer GPU than the rest: (compute capability, what for).
CAPABILITY = {"forward_product_tc": ("7.0", "fp16 tensor cores (wmma)"),
              "w1_gradient_step_tc": ("7.0", "fp16 tensor cores (wmma)")}
#: Dense training documents are kept in multiples of the largest batch.
DOC_QUANTUM = 2048


def dense_bytes_per_doc(vocab: int = data.VOCAB) -> int:
    """One training document kept dense on the device: fp32 (steps 1-7, PyTorch)
    and fp16, padded (step 8)."""
    return vocab * 4 + Dims(1, vocab).Vp * 2


def resident_bytes(dense_docs: int, train: data.Corpus | None = None, test_docs: int = data.TEST_DOCS,
                   vocab: int = data.VOCAB) -> int:
    """What the record keeps on the device for the whole run: the dense training
    documents, the dense test set (fp32), and the training set's CSR arrays."""
    nnz = train.nnz if train is not None else 0
    docs = train.docs if train is not None else 0
    return int(dense_docs * dense_bytes_per_doc(vocab) + test_docs * vocab * 4 + nnz * 8 + (docs + 1) * 8)


def step_bytes(step_: Step, d: Dims, config: Config = Config()) -> int:
    """Device memory one step allocates for a batch: its parameters (copies), its
    intermediates, step 8's fp16 W1 and dZ1 (the batch itself is a view of the
    resident data)."""
    used = {a for op in step_.ops(d, config) for a in op.args if isinstance(a, str)}
    total = 4 * (d.V * d.H + d.H + d.H * d.C + d.C)
    total += sum(4 * int(np.prod(shape)) for name, shape in scratch_shapes(d).items() if name in used)
    if "W1h" in used:
        total += 2 * d.Vp * d.H
    if "dz1h" in used:
        total += 2 * d.B * d.H
    return int(total)


def kernel_resources(steps_=STEPS, backend=None) -> pd.DataFrame:
    """Static shared memory and registers of every kernel the steps launch, by
    (file, kernel): from the compiled functions on a GPU; on the CPU backend
    from NVRTC compiling the files for an H100 (sm_90) where NVRTC is installed,
    else unknown (NaN) with the reason in ``attrs["unavailable"]``."""
    be = get_backend(backend)
    pairs = sorted({(op.file, op.kernel) for s in steps_ for op in s.ops(Dims(1024, data.VOCAB))})
    rows, why = [], None
    if be.name == "gpu":
        for file, kernel in pairs:
            attrs = load_module(file, be).get_function(kernel).raw.attributes
            rows.append({"file": file, "kernel": kernel, "static_shared_bytes": attrs["shared_size_bytes"],
                         "registers": attrs["num_regs"], "max_threads_per_block": attrs["max_threads_per_block"]})
        source = "the compiled kernels"
    else:
        why = resources.unavailable()
        tables = {}
        for file, kernel in pairs:
            if why is None and file not in tables:
                try:
                    tables[file] = resources.compile_resources(file)
                except Exception as exc:          # a compile error, or NVRTC missing a header
                    why = f"{file}: {type(exc).__name__}: {exc}"[:300]
            t = tables.get(file)
            known = t is not None and kernel in t.index
            rows.append({"file": file, "kernel": kernel,
                         "static_shared_bytes": int(t.loc[kernel, "static_shared_bytes"]) if known else np.nan,
                         "registers": int(t.loc[kernel, "registers"]) if known else np.nan,
                         "max_threads_per_block": np.nan})
        source = "NVRTC for sm_90, no GPU"
    table = pd.DataFrame(rows)
    table.attrs["source"] = source
    if why:
        table.attrs["unavailable"] = why
    return table


@dataclass
class Plan:
    """What the live run does on this device: ``dense_docs`` training documents
    kept dense, the (step, batch) pairs to skip with why, and the checks behind it."""

    device: str
    dense_docs: int
    budget_bytes: float | None
    kernels: pd.DataFrame = field(repr=False)
    batches: pd.DataFrame = field(repr=False)
    notes: list[str] = field(default_factory=list)

    def skip_reason(self, number: int, batch: int) -> str | None:
        """Why step ``number`` does not run at ``batch`` here, or None."""
        k = self.kernels[(self.kernels["step"] == number) & self.kernels["reason"].astype(bool)]
        if len(k):
            return k["reason"].iloc[0]
        b = self.batches[(self.batches["step"] == number) & (self.batches["batch"] == batch)]
        return (b["reason"].iloc[0] or None) if len(b) else None

    def skipped(self) -> pd.DataFrame:
        """One row per (step, batch) skipped, with the reason: the run's ``skipped`` table."""
        rows = [{"step": r.step, "batch": r.batch, "reason": self.skip_reason(r.step, r.batch)}
                for r in self.batches.itertuples()]
        return pd.DataFrame([r for r in rows if r["reason"]], columns=["step", "batch", "reason"])

    def summary(self) -> pd.DataFrame:
        """One row per step: kernels checked, the largest shared memory and block,
        the batch sizes that run and those skipped (with the first reason)."""
        out = []
        for s in sorted(set(self.kernels["step"])):
            k = self.kernels[self.kernels["step"] == s]
            b = self.batches[self.batches["step"] == s]
            skipped = [int(x) for x in b["batch"] if self.skip_reason(s, int(x))]
            reasons = [self.skip_reason(s, x) for x in skipped]
            out.append({"step": s, "device": self.device, "kernels": len(k),
                        "largest shared memory per block (bytes)": k["static_shared_bytes"].max(),
                        "largest block (threads)": int(k["threads"].max()),
                        "largest batch buffers (MB)": b["step_bytes"].max() / 1e6,
                        "batch sizes run": ", ".join(str(int(x)) for x in b["batch"] if int(x) not in skipped),
                        "skipped": (", ".join(map(str, skipped)) + f": {reasons[0]}") if skipped else ""})
        return pd.DataFrame(out)


def plan(limits=None, batches=None, steps_=STEPS, train: data.Corpus | None = None,
         resources: pd.DataFrame | None = None, backend=None) -> Plan:
    """Check every kernel and batch size of ``steps_`` against ``limits`` (default:
    :func:`gpulab.device.limits`) and choose how many training documents to keep
    dense; see the module's docstring."""
    batches = tuple(batches or BATCHES)
    here = limits if limits is not None else device_limits()
    resources = resources if resources is not None else kernel_resources(steps_, backend)
    shared = {(r.file, r.kernel): r.static_shared_bytes for r in resources.itertuples()}
    train_docs = train.docs if train is not None else data.TRAIN_DOCS
    name = here.name if here is not None else "no GPU limits (CPU backend)"
    budget = here.memory_budget(MEMORY_FRACTION) if here is not None else None
    notes = []
    if "unavailable" in resources.attrs:
        notes.append(f"shared memory per kernel unknown here ({resources.attrs['unavailable']}); every kernel "
                     f"of this chapter declares static shared memory, which CUDA caps at {STATIC_SHARED_LIMIT:,} "
                     "bytes")
    krows = []
    for s in steps_:
        for op in s.ops(Dims(max(batches), data.VOCAB)):
            threads = int(np.prod(op.block))
            need = shared.get((op.file, op.kernel), np.nan)
            reason = ""
            needs_cc = CAPABILITY.get(op.kernel)
            if needs_cc and here is not None and here.capability_fits(*needs_cc):
                reason = f"{op.kernel} {here.capability_fits(*needs_cc)}"
            elif threads > MAX_THREADS_PER_BLOCK:
                reason = f"{op.kernel}: a block of {threads} threads; at most {MAX_THREADS_PER_BLOCK}"
            elif here is not None and need == need and here.shared_fits(int(need)):
                reason = f"{op.kernel} {here.shared_fits(int(need))}"
            krows.append({"step": s.ordinal, "op": op.name, "kernel": op.kernel, "threads": threads,
                          "static_shared_bytes": need,
                          "shared limit (bytes)": here.shared_per_block if here is not None else np.nan,
                          "reason": reason})
    kernels = pd.DataFrame(krows)
    # The dense training documents: all of them if they fit beside everything else, else
    # the most (a multiple of DOC_QUANTUM) that do.
    largest = max(step_bytes(s, Dims(b, data.VOCAB)) for s in steps_ for b in batches)
    dense_docs = train_docs
    if budget is not None:
        room = budget - resident_bytes(0, train) - largest
        fit_docs = int(room // dense_bytes_per_doc()) // DOC_QUANTUM * DOC_QUANTUM
        if fit_docs < dense_docs:
            dense_docs = max(0, fit_docs)
            notes.append(f"{dense_docs:,} of the {train_docs:,} training documents kept dense on {name} "
                         f"({dense_bytes_per_doc() / 1e3:.0f} KB each in fp32 and fp16; memory budget "
                         f"{budget / 1e9:.1f} GB, {MEMORY_FRACTION:.0%} of the device's): the dense steps, the "
                         f"training runs and PyTorch use those")
    resident = resident_bytes(dense_docs, train)
    brows = []
    for s in steps_:
        for b in batches:
            need = step_bytes(s, Dims(b, data.VOCAB))
            reason = ""
            if s.input != "sparse" and b > dense_docs:
                reason = (f"batch {b:,} needs {b:,} dense documents on the device; {dense_docs:,} fit the "
                          f"memory budget on {name}")
            elif budget is not None and resident + need > budget:
                reason = (f"needs {(resident + need) / 1e9:.1f} GB of device memory with the resident data; "
                          f"the budget on {name} is {budget / 1e9:.1f} GB")
            brows.append({"step": s.ordinal, "batch": b, "step_bytes": need, "reason": reason})
    return Plan(name, dense_docs, budget, kernels, pd.DataFrame(brows), notes)

"""Compare a kernel's output with a float64 NumPy reference.

The measure is the relative error norm ``||out - ref|| / ||ref||`` (plus the
largest absolute error, to point at the worst element), against a tolerance
that depends on the arithmetic the kernel uses: float32 lands far below 1e-5
on the lab's workloads, half precision near 1e-3. NaN never passes, and since
outputs are poisoned with NaN before every run, an element a kernel forgot to
write is reported as such.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from .errors import CheckFailed

#: Relative-error-norm tolerances by the precision a kernel computes in.
TOLERANCE = {
    "fp64": 1e-12,
    "fp32": 1e-5,
    "tf32": 2e-3,
    "fp16": 1e-2,
    "bf16": 2e-2,
    # FP8 inputs, C in bfloat16, against float64 of the FP8 values read: what is left is the
    # accumulation and C's rounding (about 2e-3 on inputs of both signs; the hopper chapter shows
    # the all-positive sum step 9's accumulation cuts by a few percent, which this does not pass).
    "fp8": 1e-2,
}


@dataclass
class CheckResult:
    name: str
    precision: str
    tolerance: float
    rel_error: float
    max_abs_error: float
    worst_index: tuple
    unwritten: int          # NaN elements in the output where the reference is finite
    passed: bool

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "FAILED"
        text = (f"{self.name}: {verdict}  relative error {self.rel_error:.2e} "
                f"(tolerance {self.tolerance:.0e}, {self.precision}), "
                f"max abs error {self.max_abs_error:.2e} at {self.worst_index}")
        if self.unwritten:
            text += f", {self.unwritten} NaN elements (never written, or computed as NaN)"
        return text

    def _repr_html_(self) -> str:
        color = "green" if self.passed else "red"
        return f"<span style='color:{color}'>{self}</span>"

    def row(self) -> dict:
        return asdict(self)


def compare(out, ref, precision: str = "fp32", tolerance: float | None = None,
            name: str = "output") -> CheckResult:
    """Measure ``out`` against ``ref`` without raising. NumPy or CuPy arrays:
    when either is on the GPU the comparison runs there, so large outputs are
    not copied to the host to be checked."""
    if precision not in TOLERANCE:
        raise ValueError(f"precision must be one of {sorted(TOLERANCE)}, got {precision!r}")
    tol = TOLERANCE[precision] if tolerance is None else float(tolerance)
    xp = _array_module(out, ref)
    out = xp.asarray(out)
    ref = xp.asarray(ref, dtype=xp.float64)
    if out.shape != ref.shape:
        if out.size == ref.size:
            raise ValueError(f"{name}: output has shape {out.shape}, reference {ref.shape}; "
                             "reshape one of them if the layouts really match")
        raise ValueError(f"{name}: output has shape {out.shape} ({out.size} elements), "
                         f"reference {ref.shape} ({ref.size} elements)")
    out64 = out.astype(xp.float64)
    finite_ref = xp.isfinite(ref)
    bad = ~xp.isfinite(out64) & finite_ref
    unwritten = int(xp.count_nonzero(xp.isnan(out64) & finite_ref))
    diff = xp.abs(out64 - ref)
    diff[bad] = xp.inf
    ref_norm = float(xp.linalg.norm(ref.ravel()))
    if bool(bad.any()):
        rel = float("inf")
    else:
        rel = float(xp.linalg.norm(diff.ravel())) / (ref_norm if ref_norm > 0 else 1.0)
    # NaN where the reference itself is NaN must not hide the worst element.
    ranked = xp.nan_to_num(diff, nan=-1.0)
    worst = np.unravel_index(int(xp.argmax(ranked)), diff.shape) if diff.size else ()
    return CheckResult(name=name, precision=precision, tolerance=tol, rel_error=rel,
                       max_abs_error=float(ranked.max()) if diff.size else 0.0,
                       worst_index=tuple(int(i) for i in worst), unwritten=unwritten,
                       passed=bool(rel <= tol))


def check(out, ref, precision: str = "fp32", tolerance: float | None = None,
          name: str = "output") -> CheckResult:
    """Like :func:`compare`, but raise :class:`CheckFailed` when it fails."""
    result = compare(out, ref, precision, tolerance, name)
    if not result.passed:
        raise CheckFailed(str(result))
    return result


def _array_module(*arrays):
    """cupy if any of ``arrays`` is a CuPy array, else numpy."""
    for array in arrays:
        if type(array).__module__.split(".")[0] == "cupy":
            import cupy
            return cupy
    return np


class CheckTable(pd.DataFrame):
    """A table of check results: a DataFrame (filter it, assert on it) that a
    notebook shows with a caption saying where the checks ran (live, on which
    backend or GPU)."""

    _metadata = ["caption"]

    def __init__(self, *args, caption: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.caption = caption

    @property
    def _constructor(self):
        return CheckTable

    def _repr_html_(self):
        floats = [c for c in self.columns if pd.api.types.is_float_dtype(self[c])]
        return (self.style.format({c: "{:.3g}" for c in floats}, na_rep="")
                .set_caption(f"checked against the float64 reference; {self.caption}")._repr_html_())

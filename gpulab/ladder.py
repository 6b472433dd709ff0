"""The protocol every chapter's ladder follows: steps declared as data, one check loop, one table.

A chapter declares its rungs as :class:`Step` objects (a subclass adds what its launches need:
fcnet's ``launches``, alexnet's ``kind``, ...), looks them up with :func:`find` or :func:`select`,
and checks them with :func:`check_steps`, which writes every chapter's checks in one schema: a row
per step and case, with ``rel_error``, ``tolerance``, ``unwritten`` and a ``status`` that is
``"ok"``, ``"FAILED"`` or ``"skipped: <why>"``. :func:`assert_ok` stops a notebook on a failure.

A new chapter's ladder, in full (its kernels and reference are the chapter's own)::

    @dataclass(frozen=True)
    class Step(ladder.Step):
        kernel: str                       # what this chapter needs beyond number, file, title
        block: int = 256

    STEPS = [Step(1, "mychapter/01_naive.cu", "one thread per output", "naive"),
             Step(2, "mychapter/02_tiled.cu", "shared-memory tiles", "tiled", precision="fp16")]

    def check_steps(backend=None, steps=None, sizes=(1, 255, 1000)):
        def check_one(step, be):          # one (columns, CheckResult) per case
            for n in sizes:
                x = make_inputs(n)
                yield {"n": n}, compare(run(step, x, be), reference(x), step.precision)
        return ladder.check_steps(steps or STEPS, check_one, backend)

and in the notebook, ``gpulab.assert_ok(mychapter.check_steps(backend, steps=[ladder.find(STEPS, 2)]))``.
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from .check import TOLERANCE, CheckResult, CheckTable
from .errors import CheckFailed
from .kernels import get_backend

OK = "ok"
FAILED = "FAILED"
SKIPPED = "skipped"


def skipped(why: str) -> str:
    """The status of a check that did not run, with the reason a reader sees."""
    if not why:
        raise ValueError("a skipped check needs a reason (what the device lacks, or why it was left out)")
    return f"{SKIPPED}: {why}"


def number(value: int | str) -> str:
    """A step number in the one form every chapter uses: a string, two digits for a plain
    number (``1`` and ``"01"`` are both ``"01"``), as is for a named rung (``"12h"``, ``"E1"``)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"a step number is an int or a string such as '01' or 'E1', got {value!r}")
    if isinstance(value, (int, np.integer)):
        if value < 0:
            raise ValueError(f"a step number is not negative, got {value}")
        return f"{int(value):02d}"
    if isinstance(value, str) and value.strip():
        text = value.strip()
        return f"{int(text):02d}" if text.isdigit() else text
    raise TypeError(f"a step number is an int or a non-empty string such as '01' or 'E1', got {value!r}")


@dataclass(frozen=True)
class Step:
    """One rung of a ladder: its number, its kernel file (under ``kernels/``), what changed.

    ``precision`` is the arithmetic the step computes in: it sets the check's tolerance.
    ``gpu_only`` marks a kernel the CPU backend cannot run; its checks are skipped there.
    """

    number: str
    file: str
    title: str
    _: KW_ONLY
    precision: str = "fp32"
    gpu_only: bool = False

    def __post_init__(self):
        object.__setattr__(self, "number", number(self.number))
        if self.precision not in TOLERANCE:
            raise ValueError(f"step {self.number}: precision must be one of {sorted(TOLERANCE)}, "
                             f"got {self.precision!r}")

    @property
    def label(self) -> str:
        """How tables, figures and the recorded runs name the step: ``"07 whole net in registers"``."""
        return f"{self.number} {self.title}"

    @property
    def ordinal(self) -> int:
        """The number as an int, as the tables and recorded runs of fcnet and training write it
        (``"07"`` is 7); a named rung (``"12h"``, ``"E1"``) has none."""
        if not self.number.isdigit():
            raise ValueError(f"step {self.number!r} is a named rung: it has no ordinal")
        return int(self.number)

    @property
    def dtype(self):
        """The storage type of the step's data: half for fp16 steps, else float32."""
        return np.float16 if self.precision == "fp16" else np.float32

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize


def select(steps: Iterable[Step], wanted: int | str | None = None) -> list[Step]:
    """The steps numbered ``wanted`` (every step when None): a list, since a rung may have one
    kernel per case (fcnet's 13 and 14). A number no step has raises, listing the ladder's."""
    steps = list(steps)
    if wanted is None:
        return steps
    key = number(wanted)
    chosen = [s for s in steps if s.number == key]
    if not chosen:
        raise KeyError(f"the ladder has steps {list(dict.fromkeys(s.number for s in steps))}; "
                       f"none is number {wanted!r}")
    return chosen


def find(steps: Iterable[Step], wanted: int | str) -> Step:
    """The step numbered ``wanted`` (``1``, ``"01"`` or ``"E1"``); the first where a rung has several."""
    return select(steps, wanted)[0]


def status(result: CheckResult) -> str:
    return OK if result.passed else FAILED


def result_columns(result: CheckResult) -> dict:
    """The columns every check table has for one comparison."""
    return {"rel_error": result.rel_error, "tolerance": result.tolerance, "unwritten": result.unwritten,
            "status": status(result)}


def check_steps(steps: Iterable[Step], check_one: Callable, backend=None,
                skip: Callable | None = None) -> CheckTable:
    """The one check loop. For each step: skipped (one row, with the reason) where the backend
    cannot run it (``gpu_only``) or ``skip(step)`` gives a reason; else ``check_one(step, backend)``
    yields ``(columns, result)`` pairs, one per case (a size, a layer, a quantity), ``columns``
    saying which case and ``result`` the :class:`~gpulab.check.CheckResult` of its comparison."""
    be = get_backend(backend)
    rows = []
    for step in steps:
        why = ("GPU only: the CPU backend cannot run this kernel" if step.gpu_only and be.name != "gpu"
               else skip(step) if skip is not None else None)
        if why:
            rows.append({"step": step.number, "rel_error": np.nan, "tolerance": np.nan, "unwritten": 0,
                         "status": skipped(why)})
            continue
        for columns, result in check_one(step, be):
            rows.append({"step": step.number, **columns, **result_columns(result)})
    return CheckTable(rows, caption=be.caption)


def failures(checks: pd.DataFrame) -> pd.Series:
    """Which rows of a check table failed (``status == "FAILED"``); a table without the column
    is a caller's mistake, not a pass."""
    if "status" not in checks:
        raise KeyError(f"a check table has a 'status' column (ok / FAILED / skipped: why); this one has "
                       f"{list(checks.columns)}")
    return checks["status"] == FAILED


def assert_ok(checks: pd.DataFrame) -> pd.DataFrame:
    """Raise :class:`CheckFailed` listing the rows of a check table whose ``status`` is
    ``"FAILED"``; return the table, so a notebook cell shows it. Skipped rows are not failures."""
    failed = checks[failures(checks)]
    if len(failed):
        raise CheckFailed("these kernels disagree with the float64 reference:\n" + failed.to_string())
    return checks

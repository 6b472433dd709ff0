"""Sweep launch parameters: a grid of settings in, a tidy table of checked and timed results out.

A *point* is one combination of the grid's values (``{"threads": 128, "Q": 4}``). For each,
:func:`sweep` asks ``prepare(point)`` for a no-argument launch, runs it once, checks the result,
and only then times it. A point can end three ways, and the table says which in ``status``:

* ``"invalid"``: the launch could not be made or refused to run (too many threads for the
  kernel's registers, too much shared memory, a compile error for that setting...); ``reason``
  holds the message. The sweep goes on.
* ``"wrong"``: the launch ran but its result disagrees with the reference; ``reason`` holds the
  check's verdict. A wrong point is never timed, so it can never look fast.
* ``"ok"``: checked, then timed (on a GPU; on the CPU backend the sweep checks but does not
  time, and says so in ``timed``).

Example (a kernel with a grid-stride loop, swept over blocks and threads)::

    table = sweep({"blocks": [28, 56, 112], "threads": [64, 128, 256]},
                  prepare=lambda p: kernel.bind(p["blocks"], p["threads"], args),
                  verify=lambda p: compare(y, ref), reset=lambda p: y.fill(np.nan), flops=layer_flops)
    best(table)                    # the fastest checked point
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from .check import CheckResult
from .device import gpu_available

STATUSES = ("ok", "wrong", "invalid")
#: The columns every sweep table has after the grid's own.
SWEEP_COLUMNS = ["status", "reason", "rel_error", "timed", "median_ms", "q1_ms", "q3_ms", "repeats", "gflops"]


def points(grid: Mapping[str, Sequence]) -> list[dict]:
    """Every combination of ``grid``'s values, the first parameter varying slowest."""
    if not isinstance(grid, Mapping) or not grid:
        raise ValueError(f"grid must be a non-empty mapping of parameter name -> values, got {grid!r}")
    for name, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) == 0:
            raise ValueError(f"grid['{name}'] must be a non-empty list of values, got {values!r}")
    names = list(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]


def sweep(grid: Mapping[str, Sequence], prepare: Callable[[dict], Callable[[], object]], *,
          verify: Callable[[dict], CheckResult | bool] | None = None,
          reset: Callable[[dict], object] | None = None,
          describe: Callable[[dict], dict] | None = None,
          flops: float | Callable[[dict], float] = 0.0, timed: bool | None = None,
          repeats: int = 50, budget_ms: float = 200.0, log: Callable[[str], object] | None = None) -> pd.DataFrame:
    """Check, then time, every point of ``grid``; return one row per point.

    ``prepare(point)`` returns the launch (a no-argument callable); any exception it raises, or
    the launch raises on its first run, makes the point "invalid" with the exception's message.
    ``reset(point)`` runs before that first run (poison the output); ``verify(point)`` after it
    returns a :class:`gpulab.check.CheckResult` (or a bool): a failure makes the point "wrong".
    ``describe(point)`` adds columns (occupancy, registers) to the point's row, valid or not.
    ``flops`` (a number, or a function of the point) gives the ``gflops`` column. ``timed``:
    time the checked points with :func:`gpulab.timing.benchmark` (default: when a GPU is usable)."""
    timed = gpu_available() if timed is None else bool(timed)
    rows = []
    for point in points(grid):
        row = {**point, "status": "ok", "reason": "", "rel_error": np.nan, "timed": False,
               "median_ms": np.nan, "q1_ms": np.nan, "q3_ms": np.nan, "repeats": 0, "gflops": np.nan}
        if describe is not None:
            try:
                row.update(describe(point))
            except Exception as exc:       # a description must not lose the point
                row["describe_error"] = _message(exc)
        try:
            launch = prepare(point)
            if reset is not None:
                reset(point)
            launch()
            _synchronize()
        except Exception as exc:
            _synchronize(quiet=True)
            row.update(status="invalid", reason=_message(exc))
            rows.append(row)
            _log(log, point, row)
            continue
        if verify is not None:
            result = verify(point)
            passed = result.passed if isinstance(result, CheckResult) else bool(result)
            if isinstance(result, CheckResult):
                row["rel_error"] = result.rel_error
            if not passed:
                row.update(status="wrong", reason=str(result) if isinstance(result, CheckResult) else "check failed")
                rows.append(row)
                _log(log, point, row)
                continue
        if timed:
            from .timing import benchmark
            timing = benchmark(launch, repeats=repeats, budget_ms=budget_ms)
            summary = timing.summary()
            work = flops(point) if callable(flops) else flops
            row.update(timed=True, median_ms=summary["median_ms"], q1_ms=summary["q1_ms"],
                       q3_ms=summary["q3_ms"], repeats=summary["repeats"],
                       gflops=work / summary["median_ms"] / 1e6 if work else np.nan)
        rows.append(row)
        _log(log, point, row)
        del launch
    return pd.DataFrame(rows)


def best(table: pd.DataFrame, value: str = "gflops", largest: bool = True) -> pd.Series:
    """The best checked-and-timed point (largest ``value``, or smallest with ``largest=False``).
    Raises ValueError when no point was both checked and timed."""
    ok = table[(table["status"] == "ok") & table["timed"].astype(bool) & table[value].notna()]
    if ok.empty:
        counts = table["status"].value_counts().to_dict()
        raise ValueError(f"no point of the sweep was checked and timed (statuses: {counts}); "
                         "sweeps time only on a GPU")
    return ok.loc[ok[value].idxmax() if largest else ok[value].idxmin()]


def point_row(table: pd.DataFrame, **where) -> pd.Series:
    """The row of the point with the given parameter values (e.g. ``blocks=56, threads=256``)."""
    rows = table
    for name, value in where.items():
        if name not in table.columns:
            raise KeyError(f"the sweep has no parameter '{name}'; it has {list(table.columns)}")
        rows = rows[rows[name] == value]
    if len(rows) != 1:
        raise KeyError(f"{len(rows)} points match {where}; expected exactly one")
    return rows.iloc[0]


def _message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:300]


def _synchronize(quiet: bool = False) -> None:
    if not gpu_available():
        return
    try:
        import cupy
        cupy.cuda.get_current_stream().synchronize()
    except Exception:
        if not quiet:
            raise


def _log(log, point: dict, row: dict) -> None:
    if log is None:
        return
    params = ", ".join(f"{k}={v}" for k, v in point.items())
    ms = row["median_ms"]
    log(f"sweep {params}: {row['status']}" + (f" {ms:.4f} ms" if not math.isnan(ms) else "")
        + (f" ({row['reason'][:100]})" if row["reason"] else ""))

"""The one recorder: how every chapter's recorded run is measured and written.

A chapter declares its run as data, a :class:`Recording`: its experiments in the order they run,
each an :class:`Experiment` whose function measures through the :class:`Recorder` it is handed
(as ``triton.testing.Benchmark`` makes a benchmark data, and SGEMM_CUDA's and llm.c's one runner
times every kernel the same way). The recorder owns what every run needs, so no chapter writes
it again:

* **the clock and the budget**: ``budget_s`` seconds for the whole run (``None``: no limit). An
  optional experiment not started before the budget is spent is skipped, and the run's
  ``problems`` table says so; a chapter's own long loop asks :meth:`Recorder.budget_spent`;
* **the progress lines** (``lenet [   12 s] N=1000 step 03: ...``), through one ``log``;
* **check before time**: :meth:`Recorder.checked` runs a step's check; the step is timed only
  when it passed. A failed check is a ``FAILED: why`` row of the ``skipped`` table, never a
  timing, and :attr:`Recorder.failed` lists it;
* **the ladder loop**: :meth:`Recorder.ladder` checks every :class:`Variant` of a case (a step
  bound to it, or a vendor path), times those that passed (in rounds, interleaved, where a
  chapter asks) with the recording's one per-variant budget (``Recording.variant_budget_ms``),
  and adds their rows; :meth:`Recorder.vendor` does the same for the vendor libraries' paths
  (:func:`gpulab.baselines.measure`);
* **the skipped-with-reason table** (its columns are the chapter's: ``Recording.skipped``) and
  the other side tables; what the run's metadata says beyond the machine (:meth:`Recorder.add_meta`:
  the kernel sources' digests, the compiler's version);
* **the cross-check**: a recording names the rows its verdicts rest on (``crosscheck``, a test on
  a row); while it runs, each such row is timed again by the lab's loop (cold and warm), by
  Triton's ``do_bench`` and by the profiler (:func:`gpulab.timing.crosscheck`), and the fastest
  lab row and fastest vendor row of each (experiment, size, precision) among them are written
  as the run's ``crosscheck`` table (:func:`crosscheck_table`);
* **the conditions**: the run's metadata says under what conditions it was measured
  (:func:`gpulab.device.conditions`: clocks, power draw and limit, throttle reasons, the card's
  form, the vendor libraries' versions and the timing method);
* **writing the run**: :func:`record` runs a chapter under the GPU monitor and saves it through
  :func:`gpulab.runs.save_run`.

Every chapter's ``benchmark_all`` is a :class:`Recording` and is called the same way, by the
notebook (``gpulab.live_or_recorded(CHAPTER, benchmark_all)``) and by ``python -m gpulab record``::

    benchmark_all(repeats=100, quick=False, budget_s=None, log=print) -> (rows, tables)

A chapter's record module, in short (its cases, launches and checks are the chapter's own)::

    def time_ladder(rec, ctx):
        def variant(step):
            launch = ladder.bind(step, ctx.case, ctx.arrays)
            return Variant(step.label, launch, check=lambda: {"rel_error": check_output(launch)},
                           where={"step": step.number},
                           row=lambda t, checked, medians: t.row("ladder", step.label, N, **checked))
        rec.ladder([variant(step) for step in STEPS])

    benchmark_all = Recording(NAME, [Experiment("ladder", time_ladder),
                                     Experiment("ceilings", ceilings, optional=True)],
                              setup=inputs, skipped=("step", "variant", "reason"), variant_budget_ms=500.0)
"""
from __future__ import annotations

import dataclasses
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from . import timing
from .device import GpuMonitor, conditions, describe
from .errors import CheckFailed
from .ladder import FAILED
from .runs import save_run

#: The side table listing the experiments that failed or were not started, and why.
PROBLEMS = "problems"
#: Metadata that describe(), the GPU monitor and save_run write: a recording adds other keys.
OWN_META = ("gpu", "date", "driver", "cuda_runtime", "cupy", "gpu_state", "chapter", "tables", "string_columns",
            "conditions")
#: The side table of the cross-checked rows (see :func:`crosscheck_table`).
CROSSCHECK = "crosscheck"
#: Its columns: the issue's six first, then what makes each row readable on its own.
CROSSCHECK_TABLE_COLUMNS = ["variant", "size", "precision", "median_ms", "do_bench_ms", "profiler_ms",
                            "experiment", "layer", "side", "l2_flushed", "crosscheck_warm_ms", "profiler_kernels",
                            "do_bench_vs_median", "crosscheck_note"]


@dataclass(frozen=True)
class Experiment:
    """One experiment of a recorded run: its ``name`` (what the progress lines and the
    ``problems`` table call it) and ``measure(rec, ctx)``, which adds rows and tables through
    the recorder ``rec`` (``ctx``: what the recording's ``setup`` returned). An ``optional``
    experiment is not started once the run's budget is spent."""

    name: str
    measure: Callable
    optional: bool = False

    def __post_init__(self):
        if not self.name or not callable(self.measure):
            raise ValueError(f"an experiment has a name and a function measure(rec, ctx); got "
                             f"{self.name!r}, {self.measure!r}")


@dataclass(frozen=True)
class Variant:
    """One thing a ladder experiment times on one case: a step bound to the case, or a vendor
    library's path. ``launch()`` runs it once; ``check()`` runs it on a poisoned output and
    compares that with the float64 reference, raising when they disagree, and returns what the
    row says of the check (``{"rel_error": ...}``); ``where`` are the ``skipped`` table's columns
    should the check fail (beside ``variant``: the ``label``); ``row(timing, checked, medians)``
    makes the variant's row (or rows) from its :class:`~gpulab.timing.Timing`, what ``check``
    returned and each round's median. ``timer`` times the launch where the lab's loop
    (:func:`gpulab.timing.benchmark`, the default) is not how the variant runs: a step whose calls
    are replayed from a CUDA graph is timed by :func:`gpulab.timing.graph_benchmark`."""

    label: str
    launch: Callable[[], object]
    check: Callable[[], dict]
    row: Callable
    where: dict = dataclasses.field(default_factory=dict)
    timer: Callable | None = None


@dataclass(frozen=True)
class Checked:
    """What :meth:`Recorder.checked` found: ``passed``, the check's return value, and the error
    (``"CheckFailed: ..."``) when it did not pass."""

    passed: bool
    value: object = None
    error: str = ""

    def __bool__(self) -> bool:
        return self.passed


class Recorder:
    """The state of one recorded run: its clock, budget, timing rows and side tables."""

    def __init__(self, chapter: str, *, repeats: int = 100, quick: bool = False, budget_s: float | None = None,
                 log: Callable = print, skipped: Sequence[str] | None = None,
                 skipped_key: Sequence[str] | None = None, keep_going: bool = False,
                 problem_row: Callable | None = None, variant_budget_ms: float | None = None):
        if repeats < 1:
            raise ValueError(f"repeats is a positive number of timed calls, got {repeats!r}")
        if budget_s is not None and not budget_s > 0:
            raise ValueError(f"budget_s is a positive number of seconds (or None: no limit), got {budget_s!r}")
        self.chapter, self.repeats, self.quick, self.budget_s = chapter, repeats, quick, budget_s
        #: The most time one variant's timing may take (the stop rule usually ends it sooner).
        self.variant_budget_ms = variant_budget_ms
        self.log = log
        self.skipped_columns = list(skipped) if skipped is not None else None
        self.skipped_key = list(skipped_key) if skipped_key else None
        self.keep_going = keep_going
        self.problem_row = problem_row
        self.started = time.perf_counter()
        self.rows: list[dict] = []
        self.tables: dict = {}
        self._skipped: dict = {}
        self.problems: list[dict] = []
        self.failed: list[dict] = []
        self.meta: dict = {}

    # ---------------------------------------------------------------- the clock and the budget
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    @property
    def deadline(self) -> float:
        """The ``time.perf_counter()`` value at which the budget is spent (infinite without one)."""
        return self.started + self.budget_s if self.budget_s is not None else float("inf")

    def budget_spent(self) -> bool:
        return time.perf_counter() > self.deadline

    def progress(self, text: str, **_print_options) -> None:
        """One progress line, led by the chapter and the seconds since the run began. (Accepts
        ``print``'s options, so it can be handed where a ``log`` is expected; it always flushes.)"""
        self.log(f"{self.chapter} [{self.elapsed_s():5.0f} s] {text}", flush=True)

    # ---------------------------------------------------------------- rows and tables
    def add(self, rows: dict | Sequence[dict]) -> None:
        """Timing rows (one dict, or several) for the run's CSV."""
        self.rows.extend([rows] if isinstance(rows, dict) else rows)

    def table(self, name: str, frame) -> None:
        """A side table, saved as ``<chapter>.<name>.csv`` beside the timings."""
        if name in ("skipped", PROBLEMS, CROSSCHECK):
            raise ValueError(f"the recorder writes the '{name}' table itself: use rec.skip() or an Experiment")
        self.tables[name] = frame

    def add_meta(self, **items) -> None:
        """Facts the run's ``<chapter>.meta.json`` holds beside the machine's description (e.g. the
        digests of the kernel sources the run was built from, the compiler's version)."""
        owned = sorted(set(items) & set(OWN_META))
        if owned:
            raise ValueError(f"the recorder writes {owned} in a run's metadata itself; a recording adds other keys")
        self.meta.update(items)

    def skip(self, reason: str, **columns) -> None:
        """A row of the ``skipped`` table: what was not measured (``columns``) and why. With a
        ``skipped_key``, a later row for the same key replaces the earlier one."""
        if not reason:
            raise ValueError("a skipped row needs a reason a reader can act on")
        row = {**columns, "reason": reason}
        key = tuple(columns.get(k) for k in self.skipped_key) if self.skipped_key else len(self._skipped)
        self._skipped[key] = row

    @property
    def skipped(self) -> list[dict]:
        return list(self._skipped.values())

    # ---------------------------------------------------------------- check before time
    def checked(self, check: Callable, **columns) -> Checked:
        """Run ``check()`` (it raises when the output disagrees with the reference): the step is
        to be timed only when this passed. A failed check (any exception: a kernel that crashes
        has not passed either) becomes a ``FAILED: why`` row of the ``skipped`` table with
        ``columns``, a progress line and an entry of :attr:`failed`; it is never timed."""
        try:
            return Checked(True, check())
        except Exception as exc:          # noqa: BLE001 (every failure is reported, none is timed)
            error = f"{type(exc).__name__}: {exc}"[:500]
            self.failed.append({**columns, "error": error})
            self.skip(f"{FAILED}: {error}", **columns)
            self.progress(f"{FAILED}, not timed: {columns} {error}")
            return Checked(False, None, error)

    # ---------------------------------------------------------------- the ladder loop
    def ladder(self, variants: Sequence[Variant], *, rounds: int = 1, **timing_options) -> list[dict]:
        """Check every variant (a failure is a ``FAILED`` row of the ``skipped`` table and is not
        timed), then time those that passed with :func:`gpulab.timing.benchmark` (or the variant's
        own ``timer``) under the recording's ``variant_budget_ms``, ``rounds`` rounds with each
        variant once per round in turn (a GPU's clock drifts over a run: timing the variants one
        after the other would favour the first; a variant's timing then holds the samples of all
        its rounds), and add their rows in the variants' order. ``timing_options`` go to the timer (``min_repeats``...)."""
        if rounds < 1:
            raise ValueError(f"rounds is a positive number of timing rounds, got {rounds!r}")
        passed = []
        for v in variants:
            checked = self.checked(v.check, **v.where, variant=v.label)
            if checked:
                passed.append((v, checked.value))
        timings = [[] for _ in passed]
        for _ in range(rounds):
            for i, (v, _) in enumerate(passed):
                timer = v.timer or timing.benchmark
                timings[i].append(timer(v.launch, repeats=self.repeats, budget_ms=self.variant_budget_ms,
                                        **timing_options))
        added = []
        for (v, checked), runs in zip(passed, timings):
            measured = runs[0] if rounds == 1 else timing.Timing(
                np.concatenate([t.samples_ms for t in runs]), method="cuda events, queued, rounds interleaved",
                **timing.crosscheck_fields(v.launch))
            rows = v.row(measured, checked, [t.median_ms for t in runs])
            rows = [rows] if isinstance(rows, dict) else list(rows)
            self.add(rows)
            added += rows
            self.progress(f"{v.label}: {rows[0]['median_ms']:.4f} ms at size {rows[0].get('size', '')}"
                          + (f" (round medians {' '.join(f'{t.median_ms:.4f}' for t in runs)})" if rounds > 1 else ""))
        return added

    def vendor(self, paths, *, skipped_as: dict | None = None, **options):
        """The vendor libraries' ``paths`` checked against the reference and timed
        (:func:`gpulab.baselines.measure`, with the recording's ``variant_budget_ms`` unless
        ``options`` give a ``budget_ms``); their rows added, and each path skipped (its check
        failed, or its library lacks it) listed in the ``skipped`` table with ``skipped_as``'s
        columns (None: not listed). Returns what ``measure`` found."""
        from . import baselines
        options = {"repeats": self.repeats, "budget_ms": self.variant_budget_ms, "on_failure": "skip", **options}
        result = baselines.measure(paths, **options)
        self.add(result.rows)
        if skipped_as is not None:
            for entry in result.skipped:
                self.skip(**{**skipped_as, **entry})
        return result

    # ---------------------------------------------------------------- experiments
    def attempt(self, name: str, fn: Callable, default=None):
        """``fn()``; in a run that keeps going, any failure but a check's is printed and listed in
        the ``problems`` table, and ``default`` comes back, so what was measured is kept."""
        if not self.keep_going:
            return fn()
        try:
            return fn()
        except CheckFailed:
            raise
        except Exception as exc:          # noqa: BLE001 (listed in the run, with its message)
            traceback.print_exc()
            self.problem(name, f"{type(exc).__name__}: {exc}"[:500])
            return default

    def problem(self, experiment: str, error: str) -> None:
        """An experiment that failed or was not started: a row of the ``problems`` table or, for a
        recording with a ``problem_row``, of its ``skipped`` table (``error`` the reason)."""
        if self.problem_row is not None:
            self.skip(error, **self.problem_row(experiment))
        else:
            self.problems.append({"experiment": experiment, "error": error})

    def run(self, experiment: Experiment, ctx) -> None:
        if experiment.optional and self.budget_spent():
            self.problem(experiment.name, f"skipped: the run's time budget of {self.budget_s:.0f} s was spent")
            self.progress(f"{experiment.name}: skipped (the time budget of {self.budget_s:.0f} s is spent)")
            return
        self.attempt(experiment.name, lambda: experiment.measure(self, ctx))

    def result(self) -> tuple[list[dict], dict]:
        """The timing rows and side tables, the ``skipped`` and ``problems`` tables included
        (``skipped`` always when the chapter declared its columns, else only when not empty, with
        the columns its rows have and ``reason`` last)."""
        tables = dict(self.tables)
        if self.skipped_columns is not None or self._skipped:
            columns = self.skipped_columns or [*dict.fromkeys(k for row in self.skipped for k in row if k != "reason"),
                                               "reason"]
            tables["skipped"] = pd.DataFrame(self.skipped, columns=columns)
        if self.problems:
            tables[PROBLEMS] = pd.DataFrame(self.problems)
        checked = crosscheck_table(self.rows)
        if checked is not None:
            tables[CROSSCHECK] = checked
        return self.rows, tables


def crosscheck_table(rows: Sequence[dict] | pd.DataFrame) -> pd.DataFrame | None:
    """The rows a run's verdicts rest on, each timed three ways: the rows that were cross-checked
    (they have ``do_bench_ms``: the fastest lab row and the fastest vendor row of each
    (experiment, size, precision, layer) the recording's ``crosscheck`` selected).
    ``median_ms`` is the lab loop's cold median (L2 flushed, as ``do_bench`` and the profiler
    time it), ``crosscheck_warm_ms`` its warm one; the row's own ``median_ms`` in the run is
    whichever the chapter chose (its ``l2_flushed``). None when nothing was cross-checked."""
    from .baselines import is_vendor

    # A recording's ``finish`` may have made its rows a table already.
    frame = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if frame.empty or "do_bench_ms" not in frame.columns:
        return None
    frame = frame[frame["crosscheck_cold_ms"].notna()].copy()
    if frame.empty:
        return None
    if "precision" not in frame.columns:
        frame["precision"] = ""
    frame["precision"] = frame["precision"].fillna("")
    frame["side"] = is_vendor(frame).map({True: "vendor", False: "lab"})
    best = frame.drop_duplicates(subset=["experiment", "variant", "size", "precision"]
                                 + (["layer"] if "layer" in frame.columns else []))
    best = best.assign(median_ms=best["crosscheck_cold_ms"], l2_flushed=True,
                       do_bench_vs_median=best["do_bench_ms"] / best["crosscheck_cold_ms"])
    best = best.sort_values(["experiment", "size", "precision", "side"])
    return best.reindex(columns=CROSSCHECK_TABLE_COLUMNS).reset_index(drop=True)


@dataclass(frozen=True)
class Recording:
    """A chapter's recorded run as data, called as its ``benchmark_all``.

    ``experiments`` run in order, each given the recorder and ``setup(rec)``'s value (None
    without a setup). ``skipped``: the ``skipped`` table's columns (None: the chapter writes that
    table only when something was skipped); ``skipped_key``: columns under which a later skipped
    row replaces an earlier one. ``budget_s``: the run's default budget. ``keep_going``: an
    experiment's failure (other than a check's) is listed in ``problems`` and the run goes on;
    otherwise it stops the run. ``finish(rows)``: what the chapter derives from the whole run's
    rows once every experiment ran (e.g. each variant's ratio to the fastest vendor path of its
    case), returned as the rows to write. ``problem_row(experiment)``: for a chapter whose readers
    show one table of what is missing, the ``skipped`` columns under which an experiment that
    failed or was not started is listed there (the error its reason), instead of in ``problems``."""

    chapter: str
    experiments: Sequence[Experiment]
    setup: Callable | None = None
    skipped: Sequence[str] | None = None
    skipped_key: Sequence[str] | None = None
    budget_s: float | None = None
    keep_going: bool = False
    finish: Callable | None = None
    problem_row: Callable | None = None
    #: Which rows the chapter's verdicts rest on (a test on a row, e.g. its experiment and size):
    #: each is cross-checked as it is made (see :func:`crosscheck_table`). None: nothing is.
    crosscheck: Callable | None = None
    #: The most time one variant's timing may take in :meth:`Recorder.ladder` and
    #: :meth:`Recorder.vendor` (the stop rule usually ends it sooner). None: the timer's own.
    variant_budget_ms: float | None = None

    def __post_init__(self):
        names = [e.name for e in self.experiments]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"a recording lists its experiments once each, got {names}")

    def recorder(self, repeats: int = 100, quick: bool = False, budget_s: float | None = None,
                 log: Callable = print) -> Recorder:
        return Recorder(self.chapter, repeats=repeats, quick=quick,
                        budget_s=self.budget_s if budget_s is None else budget_s, log=log,
                        skipped=self.skipped, skipped_key=self.skipped_key, keep_going=self.keep_going,
                        problem_row=self.problem_row, variant_budget_ms=self.variant_budget_ms)

    def only(self, *names: str) -> "Recording":
        """This recording with only the experiments ``names`` (in its order), e.g. the part of a
        long run a notebook measures live."""
        unknown = sorted(set(names) - {e.name for e in self.experiments})
        if unknown:
            raise ValueError(f"{self.chapter}'s recording has no experiment {unknown}; it has "
                             f"{[e.name for e in self.experiments]}")
        return dataclasses.replace(self, experiments=[e for e in self.experiments if e.name in names])

    def run(self, repeats: int = 100, quick: bool = False, budget_s: float | None = None,
            log: Callable = print) -> Recorder:
        """Every experiment in order; the recorder they filled (its rows, tables and meta)."""
        rec = self.recorder(repeats, quick, budget_s, log)
        ctx = self.setup(rec) if self.setup is not None else None
        for experiment in self.experiments:
            if self.crosscheck is None:
                rec.run(experiment, ctx)
                continue
            with timing.crosschecking(self.crosscheck) as check:
                rec.run(experiment, ctx)
                if check.best:
                    rec.progress(f"{experiment.name}: cross-checking the fastest of {len(check.best)} groups")
                    check.run(rec.rows, log=rec.progress)
        if self.finish is not None and rec.rows:
            rec.rows = self.finish(rec.rows)
        return rec

    def __call__(self, repeats: int = 100, quick: bool = False, budget_s: float | None = None,
                 log: Callable = print) -> tuple[list[dict], dict]:
        """Every experiment of the chapter on the GPU: (timing rows, {table name: table}).
        ``quick``: fewer sizes (a smoke test, not for committing); ``budget_s``: seconds for the
        whole run (default: the chapter's)."""
        return self.run(repeats, quick, budget_s, log).result()


def record(chapter: str, benchmark_all: Callable, *, repeats: int = 100, quick: bool = False,
           budget_s: float | None = None, root: Path | None = None, log: Callable = print) -> tuple[Path, int, int]:
    """Run one chapter's ``benchmark_all`` under the GPU monitor (clocks, temperature and
    throttle reasons before, during and after) and write the run; return its CSV path, its
    number of timing rows and the number of checks that failed (their rows are in the
    ``skipped`` table, not timed)."""
    if timing.smoke():
        raise RuntimeError(f"{timing.SMOKE_ENV} is set: a smoke run's timings (the card not settled, no minimum "
                           f"span) are not for recording; unset it to record {chapter}")
    added = {}
    with GpuMonitor() as monitor:
        if isinstance(benchmark_all, Recording):
            rec = benchmark_all.run(repeats=repeats, quick=quick, budget_s=budget_s, log=log)
            (rows, tables), added = rec.result(), rec.meta
        else:
            rows, tables = _as_pair(benchmark_all(repeats=repeats, quick=quick, budget_s=budget_s, log=log))
    meta = dict(describe(), gpu_state=monitor.summary(), conditions=conditions(timing.describe_method()), **added)
    path = save_run(chapter, rows, meta, root=root, tables=tables)
    skipped = tables.get("skipped")
    failed = 0 if skipped is None or "reason" not in skipped else int(
        pd.Series(skipped["reason"]).astype(str).str.startswith(f"{FAILED}:").sum())
    return path, len(rows), failed


def _as_pair(result) -> tuple[list[dict], dict]:
    """A chapter's result as (rows, tables): a bare list of rows has no side tables."""
    return result if isinstance(result, tuple) else (result, {})

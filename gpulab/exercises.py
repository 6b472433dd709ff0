"""The lab's exercises: how they are declared, checked in the book, and graded.

Each chapter declares its own exercises beside its notebook, in ``book/<chapter>/exercises.py``
(a list ``EXERCISES`` of :class:`Exercise`), and their hidden checks in
``book/<chapter>/hidden_checks.py``; :func:`all_exercises` (also :data:`EXERCISES`) finds them
through the chapter registry (:mod:`gpulab.chapters`, the toc), in reading order. The book's check
cells (``exercises.check("fcnet.2", globals())``), the student export (``python -m gpulab
student``), the grader (``python -m gpulab grade``) and the tests all read them. An exercise is one
of two kinds:

``kernel``
    The student edits a ``.cu`` file (``file``, relative to the repository root).
    Its check runs the chapter's check on the workload's exercise step with the
    student's file, once per *case*. The chapter is one object (its workload's ``CHAPTER``,
    a :class:`gpulab.ladder.Chapter`; basics': :data:`gpulab.puzzles.CHAPTER`), ``step`` is
    the step's number (``CHAPTER.step``) and a case the keyword arguments ``CHAPTER.check``
    takes (sizes or shapes, seed, ``races``, ``schedule``); a case may add ``"step": {...}``
    to change the step's launch (e.g. a different fixed grid).

``function``
    The student edits one notebook cell (``file`` and ``cell``, the cell's id),
    which must define the function ``function``. Its check calls that function
    once per case with the keyword arguments ``inputs(case)`` builds, and
    compares the result with the instructor's solution cell run on the same
    inputs (in the student copy, with the answers the export stored for the
    public cases), numbers within ``tolerance`` (relative).

Public cases (``public``) are what the student's check cell runs. Hidden cases
(held-out sizes, seeds, shapes and perturbed runs: ``HIDDEN``, exercise id -> cases of
the public cases' form; ``"perturb": seed`` asks a function exercise's ``inputs`` for a
copy of the recorded run whose times are scaled by seeded random factors) live in
``book/<chapter>/hidden_checks.py``, which the student export leaves out and the grader's
sandbox never sees; the grader runs both and never shows a hidden case's inputs.

Adding an exercise
------------------
1. Write it in the chapter: a kernel with ``// BEGIN SOLUTION`` ... ``// END SOLUTION``
   (and a workload step for it), or a notebook code cell (give it a stable id) whose
   solution sits between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` and defines a
   function. Below it, a check cell: ``exercises.check("<id>", globals())``
   (kernels: ``exercises.check("<id>", backend=backend)``), under a heading "Exercise N" that
   numbers the chapter's exercises 1, 2, 3 in reading order, near the step it practises.
2. Add an :class:`Exercise` to ``EXERCISES`` in ``book/<chapter>/exercises.py`` (for a
   function exercise, an ``inputs`` builder: case -> keyword arguments), with ``number`` the
   heading's N where it is not the id's (an id never changes once graded; the book's number
   follows the reading order, which ``tests/test_exercises.py`` checks).
3. Add its hidden cases to ``book/<chapter>/hidden_checks.py`` and two or more known-wrong
   answers under ``tests/fixtures/grading/wrong/<id>/`` (a ``.cu`` file, or a ``.py``
   file holding the cell's source), each opening with a comment saying what is wrong.
   ``tests/test_grading.py`` then proves the checks accept the solution and reject
   every wrong answer. ``python tools/make_sample_submissions.py <chapter>`` writes the
   chapter's part of the sample submissions and their expected grades.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import json
import math
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from . import paths
from .chapters import names as chapter_names
from .errors import GpulabError
from .ladder import Chapter, failures
from .roofline import ceilings_table
from .runs import load_run

#: The text the student export puts in place of a solution.
PLACEHOLDER = "TODO: your code here"
#: Where the student export stores the public answers of function exercises.
EXPECTED_FILE = Path("labdata") / "exercises" / "expected.json"
#: A chapter's declarations and hidden checks, in its folder ``book/<chapter>/``.
DECLARATIONS, HIDDEN_CHECKS = "exercises.py", "hidden_checks.py"


class ExerciseNotSolved(GpulabError):
    """The student has not written the exercise yet (its placeholder is still there)."""

    def _render_traceback_(self):   # IPython shows this instead of a traceback
        return [str(self)]


class ExerciseFailed(GpulabError, AssertionError):
    """The student's answer is wrong; the message says how."""

    def _render_traceback_(self):
        return [str(self)]


@dataclass(frozen=True)
class Exercise:
    """One gradable exercise (or one part of an exercise)."""

    id: str                  # "<chapter>.<number>[<part>]", e.g. "alexnet.1a": the grading id, which
                             # the grader, the hidden checks and the submissions' grades use; it never
                             # changes when the exercise moves in its chapter
    chapter: str
    title: str
    points: int
    kind: str                # "kernel" or "function"
    file: str                # the file the student edits, relative to the repository root
    cell: str = ""           # function exercises: the id of the notebook cell the student edits
    function: str = ""       # function exercises: the function that cell defines
    signature: str = ""      # function exercises: how the book states it, e.g. "ways(vectors, features)"
    step: str = ""           # kernel exercises: the step's number in the chapter's CHAPTER ("E1")
    module: str = ""         # kernel exercises of a chapter with no workload: the module holding its
                             # CHAPTER (basics: "gpulab.puzzles")
    public: tuple = ()       # the public cases (see the module docstring)
    inputs: Callable[[dict], dict] | None = field(default=None, compare=False, repr=False)
    uses_run: bool = False   # function exercises: inputs come from the chapter's recorded run
    tolerance: float = 0.01  # relative, for numbers in a function's answer
    reveal: bool = True      # a wrong public answer is shown next to the right one
    hint: str = ""           # shown with a wrong answer: the usual mistakes
    # function exercises: a right answer in words (answer -> str), for the check's "correct"
    # message; without one, describe_answer writes it
    describe: Callable[[object], str] | None = field(default=None, compare=False, repr=False)
    # The number the book shows the exercise under (its heading, its check's messages): exercises
    # read 1, 2, 3 in their chapter's reading order, wherever the grading id's number came from
    # ("" : the id's own, "lenet.2" -> "2"); a part keeps its letter ("3a", "3b").
    number: str = ""

    def __post_init__(self):
        if self.kind not in ("kernel", "function"):
            raise ValueError(f"exercise {self.id}: kind must be 'kernel' or 'function', got {self.kind!r}")
        if self.kind == "function" and not (self.cell and self.function and self.inputs):
            raise ValueError(f"exercise {self.id}: a function exercise needs cell, function and inputs")
        if not self.public:
            raise ValueError(f"exercise {self.id}: declare at least one public case")

    @property
    def shown(self) -> str:
        """The number the book shows (:attr:`number`, else the grading id's): "1", "3b"."""
        return self.number or self.id.split(".", 1)[1]

    @property
    def label(self) -> str:
        """How the check's messages name the exercise: its number in the book, then its grading
        id and title ("Exercise 1 (fcnet.2: count the bank conflicts of a fill)"), so that the
        heading above the check and the id in the check's call and the grader's feedback meet."""
        return f"Exercise {self.shown} ({self.id}: {self.title})"

    @property
    def where(self) -> str:
        """Where the student works, in their terms."""
        if self.kind == "kernel":
            return self.file
        return f"the cell defining `{self.signature or self.function}` in {self.file}"


# ----------------------------------------------------------------- helpers of the chapters' input builders
def recorded_run(chapter: str, case: dict):
    """The chapter's recorded run; with ``case["perturb"]``, a copy whose times are scaled
    by seeded random factors (a held-out run: hard-coded numbers fail on it)."""
    run = load_run(chapter)
    seed = case.get("perturb")
    if seed is None:
        return run
    rng = np.random.default_rng(seed)
    timings = run.timings.copy()
    factor = rng.lognormal(0.0, 0.3, len(timings))
    for column in ("median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms"):
        if column in timings:
            timings[column] = timings[column] * factor
    return dataclasses.replace(run, timings=timings)


def measured_ceilings(run) -> pd.DataFrame:
    """The run's measured ceilings (FP32 rate, copy bandwidth, ...), as the roofline reads them."""
    return ceilings_table(run.timings, run.gpu)


# ----------------------------------------------------------------- the chapters' declarations
_LOADING = threading.RLock()


def _chapter_module(chapter: str, filename: str):
    """The module ``book/<chapter>/<filename>``, loaded once (None when the file is not there)."""
    path = paths.REPO / "book" / chapter / filename
    name = f"gpulab._book.{chapter}.{Path(filename).stem}"
    # One lock: the module enters sys.modules before its code has run, so without it a second
    # grading thread (grade --jobs) could read a half-built module (no HIDDEN yet).
    with _LOADING:
        if name in sys.modules:
            return sys.modules[name]
        if not path.is_file():
            return None
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        return module


def _declared(chapter: str) -> list[Exercise]:
    """The exercises ``book/<chapter>/exercises.py`` declares, checked to be that chapter's."""
    module = _chapter_module(chapter, DECLARATIONS)
    if module is None:
        return []
    declared = getattr(module, "EXERCISES", None)
    where = f"book/{chapter}/{DECLARATIONS}"
    if not isinstance(declared, list) or not all(isinstance(e, Exercise) for e in declared):
        raise GpulabError(f"{where} must define EXERCISES, a list of gpulab.exercises.Exercise")
    for exercise in declared:
        if exercise.chapter != chapter or not exercise.id.startswith(f"{chapter}."):
            raise GpulabError(f"{where} declares {exercise.id} of chapter '{exercise.chapter}': a chapter "
                              f"declares its own exercises only, with ids '{chapter}.<number>'")
    return declared


@functools.lru_cache(maxsize=None)
def all_exercises() -> tuple[Exercise, ...]:
    """Every exercise of the book, in reading order: each chapter of the toc
    (:func:`gpulab.chapters.chapters`) in turn, its ``book/<chapter>/exercises.py`` in order."""
    every = tuple(e for chapter in chapter_names() for e in _declared(chapter))
    ids = [e.id for e in every]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise GpulabError(f"exercise ids declared twice: {', '.join(twice)}")
    return every


def __getattr__(name: str):
    # ``EXERCISES`` is found on first use, not at import: a chapter's declarations import its
    # workload, and the grader's sandbox imports this module without any chapter.
    if name == "EXERCISES":
        return list(all_exercises())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def solutions_present() -> bool:
    """Whether this copy of the lab has the instructors' solutions (False in a student copy)."""
    return any("BEGIN SOLUTION" in (paths.REPO / e.file).read_text() for e in all_exercises() if e.kind == "kernel")


def get(exercise_id: str) -> Exercise:
    for exercise in all_exercises():
        if exercise.id == exercise_id:
            return exercise
    raise KeyError(f"no exercise '{exercise_id}'; the exercises are: "
                   f"{', '.join(e.id for e in all_exercises())}")


def table() -> pd.DataFrame:
    """The exercises as a table (the instructor's page shows it): each one's grading id beside the
    number its chapter shows it under."""
    rows = pd.DataFrame([{"id": e.id, "chapter": e.chapter, "in the book": f"Exercise {e.shown}",
                          "title": e.title, "points": e.points,
                          "kind": e.kind, "the student edits": e.where,
                          "public cases": len(e.public), "hidden cases": len(hidden_cases(e))}
                         for e in all_exercises()])
    return rows if solutions_present() else rows.drop(columns="hidden cases")   # a student copy has none


def hidden_cases(exercise: Exercise) -> list[dict]:
    """The held-out cases, from ``book/<chapter>/hidden_checks.py`` (empty in the student copy,
    which leaves those files out)."""
    return list(hidden_checks(exercise.chapter).get(exercise.id, ()))


def hidden_checks(chapter: str) -> dict:
    """``HIDDEN`` of ``book/<chapter>/hidden_checks.py``: exercise id -> its hidden cases ({}
    where the file is not there), checked to name only the chapter's exercises."""
    module = _chapter_module(chapter, HIDDEN_CHECKS)
    if module is None:
        return {}
    hidden = getattr(module, "HIDDEN", None)
    declared = {e.id for e in _declared(chapter)}
    if not isinstance(hidden, dict) or not set(hidden) <= declared:
        raise GpulabError(f"book/{chapter}/{HIDDEN_CHECKS} must define HIDDEN, a dict from the ids of the "
                          f"exercises declared beside it ({', '.join(sorted(declared)) or 'none'}) to "
                          f"their hidden cases; it names {', '.join(sorted(set(hidden or ()) - declared))}")
    return hidden


# ----------------------------------------------------------------- kernel exercises
def workload_step(exercise: Exercise, kernel_file: str | Path, case: dict):
    """The exercise's step with ``kernel_file`` in place of the lab's file, and the chapter that
    checks it (a :class:`gpulab.ladder.Chapter`: ``CHAPTER.step(number)``)."""
    from .workloads import workload
    module = importlib.import_module(exercise.module) if exercise.module else workload(exercise.chapter)
    chapter = getattr(module, "CHAPTER", None)
    if not isinstance(chapter, Chapter):
        raise GpulabError(f"exercise {exercise.id}: {module.__name__} has no CHAPTER (a gpulab.ladder.Chapter) "
                          "to find its step and check it")
    step = chapter.step(exercise.step)
    changes = dict(case.get("step", {}))
    return chapter, dataclasses.replace(step, file=str(Path(kernel_file).resolve()), **changes)


def run_kernel_case(exercise: Exercise, kernel_file: str | Path, case: dict, backend=None) -> pd.DataFrame:
    """One case of a kernel exercise: the chapter's check table (see :mod:`gpulab.ladder`)."""
    chapter, step = workload_step(exercise, kernel_file, case)
    return chapter.check(backend, steps=[step], **{k: v for k, v in case.items() if k != "step"})


def is_unsolved(text: str) -> bool:
    return PLACEHOLDER in text


def describe_case(case: dict) -> str:
    """A public case in words (never used for hidden cases)."""
    parts = []
    for key, value in case.items():
        if key in ("vectors", "features"):
            value = f"[{', '.join(map(str, value[:4]))}, ...]"
        parts.append(f"{key}={value}")
    return ", ".join(parts) or "the recorded run"


def describe_answer(value, grouped: bool = True) -> str:
    """An answer (as :func:`plain` makes it) in words for a "correct" message, never a Python
    repr: numbers to 4 significant digits ("0.0397", "2,149", "32,768"; in a list without the
    thousands' commas), a long list as its length and its ends, a dict as "key: value; key:
    value" (nested ones in parentheses)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}" if grouped else str(value)
    if isinstance(value, float):
        if 1e4 <= abs(value) < 1e15:
            return f"{value:,.0f}" if grouped else f"{value:.0f}"
        return f"{value:.4g}"
    if isinstance(value, dict):
        parts = []
        for key, item in value.items():
            text = describe_answer(item, grouped)
            parts.append(f"{key}: ({text})" if isinstance(item, dict) else f"{key}: {text}")
        return "; ".join(parts)
    if isinstance(value, (list, tuple)):
        items = list(value)
        if items and all(isinstance(i, (list, tuple)) for i in items):
            lengths = {len(i) for i in items}
            size = f" of {lengths.pop()} values" if len(lengths) == 1 else ""
            if all(i == items[0] for i in items):
                return f"{len(items)} equal lists{size}: {describe_answer(items[0], grouped)}"
            return (f"{len(items)} lists{size}: " + " | ".join(describe_answer(i, grouped) for i in items[:3])
                    + (" | ..." if len(items) > 3 else ""))
        shown = [describe_answer(i, grouped=False) for i in items]
        if len(shown) <= 8:
            return ", ".join(shown)
        return f"{len(shown)} values: " + ", ".join(shown[:4]) + ", ..., " + shown[-1]
    return str(value)


# ----------------------------------------------------------------- function exercises
def notebook_cell(notebook: str | Path, cell_id: str, function: str = "") -> str | None:
    """The source of the cell ``cell_id`` (or, if the student's copy lost that id, of the
    first code cell defining ``function``), or None."""
    nb = json.loads(Path(notebook).read_text())
    cells = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    for cell in cells:
        if cell.get("id") == cell_id:
            return _source(cell)
    if function:
        for cell in cells:
            if re.search(rf"^\s*def\s+{re.escape(function)}\s*\(", _source(cell), re.M):
                return _source(cell)
    return None


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def namespace(chapter: str) -> dict:
    """What a chapter notebook's first cell imports: a function cell runs in this."""
    import gpulab
    from . import plots, roofline
    from .workloads import workload
    ns = {"np": np, "pd": pd, "gpulab": gpulab, "plots": plots, "roofline": roofline,
          "math": math, "display": print, "__name__": "__exercise__"}
    module = workload(chapter)
    ns[getattr(module, "IMPORTED_AS", chapter)] = module
    return ns


def define(exercise: Exercise, source: str, extra: dict | None = None):
    """Run a function cell's source and return the function it defines (None if it does not).
    IPython lines (``%magic``, ``!shell``) are dropped."""
    return define_cell(exercise.chapter, exercise.function, source, extra, exercise.id)


def define_cell(chapter: str, function: str, source: str, extra: dict | None = None, label: str = "exercise"):
    """:func:`define` from the exercise's chapter and function alone: the grader's sandbox runs
    this, where no chapter's declarations are."""
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    ns = namespace(chapter)
    ns.update(extra or {})
    exec(compile(code, f"<{label} cell>", "exec"), ns)  # noqa: S102 -- the student's cell
    fn = ns.get(function)
    return fn if callable(fn) else None


def plain(value):
    """An answer as JSON-like data (dict keys as strings), so answers compare and store."""
    if isinstance(value, pd.Series):
        value = value.to_dict()
    if isinstance(value, pd.DataFrame):
        raise TypeError("return a dict (or a number), not a DataFrame")
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def differences(got, expected, tolerance: float, where: str = "your answer", reveal: bool = True) -> list[str]:
    """What is wrong with ``got`` against ``expected``, in words (empty when it is right).
    ``reveal=False`` says which parts are wrong without showing the right values."""
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return [f"{where} should be a dict with keys {sorted(expected)}, got {type(got).__name__}"]
        missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        problems = [f"{where} lacks the keys {missing}"] if missing else []
        problems += [f"{where} has unexpected keys {extra}"] if extra else []
        for key in expected:
            if key in got:
                problems += differences(got[key], expected[key], tolerance, f"{where}[{key!r}]", reveal)
        return problems
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return [f"{where} should be a list of {len(expected)} items"]
        return [p for i, (g, e) in enumerate(zip(got, expected))
                for p in differences(g, e, tolerance, f"{where}[{i}]", reveal)]
    if isinstance(expected, (bool, str)):
        if str(got).strip().casefold() != str(expected).strip().casefold():
            return [f"{where} is {got!r}, " + (f"expected {expected!r}" if reveal else "which is not right")]
        return []
    if isinstance(expected, (int, float)):
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return [f"{where} should be a number, got {type(got).__name__} {got!r}"]
        if math.isclose(got, expected, rel_tol=tolerance, abs_tol=1e-12):
            return []
        if not reveal:
            return [f"{where} is {got:.4g}, which is not right"]
        text = f"{where} is {got:.4g}, expected {expected:.4g}"
        text += f" (within {tolerance:.0%})" if tolerance else " exactly"
        if expected and got and (ratio := got / expected) > 0:
            power = math.log10(ratio)
            if abs(power) >= 2.5 and abs(power - round(power)) < 0.05:
                text += f": off by a factor of 1e{round(power)} -- check the units (ms vs s, bytes vs GB)"
            elif math.isclose(got * expected, 1.0, rel_tol=0.05):
                text += ": this is the reciprocal -- is the ratio upside down?"
        return [text]
    if got != expected:
        return [f"{where} is {got!r}, " + (f"expected {expected!r}" if reveal else "which is not right")]
    return []


def solution_function(exercise: Exercise, notebook: Path | None = None):
    """The instructor's function, from the solution cell of the lab's notebook (None in the
    student copy, where that cell holds only the placeholder)."""
    source = notebook_cell(notebook or paths.REPO / exercise.file, exercise.cell)
    if source is None or "BEGIN SOLUTION" not in source:
        return None
    return define(exercise, source)


def _run_id(exercise: Exercise) -> str | None:
    """Which recorded run a function exercise's public answers come from (None: no run)."""
    if not exercise.uses_run:
        return None
    run = load_run(exercise.chapter)
    return f"{run.gpu}, recorded {run.meta['date']}"


def expected_answers(exercise: Exercise) -> list:
    """The right answers to the public cases: from the solution cell when this is the
    instructor's copy, else from the answers the student export stored."""
    solution = solution_function(exercise)
    if solution is not None:
        return [plain(solution(**exercise.inputs(case))) for case in exercise.public]
    stored_path = paths.REPO / EXPECTED_FILE
    if not stored_path.is_file():
        raise GpulabError(f"no solution for {exercise.id} in {exercise.file} and no stored answers in "
                          f"{EXPECTED_FILE}: make the student copy with `python -m gpulab student DEST`")
    stored = json.loads(stored_path.read_text()).get(exercise.id)
    if stored is None:
        raise GpulabError(f"{EXPECTED_FILE} has no answers for {exercise.id}; re-make the student copy")
    run_id = _run_id(exercise)
    if stored["run"] != run_id:
        raise GpulabError(f"{exercise.id}: the stored answers are for the run on {stored['run']}, but this "
                          f"copy's recorded run is on {run_id}; re-make the student copy")
    return stored["answers"]


def store_expected_answers(dest_root: Path) -> Path:
    """Write the public answers of every function exercise into a student copy."""
    answers = {e.id: {"run": _run_id(e), "answers": expected_answers(e)}
               for e in all_exercises() if e.kind == "function"}
    path = Path(dest_root) / EXPECTED_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    return path


# ----------------------------------------------------------------- the book's check cells
def _significant(value: float) -> str:
    """A number of a check's details table to 3 significant digits (a relative error of
    3.003233e-07 reads 3e-07; the tolerance 0.00001, 1e-05)."""
    return f"{value:.3g}"


class Passed:
    """What a check cell shows when the answer is right."""

    def __init__(self, exercise: Exercise, lines: list[str], details: pd.DataFrame | None = None):
        self.exercise, self.lines, self.details = exercise, lines, details

    def __repr__(self) -> str:
        text = "\n".join([f"{self.exercise.label}: correct"] + self.lines)
        if self.details is not None:
            text += "\n" + self.details.to_string(index=False, float_format=_significant)
        return text

    def _repr_html_(self) -> str:
        import html
        body = "<br>".join(html.escape(line) for line in self.lines)
        table = "" if self.details is None else self.details.to_html(index=False, float_format=_significant)
        return (f"<p style='color:green'>&#10004; {html.escape(self.exercise.label)}: correct</p>"
                f"<p>{body}</p>{table}")


def not_solved(exercise: Exercise) -> ExerciseNotSolved:
    if exercise.kind == "kernel":
        task = f"Write the kernel in {exercise.file},"
    else:
        task = f"Complete {exercise.signature or exercise.function} in the cell above,"
    return ExerciseNotSolved(f"{exercise.label}: exercise not solved yet.\n{task}\nthen run this cell again.")


def check(exercise_id: str, namespace: dict | None = None, backend=None) -> Passed:
    """The public check of one exercise, as the book's check cell runs it.

    Kernel exercises compile the lab's copy of the kernel file and run the chapter's
    check on it (on the CPU backend with bounds checking on); function exercises call
    the function the notebook defined (pass ``globals()``) on the public inputs. A right
    answer returns a summary; a missing one raises :class:`ExerciseNotSolved`, a wrong
    one :class:`ExerciseFailed` saying what is wrong. Run from inside another copy of the
    lab than this ``gpulab``'s, it refuses (:func:`gpulab.paths.require_this_lab`)."""
    paths.require_this_lab()
    exercise = get(exercise_id)
    if exercise.kind == "kernel":
        return _check_kernel(exercise, backend)
    if namespace is None:
        raise TypeError(f"check('{exercise_id}', globals()): a function exercise needs the notebook's names")
    fn = namespace.get(exercise.function)
    if not callable(fn):
        raise not_solved(exercise)
    problems, lines = [], []
    for case, expected in zip(exercise.public, expected_answers(exercise)):
        got = plain(fn(**exercise.inputs(case)))
        if got is None:         # the student copy's skeleton: a docstring and the placeholder
            raise not_solved(exercise)
        wrong = differences(got, expected, exercise.tolerance, reveal=exercise.reveal)
        label = describe_case(case)
        if wrong:
            problems += [f"  on {label}: {p}" for p in wrong]
        else:
            lines.append(f"on {label}: " + (exercise.describe(got) if exercise.describe else describe_answer(got)))
    if problems:
        raise ExerciseFailed(f"{exercise.label}: not yet right.\n"
                             + "\n".join(problems) + (f"\nHint: {exercise.hint}" if exercise.hint else ""))
    return Passed(exercise, lines)


def _check_kernel(exercise: Exercise, backend=None) -> Passed:
    from .kernels import get_backend
    be = get_backend(backend)
    path = paths.REPO / exercise.file
    tables = []
    from .errors import KernelLaunchError
    with bounds_checking(be.name):
        for case in exercise.public:
            try:
                tables.append(run_kernel_case(exercise, path, case, be))
            except KernelLaunchError:
                if is_unsolved(path.read_text()):      # a starter whose threads wait forever (hopper.3)
                    raise not_solved(exercise) from None
                raise
    checks = pd.concat(tables, ignore_index=True)
    failed = checks[failures(checks)]
    if len(failed):
        if is_unsolved(path.read_text()):
            raise not_solved(exercise)
        raise ExerciseFailed(f"{exercise.label}: {len(failed)} of {len(checks)} "
                             f"checks disagree with the float64 reference:\n{failed.to_string(index=False)}"
                             + (f"\nHint: {exercise.hint}" if exercise.hint else ""))
    return Passed(exercise, [f"{len(checks)} checks against the float64 reference, {be.caption}"
                             + (", with bounds checking" if be.name == "cpu" else "")], checks)


def bounds_checking(backend_name: str, **extra):
    """The CPU backend's checking modes for exercise checks (bounds always on); a no-op on
    the GPU. Only the options this version of the CPU backend knows are passed."""
    import contextlib
    if backend_name != "cpu":
        return contextlib.nullcontext()
    from . import cpu
    accepted = inspect.signature(cpu.checking).parameters
    options = {k: v for k, v in {"bounds": True, **extra}.items() if k in accepted}
    return cpu.checking(**options)

"""The protocol every chapter's ladder follows: steps declared as data, each launched by its
family's :class:`Launcher` on a :class:`Case`, one check loop, one table, and the chapter as one
object.

* a :class:`Step` is data: its number, kernel file, title, precision and ``launcher``, the launch
  family that knows what a step of it needs (:class:`Needs`: shared and scratch bytes, compute
  capability) and binds it to a case (``launcher.bind(step, case, arrays, backend) -> launch``);
* a :class:`Case` is what a check or a timing runs on: its table columns, ``inputs(seed)``, the
  float64 ``reference`` and the output's shape and type;
* :func:`run` poisons the output, binds, launches and brings the output back; :func:`check` is
  the one check loop over a :class:`Chapter`'s steps and cases, in one schema: a row per step
  and case, with ``rel_error``, ``tolerance``, ``unwritten`` and a ``status`` that is ``"ok"``,
  ``"FAILED"`` or ``"skipped: <why>"``. :func:`assert_ok` stops a notebook on a failure;
* a :class:`Chapter` is what every consumer reads (the notebook, the tests, the grader and the
  recorder): its steps, cases, predictions, views and recorded run, with one look-up,
  ``CHAPTER.step("07")``.

A new chapter's ladder, in full (its kernels and reference are the chapter's own)::

    @dataclass(frozen=True)
    class Vector(ladder.Case):                     # problem.py
        n: int
        output_name = "y"
        @property
        def columns(self): return {"n": self.n}
        def inputs(self, seed, precision="fp32"): return {"x": np.random.default_rng(seed).random(self.n)}
        def reference(self, inputs, precision="fp32"): return 2.0 * inputs["x"].astype(np.float64)
        def output(self, precision="fp32"): return (self.n,), np.float32

    class OneThreadPerOutput(ladder.Launcher):     # launchers.py
        def bind(self, step, case, arrays, backend):
            fn = load_module(step.file, backend).get_function(step.kernel)
            return fn.bind((-(-case.n // 256),), (256,), (arrays["x"], arrays["y"], np.int32(case.n)))

    @dataclass(frozen=True)                        # steps.py
    class Step(ladder.Step):
        kernel: str = ""
        launcher: ladder.Launcher = field(default=OneThreadPerOutput(), kw_only=True)

    STEPS = [Step(1, "mychapter/01_naive.cu", "one thread per output", kernel="naive"),
             Step(2, "mychapter/02_tiled.cu", "shared-memory tiles", kernel="tiled", precision="fp16")]

    CHAPTER = ladder.Chapter("mychapter", "Doubling a vector", STEPS,   # __init__.py
                             check_cases=[Vector(1), Vector(255), Vector(1000)], predicted=PREDICTED)

and in the notebook, ``gpulab.assert_ok(mychapter.CHAPTER.check(backend, steps=[mychapter.CHAPTER.step(2)]))``.
Every chapter, basics' puzzles (:mod:`gpulab.puzzles`) included, checks through :meth:`Chapter.check`;
:func:`check_steps` is the loop inside it.
"""
from __future__ import annotations

import contextlib
from dataclasses import KW_ONLY, dataclass, field
from types import ModuleType
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .check import TOLERANCE, CheckResult, CheckTable, compare
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
    ``launcher`` is the step's launch family (a :class:`Launcher`): what it needs of the device
    and how it is bound to a case; a chapter's Step subclass gives its family as the default.
    """

    number: str
    file: str
    title: str
    _: KW_ONLY
    precision: str = "fp32"
    gpu_only: bool = False
    launcher: "Launcher | None" = field(default=None, compare=False)

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


# ------------------------------------------------------------------ cases and launchers
@dataclass(frozen=True)
class Needs:
    """What a step of a launch family asks of the device: dynamic shared memory per block,
    device memory beyond its inputs and output (``scratch_bytes``), and the lowest compute
    capability it runs on (``capability``: 90 for sm_90a; 0, any), with what needs it (``because``)."""

    shared_bytes: int = 0
    scratch_bytes: int = 0
    capability: int = 0
    because: str = ""


class Case:
    """One problem instance a step is checked or timed on: a size, a GEMM shape, a layer at a batch.

    A chapter's case (a frozen dataclass) gives its table ``columns``, its ``inputs(seed,
    precision)`` (host arrays by name: the names its launcher binds), the float64 ``reference``
    of those inputs and the ``output``'s shape and type in a step's precision; the output is
    bound under ``output_name``, and ``for_step`` is the case as a step computes it. ``values``
    turns an output into the floats the reference is compared with (bfloat16 bit patterns
    decoded, say); ``check_columns`` is what a check row says of the case beyond its columns;
    ``label`` names the comparison in a failure's message.

    A step that writes several arrays, or updates some of its inputs in place (training's SGD
    step: its loss, activations and gradients, and the weights), names them all in
    ``outputs`` (each poisoned before the launch) and ``updated`` (inputs brought back after
    it), and its ``comparisons`` give one check row per quantity.
    """

    output_name = "out"
    #: Inputs the step updates in place, brought back to the host after the launch with the outputs.
    updated: tuple[str, ...] = ()

    @property
    def columns(self) -> dict:
        raise NotImplementedError(f"{type(self).__name__} gives its table columns (e.g. {{'n': 1000}})")

    def inputs(self, seed: int | None, precision: str = "fp32") -> dict:
        raise NotImplementedError(f"{type(self).__name__} makes its inputs: {{name: host array}}")

    def reference(self, inputs: dict, precision: str = "fp32") -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} computes its float64 reference")

    def output(self, precision: str = "fp32") -> tuple[tuple, np.dtype]:
        raise NotImplementedError(f"{type(self).__name__} gives its output's (shape, dtype)")

    def outputs(self, precision: str = "fp32") -> dict[str, tuple[tuple, np.dtype]]:
        """Every array the step writes, by name, as (shape, dtype): each is poisoned before the
        launch. The one ``output`` under ``output_name``, unless the step writes several."""
        return {self.output_name: self.output(precision)}

    def comparisons(self, step: Step, inputs: dict, arrays: dict) -> list[tuple[dict, CheckResult]]:
        """What a check of ``step`` compares, one check row each: (its columns, the comparison).
        ``arrays`` holds the outputs and the ``updated`` inputs after the launch, on the host. By
        default one row: the output (its ``values``) against the float64 ``reference``."""
        out = arrays[self.output_name]
        result = compare(self.values(out, step.precision), self.reference(inputs, step.precision),
                         precision=step.precision, name=self.label(step))
        return [(self.check_columns(step, inputs, out), result)]

    def for_step(self, step: Step) -> "Case":
        """The case as ``step`` computes it: this one, unless the case has outputs of more than one
        kind and the step's family writes another (lenet's fused steps write a layer's pooled
        output, its others the convolution's)."""
        return self

    def values(self, out, precision: str, xp=np):
        return out

    def check_columns(self, step: Step, inputs: dict, out) -> dict:
        return dict(self.columns)

    def label(self, step: Step) -> str:
        return f"{step.label} {self.columns}"


class Launcher:
    """One launch family ("a GEMM on tensor maps", "a list of kernel launches", ...): what a step
    of the family needs (:meth:`needs`), why this device cannot run one (:meth:`unfit`), and the
    step bound to a case's device arrays as a no-argument launch (:meth:`bind`), what the checks
    and the timers call. A family is a class; its steps differ only in their data."""

    def needs(self, step: Step) -> Needs:
        return Needs()

    def unfit(self, step: Step, backend) -> str | None:
        """Why ``backend`` cannot run ``step`` (None: it can). The default: a GPU below the
        compute capability the family needs (the CPU backend emulates what the kernels use)."""
        needs = self.needs(step)
        if not needs.capability or backend.name != "gpu":
            return None
        import cupy
        cc = cupy.cuda.Device().compute_capability          # "90" on an H100
        if int(cc) >= needs.capability:
            return None
        need = f"{needs.capability // 10}.{needs.capability % 10}"
        return (f"needs compute capability {need}" + (f" ({needs.because})" if needs.because else "")
                + f"; this GPU is {cc[:-1]}.{cc[-1]}")

    def accepts(self, case: Case) -> bool:
        """Whether a step of this family runs on ``case`` (every case, by default). A chapter whose
        steps are of different kinds (basics' puzzles: a map, a 2-D broadcast, a histogram) lists
        every kind's cases once, and each step is checked on its own kind's."""
        return True

    def bind(self, step: Step, case: Case, arrays: dict, backend) -> Callable[[], None]:
        raise NotImplementedError(f"{type(self).__name__} binds a step to a case's arrays")


def launcher(step: Step) -> Launcher:
    if step.launcher is None:
        raise TypeError(f"step {step.number} ({step.file}) has no launcher: every step names its launch "
                        "family (ladder.Launcher), the default of its chapter's Step class")
    return step.launcher


def unfit(step: Step, backend=None) -> str | None:
    """Why ``backend`` cannot run ``step`` (``gpu_only`` on the CPU backend, or its launcher's
    reason), or None."""
    be = get_backend(backend)
    if step.gpu_only and be.name != "gpu":
        return "GPU only: the CPU backend cannot run this kernel"
    return launcher(step).unfit(step, be)


def bind(step: Step, case: Case, arrays: dict, backend=None) -> Callable[[], None]:
    """``step`` bound to ``case``'s device ``arrays`` (its output among them): refused with the
    reason where the backend cannot run it, else its launcher's binding."""
    be = get_backend(backend)
    why = unfit(step, be)
    if why:
        raise NotImplementedError(f"step {step.number} ({step.file}) cannot run here: {why}")
    return launcher(step).bind(step, case, arrays, be)


def run_all(step: Step, case: Case, inputs: dict, backend=None) -> dict[str, np.ndarray]:
    """``step`` once on ``case``'s host ``inputs``: copied to the device, every output poisoned
    (NaN: what the kernel leaves unwritten fails the check), bound, launched; the outputs and the
    inputs it updates in place (``case.updated``) on the host, by name."""
    be = get_backend(backend)
    case = case.for_step(step)
    arrays = {name: be.to_device(value) for name, value in inputs.items()}
    outputs = case.outputs(step.precision)
    for name, (shape, dtype) in outputs.items():
        arrays[name] = be.poisoned(shape, dtype)
    bind(step, case, arrays, be)()
    be.synchronize()
    return {name: be.to_host(arrays[name]) for name in [*outputs, *case.updated]}


def run(step: Step, case: Case, inputs: dict, backend=None) -> np.ndarray:
    """``step`` once on ``case``'s host ``inputs`` (see :func:`run_all`): its output on the host."""
    return run_all(step, case, inputs, backend)[case.for_step(step).output_name]


def case_checks(step: Step, case: Case, seed: int | None = None, backend=None) -> list[tuple[dict, CheckResult]]:
    """``step`` on fresh inputs of ``case`` (from ``seed``) against the float64 reference: each
    check row's columns and comparison (one row, unless the case compares several quantities)."""
    case = case.for_step(step)
    inputs = case.inputs(seed, step.precision)
    return case.comparisons(step, inputs, run_all(step, case, inputs, backend))


def check_case(step: Step, case: Case, seed: int | None = None, backend=None) -> tuple[dict, CheckResult]:
    """The one comparison of :func:`case_checks`: the check row's columns for the case and the
    comparison (a case that compares several quantities is read with :func:`case_checks`)."""
    rows = case_checks(step, case, seed, backend)
    if len(rows) != 1:
        raise TypeError(f"{case.label(step)} compares {len(rows)} quantities: ladder.case_checks lists them")
    return rows[0]


#: ``check``'s seed when none is given: the chapter's (``Chapter.seed``).
CHAPTER_SEED = object()


def cpu_checkers(backend, races: bool = False, schedule: str | None = None, seed: int | None = None):
    """The CPU backend's checkers a check may ask for, in effect inside the ``with`` block:
    ``races`` (two threads of a block on one word with no barrier between them is an error)
    and ``schedule`` (the threads of a block run between barriers in that order: "in_order",
    "reverse" or "shuffle", seeded by ``seed``; a kernel right in one order only fails in
    another). On a GPU neither exists: the block runs as the GPU runs it."""
    if get_backend(backend).name != "cpu" or not (races or schedule):
        return contextlib.nullcontext()
    from . import cpu
    options = {"races": True} if races else {}
    if schedule is not None:
        options.update(schedule=schedule, seed=seed or 0)
    return cpu.checking(**options)


def check(chapter: "Chapter", steps: Iterable[Step] | None = None, cases: Sequence[Case] | None = None,
          backend=None, seed=CHAPTER_SEED, races: bool = False, schedule: str | None = None) -> CheckTable:
    """The one check: each step (default: the chapter's ladder) on each case (default: its
    check cases) its launcher ``accepts``, fresh inputs from ``seed`` (default: the chapter's;
    None: new random inputs every call), run on a poisoned output and compared with the float64
    reference. A step the backend cannot run is one skipped row with the reason. ``races`` and
    ``schedule`` turn on the CPU backend's checkers (:func:`cpu_checkers`)."""
    be = get_backend(backend)
    seed = chapter.seed if seed is CHAPTER_SEED else seed
    cases = chapter.check_cases if cases is None else cases

    def check_one(step, be):
        mine = [case for case in cases if launcher(step).accepts(case)]
        if not mine:          # a check of nothing would read as a pass
            raise ValueError(f"step {step.label}: its launcher ({type(launcher(step)).__name__}) accepts none of "
                             f"the cases {[case.columns for case in cases]}")
        for case in mine:
            yield from case_checks(step, case, seed, be)
    with cpu_checkers(be, races, schedule, seed):
        return check_steps(chapter.steps if steps is None else steps, check_one, be,
                           skip=lambda step: launcher(step).unfit(step, be))


# ------------------------------------------------------------------ the chapter
@dataclass(frozen=True, eq=False)
class Chapter:
    """A chapter's workload as one object, what the notebook, the tests, the grader and the
    recorder read: its ``steps`` (the ladder; ``exercises``, steps found by number beside it),
    the ``check_cases`` a check runs on by default and ``cases(**spec)``, which makes the cases
    a notebook's or an exercise's keywords name (``sizes=(1000,)``, ``shapes=...``), the check's
    default ``seed`` (None: fresh inputs each check), what each kernel file ``predicted``, the
    ``views`` module (what the notebook shows of a run), its recorded run (``recording``, the
    :class:`gpulab.recorder.Recording` ``python -m gpulab record`` runs) and ``profile_driver``.

    A chapter is known by its name: ``CHAPTER == "fcnet"`` and ``str(CHAPTER)`` is the name,
    so it stands where a chapter's name is asked for (``gpulab.load_run(CHAPTER)``)."""

    name: str
    title: str
    steps: Sequence[Step]
    check_cases: Sequence[Case]
    predicted: Mapping = field(default_factory=dict)
    views: ModuleType | None = None
    recording: object = None
    cases: Callable[..., Sequence[Case]] | None = None
    seed: int | None = 0
    exercises: Sequence[Step] = ()
    profile_driver: Callable | None = None

    def __post_init__(self):
        labels = [s.label for s in self.steps]
        if len(set(labels)) != len(labels):
            raise ValueError(f"chapter {self.name}: two steps have one label: {labels}")
        missing = [s.number for s in [*self.steps, *self.exercises] if s.launcher is None]
        if missing:
            raise ValueError(f"chapter {self.name}: steps {missing} have no launcher")

    def rung(self, number: int | str) -> list[Step]:
        """Every kernel of step ``number`` (a rung may have one per case: fcnet's 13)."""
        return select([*self.steps, *self.exercises], number)

    def step(self, number: int | str) -> Step:
        """The step numbered ``number`` (``7``, ``"07"``, ``"E1"``), of the ladder or an exercise."""
        found = self.rung(number)
        if len(found) > 1:
            raise KeyError(f"step {found[0].number} of {self.name} has {len(found)} kernels "
                           f"({', '.join(s.label for s in found)}): CHAPTER.rung({found[0].number!r}) lists them")
        return found[0]

    def check(self, backend=None, steps: Iterable[Step] | None = None, seed=CHAPTER_SEED,
              races: bool = False, schedule: str | None = None, **spec) -> CheckTable:
        """:func:`check` of ``steps`` (default: the ladder) on the cases ``spec`` names
        (``self.cases(**spec)``; none: the check cases), under the CPU backend's race checker
        (``races``) or thread ``schedule`` where asked."""
        if spec and self.cases is None:
            raise TypeError(f"chapter {self.name} takes no case keywords, got {sorted(spec)}")
        return check(self, steps, self.cases(**spec) if spec else None, backend, seed, races, schedule)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Chapter({self.name!r}: {len(self.steps)} steps)"

    def __eq__(self, other) -> bool:
        if isinstance(other, Chapter):
            return other.name == self.name
        if isinstance(other, str):
            return other == self.name
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)


def owned_names(package: str, owners: Sequence[ModuleType]) -> Callable[[str], object]:
    """Compatibility shim for a ported chapter's package: its ``__getattr__``, which finds the
    names a notebook still reads as ``chapter.X`` (``fcnet.ladder_figure``) in the module of
    ``owners`` that owns each (not a module, function or class it imports), until the notebook's
    cells name that module; the package itself holds only its ``CHAPTER``."""
    def __getattr__(name: str):
        for module in owners if not name.startswith("_") else ():
            value = getattr(module, name, owners)
            if value is not owners and not isinstance(value, ModuleType) \
                    and getattr(value, "__module__", module.__name__) == module.__name__:
                return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return __getattr__

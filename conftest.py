"""The student version of each chapter notebook, executed when pytest collects the notebook
(``python -m pytest`` collects book/, as pyproject's testpaths say): in the student copy of the lab,
the one the published site shows, whose build then reuses these executed notebooks
(:mod:`gpulab.site`) instead of executing them again. It compares the numbers it glues with
tests/fixtures/glued, every one of them (the same names and values the notebook as it is glues).

The notebook as it is (its solution cells in place) is a second item of the same file
(:class:`GluedNumbersRun`, marker ``as_is``), left out unless asked for with ``--as-is`` or a
``-m`` expression naming ``as_is`` (``-m as_is`` runs only those): the student version checks the
same glued numbers, and the solution cells are graded by tests/test_grading.py (the lab's answers
are read from those cells), so the default run does not pay for every notebook twice.
tools/gpu_session.sh's ``check`` runs them. nbmake's test runs with ``--nbmake``. Every notebook
test is ``slow``; the student one is also ``student_book`` (``-m "not student_book"`` leaves it out)."""
from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent
_lab: Path | None = None


def _is_chapter(path: Path) -> bool:
    return path.suffix == ".ipynb" and path.parent.parent == ROOT / "book" and path.stem == path.parent.name


def pytest_collect_file(file_path: Path, parent):
    if _is_chapter(file_path):
        return StudentNotebook.from_parent(parent, path=file_path)
    return None


def _as_is_asked(config) -> bool:
    return bool(config.getoption("as_is")) or "as_is" in (config.getoption("markexpr") or "")


@pytest.hookimpl(tryfirst=True)      # before -m selects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
    if not _as_is_asked(config):
        left_out = [item for item in items if item.get_closest_marker("as_is")]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if not item.get_closest_marker("as_is")]
    _longest_first(config, items)


# ----------------------------------------------------------------- CPU time per test
# ``--cpu-durations N`` lists the N tests that used the most CPU (user + system seconds of the
# test process and of every process it waited for: compilers, notebook kernels, sandboxes).
# CI's machine is shared, so wall time says more about the neighbours than about a test; CPU
# time is what a change of the suite moves. Each phase's time travels in the report's
# user_properties, so it comes back from pytest-xdist's workers too.
def pytest_addoption(parser):
    parser.addoption("--as-is", action="store_true", default=False,
                     help="also execute every chapter notebook as it is, solutions in place, and compare "
                          "the numbers it glues (marker as_is; -m as_is runs only those)")
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="list the N tests (0: all) that used the most CPU time, their own and "
                          "their child processes' (compilers, notebook kernels)")
    parser.addoption("--cpu-durations-json", default=None, metavar="PATH",
                     help="write the CPU seconds of each unit of xdist's work (a test file, a notebook's "
                          "item) and of each test to PATH; tests/cpu_seconds.json, so written, orders the units")


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    start = getattr(item, "_gpulab_cpu_start", None)
    if start is not None:
        outcome.get_result().user_properties.append(("cpu_s", _cpu_seconds() - start))


def _phase_start(item):
    item._gpulab_cpu_start = _cpu_seconds()


pytest_runtest_setup = _phase_start      # the tests/ conftest's own setup hook runs as well
pytest_runtest_call = _phase_start
pytest_runtest_teardown = _phase_start


_cpu: dict[str, dict[str, float]] = {}
#: Wall seconds of each unit of work (all its tests' phases). The grader's tests spend most of
#: theirs in sandboxed children that the grader kills, whose CPU time reaches no parent: wall
#: time sees them (grading the sample submissions: about 17 s of CPU counted, 135 s on the clock).
_wall: dict[str, float] = {}


def pytest_runtest_logreport(report):
    for key, value in report.user_properties:
        if key == "cpu_s":
            _cpu.setdefault(report.nodeid, {})[report.when] = value
    _wall[_unit(report.nodeid)] = _wall.get(_unit(report.nodeid), 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, config):
    target = config.getoption("cpu_durations_json")
    if target and _cpu:
        import json
        units: dict[str, float] = {}
        for nodeid, phases in _cpu.items():
            units[_unit(nodeid)] = units.get(_unit(nodeid), 0.0) + sum(phases.values())
        tests = {nodeid: round(sum(phases.values()), 2) for nodeid, phases in _cpu.items()}
        Path(target).write_text(json.dumps(
            {"units": {u: round(c, 1) for u, c in sorted(units.items(), key=lambda x: -x[1])},
             "wall_units": {u: round(c, 1) for u, c in sorted(_wall.items(), key=lambda x: -x[1])},
             "tests": dict(sorted(tests.items(), key=lambda x: -x[1]))}, indent=1) + "\n")
    n = config.getoption("cpu_durations")
    if n is None or not _cpu:
        return
    rows = sorted(((sum(p.values()), nodeid, p) for nodeid, p in _cpu.items()), reverse=True)
    total = sum(r[0] for r in rows)
    terminalreporter.write_sep("=", f"CPU time: {total:.1f} s in {len(rows)} tests; the "
                                    f"{'all' if n == 0 else n} largest (setup + call + teardown)")
    for seconds, nodeid, phases in rows if n == 0 else rows[:n]:
        detail = " ".join(f"{w} {phases[w]:.1f}" for w in ("setup", "call", "teardown") if phases.get(w, 0) >= 0.05)
        terminalreporter.write_line(f"{seconds:8.2f}s  {nodeid}  ({detail})")


# ----------------------------------------------------------------- xdist: the longest work first
# pyproject's addopts run the suite with ``-n auto --dist loadfile``: a test file is one unit of
# work, so its module fixtures (the grader's runs, compiled modules) are made once. Two changes
# make two workers finish together: each notebook item (the chapter as it is, its student
# version) is a unit of its own, and the units are handed out longest first (tests/cpu_seconds.json,
# from `--cpu-durations-json`: the wall seconds each unit took on its worker, "wall_units", where
# the file has them, else its CPU seconds, else, for a unit the file has not timed as one, the CPU
# seconds of its test), so the short ones fill the gaps at the end instead of a notebook or the
# grader's sandbox tests starting last. Unknown units count as 0 and keep their order.
COSTS = ROOT / "tests" / "cpu_seconds.json"


#: Test files whose tests share no module fixture and each run a whole recording in a process of
#: its own (~300 CPU-s in all), or are the longest files of kernel checks (50-85 CPU-s each, one
#: test alone up to 70: the race check of convpool's step 11): each test is a unit, so one worker
#: does not take them all and the short ones fill the gaps at the end.
EACH_TEST_A_UNIT = ("tests/test_recording.py", "tests/test_lenet.py", "tests/test_alexnet.py",
                    "tests/test_convpool_f32.py")


def _unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or itself for a notebook's item and for the
    tests of :data:`EACH_TEST_A_UNIT`."""
    path = nodeid.split("::", 1)[0]
    return nodeid if path.endswith(".ipynb") or path in EACH_TEST_A_UNIT else path


def _costs() -> dict[str, float]:
    import json
    if not COSTS.is_file():
        return {}
    recorded = json.loads(COSTS.read_text())
    costs = dict(recorded.get("tests", {}))      # a test's CPU seconds: a unit not yet timed as one
    costs.update(recorded["units"])
    costs.update(recorded.get("wall_units") or {})
    return costs


def pytest_configure(config):
    # With a worker per core (-n auto), NumPy's OpenBLAS in each worker, and in each notebook kernel
    # and process a worker starts, would run a thread per core too: on two cores the idle pool
    # threads spin-wait for work while the other worker needs the core (~4% of CI's CPU time).
    # One BLAS thread each, as the workers already use every core. A float64 reference may then
    # differ in its last bits (alexnet's, hopper's and multigpu's glued errors at ~1e-16 relative),
    # which the glued numbers' comparison allows, as it does another NumPy's (tools/glued_values.py).
    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, int) and workers > 1 and not hasattr(config, "workerinput"):
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LongestFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return _unit(nodeid)

    config.option.loadscopereorder = False      # the workers' collection order is the order wanted
    return LongestFirst(config, log)


def _longest_first(config, items):
    if not hasattr(config, "workerinput"):
        return                                  # only an xdist worker's collection is reordered
    costs = _costs()
    first_seen = {}
    for i, item in enumerate(items):
        first_seen.setdefault(_unit(item.nodeid), i)
    items.sort(key=lambda item: (-costs.get(_unit(item.nodeid), 0.0), first_seen[_unit(item.nodeid)]))


class StudentNotebook(pytest.File):
    def collect(self):
        yield GluedNumbersRun.from_parent(self, name="as it is: glued numbers unchanged")
        yield StudentNotebookRun.from_parent(self, name="student version")


def _glued_values():
    import importlib.util
    spec = importlib.util.spec_from_file_location("glued_values", ROOT / "tools" / "glued_values.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class GluedNumbersRun(pytest.Item):
    """The chapter's notebook as it is runs without an error (as nbmake would check) and glues
    exactly the numbers of tests/fixtures/glued/<chapter>.json (tools/glued_values.py): a change
    of the package cannot move a number the book quotes. Marker ``as_is``: run only when asked
    (``--as-is``, ``-m as_is``; see the module's text). A unit of xdist's work of its own (see
    "the longest work first" above), as is the student version."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_marker(pytest.mark.as_is)

    def runtest(self):
        _glued_values().assert_unchanged(self.path.stem)

    def repr_failure(self, excinfo):
        return str(excinfo.value) if excinfo.errisinstance(AssertionError) else super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.path.relative_to(ROOT)} (as it is, glued numbers)"


class StudentNotebookRun(pytest.Item):
    """The chapter's notebook in the student copy runs without an error, except the
    exercises' checks (tagged ``raises-exception``), as the site build requires, and glues
    exactly the numbers of tests/fixtures/glued/<chapter>.json: those the published (student)
    site shows, which no exercise left unsolved may change."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_marker(pytest.mark.student_book)

    def runtest(self):
        from gpulab import site
        global _lab
        if _lab is None or not _lab.is_dir():
            _lab = site.student_lab_for_execution()
        timeout = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]["timeout"]
        executed = site.execute_student_notebook(_lab, self.path.relative_to(ROOT).as_posix(), timeout)
        import nbformat
        _glued_values().assert_unchanged(self.path.stem, nbformat.read(executed, as_version=4))

    def repr_failure(self, excinfo):
        return str(excinfo.value) if excinfo.errisinstance(AssertionError) else super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.path.relative_to(ROOT)} (student version)"


@pytest.fixture(autouse=True)
def _close_figures():
    """Figures a test draws through pyplot are closed after it: pyplot keeps every figure open,
    and a worker that runs many plotting tests otherwise warns (more than 20 open) and holds
    their memory."""
    yield
    import sys
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")

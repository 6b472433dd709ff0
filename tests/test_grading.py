"""The grader: the lab's own answers pass, every known-wrong answer is rejected, and the
three sample submissions get the expected grades without their feedback revealing any
hidden check. Instructors only (the student export leaves this file out).

The sample submissions are graded once, with the grader's command line, for the whole
module (the ``graded`` fixture): ada hands in the lab's own answers, refreshed from the lab
before grading, so her grades are also the proof that every lab answer passes every check."""
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest

from gpulab import chapters, exercises, grading, load_module, paths, sandbox
from gpulab.errors import KernelLaunchError
from gpulab.exercises import EXERCISES
from gpulab.student import find_solutions

FIXTURES = Path(__file__).parent / "fixtures" / "grading"
WRONG = FIXTURES / "wrong"


def submission(exercise, text: str, root: Path) -> Path:
    """A submission folder holding only ``text`` as the exercise's file (or cell)."""
    target = root / exercise.file
    target.parent.mkdir(parents=True, exist_ok=True)
    if exercise.kind == "kernel":
        target.write_text(text)
    else:
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell(text)
        cell["id"] = exercise.cell
        nb.cells.append(cell)
        target.write_text(nbformat.writes(nb))
    return root


def evaluate(exercise, text: str, tmp_path: Path, races: bool = True) -> dict:
    """Grade one answer with the grader's checks, its code run in this process (no sandbox,
    no time limit: these answers are wrong, not hostile, and none hangs)."""
    staged = grading.stage(submission(exercise, text, tmp_path / "sub"), tmp_path / "staged", [exercise])
    return grading._summarise(exercise, grading.evaluate(exercise, staged, races=races))


def solution_text(exercise) -> str:
    if exercise.kind == "kernel":
        return (paths.REPO / exercise.file).read_text()
    return exercises.notebook_cell(paths.REPO / exercise.file, exercise.cell)


def handed_in(exercise) -> str:
    """The lab's answer as a student hands it in (without the solution markers), as
    tools/make_sample_submissions.py writes it for ada."""
    comment = "//" if exercise.kind == "kernel" else "#"
    return re.sub(rf"^[ \t]*{comment} (BEGIN|END) SOLUTION[^\n]*\n", "", solution_text(exercise), flags=re.M)


def put_answer(exercise, text: str, student: Path) -> None:
    """Write ``text`` as the student's answer: the kernel file, or the exercise's cell of
    the student's notebook (added if the notebook lacks it)."""
    target = student / exercise.file
    if exercise.kind == "kernel":
        target.write_text(text)
        return
    nb = nbformat.read(target, as_version=4)
    cells = [c for c in nb.cells if c.get("id") == exercise.cell]
    if cells:
        cells[0].source = text.rstrip("\n")
    else:
        cell = nbformat.v4.new_code_cell(text.rstrip("\n"))
        cell["id"] = exercise.cell
        nb.cells.append(cell)
    nbformat.write(nb, target)


class Graded:
    """The sample submissions graded by ``python -m gpulab grade``."""

    def __init__(self, out: Path, feedback: Path, stdout: str):
        self.out, self.grades, self.stdout = out, pd.read_csv(out), stdout
        self.rows = self.grades.set_index(["student", "exercise"])
        self.feedback = {p.name: p.read_text() for p in feedback.glob("*.md")}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Graded:
    root = tmp_path_factory.mktemp("grading")
    submissions = root / "submissions"
    shutil.copytree(FIXTURES / "submissions", submissions)
    for exercise in EXERCISES:
        put_answer(exercise, handed_in(exercise), submissions / "ada")
    out = root / "grades.csv"
    # The samples are ours: where no sandbox can be made, grade them without one
    # (tests/test_grading_sandbox.py, which needs it, is skipped there).
    unsafe = ["--unsafe-no-sandbox"] if sandbox.problem() else []
    # cy's endless loop computes until a limit stops it: one launch's, 5 s of CPU here (the CPU
    # backend's own is 30 s, which cost this run a third of its CPU time); every honest launch
    # of the samples computes for well under a second.
    result = subprocess.run([sys.executable, "-m", "gpulab", "grade", str(submissions),
                             "--out", str(out), "--time-limit", "60", "--launch-limit", "5", "--jobs", "2",
                             *unsafe], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return Graded(out, root / "grades-feedback", result.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_the_lab_answer_passes_every_check(exercise, graded):
    assert exercises.hidden_cases(exercise), f"{exercise.id} has no hidden checks"
    row = graded.rows.loc[("ada", exercise.id)]
    assert (row["status"], row["points"]) == ("passed", exercise.points), row["message"]
    total = len(exercise.public) + len(exercises.hidden_cases(exercise))
    assert row["passed_checks"] == row["total_checks"] == total


def test_every_exercise_has_known_wrong_answers():
    for exercise in EXERCISES:
        suffix = ".cu" if exercise.kind == "kernel" else ".py"
        assert len(list((WRONG / exercise.id).glob(f"*{suffix}"))) >= 2, exercise.id
    assert {p.name for p in WRONG.iterdir()} == {e.id for e in EXERCISES}


WRONG_ANSWERS = sorted(p for p in WRONG.glob("*/*") if p.suffix in (".cu", ".py"))


@pytest.mark.slow
@pytest.mark.parametrize("path", WRONG_ANSWERS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_checks_reject_a_known_wrong_answer(path, tmp_path):
    exercise = exercises.get(path.parent.name)
    text = path.read_text()
    head = text.splitlines()[:3]
    assert re.match(r"^(//|#) WRONG: ", head[0]), f"{path} must open with a comment saying what is wrong"
    hidden_only = any("rejected by: hidden" in line for line in head)
    status = [line.split(":", 1)[1].strip() for line in head if "expected status:" in line]
    # The race checker (the slowest part of a public check) only where the fault is a race.
    row = evaluate(exercise, text, tmp_path, races=status == ["barrier or race"])
    assert row["points"] == 0 and row["status"] != "passed"
    hidden = [c for c in row["checks"] if c["hidden"]]
    public = [c for c in row["checks"] if not c["hidden"]]
    assert any(c["status"] != "passed" for c in hidden), "the hidden checks let this wrong answer pass"
    if status:
        assert row["status"] == status[0], row["message"]
    if not hidden_only:
        assert any(c["status"] != "passed" for c in public), "the public check lets this wrong answer pass"


def _hidden_inputs() -> set[str]:
    """Numbers that appear only in hidden cases (seeds and sizes), as text."""
    public = set()
    for exercise in EXERCISES:
        public |= set(re.findall(r"\d{3,}", repr(exercise.public) + exercise.hint + exercise.title
                                 + exercise.signature))
    found = set(re.findall(r"\d{3,}", repr([exercises.hidden_checks(name) for name in chapters.names()])))
    return found - public


@pytest.mark.slow
def test_sample_submissions_get_the_expected_grades(graded):
    grades = graded.grades
    expected = pd.concat([pd.read_csv(p) for p in sorted((FIXTURES / "expected_grades").glob("*.csv"))])
    got = grades.set_index(["student", "exercise"])[["points", "status"]].sort_index()
    want = expected.set_index(["student", "exercise"])[["points", "status"]].sort_index()
    pd.testing.assert_frame_equal(got, want)
    totals = grades.groupby("student")["points"].sum()
    most = sum(e.points for e in EXERCISES)
    assert totals["ada"] == most and 0 < totals["cy"] < totals["ben"] < most


@pytest.mark.slow
def test_feedback_says_why_and_never_shows_a_hidden_input(graded):
    grades = graded.grades
    # Every failure says why; the feedback and the grades never show a hidden input.
    assert grades.loc[grades["status"] != "passed", "message"].str.len().gt(0).all()
    hidden = _hidden_inputs()
    assert hidden
    texts = dict(graded.feedback)
    assert sorted(texts) == ["ada.md", "ben.md", "cy.md"]
    texts["grades.csv"] = graded.out.read_text()
    for name, text in texts.items():
        # (Not inside an address a message shows, 0x7f5a13465fd0: ASLR makes its digits anything.)
        text = re.sub(r"0x[0-9a-fA-F]+", "0x", text)
        leaked = {number for number in hidden if re.search(rf"(?<![\d.]){number}(?![\d])", text)}
        assert not leaked, f"{name} shows hidden inputs {leaked}"
        assert "hidden_checks" not in text and "perturb" not in text
    assert "out-of-bounds read of argument 'w'" in texts["cy.md"]
    # cy's endless loop: stopped by the launch limit (--launch-limit 5) in the public check, which is
    # race-checked (the limit counts four times over there) and says which kernel, blocks and limit
    # (the grader's own CPU limit, with its number: test_grading_sandbox).
    assert re.search(r"measuring\.1( \(the book's Exercise \d+\))?: a grid-stride loop -- 0 of 4 points \(time limit\)",
                     texts["cy.md"]), texts["cy.md"]
    assert re.search(r"public check \(seed=0\): time limit\s+```\s+KernelLaunchError: kernel 'saxpy_grid_stride'"
                     r".* did not finish within the time limit of 20 s", texts["cy.md"])


@pytest.mark.slow
def test_the_grader_reports_the_cpu_time_of_its_children(graded):
    # Each child's processes end with its sandbox, so no CPU time of the grader's (nor CI's) counts
    # them: the grader says what each used and the total.
    used = {(m[1], m[2]): float(m[3]) for m in re.finditer(
        r"^(\S+) (\S+): .*\(\d+/\d+, ([\d.]+) s CPU, [\d.]+ s\)$", graded.stdout, re.M)}
    assert set(used) == set(graded.rows.index)
    total = re.search(r"^CPU time of the children that ran the submissions' code: ([\d.]+) s in (\d+) exercises",
                      graded.stdout, re.M)
    assert total and int(total[2]) == len(used), graded.stdout[-2000:]
    assert float(total[1]) == pytest.approx(sum(used.values()), abs=0.1)
    ran = graded.grades[~graded.grades["status"].isin(["missing", "invalid file"])]
    assert all(used[s, e] > 0 for s, e in zip(ran["student"], ran["exercise"]))
    # cy's endless loop computed up to the launch limit (5 s of its busiest thread's CPU time).
    assert used[("cy", "measuring.1")] >= 5


def _sample_tool():
    path = paths.REPO / "tools" / "make_sample_submissions.py"
    spec = importlib.util.spec_from_file_location("make_sample_submissions", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_the_sample_submissions_are_what_the_script_writes():
    """Every chapter's part of the sample submissions is what tools/make_sample_submissions.py
    writes from the lab as it is now (no grading here: the files only), and each chapter with
    exercises has its expected grades, a row per student and exercise."""
    tool = _sample_tool()
    every = set()
    for chapter in chapters.names():
        want, have = tool.sample_files(chapter), tool.committed_files(chapter)
        stale = sorted(str(p) for p in set(want) | set(have) if want.get(p) != have.get(p))
        assert not stale, f"run `python tools/make_sample_submissions.py {chapter}`: {stale} differ"
        every |= set(have)
        ids = [e.id for e in EXERCISES if e.chapter == chapter]
        expected = FIXTURES / "expected_grades" / f"{chapter}.csv"
        assert expected.is_file() == bool(ids), expected
        if ids:
            rows = pd.read_csv(expected)
            assert sorted(zip(rows["student"], rows["exercise"])) == sorted(
                (student, i) for student in tool.STUDENTS for i in ids), expected
    assert every == {p.relative_to(tool.SUBMISSIONS) for p in tool.SUBMISSIONS.rglob("*") if p.is_file()}
    assert {p.stem for p in (FIXTURES / "expected_grades").iterdir()} == {e.chapter for e in EXERCISES}


def test_grade_says_what_it_expected(tmp_path):
    result = subprocess.run([sys.executable, "-m", "gpulab", "grade", str(tmp_path), "--out",
                             str(tmp_path / "g.csv")], capture_output=True, text=True)
    assert result.returncode == 2
    assert "has no student folders; expected one folder per student" in result.stderr
    assert "Traceback" not in result.stderr
    for options, words in (({"wall_factor": 0.5}, "the wall factor must be a number of at least 1"),
                           ({"launch_limit": 90.0}, "at most the time limit (60), got 90"),
                           ({"launch_limit": 0}, "the launch limit must be a positive number")):
        with pytest.raises(grading.GpulabError, match=re.escape(words)):
            grading.grade(tmp_path, tmp_path / "g.csv", **options)


def test_failures_are_named_from_the_cpu_backends_own_messages(tmp_path):
    import gpulab
    from gpulab.errors import KernelCompileError, KernelLaunchError
    source = tmp_path / "divergent_barrier.cu"
    source.write_text('extern "C" __global__ void k(float* y) {\n'
                      '    if (threadIdx.x < 16) __syncthreads();\n    y[threadIdx.x] = 1.0f;\n}\n')
    with pytest.raises(KernelLaunchError) as barrier:
        gpulab.load_module(source, "cpu").get_function("k")(1, 32, (np.zeros(32, np.float32),))
    assert grading.classify(barrier.value) == "barrier or race"
    overrun_source = tmp_path / "overrun.cu"
    overrun_source.write_text('extern "C" __global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n')
    with pytest.raises(KernelLaunchError) as overrun:
        gpulab.load_module(overrun_source, "cpu").get_function("k")(1, 32, (np.zeros(8, np.float32),))
    assert grading.classify(overrun.value) == "out of bounds"
    source.write_text('extern "C" __global__ void k(float* y) { y[0] = 1.0f }\n')
    with pytest.raises(KernelCompileError) as compile_error:
        gpulab.load_module(source, "cpu")
    assert grading.classify(compile_error.value) == "compile error"
    assert grading.classify(ZeroDivisionError("x")) == "crashed"


def test_inputs_are_checked_and_messages_name_only_the_students_files(tmp_path):
    """A link, a binary or oversized file is refused before anything runs; a compile error in a
    file the student did not write (a system header, here) names neither that file nor its source."""
    exercise = exercises.get("measuring.1")
    answer = handed_in(exercise)
    # The macro reaches the system header included after it (the lab's runtime is compiled apart).
    broken = submission(exercise, "#define struct union\n#include <complex>\n" + answer, tmp_path / "macro")
    staged = grading.stage(broken, tmp_path / "staged-macro", [exercise])
    row = grading._summarise(exercise, grading.evaluate(exercise, staged))
    assert row["status"] == "compile error"
    assert "a file you did not write" in row["message"] and "/usr/include" not in row["message"]
    assert "extern int" not in row["message"]
    linked = tmp_path / "linked" / exercise.file
    linked.parent.mkdir(parents=True)
    linked.symlink_to(paths.REPO / exercise.file)
    big = submission(exercise, answer + "//" + "x" * grading.MAX_FILE_BYTES, tmp_path / "big")
    binary = submission(exercise, answer.replace("//", "/\0/", 1), tmp_path / "binary")
    for folder, words in ((tmp_path / "linked", "symbolic link"), (big, "1 MB"), (binary, "binary")):
        staged = grading.stage(folder, tmp_path / f"staged-{folder.name}", [exercise])
        row = grading._summarise(exercise, grading.evaluate(exercise, staged))
        assert (row["status"], row["points"]) == ("invalid file", 0) and words in row["message"]
        assert not staged.digests and not (staged.root / exercise.file).exists()


def test_the_sandboxs_lab_holds_no_hidden_check_declaration_or_solution(tmp_path):
    """What a submission's code can read of the lab (sandbox.student_tree, bound at /lab): the
    package and the common headers, without any chapter's hidden checks (they live in book/,
    which is not there) or solution; a hidden-checks file put in the package is refused."""
    lab = sandbox.student_tree(tmp_path / "lab")
    assert sorted(p.name for p in lab.iterdir()) == ["gpulab", "kernels"]
    texts = {p: p.read_text(errors="replace") for p in lab.rglob("*") if p.is_file()}
    hidden = [p for p in texts if p.name == exercises.HIDDEN_CHECKS or "HIDDEN = {" in texts[p]]
    assert not hidden
    assert find_solutions(lab) == []
    assert sorted(paths.REPO.glob(f"book/*/{exercises.HIDDEN_CHECKS}"))       # they are in the lab
    fake = tmp_path / "repo"
    shutil.copytree(paths.REPO / "kernels" / "common", fake / "kernels" / "common")
    (fake / "gpulab" / "workloads" / "x").mkdir(parents=True)
    (fake / "gpulab" / "workloads" / "x" / exercises.HIDDEN_CHECKS).write_text("HIDDEN = {}\n")
    with pytest.raises(grading.GpulabError, match="hidden checks would be shown"):
        sandbox.student_tree(tmp_path / "lab2", fake)


def test_the_font_list_shown_to_children_names_only_files_they_see(tmp_path, monkeypatch):
    """The grader's font list (sandbox.prebuilt_font_list, shown to every child) lists the
    system's font files by path; one that names a file outside what a child sees is not shown
    (matplotlib would find the file missing and rebuild the list over the read-only copy)."""
    import json
    import os
    fonts = sandbox.prebuilt_font_list(tmp_path / "seen")
    assert fonts is not None
    listed = json.loads(fonts.read_text())
    absolute = [f["fname"] for key in ("ttflist", "afmlist") for f in listed[key] if os.path.isabs(f["fname"])]
    assert all(sandbox._seen_by_children(f) for f in absolute)
    monkeypatch.setattr(sandbox, "_python_prefixes", lambda: [])
    monkeypatch.setattr(sandbox, "_SYSTEM_TOPS", ())
    assert (sandbox.prebuilt_font_list(tmp_path / "unseen") is None) == bool(absolute)


def test_the_graders_checking_modes_reach_the_students_kernel_only(tmp_path):
    """The race checker (public checks) and the shuffled schedule (hidden ones) are turned on in the
    child, for the submission's kernels; the lab's own kernels run beside them in the grader
    without (checked by the lab's tests: checking them again tripled training.1's time)."""
    from gpulab import cpu
    racy = tmp_path / "racy.cu"
    racy.write_text((WRONG / "basics.3" / "not_atomic.cu").read_text())
    values = np.zeros(64, np.int32)                  # every thread adds to bin 0
    args = lambda counts: (np.int32(64), np.int32(1), values, counts)    # noqa: E731
    child = sandbox.InProcess(paths.REPO, tmp_path)
    checked = sandbox.RemoteModule(child, "racy.cu", racy.read_text(), (), {"races": True})
    with pytest.raises(KernelLaunchError, match="race"):
        checked.get_function("histogram")((1,), (64,), args(np.zeros(1, np.uint32)))
    with cpu.checking(races=True):                  # asked by the case itself (basics.3's hidden one)
        with pytest.raises(KernelLaunchError, match="race"):
            sandbox.RemoteModule(child, "racy.cu", racy.read_text()).get_function("histogram")(
                (1,), (64,), args(np.zeros(1, np.uint32)))
    counts = np.zeros(1, np.uint32)
    load_module(racy, "cpu").get_function("histogram")((1,), (64,), args(counts))   # the grader's own
    assert counts[0] >= 1

"""The grader against dishonest submissions: one or more per class of attack (the threat
model in book/instructors.md), graded beside honest ones with ``python -m gpulab grade``.

Every attack scores 0 on the exercise it attacks; no grade or feedback file shows hidden-check
text, solution text or an instructor path; the honest students' grades are the same with and
without the attackers in the folder; no file of any submission changes; the run ends within
its limits. Instructors only (the student export leaves this file out)."""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from gpulab import exercises, grading, paths, sandbox
from test_grading import FIXTURES, WRONG, _hidden_inputs, handed_in, submission

WHY_NO_SANDBOX = sandbox.problem()
pytestmark = pytest.mark.skipif(WHY_NO_SANDBOX is not None, reason=f"no sandbox here: {WHY_NO_SANDBOX}")

ATTACKS = FIXTURES / "attacks"
KERNEL, CELL = exercises.get("measuring.1"), exercises.get("fcnet.2")
#: CPU seconds per student and exercise: the honest answers need about 1.5.
LIMIT = 10
#: A child that waits is stopped after WALL_FACTOR * LIMIT seconds on the clock: the "sleeps" attack
#: in 20 s instead of the default's 60; an honest child here waits for its answers at most a few
#: seconds, even on a machine busy with other work.
WALL_FACTOR = 2


#: Every chapter's hidden checks, and where a child would find them if the sandbox showed them:
#: the attacks try each (HIDDEN_PATHS).
HIDDEN_FILES = sorted(paths.REPO.glob(f"book/*/{exercises.HIDDEN_CHECKS}"))
HIDDEN_PATHS = [str(p) for p in HIDDEN_FILES] + [
    f"{where}/{p.relative_to(paths.REPO).as_posix()}" for p in HIDDEN_FILES
    for where in (sandbox.LAB, sandbox.SUBMISSION)] + [f"{sandbox.LAB}/gpulab/hidden_checks.py"]


def _attack(name: str, **values) -> str:
    text = (ATTACKS / name).read_text()
    quoted = ", ".join(f'"{p}"' for p in HIDDEN_PATHS)
    for key, value in {"REPO": str(paths.REPO), "HIDDEN_PATHS": quoted, **values}.items():
        text = text.replace(f"@{key}@", value)
    return text


def _honest(root: Path) -> list[str]:
    """ada: the lab's answers; ben: the sample submission's; dora: a known-wrong kernel."""
    for exercise in (KERNEL, CELL):
        submission(exercise, handed_in(exercise), root / "ada")
        (root / "ben" / exercise.file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / "submissions" / "ben" / exercise.file, root / "ben" / exercise.file)
    submission(KERNEL, (WRONG / "measuring.1" / "start_ignores_block.cu").read_text(), root / "dora")
    return ["ada", "ben", "dora"]


def _attackers(root: Path, out: Path) -> dict[str, str]:
    """Write the attackers' folders; the exercise each attacks."""
    kernel = lambda name, text: submission(KERNEL, text, root / name)              # noqa: E731
    answer = handed_in(KERNEL)
    # 1. The preprocessor reaches for the instructor's files (by the lab's name, and by path).
    kernel("inc_relative", '#include "measuring/03_saxpy_grid_stride.cu"\n')
    kernel("inc_absolute", f'#include "{paths.REPO}/kernels/measuring/03_saxpy_grid_stride.cu"\n')
    # 2. A global constructor runs at load: reads hidden checks and solution, forges answers.
    kernel("constructor", _attack("constructor_reads_hidden_checks.cu", OUT=str(out)))
    # 3. A notebook cell replaces the comparison and calls the solution.
    submission(CELL, _attack("cell_replaces_checker.py"), root / "cell")
    # 4. A setsid child outlives the worker and rewrites grades and a classmate's kernel.
    kernel("survivor", _attack("setsid_survivor.cu", OUT=str(out), CLASSMATE=str(root / "ada" / KERNEL.file)))
    # 5. Links out of the submission: to the solution, the lab's notebook, /etc/passwd, a header.
    for name, target, exercise in (("link_solution", paths.REPO / KERNEL.file, KERNEL),
                                   ("link_notebook", paths.REPO / CELL.file, CELL),
                                   ("link_passwd", Path("/etc/passwd"), KERNEL)):
        (root / name / exercise.file).parent.mkdir(parents=True)
        (root / name / exercise.file).symlink_to(target)
    kernel("link_header", '#include "leak.h"\n' + answer)
    (root / "link_header" / "kernels" / "measuring" / "leak.h").symlink_to("/etc/passwd")
    shutil.copytree(paths.REPO / "kernels" / "measuring", root / "link_folder" / "kernels" / "measuring",
                    symlinks=True)
    (root / "link_folder" / "kernels" / "measuring" / "03_saxpy_grid_stride.cu").unlink()
    (root / "link_folder" / "kernels" / "measuring" / "03_saxpy_grid_stride.cu").symlink_to(
        paths.REPO / KERNEL.file)
    # 6. No limits: fork bomb and 8 GiB, endless computing, endless waiting, huge and binary files.
    kernel("fork_memory", _attack("fork_and_memory.cu"))
    kernel("spins", _attack("spins.cu"))
    kernel("sleeps", _attack("sleeps.cu"))
    kernel("huge", answer + "//" + "x" * (grading.MAX_FILE_BYTES + 10) + "\n")
    kernel("binary", answer.replace("Exercise", "Exerc\0ise", 1))
    kernel("latin1", "")
    (root / "latin1" / KERNEL.file).write_bytes(answer.encode() + "// caf\xe9\n".encode("latin-1"))
    kernel("_skipped", answer)
    return {"inc_relative": KERNEL.id, "inc_absolute": KERNEL.id, "constructor": KERNEL.id,
            "cell": CELL.id, "survivor": KERNEL.id, "link_solution": KERNEL.id, "link_notebook": CELL.id,
            "link_passwd": KERNEL.id, "link_header": KERNEL.id, "link_folder": KERNEL.id,
            "fork_memory": KERNEL.id, "spins": KERNEL.id, "sleeps": KERNEL.id, "huge": KERNEL.id,
            "binary": KERNEL.id, "latin1": KERNEL.id}


def _fingerprint(root: Path) -> dict[str, str]:
    """Every entry under ``root``: a file's digest, a link's target."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                seen[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                seen[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def _grade(submissions: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpulab", "grade", str(submissions), "--out", str(out),
                           "--exercise", KERNEL.id, "--exercise", CELL.id, "--time-limit", str(LIMIT),
                           "--wall-factor", str(WALL_FACTOR), "--jobs", "2"],
                          capture_output=True, text=True, timeout=1800)


class Run:
    def __init__(self, root: Path, with_attackers: bool):
        self.root = root
        self.submissions, self.out = root / "submissions", root / "grades.csv"
        self.honest = _honest(self.submissions)
        self.attacks = _attackers(self.submissions, self.out) if with_attackers else {}
        before = _fingerprint(self.submissions)
        started = time.monotonic()
        self.result = _grade(self.submissions, self.out)
        self.wall = time.monotonic() - started
        assert self.result.returncode == 0, self.result.stdout + self.result.stderr
        self.csv = self.out.read_bytes()
        time.sleep(3)          # anything still alive would now rewrite the grades or a classmate's file
        self.after_wait = self.out.read_bytes()
        self.changed = {k for k, v in _fingerprint(self.submissions).items() if before.get(k) != v}
        self.grades = pd.read_csv(self.out).set_index(["student", "exercise"])
        self.texts = {p.name: p.read_text() for p in (root / "grades-feedback").glob("*.md")}
        self.texts["grades.csv"] = self.out.read_text()
        self.texts["grades-files.csv"] = (root / "grades-files.csv").read_text()
        self.texts["stdout"] = self.result.stdout


@pytest.fixture(scope="module")
def honest_only(tmp_path_factory) -> Run:
    return Run(tmp_path_factory.mktemp("honest"), with_attackers=False)


@pytest.fixture(scope="module")
def attacked(tmp_path_factory) -> Run:
    return Run(tmp_path_factory.mktemp("attacked"), with_attackers=True)


@pytest.mark.slow        # grades the attackers and the honest students (the module's fixtures)
def test_every_attack_scores_zero_on_what_it_attacks(attacked):
    for student, exercise in attacked.attacks.items():
        row = attacked.grades.loc[(student, exercise)]
        assert row["points"] == 0, f"{student} got {row['points']} on {exercise}: {row['message']}"
    rows = attacked.grades
    assert rows.loc[("spins", KERNEL.id), "status"] == "time limit"
    assert re.search(rf"limit is {LIMIT} s of CPU", rows.loc[("spins", KERNEL.id), "message"])
    assert rows.loc[("sleeps", KERNEL.id), "status"] == "time limit"
    assert "waiting" in rows.loc[("sleeps", KERNEL.id), "message"]
    for name in ("huge", "binary", "latin1", "link_solution", "link_passwd", "link_notebook", "link_folder"):
        assert rows.loc[(name, KERNEL.id if name != "link_notebook" else CELL.id), "status"] == "invalid file"
    assert "symbolic link" in rows.loc[("link_solution", KERNEL.id), "message"]
    assert "1 MB" in rows.loc[("huge", KERNEL.id), "message"]
    assert "binary" in rows.loc[("binary", KERNEL.id), "message"]
    assert "UTF-8" in rows.loc[("latin1", KERNEL.id), "message"]
    assert rows.loc[("inc_relative", KERNEL.id), "status"] == "compile error"
    assert rows.loc[("link_header", KERNEL.id), "status"] == "compile error"
    assert "_skipped" not in {s for s, _ in rows.index}
    assert "not graded: _skipped" in attacked.result.stdout


@pytest.mark.slow        # grades the attackers and the honest students (the module's fixtures)
def test_no_grade_or_feedback_file_shows_hidden_checks_solutions_or_instructor_paths(attacked):
    from gpulab.workloads import measuring
    # Numbers of the hidden cases that the public check's own table shows too (its sizes) are not secret.
    hidden_numbers = _hidden_inputs() - set(re.findall(r"\d{3,}", repr(measuring.CHECK_SIZES)))
    assert {p.parent.name for p in HIDDEN_FILES} == {e.chapter for e in exercises.EXERCISES}
    hidden_text = [line.strip() for path in HIDDEN_FILES for line in path.read_text().splitlines()
                   if len(line.strip()) > 25]
    solution_lines = [line.strip() for exercise in (KERNEL, CELL)
                      for line in re.findall(r"BEGIN SOLUTION[^\n]*\n(.*?)END SOLUTION",
                                             (paths.REPO / exercise.file).read_text(), re.S)[0].splitlines()
                      if len(line.strip().strip('",\\n')) > 20]
    assert hidden_text and solution_lines
    for name, text in attacked.texts.items():
        assert str(paths.REPO) not in text, name
        assert "gpulab-grade-" not in text and "/etc/passwd" not in text and "root:x:0:0" not in text, name
        assert "HIDDEN" not in text and "hidden_checks" not in text, name
        for line in hidden_text + solution_lines:
            assert line.strip('",\\n') not in text, f"{name} shows {line!r}"
        leaks = _hidden_numbers_shown(text, hidden_numbers, own_paths=attacked.root.parent)
        assert not leaks, f"{name} shows hidden inputs:\n" + "\n".join(leaks)


def _hidden_numbers_shown(text: str, numbers: set[str], own_paths: Path) -> list[str]:
    """Each hidden number that ``text`` shows, with the text around it. Paths under
    ``own_paths`` (pytest's temporary folder of this run, which the grader prints as the
    grades' path) are left out first: their digits are the folder's own number (pytest-450), no
    leak. So is a run of digits inside a sha256 digest (grades-files.csv holds each file's)."""
    own = "|".join(re.escape(str(p)) for p in {own_paths, own_paths.resolve()})
    text = re.sub(rf"(?:{own})(?![^/\s'\",])[^\s'\",]*", "<tmp>", text)
    text = re.sub(r"\b[0-9a-f]{64}\b", "<sha256>", text)
    return [f"{n}: ...{text[max(m.start() - 60, 0):m.end() + 60]!r}..." for n in sorted(numbers)
            for m in re.finditer(rf"(?<![\d.]){n}(?!\d)", text)]


def test_the_leak_scan_ignores_its_own_folder_and_finds_a_hidden_number():
    # ci4: the grader printed "grades: /tmp/pytest-of-root/pytest-450/attacked0/grades.csv", and
    # 450 is a hidden size. The folder's number is no leak; the same number printed by a
    # submission, beside that path, in a path of its own, or in a message, is.
    numbers = _hidden_inputs()
    assert "450" in numbers
    base = Path("/tmp/pytest-of-root/pytest-450")
    grades = f"wrote {base}/attacked0/grades.csv and {base}/attacked0/grades-feedback/ada.md\n"
    digest = "ab" * 20 + "450" + "c" * 21
    assert _hidden_numbers_shown(grades + f"sha256 {digest}\n", numbers, base) == []
    for leak in ("ada measuring.1: failed: n = 450 gave 0.0\n", "/tmp/n450/out.txt\n", "size 450\n",
                 f"{base}-450/x\n"):
        shown = _hidden_numbers_shown(grades + leak, numbers, base)
        assert shown and shown[0].startswith("450: ") and leak.strip()[:8] in shown[0], (leak, shown)


@pytest.mark.slow        # grades the attackers and the honest students (the module's fixtures)
def test_honest_grades_are_the_same_with_and_without_attackers(honest_only, attacked):
    columns = ["points", "status", "passed_checks", "message"]
    alone = honest_only.grades.loc[honest_only.honest, columns]
    beside = attacked.grades.loc[attacked.honest, columns]
    pd.testing.assert_frame_equal(alone, beside)
    assert alone.loc[("ada", KERNEL.id), "points"] == KERNEL.points
    assert alone.loc[("ada", CELL.id), "points"] == CELL.points
    assert alone.loc[("dora", KERNEL.id), "points"] == 0


@pytest.mark.slow        # grades the attackers and the honest students (the module's fixtures)
def test_no_submission_file_changes_and_nothing_outlives_the_grader(honest_only, attacked):
    for run in (honest_only, attacked):
        assert not run.changed, run.changed
        assert run.after_wait == run.csv
        digest = hashlib.sha256(run.csv).hexdigest()
        assert f"sha256 {digest}" in run.result.stdout
    files = pd.read_csv(attacked.out.with_name("grades-files.csv"))
    ada = files[(files["student"] == "ada") & (files["file"] == KERNEL.file)]
    assert ada["sha256"].tolist() == [hashlib.sha256(handed_in(KERNEL).encode()).hexdigest()]


@pytest.mark.slow        # grades the attackers and the honest students (the module's fixtures)
def test_the_run_ends_within_its_limits(attacked):
    """What the grader guarantees, whatever the machine's load: every item ends, none computes
    past its CPU limit, the children that never answer are stopped with 0 points within their
    wall budget, and the run within (students x exercises x limit) and a margin. Not which limit
    stops "spins": on a quiet machine its CPU limit, on a busy one (load 4-6 on two cores) the
    clock's backstop, WALL_FACTOR x LIMIT, first."""
    # Every item ended and says what it used: no child computed past its CPU limit (the grader
    # checks four times a second; RLIMIT_CPU, at the limit plus 2 s, stops each process anyway).
    ended = {(m[1], m[2]): (float(m[3]), float(m[4])) for m in re.finditer(
        r"^(\S+) (\S+): .*\(\d+/\d+, ([\d.]+) s CPU, ([\d.]+) s\)$", attacked.result.stdout, re.M)}
    used = {item: cpu for item, (cpu, _) in ended.items()}
    assert set(used) == set(attacked.grades.index), attacked.result.stdout
    assert max(used.values()) <= LIMIT + 2, used
    for name in ("spins", "sleeps"):
        row = attacked.grades.loc[(name, KERNEL.id)]
        assert (row["status"], row["points"]) == ("time limit", 0), row["message"]
        cpu, wall = ended[(name, KERNEL.id)]
        # Its wall budget: WALL_FACTOR x LIMIT of waiting; sooner, IDLE_GRACE past WALL_FACTOR x
        # what it used (the grader's own work between requests, and the start, come on top).
        budget = min(WALL_FACTOR * LIMIT, sandbox.IDLE_GRACE + WALL_FACTOR * cpu)
        assert wall <= budget + 15, (name, cpu, wall, row["message"])
    assert "of waiting for it (wall-clock time)" in attacked.grades.loc[("sleeps", KERNEL.id), "message"]
    assert attacked.wall <= len(attacked.grades) * LIMIT + 120, attacked.wall
    total = re.search(r"^CPU time of the children that ran the submissions' code: ([\d.]+) s",
                      attacked.result.stdout, re.M)
    assert total and float(total[1]) == pytest.approx(sum(used.values()), abs=0.1)


def test_a_child_sees_the_graders_prebuilt_files_read_only(tmp_path):
    """What the grader shows in a child's /tmp (the CPU backend's runtime, its precompiled prelude
    and matplotlib's font list, made by the grader: sandbox.prebuilt_runtime, prebuilt_font_list) the child reads
    and uses, and can neither change, replace nor remove, while it still writes its own files
    beside them: the next child, and the grader, load them as the grader made them."""
    lab = sandbox.student_tree(tmp_path / "lab")
    (tmp_path / "submission").mkdir()
    runtime = tmp_path / "runtime-0123.o"
    runtime.write_bytes(b"the grader's runtime")
    fonts = sandbox.prebuilt_font_list(tmp_path / "fonts")
    assert fonts is not None and fonts.name.startswith("fontlist-")
    prelude = tmp_path / "prelude-0123" / "gpulab_cuda_cpu.h.gch"      # in a folder of the cache
    prelude.parent.mkdir()
    prelude.write_bytes(b"the grader's precompiled prelude")
    shown = {f"{sandbox.CHILD_CACHE}/cpu/{runtime.name}": runtime, f"{sandbox.CHILD_MPLCONFIG}/{fonts.name}": fonts,
             f"{sandbox.CHILD_CACHE}/cpu/prelude-0123/{prelude.name}": prelude}
    made = {place: path.read_bytes() for place, path in shown.items()}
    for path in shown.values():
        # Writable by all: the read-only mount alone must keep them (run by an ordinary user, the
        # child has the user id of the files' owner).
        path.chmod(0o666)
    probe = f"""
import os
def probe(places):
    tries, seen = {{}}, {{}}
    for path in places:
        attempts = {{"write": lambda: open(path, "r+b").write(b"poison"), "append": lambda: open(path, "ab"),
                    "chmod": lambda: os.chmod(path, 0o777), "remove": lambda: os.remove(path),
                    "rename": lambda: os.rename(path, path + ".old"),
                    "replace": lambda: (open(path + ".new", "wb").close(), os.replace(path + ".new", path))}}
        for name, attempt in attempts.items():
            try:
                attempt()
                tries[path + " " + name] = "done"
            except OSError as error:
                tries[path + " " + name] = type(error).__name__
        if os.path.exists(path + ".new"):
            os.remove(path + ".new")
        with open(path, "rb") as f:
            seen[path] = f.read().decode()
    with open("{sandbox.CHILD_CACHE}/cpu/own.so", "wb") as f:
        f.write(b"a child's own build")
    import matplotlib
    return {{"seen": seen, "tries": tries, "matplotlib": matplotlib.get_cachedir(),
             "fonts": sorted(os.listdir("{sandbox.CHILD_MPLCONFIG}"))}}
"""
    child = sandbox.Child(lab, tmp_path / "submission", LIMIT, prebuilt=shown)
    try:
        # The cell runs in the chapter's namespace, as a notebook's: pyplot is imported first.
        header, _ = child.request({"op": "define", "exercise": CELL.id, "chapter": CELL.chapter,
                                   "function": "probe", "source": probe, "extra": {}})
        assert header.get("defined"), header
        header, _ = child.request({"op": "call", "inputs": {"places": sorted(shown)}})
    finally:
        child.kill()
    assert "error" not in header, header
    got = header["value"]
    assert got["seen"] == {place: data.decode() for place, data in made.items()}
    assert "done" not in got["tries"].values(), got["tries"]
    assert {place: path.read_bytes() for place, path in shown.items()} == made
    # pyplot found its font list there and wrote none of its own: it used the grader's.
    assert got["matplotlib"] == sandbox.CHILD_MPLCONFIG and got["fonts"] == [fonts.name]
    assert child.used > 0


def test_grade_refuses_without_a_sandbox_and_says_what_to_install(tmp_path, monkeypatch):
    (tmp_path / "subs" / "ada").mkdir(parents=True)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(grading.GpulabError) as refused:
        grading.grade(tmp_path / "subs", tmp_path / "g.csv", only=[KERNEL.id])
    assert "apt-get install bubblewrap" in str(refused.value)
    assert "--unsafe-no-sandbox" in str(refused.value)


def test_two_graders_children_never_share_a_uid():
    """A process limit counts a uid's processes machine-wide: two graders at once (two test
    workers) whose slots both ran as FIRST_UID + slot shared it, and one's fork bomb left the
    other's g++ unable to start (a "compile error" in CI). Each child now leases its uid."""
    if os.getuid() != 0:
        pytest.skip("children change uid only when the grader runs as root")
    first, first_lock = sandbox._lease_uid(sandbox.FIRST_UID)
    second, second_lock = sandbox._lease_uid(first)          # the same wish while the first holds it
    try:
        assert second != first and sandbox.FIRST_UID <= second < sandbox.FIRST_UID + sandbox.UID_COUNT
    finally:
        os.close(second_lock)
        os.close(first_lock)
    again, again_lock = sandbox._lease_uid(first)            # released: free again
    os.close(again_lock)
    assert again == first

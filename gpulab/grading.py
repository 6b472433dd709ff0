"""Grade a folder of submissions: ``python -m gpulab grade SUBMISSIONS/ --out grades.csv``.

Each sub-folder of SUBMISSIONS is one student's copy of the student version (only the
files the exercises name are read: the kernel files, the headers under ``kernels/`` and the
notebooks). Before anything runs, every file read is checked (a regular file inside the
student's folder, not a link; at most :data:`MAX_FILE_BYTES`; text) and copied out with
its SHA-256 recorded; folders that are not graded are listed.

This process is trusted: it makes every input and reference, compares, and computes the
points. A student's code -- the compiled kernel, the notebook cell -- runs only in an
untrusted child (:mod:`gpulab.sandbox`), one per student and exercise, sandboxed with
bubblewrap, which gets one case's inputs at a time and answers with outputs only. The
child never sees a hidden case it is not run on, a reference, a solution or this process's
state. A submission that does not compile, crashes, reads or writes out of bounds, fails a
barrier or uses up its CPU time gets zero for that exercise with the reason, and the others
are graded as usual. The time limit counts CPU seconds of the child's whole process tree,
so a busy machine does not fail correct work; a child that waits instead of computing is
stopped by a wall-clock backstop, and the whole run has a deadline. The grader reports the CPU
time its children used (their processes end with their sandbox: no parent's CPU time counts
them).

An exercise earns all its points when every check passes, else none. The grades are one
row per student and exercise; each student also gets a feedback file with the public
checks' details and, for hidden checks, only their number and the kind of failure. The
threat model is in book/instructors.md.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import os
import queue
import re
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from . import exercises as ex_mod
from . import kernels as kernels_mod
from . import paths, sandbox
from .errors import GpulabError, KernelCompileError, KernelLaunchError
from .ladder import failures

#: Row columns of grades.csv.
COLUMNS = ["student", "exercise", "chapter", "title", "points", "max_points", "passed_checks",
           "total_checks", "status", "message"]
#: The statuses, worst first: an exercise's status is the worst of its checks'.
STATUSES = ("invalid file", "compile error", "time limit", "crashed", "out of bounds", "barrier or race",
            "missing", "not solved", "wrong", "passed")
#: CPU seconds a student's code may use per exercise (its whole process tree).
DEFAULT_TIME_LIMIT = 60.0
#: The largest source file the grader reads (notebooks: NOTEBOOK_BYTES).
MAX_FILE_BYTES = 1 << 20
NOTEBOOK_BYTES = 16 << 20
#: Files under a submission's kernels/ that a kernel may include.
HEADER_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".inc")
_MESSAGE_CHARS = 1500


def classify(error: BaseException) -> str:
    """The kind of a failure, in the words a grade uses."""
    text = str(error).lower()
    if isinstance(error, KernelCompileError):
        return "compile error"
    if isinstance(error, sandbox.Stopped):
        return "time limit"
    if isinstance(error, KernelLaunchError):
        if "time limit" in text:
            return "time limit"
        if "out-of-bounds" in text or "out of bounds" in text or "invalid memory" in text:
            return "out of bounds"
        if "barrier" in text or "data race" in text or "__syncthreads" in text:
            return "barrier or race"
    return "crashed"


_HIDDEN_WORDS = {"wrong": "wrong result", "crashed": "crashed", "out of bounds": "out-of-bounds access",
                 "time limit": "time limit exceeded",
                 "barrier or race": "barrier or race failure", "not solved": "not solved"}


# ----------------------------------------------------------------- reading a submission
class Staged:
    """A student's files that passed the checks, copied out (``root``), with their digests;
    ``problems`` says why each refused file was refused."""

    def __init__(self, student: Path, root: Path):
        self.student, self.root = Path(student), Path(root)
        self.digests: dict[str, tuple[int, str]] = {}
        self.problems: dict[str, str] = {}

    def read(self, relative: str, most: int = MAX_FILE_BYTES) -> None:
        if relative in self.digests or relative in self.problems:
            return
        why = _refusal(self.student, relative, most)
        if why is None:
            data = (self.student / relative).read_bytes()[:most + 1]
            if len(data) > most:
                why = f"{relative} grew past {most // 1024} KB while it was read"
            elif b"\0" in data:
                why = f"{relative} is a binary file, not text: hand in the source file itself"
            else:
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError as error:
                    why = (f"{relative} is not UTF-8 text (byte {error.start}): hand in the source file "
                           "itself, saved as UTF-8")
        if why is not None:
            self.problems[relative] = why
            return
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        self.digests[relative] = (len(data), hashlib.sha256(data).hexdigest())


def _refusal(student: Path, relative: str, most: int) -> str | None:
    """Why ``student/relative`` may not be read (None: it may): a link, not a regular file,
    outside the folder, too large."""
    here = student
    parts = Path(relative).parts
    for i, part in enumerate(parts):
        here = here / part
        try:
            info = here.lstat()
        except FileNotFoundError:
            return "missing"
        if os.path.islink(here):
            return (f"{'/'.join(parts[:i + 1])} is a symbolic link; the grader reads only regular files "
                    "inside your folder (copy the file itself there)")
    import stat
    if not stat.S_ISREG(info.st_mode):
        return f"{relative} is not a regular file"
    if info.st_size > most:
        return (f"{relative} is {info.st_size / 1e6:.1f} MB; the grader reads files of at most "
                f"{most / 1e6:.0f} MB")
    return None


def stage(student: Path, root: Path, chosen) -> Staged:
    """Check and copy out the files of ``student`` the exercises read."""
    staged = Staged(student, root)
    for exercise in chosen:
        staged.read(exercise.file, MAX_FILE_BYTES if exercise.kind == "kernel" else NOTEBOOK_BYTES)
    kernels = Path(student) / "kernels"
    if kernels.is_dir() and not kernels.is_symlink():
        for folder, dirs, files in os.walk(kernels):       # os.walk does not follow links to folders
            for name in sorted(files):
                if name.endswith(HEADER_SUFFIXES):
                    relative = (Path(folder) / name).relative_to(student).as_posix()
                    staged.read(relative)
    return staged


# ----------------------------------------------------------------- one exercise of one student
class _Recorder:
    """The checks so far, and the one running, if the child is stopped in it."""

    def __init__(self, scrub):
        self.checks, self.current, self.final, self.scrub = [], None, None, scrub

    def start(self, name: str, hidden: bool) -> None:
        self.current = {"name": name, "hidden": hidden}

    def done(self, status: str, message: str = "") -> None:
        self.checks.append({**self.current, "status": status, "message": self.scrub(message)[:_MESSAGE_CHARS]})
        self.current = None

    def finish(self, status: str | None = None, message: str = "") -> None:
        self.final = {"status": status, "message": self.scrub(message)[:_MESSAGE_CHARS]}


def _cases(exercise):
    public = [(case, False, f"public check ({ex_mod.describe_case(case)})") for case in exercise.public]
    hidden = [(case, True, f"hidden check {i}") for i, case in enumerate(ex_mod.hidden_cases(exercise), 1)]
    return public + hidden


_route = threading.local()
_compile_original = kernels_mod._compile_cached


def _compile_routed(path: str, source: str, backend: str, options: tuple[str, ...]):
    """Kernel files of the submission being graded by this thread compile in its child;
    the lab's own files (a chapter's other steps) compile here, as always."""
    route = getattr(_route, "value", None)
    if route is not None:
        root, child, checking = route
        try:
            relative = Path(path).resolve().relative_to(root)
        except ValueError:
            relative = None
        if relative is not None:
            return sandbox.RemoteModule(child, relative.as_posix(), source, options, checking)
    return _compile_original(path, source, backend, options)


@contextlib.contextmanager
def _routed(root: Path, child, checking: dict | None = None):
    """Compile the submission's files under ``root`` in ``child``, their launches with the CPU
    backend's ``checking`` options on (the lab's own kernels, compiled here, run without them)."""
    kernels_mod._compile_cached = _compile_routed
    _route.value = (Path(root).resolve(), child, checking)
    try:
        yield
    finally:
        _route.value = None


def evaluate(exercise, staged: Staged, lab: Path | None = None, make_child=None, races: bool = True,
             launch_limit: float | None = None) -> dict:
    """Run one exercise's checks on one staged submission: the checks' statuses (``checks``,
    the one ``current`` when stopped, the ``final`` verdict). ``make_child()`` gives the child
    that runs the student's code (default: in this process, for tests of the checks only).
    ``races=False`` runs the public checks of a kernel exercise without the race checker
    (the grader always checks; the tests of known-wrong answers whose fault is not a race
    skip it, as it is the slowest part of a check and has nothing to find there).
    ``launch_limit``: CPU seconds one launch of the student's kernel may compute (None: the
    CPU backend's own limit, :data:`gpulab.cpu.DEFAULT_TIME_LIMIT_S`)."""
    lab = Path(lab) if lab else paths.REPO
    rec = _Recorder(_scrubber(staged, lab))
    if exercise.file in staged.problems:
        why = staged.problems[exercise.file]
        if why == "missing":
            rec.finish("missing", f"{exercise.file} is not in the submission")
        else:
            rec.finish("invalid file", why)
        return _outcome(rec)
    child = (make_child or (lambda: sandbox.InProcess(lab, staged.root)))()
    try:
        if exercise.kind == "kernel":
            _evaluate_kernel(exercise, staged.root / exercise.file, rec, child, races, tuple(staged.digests),
                             launch_limit)
        else:
            _evaluate_function(exercise, staged.root / exercise.file, rec, child)
    except (sandbox.Stopped, sandbox.ChildDied) as error:
        _stopped(rec, error, exercise)
    finally:
        child.kill()
        rec.cpu_seconds = getattr(child, "used", 0.0)
    return _outcome(rec)


def _outcome(rec: _Recorder) -> dict:
    return {"checks": rec.checks, "current": rec.current, "final": rec.final,
            "cpu_seconds": getattr(rec, "cpu_seconds", 0.0)}


def _stopped(rec: _Recorder, error: Exception, exercise) -> None:
    if isinstance(error, sandbox.Stopped):
        status, why = "time limit", str(error)
    else:
        status, why = "crashed", str(error)
    total, passed = len(_cases(exercise)), sum(c["status"] == "passed" for c in rec.checks)
    where = rec.current["name"] if rec.current else "setting up"
    progress = f"{why} in {where}, after {passed} of {total} checks passed"
    if rec.current is not None:
        tail = ""
        if not rec.current["hidden"] and isinstance(error, sandbox.ChildDied) and error.stderr.strip():
            tail = "\n" + "\n".join(error.stderr.strip().splitlines()[-8:])
        rec.done(status, progress + tail)
    rec.finish(status, progress)


def _scrubber(staged: Staged, lab: Path):
    """Messages show the student's own files by their names in the submission, and no path
    of this machine's: not the instructor's, not the copies', not the sandbox's."""
    pairs = [(str(staged.root.resolve()) + os.sep, ""), (str(staged.root) + os.sep, ""),
             (sandbox.SUBMISSION + "/", ""), (str(Path(staged.student).resolve()) + os.sep, ""),
             (str(lab.resolve()), "<gpulab>"), (str(lab), "<gpulab>"), (sandbox.LAB + "/", "<gpulab>/"),
             (str(paths.REPO), "<lab>")]

    def scrub(text: str) -> str:
        for old, new in pairs:
            text = text.replace(old, new)
        return text
    return scrub


def _failure(rec: _Recorder, hidden: bool, error: BaseException, public_message: str) -> str:
    status = classify(error)
    rec.done(status, _HIDDEN_WORDS.get(status, status) if hidden else public_message)
    return status


def _compile_message(text: str, exercise, mine) -> str:
    """A compile error as the student sees it: in their own file, as the compiler said it; in a
    file they did not write (the lab's CPU runtime, a system header), without that file's name
    or source, saying what most likely happened."""
    first = text.splitlines()[0] if text else ""
    if any(first.startswith(name) for name in mine):
        return text
    said = re.search(r"error:\s*(.*)", first)
    return (f"{exercise.file} does not compile: the compiler stopped in a file you did not write (the "
            "lab's CPU runtime or a system header), most likely because a macro or declaration in your "
            "file changes what that file means" + (f"; the compiler said: {said.group(1)}" if said else ""))


def _evaluate_kernel(exercise, target: Path, rec: _Recorder, child, races: bool = True, mine=(),
                     launch_limit: float | None = None) -> None:
    from .kernels import get_backend
    be = get_backend("cpu")
    unsolved = ex_mod.is_unsolved(target.read_text(errors="replace"))
    root = target.parents[len(Path(exercise.file).parts) - 1]      # the staged submission
    for i, (case, hidden, name) in enumerate(_cases(exercise)):
        rec.start(name, hidden)
        # The public checks (small sizes) look for data races: two threads, one word, no
        # barrier between them (an instrumented build, one block at a time: too slow for
        # the larger hidden sizes). The hidden checks run the threads of a block in a
        # shuffled order, so a kernel that only works in one order (a missing barrier) fails.
        # Both only in the student's kernels: the lab's own kernels of the step (training's
        # SGD step runs seven of them beside the student's) are checked by the lab's tests,
        # and checking them here would cost the grader three times their run time.
        extra = {"schedule": "shuffle", "seed": 1000 + i} if hidden else {"races": True} if races else {}
        if launch_limit is not None:
            extra["time_limit_s"] = launch_limit
        with _routed(root, child, extra):
            try:
                with ex_mod.bounds_checking(be.name):
                    checks = ex_mod.run_kernel_case(exercise, target, case, be)
            except (sandbox.Stopped, sandbox.ChildDied):
                raise
            except KernelCompileError as error:
                rec.done("compile error", _compile_message(rec.scrub(str(error)), exercise, mine))
                rec.finish("compile error")
                return
            except Exception as error:          # noqa: BLE001 -- the student's kernel failed
                if unsolved and classify(error) == "barrier or race":
                    # The starter itself waits forever (hopper.3's empty producer: no copy ever lands).
                    rec.done("not solved", "exercise not solved yet: the kernel's threads wait for each other "
                             "forever" + ("" if hidden else f" ({error})"))
                    continue
                if _failure(rec, hidden, error, f"{type(error).__name__}: {error}") == "time limit":
                    break                       # the next cases would only use up the time too
                continue
            failed = checks[failures(checks)]
            if failed.empty:
                rec.done("passed")
            elif hidden:
                rec.done("not solved" if unsolved else "wrong", "wrong result")
            else:
                rec.done("not solved" if unsolved else "wrong",
                         f"{len(failed)} of {len(checks)} checks disagree with the float64 reference:\n"
                         + failed.to_string(index=False))
    rec.finish()


def _evaluate_function(exercise, notebook: Path, rec: _Recorder, child) -> None:
    solution = ex_mod.solution_function(exercise)
    if solution is None:
        raise GpulabError(f"no solution cell for {exercise.id} in {exercise.file}: grade from the "
                          "instructor's copy of the lab, not a student copy")
    try:
        source = ex_mod.notebook_cell(notebook, exercise.cell, exercise.function)
    except (OSError, ValueError) as error:
        rec.finish("missing", f"{exercise.file} cannot be read as a notebook: {error}")
        return
    if source is None:
        rec.finish("missing", f"{exercise.file} has no cell {exercise.cell} defining {exercise.function}")
        return
    header, _ = child.request({"op": "define", "exercise": exercise.id, "chapter": exercise.chapter,
                               "function": exercise.function, "source": source,
                               "extra": exercise.inputs(exercise.public[0])})
    if "error" in header:
        rec.finish("crashed", f"the cell defining {exercise.function} raised {_said(header)}")
        return
    if not header.get("defined"):
        rec.finish("not solved", f"exercise not solved yet: the cell does not define {exercise.signature}")
        return
    for case, hidden, name in _cases(exercise):
        rec.start(name, hidden)
        expected = ex_mod.plain(solution(**exercise.inputs(case)))
        header, _ = child.request({"op": "call", "inputs": exercise.inputs(case)})
        if "error" in header:
            rec.done("crashed", "crashed" if hidden else f"{exercise.function} raised {_said(header)}")
            continue
        got = header.get("value")
        if got is None:
            rec.done("not solved", "exercise not solved yet: the function returns None")
            continue
        wrong = ex_mod.differences(got, expected, exercise.tolerance, reveal=exercise.reveal)
        if not wrong:
            rec.done("passed")
        else:
            rec.done("wrong", "wrong result" if hidden else "\n".join(wrong))
    rec.finish()


def _said(header: dict) -> str:
    """An exception the child reported, in words, with the student's frames of its traceback."""
    text = f"{header.get('error', 'an error')}: {header.get('message', '')}"
    trace = str(header.get("traceback", "")).strip()
    return text + (f"\n{trace}" if trace else "")


def _summarise(exercise, data: dict, seconds: float = 0.0) -> dict:
    """A row of grades.csv (without the student) plus the list of checks."""
    checks = list(data["checks"])
    final = data["final"] or {"status": None, "message": ""}
    total = len(_cases(exercise))
    passed = sum(c["status"] == "passed" for c in checks)
    status = final.get("status")
    if status is None:
        status = min((c["status"] for c in checks), key=STATUSES.index, default="passed")
    message = final.get("message") or _first_problem(checks)
    return {"exercise": exercise.id, "chapter": exercise.chapter, "title": exercise.title,
            "points": exercise.points if status == "passed" and passed == total else 0,
            "max_points": exercise.points, "passed_checks": passed, "total_checks": total,
            "status": status, "message": message, "checks": checks, "seconds": round(seconds, 1),
            "cpu_seconds": round(data.get("cpu_seconds", 0.0), 1)}


def _first_problem(checks: list[dict]) -> str:
    bad = [c for c in checks if c["status"] != "passed"]
    if not bad:
        return ""
    public = [c for c in bad if not c["hidden"]]
    if public:
        c = public[0]
        return f"{c['name']}: {c['message'] or c['status']}"
    kinds = sorted({c["message"] for c in bad})
    return (f"passes the public checks but fails {len(bad)} hidden check(s) "
            f"({', '.join(c['name'] for c in bad)}): {', '.join(kinds)}")


# ----------------------------------------------------------------- the whole class
def students(submissions: Path) -> tuple[list[Path], list[str]]:
    """The student folders, and what else is there and why it is not graded."""
    folders, skipped = [], []
    for p in sorted(Path(submissions).iterdir()):
        if p.is_symlink():
            skipped.append(f"{p.name} (a symbolic link, not a folder)")
        elif not p.is_dir():
            skipped.append(f"{p.name} (a file, not a folder)")
        elif p.name.startswith((".", "_")):
            skipped.append(f"{p.name} (names starting with '.' or '_' are not students)")
        else:
            folders.append(p)
    if not folders:
        raise GpulabError(f"{submissions} has no student folders; expected one folder per student, "
                          "each a copy of the student version with their edits")
    return folders, skipped


def grade(submissions: str | Path, out: str | Path, feedback: str | Path | None = None,
          time_limit: float = DEFAULT_TIME_LIMIT, backend: str = "cpu", only=None,
          jobs: int | None = None, progress=None, unsafe_no_sandbox: bool = False,
          wall_factor: float | None = None, launch_limit: float | None = None) -> pd.DataFrame:
    """Grade every student folder under ``submissions``; write ``out`` (CSV), the digests of
    every file read (``<out>-files.csv``) and one Markdown feedback file per student under
    ``feedback`` (default: ``<out>`` without its suffix, plus ``-feedback/``). Returns the
    grades; ``grades.attrs["sha256"]`` is the digest of the CSV as written, and
    ``grades.attrs["children_cpu_seconds"]`` the CPU time the children used, all together.

    ``time_limit``: CPU seconds per student and exercise. ``wall_factor``: a child that waits is
    stopped once the grader has waited this many times ``time_limit`` for it (None:
    :data:`gpulab.sandbox.WALL_FACTOR`). ``launch_limit``:
    CPU seconds one launch of a student's kernel may compute (None: the CPU backend's own)."""
    submissions, out = Path(submissions), Path(out)
    said = threading.Lock()

    def say(line: str) -> None:
        # One line at a time: the slots' threads report at once, and print() writes a line and
        # its end apart (two lines could share one).
        if progress is not None:
            with said:
                progress(line)
    if not submissions.is_dir():
        raise GpulabError(f"submissions folder {submissions} does not exist (expected a folder with one "
                          "sub-folder per student)")
    if backend != "cpu":
        raise GpulabError("the grader runs students' kernels on the CPU backend only (its sandbox has no GPU); "
                          "use --backend cpu")
    if not ex_mod.solutions_present():
        raise GpulabError("this is a student copy (no solutions, no hidden checks): grade from the "
                          "instructors' copy of the lab")
    if not time_limit > 0:
        raise GpulabError(f"the time limit must be a positive number of CPU seconds, got {time_limit}")
    wall_factor = sandbox.WALL_FACTOR if wall_factor is None else wall_factor
    if not wall_factor >= 1:
        raise GpulabError(f"the wall factor must be a number of at least 1 (the clock's backstop is that many "
                          f"times the time limit), got {wall_factor}")
    if launch_limit is not None and not 0 < launch_limit <= time_limit:
        raise GpulabError(f"the launch limit must be a positive number of CPU seconds, at most the time limit "
                          f"({time_limit:g}), got {launch_limit}")
    if not unsafe_no_sandbox:
        why = sandbox.problem()
        if why:
            raise GpulabError(f"cannot grade safely: {why}. The grader runs every submission's code in a "
                              f"sandbox; {sandbox.INSTALL_HINT}")
    chosen = [ex_mod.get(i) for i in only] if only else list(ex_mod.all_exercises())
    feedback = Path(feedback) if feedback else out.with_name(out.stem + "-feedback")
    jobs = jobs or max(1, min(4, os.cpu_count() or 1))
    folders, skipped = students(submissions)
    for line in skipped:
        say(f"not graded: {line}")
    # Exercise by exercise, so that one student's hang runs beside the others' work, not last.
    work = [(i, exercise) for exercise in chosen for i in range(len(folders))]
    # The run's backstop: every slot busy with children that each wait out their own backstop.
    deadline = time.monotonic() + math.ceil(len(work) / jobs) * wall_factor * time_limit + 60
    slots = queue.Queue()
    for slot in range(jobs):
        slots.put(slot)

    with tempfile.TemporaryDirectory(prefix="gpulab-grade-") as tmp:
        tmp = Path(tmp)
        os.chmod(tmp, 0o755)            # children run as other uids: they read the copies
        lab = sandbox.student_tree(tmp / "lab")
        # Made here, shown read-only to every child: the CPU backend's runtime, the font list.
        prebuilt = {}
        if any(e.kind == "kernel" for e in chosen):
            for place, path in sandbox.prebuilt_runtime().items():
                prebuilt[f"{sandbox.CHILD_CACHE}/cpu/{place}"] = path
        fonts = sandbox.prebuilt_font_list(tmp / "fonts") if any(e.kind == "function" for e in chosen) else None
        if fonts is not None:
            prebuilt[f"{sandbox.CHILD_MPLCONFIG}/{fonts.name}"] = fonts
        staged = [stage(folder, tmp / "submissions" / f"{i:04d}", chosen) for i, folder in enumerate(folders)]

        def one(item):
            i, exercise = item
            slot = slots.get()
            try:
                started = time.monotonic()
                make = (lambda: sandbox.Child(lab, staged[i].root, time_limit, sandbox=not unsafe_no_sandbox,
                                              slot=slot, deadline=deadline, wall_factor=wall_factor,
                                              prebuilt=prebuilt))
                row = _summarise(exercise, evaluate(exercise, staged[i], lab, make, launch_limit=launch_limit),
                                 time.monotonic() - started)
            finally:
                slots.put(slot)
            say(f"{folders[i].name} {exercise.id}: {row['status']} ({row['points']}/{row['max_points']}, "
                f"{row['cpu_seconds']} s CPU, {row['seconds']} s)")
            return {"student": folders[i].name, **row}

        for s in staged:
            (s.root).mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            rows = list(pool.map(one, work))
    order = {(s.name, e.id): (i, j) for i, s in enumerate(folders) for j, e in enumerate(chosen)}
    rows.sort(key=lambda row: order[row["student"], row["exercise"]])
    out.parent.mkdir(parents=True, exist_ok=True)
    grades = pd.DataFrame(rows)
    grades[COLUMNS].to_csv(out, index=False)
    files = out.with_name(out.stem + "-files.csv")
    pd.DataFrame([{"student": folder.name, "file": name, "bytes": size, "sha256": digest}
                  for folder, s in zip(folders, staged) for name, (size, digest) in sorted(s.digests.items())],
                 columns=["student", "file", "bytes", "sha256"]).to_csv(files, index=False)
    feedback.mkdir(parents=True, exist_ok=True)
    for name, group in grades.groupby("student", sort=False):
        (feedback / f"{name}.md").write_text(feedback_text(name, group.to_dict("records")))
    grades.attrs["sha256"] = hashlib.sha256(out.read_bytes()).hexdigest()
    grades.attrs["children_cpu_seconds"] = float(grades["cpu_seconds"].sum()) if len(grades) else 0.0
    say(f"CPU time of the children that ran the submissions' code: {grades.attrs['children_cpu_seconds']:.1f} s "
        f"in {len(grades)} exercises (not in the grader's own CPU time: a child's processes end with its sandbox)")
    grades.attrs["files"] = str(files)
    return grades


def feedback_text(student: str, rows: list[dict]) -> str:
    """A student's feedback: public checks in full, hidden checks by number and kind only."""
    total, most = sum(r["points"] for r in rows), sum(r["max_points"] for r in rows)
    lines = [f"# Feedback for {student}", "", f"Total: {total} of {most} points.", ""]
    for r in rows:
        exercise = ex_mod.get(r["exercise"])
        lines += [f"## Exercise {r['exercise']}: {r['title']} -- {r['points']} of {r['max_points']} "
                  f"points ({r['status']})", ""]
        shown = set()
        for c in r["checks"]:
            shown.add(c["name"])
            text = c["message"] if c["message"] not in ("", c["status"]) and c["status"] != "passed" else ""
            if text and not c["hidden"]:
                text = f"\n\n  ```\n  {_indent(text)}\n  ```"
            elif text:
                text = f" ({text})"
            lines.append(f"- {c['name']}: {c['status']}{text}")
        if r["message"] and not any(c["status"] != "passed" for c in r["checks"]):
            lines.append(f"\n```\n{r['message']}\n```")
        if r["status"] not in ("passed", "missing") and exercise.hint:
            lines.append(f"\nHint: {exercise.hint}")
        lines.append("")
    return "\n".join(lines)


def _indent(text: str) -> str:
    return text.replace("\n", "\n  ")

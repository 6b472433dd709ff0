"""Grade a folder of submissions: ``python -m gpulab grade SUBMISSIONS/ --out grades.csv``.

Each sub-folder of SUBMISSIONS is one student's copy of the student version (only the
files the exercises name are read: the kernel files, the headers under ``kernels/`` and the
notebooks). Before anything runs, every file read is checked (a regular file inside the
student's folder, not a link, under no link, with no other hard link; a path of safe length;
at most :data:`MAX_FILE_BYTES`; text; a notebook in the shape the grader reads) and copied out
with its SHA-256 recorded; folders that are not graded are listed.

Every (student, exercise) is its own failure domain: a refused file costs the exercises that
read it, and an exception of the grader's own while grading one row makes that row a
"grader error" and the run goes on. ``grades.csv``, the files' digests and the feedback are
written whole (or not at all), in a ``finally``: an interrupted run writes what it graded. A
folder's name is shown :func:`printable` (no line of the output can be forged), CSV cells
cannot be read as formulas (:func:`csv_cell`), and feedback files are named safely
(:func:`feedback_names`).

This process is trusted: it makes every input and reference, compares, and computes the
points. A student's code -- the compiled kernel, the notebook cell -- runs only in an
untrusted child (:mod:`gpulab.sandbox`), one per student and exercise, sandboxed with
bubblewrap, which gets one case's inputs at a time and answers with outputs only. The
child never sees a hidden case it is not run on, a reference, a solution or this process's
state. A submission that does not compile, crashes, reads or writes out of bounds, fails a
barrier or uses up its CPU time gets zero for that exercise with the reason, and the others
are graded as usual. The time limit counts CPU seconds of the child's whole process tree,
so a busy machine does not fail correct work; a child that waits instead of computing is
stopped by a wall-clock backstop (sooner when it computes nothing at all), and the whole run has
a deadline. The grader reports the CPU
time its children used (their processes end with their sandbox: no parent's CPU time counts
them).

An exercise earns all its points when every check passes, else none. The grades are one
row per student and exercise; each student also gets a feedback file with the public
checks' details and, of the hidden checks, only how many passed (the instructor's grades.csv
keeps each hidden check's kind of failure). The
threat model is in book/instructors.md.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import queue
import re
import stat
import tempfile
import threading
import time
import traceback
import unicodedata
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
STATUSES = ("grader error", "invalid file", "compile error", "time limit", "crashed", "out of bounds", "barrier or race",
            "missing", "not solved", "wrong", "passed")
#: CPU seconds a student's code may use per exercise (its whole process tree).
DEFAULT_TIME_LIMIT = 60.0
#: The largest source file the grader reads (notebooks: NOTEBOOK_BYTES).
MAX_FILE_BYTES = 1 << 20
NOTEBOOK_BYTES = 16 << 20
#: Files under a submission's kernels/ that a kernel may include.
HEADER_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".inc")
#: What the grader reads of one submission at most: headers under kernels/ (how many, how deep),
#: the length of a file's path in the submission, and a notebook's JSON nesting.
MAX_HEADERS, MAX_FOLDER_DEPTH, MAX_PATH_CHARS, MAX_JSON_DEPTH = 200, 8, 300, 32
#: A student's name in the grades (the folder's name, made printable) and in a feedback file's name.
MAX_NAME_CHARS = 100
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
        try:
            data, why = _read_inside(self.student, relative, most)
            if why is None:
                why = _content_problem(relative, data)
        except OSError as error:                # anything else the file system says: this file only
            data, why = None, f"{printable(relative)} cannot be read ({os.strerror(error.errno or 0) or error})"
        if why is not None:
            self.problems[relative] = why
            return
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        self.digests[relative] = (len(data), hashlib.sha256(data).hexdigest())


def _read_inside(student: Path, relative: str, most: int) -> tuple[bytes | None, str | None]:
    """``student/relative``'s bytes, or why they may not be read: a folder or the file a symbolic
    link, a folder that is not one, not a regular file, a file with other hard links (its
    contents are also somewhere outside the folder), too large, a path too long. Each folder on
    the way is opened without following links, and the file is checked again once open, so that
    nothing swapped in between the checks and the read is read."""
    parts = Path(relative).parts
    shown = printable(relative)
    if len(relative) > MAX_PATH_CHARS or any(len(os.fsencode(part)) > 255 for part in parts):
        return None, f"{shown[:80]}... is a path of {len(relative)} characters; the grader reads at most {MAX_PATH_CHARS}"
    link = ("{} is a symbolic link; the grader reads only regular files inside your folder (copy the "
            "file itself there)")
    fd = os.open(student, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return None, "missing"
            if stat.S_ISLNK(info.st_mode):
                return None, link.format(printable("/".join(parts[:i + 1])))
            if not stat.S_ISDIR(info.st_mode):
                return None, (f"{printable('/'.join(parts[:i + 1]))} is a file, not a folder: the grader looks "
                              f"for {shown} inside it")
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        try:
            info = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None, "missing"
        if stat.S_ISLNK(info.st_mode):
            return None, link.format(shown)
        if not stat.S_ISREG(info.st_mode):
            return None, f"{shown} is not a regular file"
        file = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return None, link.format(shown)
        if error.errno == errno.ENOTDIR:
            return None, f"a folder on the way to {shown} is a file, not a folder"
        raise
    finally:
        os.close(fd)
    with os.fdopen(file, "rb") as f:
        opened = os.fstat(f.fileno())
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino) or not stat.S_ISREG(opened.st_mode):
            return None, f"{shown} changed while it was read"
        if opened.st_nlink > 1:
            return None, (f"{shown} has {opened.st_nlink} hard links (the same file is also elsewhere); the "
                          "grader reads only files of your own folder: hand in a copy")
        if opened.st_size > most:
            return None, (f"{shown} is {opened.st_size / 1e6:.1f} MB; the grader reads files of at most "
                          f"{most / 1e6:.0f} MB")
        data = f.read(most + 1)
    if len(data) > most:
        return None, f"{shown} grew past {most // 1024} KB while it was read"
    return data, None


def _content_problem(relative: str, data: bytes) -> str | None:
    """Why a file's bytes are not what the grader reads (None: they are): text, UTF-8, and a
    notebook in the shape the grader reads."""
    if b"\0" in data:
        return f"{relative} is a binary file, not text: hand in the source file itself"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return (f"{relative} is not UTF-8 text (byte {error.start}): hand in the source file itself, "
                "saved as UTF-8")
    if relative.endswith(".ipynb"):
        why = notebook_problem(text)
        if why:
            return f"{relative} cannot be read as a notebook: {why}"
    return None


def notebook_problem(text: str) -> str | None:
    """Why ``text`` is not a notebook the grader reads (None: it is): JSON, nested at most
    MAX_JSON_DEPTH deep, with no integer over 30 digits, no NaN or infinity, a dict whose
    ``cells`` are dicts with a text ``cell_type``, a text ``id`` if any and a ``source`` that is
    text or a list of texts."""
    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > 30:
            raise ValueError(f"an integer of {len(digits)} digits")
        return int(digits)

    def constant(name: str):
        raise ValueError(f"{name} is not a number JSON allows")
    try:
        nb = json.loads(text, parse_int=integer, parse_constant=constant)
    except RecursionError:
        return "it is nested too deeply"
    except ValueError as error:
        return f"it is not valid JSON ({str(error)[:200]})"
    level, depth = [nb], 0
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            return f"it is nested more than {MAX_JSON_DEPTH} levels deep"
        level = [v for item in level for v in (item.values() if isinstance(item, dict) else item)
                 if isinstance(v, (dict, list))]
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return "it is not a JSON object with a list of cells"
    for i, cell in enumerate(nb["cells"]):
        source = cell.get("source", "") if isinstance(cell, dict) else None
        if (not isinstance(cell, dict) or not isinstance(cell.get("cell_type", ""), str)
                or not isinstance(cell.get("id", ""), str)
                or not (isinstance(source, str) or isinstance(source, list)
                        and all(isinstance(line, str) for line in source))):
            return f"its cell {i} is not a cell (a dict with a cell_type, an id and a source of text)"
    return None


def stage(student: Path, root: Path, chosen) -> Staged:
    """Check and copy out the files of ``student`` the exercises read."""
    staged = Staged(student, root)
    for exercise in chosen:
        staged.read(exercise.file, MAX_FILE_BYTES if exercise.kind == "kernel" else NOTEBOOK_BYTES)
    headers = 0
    for relative in _headers(Path(student)):
        if relative in staged.digests or relative in staged.problems:
            continue
        if headers >= MAX_HEADERS:
            staged.problems[relative] = f"more than {MAX_HEADERS} headers under kernels/: {relative} was not read"
        else:
            staged.read(relative)
            headers += 1
    return staged


def _headers(student: Path) -> list[str]:
    """The files under ``student/kernels`` a kernel may include (relative paths), breadth first,
    at most MAX_FOLDER_DEPTH folders deep, without following links; names that are not text are
    left out (no include could name them)."""
    found, level = [], ["kernels"]
    try:
        if not stat.S_ISDIR(os.lstat(student / "kernels").st_mode):
            return []
    except OSError:
        return []
    for _ in range(MAX_FOLDER_DEPTH):
        deeper = []
        for folder in level:
            try:
                with os.scandir(student / folder) as entries:
                    listed = sorted((entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries)
            except OSError:                     # not a folder, a link, too long: nothing to include there
                continue
            for name, is_dir in listed:
                relative = f"{folder}/{name}"
                if printable(name) != name or len(relative) > MAX_PATH_CHARS:
                    continue
                if is_dir:
                    deeper.append(relative)
                elif name.endswith(HEADER_SUFFIXES):
                    found.append(relative)
            if len(found) > 2 * MAX_HEADERS:
                return found
        level = deeper
    return found


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
        # Every case runs the threads of a block in a shuffled order, so that a kernel that only
        # works in one order (a missing barrier) fails, from a seed that looks like any other
        # (_case_seed): nothing of a request says which case is hidden (a public case's inputs
        # are the student's to know). The public checks (small sizes) also look for data races:
        # two threads, one word, no barrier between them (an instrumented build, one block at a
        # time: too slow for the larger hidden sizes). Both only in the student's kernels: the
        # lab's own kernels of the step (training's SGD step runs seven of them beside the
        # student's) are checked by the lab's tests, and checking them here would cost the
        # grader three times their run time.
        extra = {"schedule": "shuffle", "seed": _case_seed(exercise, i)}
        if races and not hidden:
            extra["races"] = True
        if launch_limit is not None:
            extra["time_limit_s"] = launch_limit
        with _routed(root, child, extra):
            try:
                with ex_mod.bounds_checking(be.name):
                    checks = ex_mod.run_kernel_case(exercise, target, case, be)
            except (sandbox.Stopped, sandbox.ChildDied):
                raise
            except KernelCompileError as error:
                # In a hidden case the child's words are not shown: it has seen that case's inputs.
                rec.done("compile error", "compile error" if hidden
                         else _compile_message(rec.scrub(str(error)), exercise, mine))
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


def _case_seed(exercise, i: int) -> int:
    """The schedule's seed of an exercise's case ``i``: the same in every run, and, drawn from a
    digest of the exercise's hidden cases, which the child never sees, of one look for every
    case."""
    digest = hashlib.sha256(f"{exercise.id}\0{i}\0{ex_mod.hidden_cases(exercise)!r}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


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


# ----------------------------------------------------------------- names, lines and cells
def printable(text: str) -> str:
    """``text`` with nothing that could end a line or change what a terminal shows: a backslash
    doubled, every other character that is not a letter, mark, number, punctuation, symbol or
    space (a newline, an escape sequence, a direction override) as ``\\uXXXX``, and a byte that is
    not UTF-8 (a file name's, as Python reads it) as ``\\xNN``. One text for each ``text``."""
    out = []
    for char in text:
        code = ord(char)
        if char == "\\":
            out.append("\\\\")
        elif 0xDC80 <= code <= 0xDCFF:                  # os.fsdecode's stand-in for a byte that is not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char == " " or unicodedata.category(char)[0] in "LMNPS":
            out.append(char)
        else:
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    return "".join(out)


def _one_line(text: str) -> str:
    """A console line that is one line as it is shown: no character that ends a line or moves the
    cursor (the names in it are already :func:`printable`; this holds for anything else)."""
    return "".join(c if c == " " or unicodedata.category(c)[0] in "LMNPS" else f"\\u{ord(c):04x}" for c in text)


def student_name(folder: Path) -> str:
    """The student's name in the grades: the folder's name, :func:`printable`, at most
    MAX_NAME_CHARS characters (a longer one ends in ``...`` and a digest of the whole name, so
    that two names stay two)."""
    name = printable(Path(folder).name)
    if len(name) > MAX_NAME_CHARS:
        digest = hashlib.sha256(os.fsencode(Path(folder).name)).hexdigest()[:12]
        name = f"{name[:MAX_NAME_CHARS - 16]}...{digest}"
    return name


def feedback_names(names: list[str]) -> list[str]:
    """A feedback file's name for each student (``NAME.md``): the name itself where it is only
    letters, digits, ``.``, ``_`` and ``-`` and short, else its safe characters and a digest of it;
    never two alike (nor two that differ only in case), never a name starting with ``.`` or ``-``."""
    made, taken = [], set()
    for name in names:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:60]
        if safe != name or safe[:1] in ("", ".", "-"):
            safe = f"{safe.lstrip('.-')[:40] or 'student'}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"
        file, n = safe, 1
        while file.casefold() in taken:
            n += 1
            file = f"{safe}-{n}"
        taken.add(file.casefold())
        made.append(file + ".md")
    return made


def csv_cell(value):
    """A CSV cell no spreadsheet reads as a formula: text starting with ``=``, ``+``, ``-``, ``@``,
    a tab, a carriage return or ``'`` gets a leading ``'`` (so two texts stay two)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r", "'"):
        return "'" + value
    return value


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    """``frame`` as CSV at ``path``, whole or not at all (written beside it, then renamed), every
    text cell through :func:`csv_cell`."""
    frame = frame.apply(lambda column: column if pd.api.types.is_numeric_dtype(column) else column.map(csv_cell))
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        frame.to_csv(partial, index=False)
        os.replace(partial, path)
    finally:
        if partial.exists():
            partial.unlink()


def _write_text(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_text(text)
        os.replace(partial, path)
    finally:
        if partial.exists():
            partial.unlink()


# ----------------------------------------------------------------- the whole class
def students(submissions: Path) -> tuple[list[Path], list[str]]:
    """The student folders, and what else is there and why it is not graded (names as
    :func:`student_name` shows them)."""
    folders, skipped = [], []
    for p in sorted(Path(submissions).iterdir()):
        if p.is_symlink():
            skipped.append(f"{student_name(p)} (a symbolic link, not a folder)")
        elif not p.is_dir():
            skipped.append(f"{student_name(p)} (a file, not a folder)")
        elif p.name.startswith((".", "_")):
            skipped.append(f"{student_name(p)} (names starting with '.' or '_' are not students)")
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

    def say(text: str) -> None:
        # One line at a time: the slots' threads report at once, and print() writes a line and
        # its end apart (two lines could share one). No text in a line ends it or moves the
        # cursor: a folder's name cannot forge another line.
        if progress is not None:
            with said:
                for line in text.split("\n"):
                    progress(_one_line(line))
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
    names = _unique([student_name(folder) for folder in folders])
    for line in skipped:
        say(f"not graded: {line}")
    # Exercise by exercise, so that one student's hang runs beside the others' work, not last.
    work = [(i, exercise) for exercise in chosen for i in range(len(folders))]
    # The run's backstop: every slot busy with children that each wait out their own backstop.
    deadline = time.monotonic() + math.ceil(len(work) / jobs) * wall_factor * time_limit + 60
    slots = queue.Queue()
    for slot in range(jobs):
        slots.put(slot)
    rows: dict[tuple[int, str], dict] = {}
    staged: list[Staged | None] = [None] * len(folders)
    begun = False

    try:
        with tempfile.TemporaryDirectory(prefix="gpulab-grade-", ignore_cleanup_errors=True) as tmp:
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
            unread = {}
            for i, folder in enumerate(folders):
                try:
                    staged[i] = stage(folder, tmp / "submissions" / f"{i:04d}", chosen)
                    staged[i].root.mkdir(parents=True, exist_ok=True)
                except Exception as error:          # noqa: BLE001 -- this student's rows only
                    unread[i] = f"the grader could not read this submission ({_error_words(error, tmp)})"
                    say(f"grader error: {names[i]}: {unread[i]}")

            def one(item):
                i, exercise = item
                if i in unread:
                    return _grader_error(exercise, unread[i])
                slot = slots.get()
                try:
                    started = time.monotonic()
                    make = (lambda: sandbox.Child(lab, staged[i].root, time_limit, sandbox=not unsafe_no_sandbox,
                                                  slot=slot, deadline=deadline, wall_factor=wall_factor,
                                                  prebuilt=prebuilt))
                    try:
                        row = _summarise(exercise, evaluate(exercise, staged[i], lab, make,
                                                            launch_limit=launch_limit),
                                         time.monotonic() - started)
                    except Exception as error:      # noqa: BLE001 -- a fault of the grader's costs this row only
                        why = _error_words(error, tmp)
                        say(f"grader error: {names[i]} {exercise.id}: {why}\n  "
                            + _scrubbed(traceback.format_exc(limit=-6), tmp).strip().replace("\n", " | "))
                        row = _grader_error(exercise, f"the grader failed while grading this exercise ({why})",
                                            time.monotonic() - started)
                finally:
                    slots.put(slot)
                say(f"{names[i]} {exercise.id}: {row['status']} ({row['points']}/{row['max_points']}, "
                    f"{row['cpu_seconds']} s CPU, {row['seconds']} s)")
                return row

            def record(item):
                rows[item[0], item[1].id] = one(item)

            pool, begun = ThreadPoolExecutor(max_workers=jobs), True
            try:
                for done in [pool.submit(record, item) for item in work]:
                    done.result()
            finally:            # stopped (an interrupt): the items running end within their limits
                pool.shutdown(wait=True, cancel_futures=True)
    finally:
        # Once grading has begun, whatever happens, every row graded so far is written, and the
        # others say why not (before, a failure leaves an earlier run's grades as they were).
        if begun:
            grades = _write_results(out, feedback, names, chosen, rows, staged)
    grades.attrs["sha256"] = hashlib.sha256(out.read_bytes()).hexdigest()
    grades.attrs["children_cpu_seconds"] = float(grades["cpu_seconds"].sum()) if len(grades) else 0.0
    say(f"CPU time of the children that ran the submissions' code: {grades.attrs['children_cpu_seconds']:.1f} s "
        f"in {len(grades)} exercises (not in the grader's own CPU time: a child's processes end with its sandbox)")
    grades.attrs["files"] = str(out.with_name(out.stem + "-files.csv"))
    return grades


def _unique(names: list[str]) -> list[str]:
    """``names``, a later one equal to an earlier one (two long names cut alike) numbered."""
    seen, made = set(), []
    for name in names:
        shown, n = name, 1
        while shown in seen:
            n += 1
            shown = f"{name} ({n})"
        seen.add(shown)
        made.append(shown)
    return made


def _scrubbed(text: str, tmp: Path) -> str:
    return text.replace(str(tmp), "<grader's folder>").replace(str(paths.REPO), "<lab>")


def _error_words(error: BaseException, tmp: Path) -> str:
    """A fault of the grader's, in one line without this machine's paths."""
    return _one_line(_scrubbed(f"{type(error).__name__}: {error}", tmp))[:500]


def _grader_error(exercise, message: str, seconds: float = 0.0) -> dict:
    return {"exercise": exercise.id, "chapter": exercise.chapter, "title": exercise.title, "points": 0,
            "max_points": exercise.points, "passed_checks": 0, "total_checks": len(_cases(exercise)),
            "status": "grader error", "message": message, "checks": [], "seconds": round(seconds, 1),
            "cpu_seconds": 0.0}


def _write_results(out: Path, feedback: Path, names: list[str], chosen, rows: dict, staged: list) -> pd.DataFrame:
    """Write grades.csv, its files' digests and every student's feedback (each whole or not at
    all); a row never graded (the run was stopped) is a grader error that says so."""
    table = []
    for i, name in enumerate(names):
        for exercise in chosen:
            row = rows.get((i, exercise.id))
            if row is None:
                row = _grader_error(exercise, "not graded: the grader stopped before it graded this exercise")
            table.append({"student": name, **row})
    grades = pd.DataFrame(table, columns=[*COLUMNS, "checks", "seconds", "cpu_seconds"])
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_csv(grades[COLUMNS], out)
    _write_csv(pd.DataFrame([{"student": name, "file": printable(file), "bytes": size, "sha256": digest}
                             for name, s in zip(names, staged) if s is not None
                             for file, (size, digest) in sorted(s.digests.items())],
                            columns=["student", "file", "bytes", "sha256"]), out.with_name(out.stem + "-files.csv"))
    feedback.mkdir(parents=True, exist_ok=True)
    for i, (name, file) in enumerate(zip(names, feedback_names(names))):
        _write_text(feedback / file, feedback_text(name, [r for r in table if r["student"] == name]))
    return grades


def feedback_text(student: str, rows: list[dict]) -> str:
    """A student's feedback: public checks in full; of the hidden checks, only how many passed
    (:func:`shown_status`: no hidden check's kind of failure, message, size or value, not even
    through the exercise's status)."""
    total, most = sum(r["points"] for r in rows), sum(r["max_points"] for r in rows)
    lines = [f"# Feedback for {student}", "", f"Total: {total} of {most} points.", ""]
    for r in rows:
        exercise = ex_mod.get(r["exercise"])
        status, setup = shown_status(exercise, r)
        lines += [f"## Exercise {r['exercise']} (the book's Exercise {exercise.shown}): {r['title']} -- "
                  f"{r['points']} of {r['max_points']} "
                  f"points ({status})", ""]
        if r["status"] == "grader error":
            # The details (which may be a hidden check's) are in grades.csv and the grader's output.
            lines += ["The grader itself failed on this exercise, not your code: your instructor has the "
                      "details and will grade it again.", ""]
            continue
        for c in r["checks"]:
            if c["hidden"]:
                continue
            text = c["message"] if c["message"] not in ("", c["status"]) and c["status"] != "passed" else ""
            if text:
                fence = _fence(text)
                text = f"\n\n  {fence}\n  {_indent(text)}\n  {fence}"
            lines.append(f"- {c['name']}: {c['status']}{text}")
        hidden = r["total_checks"] - len(exercise.public)
        if hidden > 0:
            passed = sum(c["hidden"] and c["status"] == "passed" for c in r["checks"])
            lines.append(f"- hidden checks: {passed} of {hidden} passed")
        if setup and r["message"]:
            fence = _fence(r["message"])
            lines.append(f"\n{fence}\n{r['message']}\n{fence}")
        if r["status"] not in ("passed", "missing") and exercise.hint:
            lines.append(f"\nHint: {exercise.hint}")
        lines.append("")
    return "\n".join(lines)


def shown_status(exercise, row: dict) -> tuple[str, bool]:
    """The status a student is shown for ``row``, and whether it is the verdict of something before
    the checks (a missing or refused file, a notebook cell that does not define the function),
    whose message is then shown: the worst of the public checks' statuses where one failed, else
    the row's where the public checks did not all run, else "passed" or "failed hidden checks".
    Never a hidden check's own status: the row's (the worst of all checks') could be one."""
    if row["status"] == "grader error":
        return row["status"], False
    public = [c for c in row["checks"] if not c["hidden"]]
    failed = [c["status"] for c in public if c["status"] != "passed"]
    if failed:
        return min(failed, key=STATUSES.index), False
    if len(public) < len(exercise.public):
        return row["status"], True
    return ("passed", False) if row["status"] == "passed" else ("failed hidden checks", False)


def _indent(text: str) -> str:
    return text.replace("\n", "\n  ")


def _fence(text: str) -> str:
    """A Markdown code fence longer than any run of backticks in ``text``: nothing in a message
    (a compiler's quote of the student's source) ends the block early and forges feedback."""
    return "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))

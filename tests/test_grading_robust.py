"""The grader against inputs made to break it rather than to cheat it: every (student, exercise)
is its own failure domain, and every wait has a deadline.

Bad files of every kind (a notebook of the wrong shape or nested too deeply, an answer that is
an enormous integer, a chapter folder that is a file, a path too long, a FIFO, a hard link to a
file outside the folder) and folder names made to break the grades (very long, not UTF-8, a
spreadsheet formula, a newline that forges a console line) each cost only their own row;
children that stop reading their requests, stop themselves or sleep are stopped within their
budget, and the run ends within its deadline. Honest and do-nothing students are graded beside
them, with the same grades as alone. Instructors only (the student export leaves this file out)."""
import json
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
from gpulab.student import strip_solutions
from test_grading import FIXTURES, handed_in, solution_text, submission

WHY_NO_SANDBOX = sandbox.problem()
needs_sandbox = pytest.mark.skipif(WHY_NO_SANDBOX is not None, reason=f"no sandbox here: {WHY_NO_SANDBOX}")

ATTACKS = FIXTURES / "attacks"
KERNEL, CELL = exercises.get("measuring.1"), exercises.get("fcnet.2")
#: CPU seconds per student and exercise in the graded run: the honest answers need about 1.5.
LIMIT = 10
#: A line a folder's name forges (a name holds no "/": its "/" is a division slash, U+2215).
FORGED = "ada measuring.1: passed (4\u22154, 1.0 s CPU, 1.0 s)"
#: A child that computes nothing is stopped after about this many seconds of waiting (plus
#: WALL_FACTOR times the little CPU time it used): the graded run's sleepers cost this, not 6 x LIMIT.
IDLE_GRACE = 15


# ----------------------------------------------------------------- folder names, CSV cells, console lines
def test_names_are_printable_distinct_and_safe_as_file_names():
    weird = ["ada", "eve\n" + FORGED, "=1+1", "+cmd", "-2", "@SUM(A1)",
             "caf" + os.fsdecode(b"\xe9"), "x" * 255, "x" * 254 + "y", "back\\slash", "back\\u000aslash",
             "\u202eevil", "Ada", "ada.md", "..", "-rf", "tab\there"]
    shown = [grading.student_name(Path("/s") / name) for name in weird]
    assert len(set(shown)) == len(weird)                         # one name each
    assert shown[0] == "ada" and shown[2] == "=1+1"              # ordinary names unchanged
    for name in shown:
        assert all(c == " " or c.isprintable() for c in name) and len(name) <= grading.MAX_NAME_CHARS
    assert shown[1].startswith("eve\\u000aada")
    assert shown[6] == "caf\\xe9"
    files = grading.feedback_names(shown)
    assert files[0] == "ada.md" and len({f.casefold() for f in files}) == len(files)
    for file in files:
        assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*\.md", file) and len(file) <= 80, file
    for cell in ("=1+1", "+cmd", "-2", "@SUM(A1)", "\tx", "\rx", "'=1"):
        assert grading.csv_cell(cell) == "'" + cell
    assert grading.csv_cell("ada") == "ada" and grading.csv_cell(3) == 3
    assert grading.csv_cell("'=1") != grading.csv_cell("=1")


# ----------------------------------------------------------------- bad files: refused, one row each
def _stage(tmp_path: Path, make) -> grading.Staged:
    student = tmp_path / "student"
    (student / "kernels" / "measuring").mkdir(parents=True)
    (student / "book" / "fcnet").mkdir(parents=True)
    make(student)
    return grading.stage(student, tmp_path / "staged", [KERNEL, CELL])


def _notebook(student: Path, text: str) -> None:
    (student / CELL.file).write_text(text)


DEEP = 100_000
BAD_NOTEBOOKS = {
    "a list": ("[]", "not a JSON object with a list of cells"),
    "cells not a list": ('{"cells": 5}', "not a JSON object with a list of cells"),
    "a cell not a dict": ('{"cells": [1]}', "cell 0 is not a cell"),
    "a source not text": ('{"cells": [{"cell_type": "code", "source": {"a": 1}}]}', "cell 0 is not a cell"),
    "an id not text": ('{"cells": [{"cell_type": "code", "id": [], "source": ""}]}', "cell 0 is not a cell"),
    "nested deeply": ('{"cells": [], "x": ' + "[" * DEEP + "]" * DEEP + "}", "nested too deeply"),
    "nested 40 deep": ('{"cells": [], "x": ' + "[" * 40 + "]" * 40 + "}", "more than 32 levels"),
    "an enormous integer": ('{"cells": [], "n": 1' + "0" * 5000 + "}", "an integer of 5001 digits"),
    "a long integer": ('{"cells": [], "n": 1' + "0" * 40 + "}", "an integer of 41 digits"),
    "NaN": ('{"cells": [], "n": NaN}', "NaN is not a number JSON allows"),
    "not JSON": ("{", "not valid JSON"),
}


@pytest.mark.parametrize("kind", sorted(BAD_NOTEBOOKS))
def test_a_notebook_the_grader_cannot_read_is_an_invalid_file(kind, tmp_path):
    text, words = BAD_NOTEBOOKS[kind]
    staged = _stage(tmp_path, lambda s: _notebook(s, text))
    assert words in staged.problems[CELL.file], staged.problems
    row = grading._summarise(CELL, grading.evaluate(CELL, staged))
    assert (row["status"], row["points"]) == ("invalid file", 0) and words in row["message"]
    assert not (staged.root / CELL.file).exists()


def test_a_notebook_in_the_shape_the_grader_reads_is_read():
    cell = {"cell_type": "code", "id": CELL.cell, "source": ["def ways(vectors, features, row_halves=72):\n",
                                                              "    return 1\n"], "metadata": {}, "outputs": []}
    assert grading.notebook_problem(json.dumps({"cells": [cell], "nbformat": 4, "metadata": {}})) is None
    assert grading.notebook_problem((paths.REPO / CELL.file).read_text()) is None


def _long_path(root: Path, depth: int = 20, name: str = "d" * 250) -> None:
    """Folders nested ``depth`` deep under ``root``, a path of more than PATH_MAX characters,
    with a header at the bottom (made folder by folder: no single call could name it)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(os.open("deep.cuh", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)


def _hard_link(student: Path) -> None:
    outside = student.parent / "someone_elses.cu"
    outside.write_text(handed_in(KERNEL))
    os.link(outside, student / KERNEL.file)


BAD_FILES = {
    # name: (how to make it, the exercise it costs, words of the reason)
    "chapter folder is a file": (lambda s: (shutil.rmtree(s / "book" / "fcnet"), (s / "book" / "fcnet").write_text("x")),
                                 CELL, "book/fcnet is a file, not a folder"),
    "kernels folder is a file": (lambda s: (shutil.rmtree(s / "kernels"), (s / "kernels").write_text("x")),
                                 KERNEL, "kernels is a file, not a folder"),
    "a FIFO": (lambda s: os.mkfifo(s / KERNEL.file), KERNEL, "is not a regular file"),
    "a hard link": (_hard_link, KERNEL, "has 2 hard links"),
    "a folder on the way is a link": (lambda s: (shutil.rmtree(s / "kernels" / "measuring"),
                                                 (s / "kernels" / "measuring").symlink_to(paths.REPO / "kernels" / "measuring")),
                                      KERNEL, "kernels/measuring is a symbolic link"),
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_file_that_is_not_a_plain_file_of_the_folder_is_refused(kind, tmp_path):
    make, exercise, words = BAD_FILES[kind]
    staged = _stage(tmp_path, make)        # a FIFO opened without O_NONBLOCK would wait here for ever
    assert words in staged.problems[exercise.file], staged.problems
    row = grading._summarise(exercise, grading.evaluate(exercise, staged))
    assert (row["status"], row["points"]) == ("invalid file", 0) and words in row["message"]
    assert not staged.digests


def test_headers_too_deep_too_many_or_oddly_named_are_not_read(tmp_path):
    def make(student):
        (student / KERNEL.file).write_text(handed_in(KERNEL))
        _long_path(student / "kernels")
        for i in range(grading.MAX_HEADERS + 5):
            (student / "kernels" / "measuring" / f"h{i:03d}.cuh").write_text("// a header\n")
        (student / "kernels" / os.fsdecode(b"bad\xffname.h")).write_text("// a header\n")
        (student / "kernels" / "new\nline.h").write_text("// a header\n")
        (student / "kernels" / ("x" * 250 + ".h")).write_text("// a header\n")
    staged = _stage(tmp_path, make)
    assert staged.digests[KERNEL.file][0] == len(handed_in(KERNEL).encode())
    assert len(staged.digests) == 1 + grading.MAX_HEADERS
    assert sum("more than" in why for why in staged.problems.values()) == 6     # 205 .cuh and the long name's .h
    assert all(len(name) <= grading.MAX_PATH_CHARS and grading.printable(name) == name
               for name in [*staged.digests, *staged.problems])
    row = grading._summarise(KERNEL, grading.evaluate(KERNEL, staged, races=False))
    assert (row["status"], row["points"]) == ("passed", KERNEL.points), row["message"]


def test_an_over_long_path_is_refused_with_its_length(tmp_path):
    student = tmp_path / "student"
    student.mkdir()
    staged = grading.Staged(student, tmp_path / "staged")
    relative = "kernels/" + "/".join(["d" * 250] * 20) + "/deep.cuh"
    staged.read(relative)
    (why,) = staged.problems.values()
    assert f"is a path of {len(relative)} characters; the grader reads at most 300" in why


# ----------------------------------------------------------------- answers the grader cannot compare
def test_an_answer_header_past_the_graders_bounds_is_refused_or_read_as_a_float():
    read = sandbox._answer_header
    assert read(b'{"value": 12, "parts": 0}') == {"value": 12, "parts": 0}
    assert read(b'{"value": 1' + b"0" * 400 + b"}") == {"value": float("inf")}
    assert read(b'{"value": -1' + b"0" * 30 + b"}") == {"value": -1e30}
    assert read(b'{"value": 1' + b"0" * 5000 + b"}") == {"value": float("inf")}     # past int's 4300 digits
    assert read(b'{"value": ' + b"[" * 65 + b"]" * 65 + b"}") is None
    assert read(b'{"value": ' + b"[" * 62 + b"]" * 62 + b"}") is not None
    assert read(b'{"value": ' + b"[" * 100_000 + b"]" * 100_000 + b"}") is None
    for not_a_header in (b"[]", b"1", b"\xff", b'"x"'):
        assert read(not_a_header) is None


def _cell(body: str) -> str:
    return f"def {CELL.function}(vectors, features, row_halves=72):\n    {body}\n"


@pytest.mark.parametrize("value", ["10 ** 1000", "-(10 ** 400)", "float('nan')", "float('inf')",
                                   "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"])
def test_an_answer_the_grader_cannot_compare_is_wrong_not_a_crash(value, tmp_path):
    """In the sandbox's child (the answer crosses the pipe as JSON, as in a graded run)."""
    if WHY_NO_SANDBOX:
        pytest.skip(f"no sandbox here: {WHY_NO_SANDBOX}")
    staged = grading.stage(submission(CELL, _cell(f"return {value}"), tmp_path / "sub"), tmp_path / "staged", [CELL])
    lab = sandbox.student_tree(tmp_path / "lab")
    data = grading.evaluate(CELL, staged, lab, lambda: sandbox.Child(lab, staged.root, LIMIT))
    row = grading._summarise(CELL, data)
    assert row["points"] == 0 and row["status"] in ("wrong", "crashed"), row


# ----------------------------------------------------------------- every wait has a deadline
def _child(tmp_path: Path, **options) -> sandbox.Child:
    lab = tmp_path / "lab"
    if not lab.exists():
        sandbox.student_tree(lab)
    (tmp_path / "submission").mkdir(exist_ok=True)
    return sandbox.Child(lab, tmp_path / "submission", options.pop("cpu_limit", 60), **options)


def _define(child, source: str) -> dict:
    header, _ = child.request({"op": "define", "exercise": CELL.id, "chapter": CELL.chapter,
                               "function": "f", "source": source, "extra": {}})
    return header


STOP_READING = """
import os, stat
empty, _keep = os.pipe()
for fd in range(3, 256):
    try:
        info = os.fstat(fd)
    except OSError:
        continue
    if fd != empty and stat.S_ISFIFO(info.st_mode):
        import fcntl
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            os.dup2(empty, fd)
def f(x):
    return len(x)
"""
STOP_ITSELF = """
import os, signal, threading
def f(x):
    return len(x)
# Once the answer to this request is on its way, the worker stops itself: the next request finds it stopped.
threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGSTOP)).start()
"""


@needs_sandbox
@pytest.mark.parametrize("attack", ["stops reading", "stops itself"])
def test_a_request_larger_than_the_pipe_to_a_child_that_does_not_read_it_ends_in_its_budget(attack, tmp_path):
    """The grader writes a 16 MB request (the pipe holds 1 MB) to a child that no longer reads:
    it is stopped after IDLE_GRACE seconds and a little, not after six times its CPU limit
    (6 x 60 s here), and not never (a blocking write waited for ever)."""
    grace, factor = 3.0, 2
    child = _child(tmp_path, idle_grace=grace, wall_factor=factor)
    try:
        assert "error" not in _define(child, STOP_READING if attack == "stops reading" else STOP_ITSELF)
        time.sleep(0.5)
        started = time.monotonic()
        with pytest.raises(sandbox.Stopped, match="of waiting for it"):
            child.request({"op": "call", "inputs": {"x": b"\0" * (16 << 20)}})
        took = time.monotonic() - started
    finally:
        child.kill()
    assert took <= grace + factor * child.used + 3, (took, child.used)
    assert child.proc.returncode is not None


@needs_sandbox
@pytest.mark.slow        # waits out a deadline and the watchdog's margin (8 s, no CPU time)
def test_the_watchdog_kills_a_stopped_child_while_the_grader_is_busy_elsewhere(tmp_path):
    """Past the run's deadline the watchdog kills the child's whole tree, stopped or not, even
    while the grader's thread is not waiting for it (here: asleep); the next request says so."""
    child = _child(tmp_path)
    try:
        assert "error" not in _define(child, STOP_ITSELF.replace("0.3", "0.05"))
        child.deadline = time.monotonic() + 1
        tree = [child.proc.pid, *sandbox._under(child.proc.pid, sandbox._processes()[0])]
        time.sleep(0.5)
        assert any(_state(pid) == "T" for pid in tree), {pid: _state(pid) for pid in tree}
        time.sleep(7)                                        # deadline + the watchdog's 5 s
        assert child.proc.poll() is not None
        assert all(_state(pid) in (None, "Z") for pid in tree), {pid: _state(pid) for pid in tree}
        with pytest.raises(sandbox.Stopped, match="watchdog"):
            child.request({"op": "call", "inputs": {"x": [1]}})
    finally:
        child.kill()


def _state(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2]


# ----------------------------------------------------------------- what the sandbox shows
@needs_sandbox
def test_the_sandbox_shows_no_path_of_the_graders_and_its_tmp_has_a_size(tmp_path, monkeypatch):
    """Nothing a child can read of the kernel's views of processes names a folder of this
    machine's (the grader's temporary folder, its build cache, its checkout, its Python): not a
    process's command line or environment, nor the mount table, whose source column would name
    the folders bound into the sandbox (the sandbox has no /proc, and a child cannot mount one);
    and the child's /tmp, which is memory, holds at most TMP_BYTES (16 MB here; 512 MB when
    grading)."""
    monkeypatch.setattr(sandbox, "TMP_BYTES", 16 << 20)
    runtime = tmp_path / "cache-of-the-grader" / "runtime-0123.o"
    runtime.parent.mkdir()
    runtime.write_bytes(b"the grader's runtime")
    child = _child(tmp_path, prebuilt={f"{sandbox.CHILD_CACHE}/cpu/{runtime.name}": runtime})
    probe = """
import ctypes, os
def f():
    seen = {}
    places = ["/proc/self/mountinfo", "/proc/self/mounts", "/proc/mounts", "/proc/self/mountstats",
              "/proc/self/maps", "/proc/self/environ", "/proc/self/cmdline", "/proc/1/mountinfo",
              "/proc/1/cmdline", "/proc/1/environ", "/proc/2/mountinfo"]
    try:
        places += [f"/proc/{pid}/{part}" for pid in os.listdir("/proc") if pid.isdigit()
                   for part in ("cmdline", "environ", "mountinfo", "maps")]
    except OSError:
        pass
    for place in places:
        try:
            with open(place, "rb") as file:
                seen[place] = file.read().decode(errors="replace")
        except OSError as error:
            seen[place] = type(error).__name__
    seen["own environment"] = repr(dict(os.environ))
    # A /proc of its own, in a user namespace of its own: refused (none is shown to it).
    read, write = os.pipe()
    if os.fork() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        os.makedirs("/tmp/proc", exist_ok=True)
        said = "unshare refused"
        if libc.unshare(0x10000000 | 0x00020000) == 0:          # CLONE_NEWUSER | CLONE_NEWNS
            said = "mounted" if libc.mount(b"proc", b"/tmp/proc", b"proc", 0, None) == 0 else "mount refused"
            if said == "mounted":
                said += open("/tmp/proc/self/mountinfo").read()
        os.write(write, said.encode()[:60000])
        os._exit(0)
    os.close(write)
    seen["own /proc"] = os.read(read, 65536).decode(errors="replace")
    written = 0
    try:
        for i in range(8):
            with open(f"/tmp/fill{i}", "wb") as file:
                for _ in range(4):
                    file.write(b"x" * (1 << 20))
                    file.flush()
                    written += 1 << 20
    except OSError as error:
        seen["full"] = error.strerror
    st = os.statvfs("/tmp")
    return {"seen": seen, "tmp": st.f_blocks * st.f_frsize, "written": written}
"""
    try:
        assert "error" not in _define(child, probe)
        header, _ = child.request({"op": "call", "inputs": {}})
    finally:
        child.kill()
    got = header["value"]
    assert "own environment" in got["seen"] and "/proc/self/mountinfo" in got["seen"]
    assert not got["seen"]["own /proc"].startswith("mounted"), got["seen"]["own /proc"][:300]
    host = {str(tmp_path), str(runtime.parent), sys.prefix, sys.base_prefix, str(paths.REPO),
            str(Path(sys.executable).parent)}
    for key, text in got["seen"].items():
        for path in host:
            assert path not in text, f"{key} shows {path}: {text[:300]!r}"
    if sandbox._bwrap_knows("--size"):          # bubblewrap 0.8 and later
        assert got["tmp"] == 16 << 20
        assert got["seen"]["full"] == "No space left on device" and got["written"] < 16 << 20


# ----------------------------------------------------------------- a whole class of bad inputs, graded


def _bytes_folder(root: Path, name: bytes) -> Path:
    path = os.path.join(os.fsencode(root), name)
    os.mkdir(path)
    return Path(os.fsdecode(path))


def _class(root: Path, with_attackers: bool) -> dict:
    """Write the class's folders: honest 'ada', do-nothing 'nobody', and (with_attackers) one
    folder per attack. Returns {folder name: {exercise id: expected status or None (honest)}}."""
    answer = handed_in(KERNEL)
    starter = strip_solutions((paths.REPO / KERNEL.file).read_text())
    cell_starter = strip_solutions(solution_text(CELL), "#")

    def both(folder: Path, kernel: str = answer, cell: str | None = handed_in(CELL)) -> Path:
        submission(KERNEL, kernel, folder)
        if cell is not None:
            submission(CELL, cell, folder)
        return folder
    both(root / "ada")
    both(root / "nobody", starter, cell_starter)
    classes = {"ada": {KERNEL.id: "passed", CELL.id: "passed"},
               "nobody": {KERNEL.id: "not solved", CELL.id: "not solved"}}
    if not with_attackers:
        return classes
    # Bad files: each costs its own row; the other exercise, answered right, passes.
    for name, text in (("nb_shape", "[]"), ("nb_deep", '{"cells": ' + "[" * DEEP + "]" * DEEP + "}"),
                       ("nb_bigint", '{"cells": [], "nbformat": 1' + "0" * 5000 + "}")):
        both(root / name, cell=None)
        (root / name / CELL.file).parent.mkdir(parents=True, exist_ok=True)
        (root / name / CELL.file).write_text(text)
        classes[name] = {KERNEL.id: "passed", CELL.id: "invalid file"}
    for name, value in (("answer_bigint", "10 ** 1000"), ("answer_huge", "10 ** 5000"),
                        ("answer_deep", "eval('[' * 500 + ']' * 500)")):
        both(root / name, cell=_cell(f"return {value}"))
        classes[name] = {KERNEL.id: "passed", CELL.id: "wrong or crashed"}
    both(root / "chapter_file", cell=None)
    (root / "chapter_file" / "book").mkdir()
    (root / "chapter_file" / "book" / "fcnet").write_text("not a folder")
    classes["chapter_file"] = {KERNEL.id: "passed", CELL.id: "invalid file"}
    both(root / "long_path")
    _long_path(root / "long_path" / "kernels")
    classes["long_path"] = {KERNEL.id: "passed", CELL.id: "passed"}
    both(root / "hard_link")
    (root / "hard_link" / KERNEL.file).unlink()
    (root.parent / "outside.cu").write_text(answer)
    os.link(root.parent / "outside.cu", root / "hard_link" / KERNEL.file)
    classes["hard_link"] = {KERNEL.id: "invalid file", CELL.id: "passed"}
    both(root / "fifo")
    (root / "fifo" / KERNEL.file).unlink()
    os.mkfifo(root / "fifo" / KERNEL.file)
    classes["fifo"] = {KERNEL.id: "invalid file", CELL.id: "passed"}
    # Children that stop reading, stop themselves, sleep: stopped, 0 points.
    for name, attack in (("stops_reading", "stops_reading.cu"), ("stops_itself", "stops_itself.cu"),
                         ("sleeps", "sleeps.cu")):
        both(root / name, (ATTACKS / attack).read_text())
        classes[name] = {KERNEL.id: "time limit", CELL.id: "passed"}
    # Their constructors are refused before it loads now (test_grading_attacks): 0 points either way; the
    # write deadline it aimed at is tested on its own (a 16 MB request to a child that stops reading).
    classes["stops_reading"][KERNEL.id] = classes["stops_itself"][KERNEL.id] = "compile error or time limit"
    # Folder names: graded as usual, shown safely.
    for raw in (b"=HYPERLINK(\"x\")", b"+1", b"-1", b"@SUM(1)", b"caf\xe9", b"n" * 255,
                ("eve\n" + FORGED).encode()):
        folder = _bytes_folder(root, raw)
        submission(KERNEL, answer, folder)
        classes[folder.name] = {KERNEL.id: "passed", CELL.id: "missing"}
    return classes


class Graded:
    def __init__(self, root: Path, with_attackers: bool):
        self.submissions, self.out = root / "submissions", root / "grades.csv"
        self.submissions.mkdir()
        self.classes = _class(self.submissions, with_attackers)
        started = time.monotonic()
        self.result = subprocess.run(
            [sys.executable, "-m", "gpulab", "grade", str(self.submissions), "--out", str(self.out),
             "--exercise", KERNEL.id, "--exercise", CELL.id, "--time-limit", str(LIMIT), "--jobs", "2"],
            capture_output=True, text=True, timeout=1800)
        self.wall = time.monotonic() - started
        assert self.result.returncode == 0, self.result.stdout + self.result.stderr
        self.raw = pd.read_csv(self.out, keep_default_na=False)
        self.feedback = {p.name: p.read_text() for p in (root / "grades-feedback").iterdir()}

    def row(self, folder: str, exercise) -> pd.Series:
        shown = grading.csv_cell(grading.student_name(Path(folder)))
        rows = self.raw[(self.raw["student"] == shown) & (self.raw["exercise"] == exercise.id)]
        assert len(rows) == 1, (folder, shown, sorted(self.raw["student"]))
        return rows.iloc[0]


@pytest.fixture(scope="module")
def alone(tmp_path_factory) -> Graded:
    return Graded(tmp_path_factory.mktemp("alone"), with_attackers=False)


@pytest.fixture(scope="module")
def beside(tmp_path_factory) -> Graded:
    return Graded(tmp_path_factory.mktemp("beside"), with_attackers=True)


@needs_sandbox
@pytest.mark.slow        # grades a class of bad inputs beside honest students
def test_every_bad_input_costs_its_own_row_only(beside):
    for folder, expected in beside.classes.items():
        for exercise in (KERNEL, CELL):
            row = beside.row(folder, exercise)
            want = expected[exercise.id]
            if want == "passed":
                assert (row["status"], row["points"]) == ("passed", exercise.points), (folder, row["message"])
            else:
                assert row["points"] == 0 and row["status"] in want.split(" or "), (folder, exercise.id, dict(row))
    assert "grader error" not in set(beside.raw["status"])
    assert len(beside.raw) == 2 * len(beside.classes)
    message = beside.row("stops_reading", KERNEL)["message"]
    assert "of waiting for it" in message or "would run code of its own" in message, message


@needs_sandbox
@pytest.mark.slow        # grades a class of bad inputs beside honest students
def test_names_cannot_forge_a_formula_a_console_line_or_a_feedback_file(beside):
    cells = [str(v) for column in beside.raw.columns for v in beside.raw[column]]
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert "'=HYPERLINK(\"x\")" in set(beside.raw["student"])
    lines = beside.result.stdout.splitlines()
    assert FORGED not in lines and sum(line.startswith("ada measuring.1:") for line in lines) == 1
    assert any(line.startswith("eve\\u000a" + FORGED[:20]) for line in lines)
    assert "caf\\xe9 measuring.1: passed" in beside.result.stdout
    assert all(line.isprintable() for line in lines)
    # One feedback file per student, each with a safe name, each the student's own.
    assert len(beside.feedback) == len(beside.classes)
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*\.md", name) for name in beside.feedback)
    for name, text in beside.feedback.items():
        student = text.splitlines()[0].removeprefix("# Feedback for ")
        assert grading.feedback_names([student]) == [name] or name.startswith(student[:20].replace("\\", "_"))


@needs_sandbox
@pytest.mark.slow        # grades a class of bad inputs beside honest students (and the honest alone)
def test_honest_grades_are_the_same_beside_bad_inputs(alone, beside):
    columns = ["student", "exercise", "points", "status", "passed_checks", "message"]
    honest = alone.raw[columns].set_index(["student", "exercise"])
    pd.testing.assert_frame_equal(honest, beside.raw[columns].set_index(["student", "exercise"]).loc[honest.index])
    assert honest.loc[("ada", KERNEL.id), "points"] == KERNEL.points
    assert honest.loc[("nobody", KERNEL.id), "points"] == honest.loc[("nobody", CELL.id), "points"] == 0


@needs_sandbox
@pytest.mark.slow        # grades a class of bad inputs beside honest students
def test_the_run_ends_within_students_times_exercises_times_the_limit(beside):
    rows = len(beside.classes) * 2
    assert beside.wall <= rows * LIMIT + 60, beside.wall
    # The children that stopped computing were stopped after about IDLE_GRACE s, not 6 x LIMIT.
    for folder in ("sleeps",):
        seconds = re.search(rf"^{folder} {re.escape(KERNEL.id)}: time limit \(0/\d+, ([\d.]+) s CPU, ([\d.]+) s\)$",
                            beside.result.stdout, re.M)
        assert seconds, beside.result.stdout
        assert float(seconds[2]) <= sandbox.IDLE_GRACE + sandbox.WALL_FACTOR * float(seconds[1]) + 10, seconds[0]


def test_a_fault_of_the_graders_costs_its_row_and_every_grade_is_still_written(tmp_path, monkeypatch):
    """A grader bug on one row (here: a failure made to happen for one student and exercise)
    becomes that row's "grader error"; the others are graded and written, and an interrupted
    run writes what it graded, the rest marked as not graded."""
    for name in ("ada", "ben"):
        submission(KERNEL, handed_in(KERNEL), tmp_path / "subs" / name)
    original = grading._summarise

    def faulty(exercise, data, seconds=0.0):
        row = original(exercise, data, seconds)
        if threading_name() == "ben":
            raise OverflowError("int too large to convert to float")
        return row
    names = {}

    def threading_name():
        return names.get("current")
    real_evaluate = grading.evaluate

    def evaluate(exercise, staged, *args, **kwargs):
        names["current"] = Path(staged.student).name
        return real_evaluate(exercise, staged, *args, **kwargs)
    monkeypatch.setattr(grading, "_summarise", faulty)
    monkeypatch.setattr(grading, "evaluate", evaluate)
    said = []
    grades = grading.grade(tmp_path / "subs", tmp_path / "g.csv", only=[KERNEL.id], jobs=1,
                           unsafe_no_sandbox=True, progress=said.append, time_limit=LIMIT)
    rows = pd.read_csv(tmp_path / "g.csv").set_index("student")
    assert rows.loc["ada", "status"] == "passed"
    assert rows.loc["ben", "status"] == "grader error" and rows.loc["ben", "points"] == 0
    assert "OverflowError: int too large" in rows.loc["ben", "message"]
    assert any(line.startswith("grader error: ben measuring.1: OverflowError") for line in said)
    assert "The grader itself failed" in (tmp_path / "g-feedback" / "ben.md").read_text()
    assert list(grades["status"]) == ["passed", "grader error"]

    def interrupted(*args, **kwargs):
        if names.get("current") == "ben":
            raise KeyboardInterrupt
        return original(*args, **kwargs)
    monkeypatch.setattr(grading, "_summarise", interrupted)
    with pytest.raises(KeyboardInterrupt):
        grading.grade(tmp_path / "subs", tmp_path / "h.csv", only=[KERNEL.id], jobs=1, unsafe_no_sandbox=True,
                      time_limit=LIMIT)
    rows = pd.read_csv(tmp_path / "h.csv").set_index("student")
    assert rows.loc["ada", "status"] == "passed"
    assert rows.loc["ben", "status"] == "grader error" and "not graded" in rows.loc["ben", "message"]
    assert (tmp_path / "h-feedback" / "ada.md").is_file() and (tmp_path / "h-feedback" / "ben.md").is_file()

"""Grade a folder of submissions: ``python -m gpulab grade SUBMISSIONS/ --out grades.csv``.

Each sub-folder of SUBMISSIONS is one student's copy of the student version (only the
files the exercises name are read: the kernel files and the notebooks). For every student
and every exercise of :data:`gpulab.exercises.EXERCISES`, a separate Python process
(``python -m gpulab.grading``, with the instructor's gpulab, never the student's) compiles
and runs the exercise's public and hidden checks, with the CPU backend's bounds checking
on, under a time limit. A submission that does not compile, crashes, reads or writes out
of bounds, fails a barrier, hangs or overruns the limit gets zero for that exercise with
the reason, and the others are graded as usual.

An exercise earns all its points when every check passes, else none. The grades are one
row per student and exercise; each student also gets a feedback file with the public
checks' details and, for hidden checks, only their number and the kind of failure.

Student code runs as the instructor's user, in the process that checks it: the grader
catches mistakes, not a submission written to fake its result. Grade untrusted
submissions in a container or a virtual machine.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from . import exercises as ex_mod
from . import paths
from .errors import GpulabError, KernelCompileError, KernelLaunchError

#: Row columns of grades.csv.
COLUMNS = ["student", "exercise", "chapter", "title", "points", "max_points", "passed_checks",
           "total_checks", "status", "message"]
#: The statuses, worst first: an exercise's status is the worst of its checks'.
STATUSES = ("compile error", "time limit", "crashed", "out of bounds", "barrier or race", "missing",
            "not solved", "wrong", "passed")
DEFAULT_TIME_LIMIT = 60.0
_MESSAGE_CHARS = 1500


# ----------------------------------------------------------------- in the worker process
def classify(error: BaseException) -> str:
    """The kind of a failure, in the words a grade uses."""
    text = str(error).lower()
    if isinstance(error, KernelCompileError):
        return "compile error"
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


class _Recorder:
    """The checks so far, written to the result file after each step, so that the grading
    process knows which check was running if this process dies or is stopped."""

    def __init__(self, path: Path):
        self.path, self.checks, self.current = path, [], None

    def start(self, name: str, hidden: bool) -> None:
        self.current = {"name": name, "hidden": hidden}
        self._write()

    def done(self, status: str, message: str = "") -> None:
        self.checks.append({**self.current, "status": status, "message": message[:_MESSAGE_CHARS]})
        self.current = None
        self._write()

    def finish(self, status: str | None = None, message: str = "") -> None:
        self._write(final={"status": status, "message": message[:_MESSAGE_CHARS]})

    def _write(self, final: dict | None = None) -> None:
        data = {"checks": self.checks, "current": self.current, "final": final}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.path)


def _cases(exercise):
    public = [(case, False, f"public check ({ex_mod.describe_case(case)})") for case in exercise.public]
    hidden = [(case, True, f"hidden check {i}") for i, case in enumerate(ex_mod.hidden_cases(exercise), 1)]
    return public + hidden


def evaluate(exercise_id: str, submission: Path, result: Path, backend: str = "cpu",
             races: bool = True) -> None:
    """Run one exercise's checks on one submission (in this process: the worker).
    ``races=False`` runs the public checks of a kernel exercise without the race checker
    (the grader always checks; the tests of known-wrong answers whose fault is not a race
    skip it, as it is the slowest part of a check and has nothing to find there)."""
    exercise = ex_mod.get(exercise_id)
    rec = _Recorder(result)
    target = submission / exercise.file
    if not target.is_file():
        rec.finish("missing", f"{exercise.file} is not in the submission")
        return
    if exercise.kind == "kernel":
        _evaluate_kernel(exercise, target, rec, backend, races)
    else:
        _evaluate_function(exercise, target, rec)


def _failure(rec: _Recorder, hidden: bool, error: BaseException, public_message: str) -> str:
    status = classify(error)
    rec.done(status, _HIDDEN_WORDS.get(status, status) if hidden else public_message)
    return status


def _evaluate_kernel(exercise, target: Path, rec: _Recorder, backend: str, races: bool = True) -> None:
    from .kernels import get_backend
    be = get_backend(backend)
    unsolved = ex_mod.is_unsolved(target.read_text(errors="replace"))
    for i, (case, hidden, name) in enumerate(_cases(exercise)):
        rec.start(name, hidden)
        # The public checks (small sizes) look for data races: two threads, one word, no
        # barrier between them (an instrumented build, one block at a time: too slow for
        # the larger hidden sizes). The hidden checks run the threads of a block in a
        # shuffled order, so a kernel that only works in one order (a missing barrier) fails.
        extra = {"schedule": "shuffle", "seed": 1000 + i} if hidden else {"races": races}
        try:
            with ex_mod.bounds_checking(be.name, **extra):
                checks = ex_mod.run_kernel_case(exercise, target, case, be)
        except KernelCompileError as error:
            where = str(target.parent.resolve()) + os.sep
            rec.done("compile error", str(error).replace(where, "").replace(str(target), exercise.file))
            rec.finish("compile error")
            return
        except Exception as error:          # noqa: BLE001 -- the student's kernel failed
            if _failure(rec, hidden, error, f"{type(error).__name__}: {error}") == "time limit":
                break                       # the next cases would only use up the time too
            continue
        if checks["passed"].all():
            rec.done("passed")
        elif hidden:
            rec.done("not solved" if unsolved else "wrong", "wrong result")
        else:
            failed = checks[~checks["passed"]]
            rec.done("not solved" if unsolved else "wrong",
                     f"{len(failed)} of {len(checks)} checks disagree with the float64 reference:\n"
                     + failed.to_string(index=False))
    rec.finish()


def _evaluate_function(exercise, notebook: Path, rec: _Recorder) -> None:
    solution = ex_mod.solution_function(exercise)
    if solution is None:
        raise RuntimeError(f"no solution cell for {exercise.id} in {paths.REPO / exercise.file}: "
                           "grade from the instructor's copy of the lab, not a student copy")
    try:
        source = ex_mod.notebook_cell(notebook, exercise.cell, exercise.function)
    except (OSError, ValueError) as error:
        rec.finish("missing", f"{exercise.file} cannot be read as a notebook: {error}")
        return
    if source is None:
        rec.finish("missing", f"{exercise.file} has no cell {exercise.cell} defining {exercise.function}")
        return
    try:
        fn = ex_mod.define(exercise, source, exercise.inputs(exercise.public[0]))
    except Exception as error:              # noqa: BLE001 -- the student's cell failed
        rec.finish("crashed", f"the cell defining {exercise.function} raised "
                              f"{type(error).__name__}: {error}\n{_student_traceback(error)}")
        return
    if fn is None:
        rec.finish("not solved", f"exercise not solved yet: the cell does not define {exercise.signature}")
        return
    for case, hidden, name in _cases(exercise):
        rec.start(name, hidden)
        expected = ex_mod.plain(solution(**exercise.inputs(case)))
        try:
            got = ex_mod.plain(fn(**exercise.inputs(case)))
        except Exception as error:          # noqa: BLE001
            _failure(rec, hidden, error, f"{exercise.function} raised {type(error).__name__}: {error}\n"
                                         + _student_traceback(error))
            continue
        if got is None:
            rec.done("not solved", "exercise not solved yet: the function returns None")
            continue
        wrong = ex_mod.differences(got, expected, exercise.tolerance, reveal=exercise.reveal)
        if not wrong:
            rec.done("passed")
        else:
            rec.done("wrong", "wrong result" if hidden else "\n".join(wrong))
    rec.finish()


def _student_traceback(error: BaseException) -> str:
    """The traceback's frames in the student's cell only."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<")]
    return "".join(traceback.format_list(frames)).rstrip()


# ----------------------------------------------------------------- in the grading process
def grade_one(exercise, submission: Path, time_limit: float = DEFAULT_TIME_LIMIT,
              backend: str = "cpu") -> dict:
    """Grade one exercise of one submission in a separate process; a row of grades.csv
    (without the student) plus the list of checks."""
    with tempfile.TemporaryDirectory(prefix="gpulab-grade-") as tmp:
        result = Path(tmp) / "result.json"
        env = dict(os.environ, GPULAB_BACKEND=backend, PYTHONDONTWRITEBYTECODE="1",
                   PYTHONPATH=os.pathsep.join([str(paths.REPO), os.environ.get("PYTHONPATH", "")]))
        command = [sys.executable, "-m", "gpulab.grading", exercise.id, str(Path(submission).resolve()),
                   str(result), "--backend", backend]
        start = time.monotonic()
        proc = subprocess.Popen(command, cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        timed_out = False
        try:
            _, stderr = proc.communicate(timeout=time_limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            _, stderr = proc.communicate()
        seconds = time.monotonic() - start
        data = json.loads(result.read_text()) if result.is_file() else {"checks": [], "current": None,
                                                                         "final": None}
    return _summarise(exercise, data, proc.returncode, timed_out, time_limit,
                      stderr.decode(errors="replace"), seconds)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _summarise(exercise, data: dict, returncode: int, timed_out: bool, time_limit: float,
               stderr: str, seconds: float) -> dict:
    checks = list(data["checks"])
    final = data["final"]
    current = data["current"]
    if timed_out or final is None:
        if timed_out:
            status, why = "time limit", f"stopped after the time limit of {time_limit:.0f} s"
        elif returncode < 0:
            status, why = "crashed", f"the process died ({signal.Signals(-returncode).name})"
        else:
            status, why = "crashed", f"the process exited with status {returncode}"
        if current is not None:
            where = current["name"]
            tail = "" if current["hidden"] else "\n" + "\n".join(stderr.strip().splitlines()[-8:])
            checks.append({**current, "status": status, "message": f"{why} in {where}{tail}".rstrip()})
        message = f"{why}" + (f" in {current['name']}" if current else "")
        if current is None and returncode > 0 and not timed_out:
            message += ":\n" + "\n".join(stderr.strip().splitlines()[-8:])   # the grader itself failed
        final = {"status": status, "message": message}
    total = len(_cases(exercise))
    passed = sum(c["status"] == "passed" for c in checks)
    status = final.get("status")
    if status is None:
        status = min((c["status"] for c in checks), key=STATUSES.index, default="passed")
    message = final.get("message") or _first_problem(checks)
    return {"exercise": exercise.id, "chapter": exercise.chapter, "title": exercise.title,
            "points": exercise.points if status == "passed" and passed == total else 0,
            "max_points": exercise.points, "passed_checks": passed, "total_checks": total,
            "status": status, "message": message, "checks": checks, "seconds": round(seconds, 1)}


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


def students(submissions: Path) -> list[Path]:
    folders = sorted(p for p in Path(submissions).iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    if not folders:
        raise GpulabError(f"{submissions} has no student folders; expected one folder per student, "
                                "each a copy of the student version with their edits")
    return folders


def grade(submissions: str | Path, out: str | Path, feedback: str | Path | None = None,
          time_limit: float = DEFAULT_TIME_LIMIT, backend: str = "cpu", only=None,
          jobs: int | None = None, progress=None) -> pd.DataFrame:
    """Grade every student folder under ``submissions``; write ``out`` (CSV) and one
    Markdown feedback file per student under ``feedback`` (default: ``<out>`` without
    its suffix, plus ``-feedback/``). Returns the grades."""
    submissions, out = Path(submissions), Path(out)
    if not submissions.is_dir():
        raise GpulabError(f"submissions folder {submissions} does not exist (expected a folder with one "
                          "sub-folder per student)")
    if not ex_mod.solutions_present():
        raise GpulabError(f"{paths.REPO} is a student copy (no solutions, no hidden checks): grade from the "
                           "instructors' copy of the lab")
    chosen = [ex_mod.get(i) for i in only] if only else list(ex_mod.EXERCISES)
    feedback = Path(feedback) if feedback else out.with_name(out.stem + "-feedback")
    jobs = jobs or max(1, min(4, os.cpu_count() or 1))
    folders = students(submissions)
    # Exercise by exercise, so that one student's hang runs beside the others' work, not last.
    work = [(student, exercise) for exercise in chosen for student in folders]

    def one(item):
        student, exercise = item
        row = grade_one(exercise, student, time_limit, backend)
        if progress:
            progress(f"{student.name} {exercise.id}: {row['status']} ({row['points']}/{row['max_points']}, "
                     f"{row['seconds']} s)")
        return {"student": student.name, **row}

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        rows = list(pool.map(one, work))
    order = {(s.name, e.id): (i, j) for i, s in enumerate(folders) for j, e in enumerate(chosen)}
    rows.sort(key=lambda row: order[row["student"], row["exercise"]])
    out.parent.mkdir(parents=True, exist_ok=True)
    grades = pd.DataFrame(rows)
    grades[COLUMNS].to_csv(out, index=False)
    feedback.mkdir(parents=True, exist_ok=True)
    for name, group in grades.groupby("student", sort=False):
        (feedback / f"{name}.md").write_text(feedback_text(name, group.to_dict("records")))
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


def main(argv=None) -> int:
    """The worker: ``python -m gpulab.grading EXERCISE SUBMISSION RESULT [--backend cpu]``."""
    parser = argparse.ArgumentParser(prog="python -m gpulab.grading")
    parser.add_argument("exercise")
    parser.add_argument("submission", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--backend", default="cpu", choices=("cpu", "gpu"))
    args = parser.parse_args(argv)
    evaluate(args.exercise, args.submission, args.result, args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Write one chapter's part of the three sample submissions under tests/fixtures/grading/submissions/,
and its expected grades (tests/fixtures/grading/expected_grades/<chapter>.csv), from the lab's own
solutions.

    python tools/make_sample_submissions.py CHAPTER [CHAPTER ...]      # or --all

Run it after adding or changing a chapter's exercise (its kernel, its cell, its checks), then read the
grades it prints before committing. ada answers every exercise with the lab's solution; ben and cy
answer the exercises that tests/fixtures/grading/samples/<chapter>.json names (the solution, a
known-wrong answer of tests/fixtures/grading/wrong/, or the solution edited into a kernel that hangs,
one that does not compile, a cell that raises). ben leaves the others as the student version has
them ("not solved"); cy hands in the starter only where ben answers the exercise, and nothing where
ben hands in the starter ("missing"): grading the same starter twice, each time in a sandbox of its
own, would prove nothing more and cost the grading test about 3 CPU-s an exercise.
Each sample holds only the files the grader reads: the chapter's exercise kernels, and its notebook
trimmed to the exercise cells. Other chapters' files are left as they are.

What it writes depends only on the lab's files (no date, no random cell id), so
tests/test_grading.py checks, without grading, that the committed samples are what
:func:`sample_files` writes now: a kernel or cell changed without re-running this script fails there.
"""
import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pandas as pd

from gpulab import chapters, exercises, paths
from gpulab.student import strip_solutions

FIXTURES = paths.REPO / "tests" / "fixtures" / "grading"
SUBMISSIONS = FIXTURES / "submissions"
SAMPLES = FIXTURES / "samples"
EXPECTED = FIXTURES / "expected_grades"
STUDENTS = ("ada", "ben", "cy")
NOTE_CELL = "sample-note"


def lab_text(exercise) -> str:
    if exercise.kind == "kernel":
        return (paths.REPO / exercise.file).read_text()
    return exercises.notebook_cell(paths.REPO / exercise.file, exercise.cell)


def solution(exercise) -> str:
    """The lab's answer as a student would hand it in (no markers)."""
    comment = "//" if exercise.kind == "kernel" else "#"
    return re.sub(rf"^[ \t]*{comment} (BEGIN|END) SOLUTION[^\n]*\n", "", lab_text(exercise), flags=re.M)


def unsolved(exercise) -> str:
    return strip_solutions(lab_text(exercise), "//" if exercise.kind == "kernel" else "#")


def wrong(exercise, name: str) -> str:
    """A known-wrong answer, without the comment lines that say what is wrong."""
    text = (FIXTURES / "wrong" / exercise.id / name).read_text()
    return "".join(line for line in text.splitlines(True) if not re.match(r"^(//|#) (WRONG|rejected by)", line))


def answer(exercise, spec) -> str:
    """The text a plan entry stands for: ``"solution"``, ``{"wrong": "<file>"}`` (a known-wrong
    answer), or ``{"edit": [[old, new], ...], "why": "..."}`` (the solution with each ``old``
    replaced by ``new``; every ``old`` must be there)."""
    if spec == "solution":
        return solution(exercise)
    if isinstance(spec, dict) and set(spec) == {"wrong"}:
        return wrong(exercise, spec["wrong"])
    if isinstance(spec, dict) and set(spec) == {"edit", "why"}:
        text = solution(exercise)
        for old, new in spec["edit"]:
            if old not in text:
                raise ValueError(f"{exercise.id}: the edit '{old}' -> '{new}' ({spec['why']}) finds no "
                                 f"'{old}' in the solution any more; update {SAMPLES.name}/{exercise.chapter}.json")
            text = text.replace(old, new)
        return text
    raise ValueError(f"{exercise.id}: a sample answer is \"solution\", {{\"wrong\": FILE}} or "
                     f"{{\"edit\": [[OLD, NEW], ...], \"why\": TEXT}}, not {spec!r}")


def chapter_exercises(chapter: str) -> list:
    return [e for e in exercises.all_exercises() if e.chapter == chapter]


def plan(chapter: str) -> dict[str, dict]:
    """Each student's answers (exercise id -> plan entry) for the chapter's exercises."""
    path = SAMPLES / f"{chapter}.json"
    plans = json.loads(path.read_text()) if path.is_file() else {}
    ids = {e.id for e in chapter_exercises(chapter)}
    for student, answers in plans.items():
        if student not in STUDENTS[1:] or not set(answers) <= ids:
            raise ValueError(f"{path}: expected answers of {', '.join(STUDENTS[1:])} to the chapter's "
                             f"exercises ({', '.join(sorted(ids))}), got {student}: {sorted(answers)}")
    return {"ada": {i: "solution" for i in sorted(ids)}, **{s: plans.get(s, {}) for s in STUDENTS[1:]}}


def chapter_folders(chapter: str) -> list[Path]:
    """Where a sample submission keeps a chapter's files, relative to SUBMISSIONS."""
    return [Path(student) / top / chapter for student in STUDENTS for top in ("kernels", "book")]


def sample_files(chapter: str) -> dict[Path, str]:
    """The chapter's files of the three samples (path relative to SUBMISSIONS -> text)."""
    files = {}
    plans = plan(chapter)
    for student, answers in plans.items():
        cells = {}
        for exercise in chapter_exercises(chapter):
            if not any(Path(exercise.file).is_relative_to(Path(top) / chapter) for top in ("kernels", "book")):
                raise ValueError(f"{exercise.id}: {exercise.file} is outside kernels/{chapter}/ and book/{chapter}/")
            if student == "cy" and exercise.id not in answers and exercise.id not in plans["ben"]:
                continue        # ben hands in the starter already: cy hands in nothing ("missing")
            text = answer(exercise, answers[exercise.id]) if exercise.id in answers else unsolved(exercise)
            if exercise.kind == "kernel":
                files[Path(student) / exercise.file] = text
                # A chapter header the kernel includes from kernels/ (a student's copy has it; the
                # grader's own tree has kernels/common/ only).
                for header in re.findall(rf"^#include\s*<({chapter}/[^>]+)>", text, re.M):
                    files[Path(student) / "kernels" / header] = (paths.REPO / "kernels" / header).read_text()
            else:
                cells.setdefault(exercise.file, []).append((exercise.cell, text))
        for file, texts in cells.items():
            files[Path(student) / file] = _notebook(texts)
    return files


def _notebook(cells: list[tuple[str, str]]) -> str:
    nb = nbformat.v4.new_notebook()
    note = nbformat.v4.new_markdown_cell("A sample submission, trimmed to the cells the grader reads "
                                         "(a real one is the whole notebook).")
    note["id"] = NOTE_CELL
    nb.cells.append(note)
    for cell_id, text in cells:
        cell = nbformat.v4.new_code_cell(text.rstrip("\n"))
        cell["id"] = cell_id                     # (nbformat gives a random one)
        nb.cells.append(cell)
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    return nbformat.writes(nb) + "\n"


def committed_files(chapter: str) -> dict[Path, str]:
    """The chapter's files of the samples as they are on disk."""
    return {path.relative_to(SUBMISSIONS): path.read_text() for folder in chapter_folders(chapter)
            for path in sorted((SUBMISSIONS / folder).rglob("*")) if path.is_file()}


def write(chapter: str) -> None:
    for path in committed_files(chapter):
        (SUBMISSIONS / path).unlink()
    for path, text in sample_files(chapter).items():
        (SUBMISSIONS / path).parent.mkdir(parents=True, exist_ok=True)
        (SUBMISSIONS / path).write_text(text)
    for folder in chapter_folders(chapter):                  # folders left empty
        if (SUBMISSIONS / folder).is_dir() and not any((SUBMISSIONS / folder).rglob("*")):
            (SUBMISSIONS / folder).rmdir()


def grade(chapter: str) -> pd.DataFrame:
    """Grade the samples on the chapter's exercises and write its expected grades."""
    ids = [e.id for e in chapter_exercises(chapter)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "grades.csv"
        subprocess.run([sys.executable, "-m", "gpulab", "grade", str(SUBMISSIONS), "--out", str(out),
                        "--time-limit", "60", *[a for i in ids for a in ("--exercise", i)]], check=True)
        grades = pd.read_csv(out)
    EXPECTED.mkdir(parents=True, exist_ok=True)
    grades[["student", "exercise", "points", "status"]].to_csv(EXPECTED / f"{chapter}.csv", index=False)
    return grades


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="the chapters to write (default: none; see --all)")
    parser.add_argument("--all", action="store_true", help="every chapter with exercises")
    args = parser.parse_args(argv)
    with_exercises = [c for c in chapters.names() if chapter_exercises(c)]
    chosen = with_exercises if args.all else args.chapters
    unknown = sorted(set(chosen) - set(with_exercises))
    if not chosen or unknown:
        parser.error(f"name chapters with exercises ({', '.join(with_exercises)}), or --all"
                     + (f"; not one of them: {', '.join(unknown)}" if unknown else ""))
    for chapter in chosen:
        write(chapter)
        grades = grade(chapter)
        print(f"{chapter}:\n" + grades.groupby("student")[["points", "max_points"]].sum().to_string())


if __name__ == "__main__":
    main()

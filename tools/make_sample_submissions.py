"""Write the three sample submissions under tests/fixtures/grading/submissions/, and their
expected grades (tests/fixtures/grading/expected_grades.csv), from the lab's own solutions.

    python tools/make_sample_submissions.py

Run it after adding an exercise, then read the grades it prints before committing: ada
answers every exercise with the lab's solution; ben and cy answer a few exercises (wrongly,
with a kernel that hangs, one that reads out of bounds, one that does not compile, a cell
that raises) and leave the others as the student version has them. Each sample holds only
the files the grader reads (the kernels, and the notebooks trimmed to the exercise cells).
"""
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pandas as pd

from gpulab import exercises, paths
from gpulab.student import strip_solutions

FIXTURES = paths.REPO / "tests" / "fixtures" / "grading"
SUBMISSIONS = FIXTURES / "submissions"


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


def write(student: str, answers: dict) -> None:
    notebooks = {}
    for exercise in exercises.EXERCISES:
        text = answers.get(exercise.id, unsolved(exercise))
        if exercise.kind == "kernel":
            path = SUBMISSIONS / student / exercise.file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        else:
            notebooks.setdefault(exercise.file, []).append((exercise, text))
    for file, cells in notebooks.items():
        nb = nbformat.v4.new_notebook()
        note = nbformat.v4.new_markdown_cell("A sample submission, trimmed to the cells the grader reads "
                                             "(a real one is the whole notebook).")
        note["id"] = "sample-note"
        nb.cells.append(note)
        for exercise, text in cells:
            cell = nbformat.v4.new_code_cell(text.rstrip("\n"))
            cell["id"] = exercise.cell
            nb.cells.append(cell)
        nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                       "language_info": {"name": "python"}}
        path = SUBMISSIONS / student / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(nbformat.writes(nb) + "\n")


def main() -> None:
    get = exercises.get
    shutil.rmtree(SUBMISSIONS, ignore_errors=True)
    write("ada", {e.id: solution(e) for e in exercises.EXERCISES})
    write("ben", {
        "basics.1": solution(get("basics.1")),
        "basics.2": wrong(get("basics.2"), "axes_swapped.cu"),
        "measuring.1": solution(get("measuring.1")),
        "measuring.2": wrong(get("measuring.2"), "milliseconds_as_seconds.py"),
        "fcnet.1": wrong(get("fcnet.1"), "relu_always.cu"),
        "fcnet.2": solution(get("fcnet.2")),
        "fcnet.3": solution(get("fcnet.3")),
        "alexnet.1a": solution(get("alexnet.1a")),
        "alexnet.1b": wrong(get("alexnet.1b"), "typed_in_number.py"),   # right on the public run only
        "alexnet.3": solution(get("alexnet.3")),
    })
    saxpy = solution(get("measuring.1"))
    hangs = saxpy.replace("i += stride", "i += blockIdx.x * blockDim.x")   # block 0 strides by 0
    fcnet_1 = solution(get("fcnet.1"))
    no_semicolon = fcnet_1.replace("float acc = 0.0f;", "float acc = 0.0f")
    measuring_2 = solution(get("measuring.2"))
    raises = measuring_2.replace('ladder["size"].max()', 'ladder["n"].max()')            # KeyError
    assert hangs != saxpy and no_semicolon != fcnet_1 and raises != measuring_2
    write("cy", {
        "basics.3": wrong(get("basics.3"), "not_atomic.cu"),
        "measuring.1": hangs,
        "measuring.2": raises,
        "fcnet.1": no_semicolon,
        "fcnet.2": solution(get("fcnet.2")),
        "alexnet.1a": wrong(get("alexnet.1a"), "no_filter_guard.cu"),
    })
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "grades.csv"
        subprocess.run([sys.executable, "-m", "gpulab", "grade", str(SUBMISSIONS), "--out", str(out),
                        "--time-limit", "60"], check=True)
        grades = pd.read_csv(out)
    grades[["student", "exercise", "points", "status"]].to_csv(FIXTURES / "expected_grades.csv", index=False)
    print(grades.groupby("student")[["points", "max_points"]].sum().to_string())


if __name__ == "__main__":
    main()

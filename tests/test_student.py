import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpulab
from gpulab import exercises, paths, student
from gpulab.student import INSTRUCTOR_ONLY, find_solutions, solution_fingerprints, strip_notebook, strip_solutions
from gpulab.workloads import measuring as saxpy


def test_cu_solution_becomes_a_todo_and_keeps_indentation():
    text = "void k() {\n    // BEGIN SOLUTION\n    int i = 1;\n    // END SOLUTION\n}\n"
    assert strip_solutions(text) == "void k() {\n    // TODO: your code here\n}\n"


def test_unbalanced_markers_are_an_error():
    with pytest.raises(ValueError, match="unbalanced"):
        strip_solutions("// BEGIN SOLUTION\nsecret\n")


def test_notebook_cells_are_stripped_and_cleared():
    nb = {"cells": [{"cell_type": "code", "source": "a = 1\n# BEGIN SOLUTION\nb = 2\n# END SOLUTION\nprint(a)",
                     "outputs": [{"output_type": "stream", "text": "1"}], "execution_count": 3},
                    {"cell_type": "code", "source": "show(kernel)", "metadata": {},
                     "outputs": [{"output_type": "stream", "text": "a solution shown in an output"}]},
                    {"cell_type": "code", "source": 'exercises.check("x.1", globals())', "metadata": {},
                     "outputs": []},
                    {"cell_type": "markdown", "source": "# BEGIN SOLUTION is only a phrase here"}]}
    out = strip_notebook(nb)
    assert out["cells"][0]["source"] == "a = 1\n# TODO: your code here\nprint(a)"
    assert out["cells"][0]["outputs"] == [] and out["cells"][0]["execution_count"] is None
    assert out["cells"][1]["outputs"] == []                     # every output goes, not only changed cells'
    assert out["cells"][2]["metadata"]["tags"] == ["raises-exception"]
    assert out["cells"][3] == nb["cells"][3]


@pytest.fixture(scope="module")
def student_copy(tmp_path_factory):
    dest = tmp_path_factory.mktemp("copy") / "student"
    result = subprocess.run([sys.executable, "-m", "gpulab", "student", str(dest)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return dest


def test_student_version_of_the_whole_lab(student_copy):
    dest = student_copy
    exercise = dest / "kernels" / saxpy.EXERCISE.file
    text = exercise.read_text()
    assert "TODO: your code here" in text and "stride" not in text.split("{", 1)[1]
    for path in list(dest.rglob("*.cu")) + list(dest.rglob("*.ipynb")):
        assert "BEGIN SOLUTION" not in path.read_text(), path
        assert "between the markers" not in path.read_text(), f"{path}: the copy has no markers"
    notebook = json.loads((dest / "book/measuring/measuring.ipynb").read_text())
    assert any("TODO: your code here" in "".join(c["source"]) for c in notebook["cells"])
    for pattern in INSTRUCTOR_ONLY:
        assert any(paths.REPO.glob(pattern)), f"{pattern} names nothing in the lab"
        assert not any(dest.glob(pattern)), pattern
    assert (dest / "book/fcnet/exercises.py").is_file()         # the declarations stay, the hidden checks go
    assert (dest / "labdata/exercises/expected.json").is_file()
    # The stripped kernel still compiles, and the exercise's check now fails.
    module = gpulab.load_module(exercise, "cpu")
    x, y = saxpy.make_inputs(1000)
    z = np.full(1000, np.nan, np.float32)
    module.saxpy_grid_stride(saxpy.EXERCISE.grid(1000), saxpy.BLOCK, (1000, saxpy.A, x, y, z))
    assert not gpulab.compare(z, saxpy.reference(saxpy.A, x, y)).passed
    assert (paths.KERNELS / saxpy.EXERCISE.file).read_text() != text  # the original is untouched


def test_no_solution_anywhere_in_the_student_copy(student_copy):
    fingerprints = solution_fingerprints()
    assert len(fingerprints["lines"]) >= 2 * len(exercises.EXERCISES)
    # The search finds the solutions where they are (the lab itself), and none in the copy.
    assert len(find_solutions(paths.REPO / "kernels", fingerprints)) >= 3
    assert find_solutions(student_copy, fingerprints) == []


def _tests_naming(path: Path, names: set, root: Path) -> list[str]:
    """The test functions of ``path`` that use one of ``names``, directly or through the
    file's own helper functions, as pytest node ids."""
    tree = ast.parse(path.read_text())
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    uses = {name: {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
                   if isinstance(n, (ast.Name, ast.Attribute))} | set(re.findall(r"[\w.]+\.cu", ast.unparse(node)))
            for name, node in functions.items()}
    tainted = {name for name, used in uses.items() if used & names}
    while True:
        more = {name for name, used in uses.items() if used & tainted} - tainted
        if not more:
            break
        tainted |= more
    relative = path.relative_to(root).as_posix()
    return [f"{relative}::{name}" for name in sorted(tainted) if name.startswith("test_")]


@pytest.mark.slow
def test_student_copy_checks_say_not_solved(student_copy):
    """The copy's tests pass except the exercises' checks, which say "exercise not solved yet".
    (Run here: the test files that name an exercise; tests that need a solution are marked
    ``@pytest.mark.solutions`` and skip themselves in a student copy.)"""
    names = {"EXERCISE", "EXERCISES"} | {Path(e.file).name for e in exercises.EXERCISES}
    tests = [t for p in sorted((student_copy / "tests").glob("test_*.py"))
             for t in _tests_naming(p, names, student_copy)]
    assert any(t.startswith("tests/test_exercises.py::test_public_check") for t in tests)
    result = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider",
                             *tests], cwd=student_copy,
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(student_copy)})
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == len(exercises.EXERCISES), result.stdout[-3000:]
    assert all("test_public_check[cpu-" in line for line in failed), failed
    assert result.stdout.count("exercise not solved yet") >= len(exercises.EXERCISES)


@pytest.mark.slow
def test_student_book_has_no_solution(student_copy, tmp_path):
    """The student book (built here without executing the notebooks, to stay cheap: CI builds
    and searches the executed one) shows no solution in its pages, sources or search index."""
    book = tmp_path / "book"
    shutil.copytree(student_copy, book)
    config = (book / "_config.yml").read_text()
    (book / "_config.yml").write_text(config.replace("execute_notebooks: force", "execute_notebooks: \"off\""))
    result = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", "--keep-going", str(book)],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(book)})
    html = book / "_build" / "html"
    assert (html / "book/fcnet/fcnet.html").is_file(), result.stdout[-3000:]
    assert (html / "_sources/book/fcnet/fcnet.ipynb").is_file()
    assert find_solutions(html) == []
    # The search is able to fail: the instructors' notebooks in the same place are found.
    shutil.copy(paths.REPO / "book/fcnet/fcnet.ipynb", html / "_sources/book/fcnet/fcnet.ipynb")
    assert find_solutions(html)


def test_instructor_only_paths_match_every_chapters_hidden_checks():
    from gpulab.student import instructor_only
    assert instructor_only("book/lenet/hidden_checks.py") and instructor_only("book/x/hidden_checks.py")
    assert instructor_only("tests/fixtures/grading") and instructor_only("tests/fixtures/grading/wrong/a.cu")
    assert not instructor_only("book/lenet/exercises.py") and not instructor_only("book/lenet/lenet.ipynb")
    assert not instructor_only("tests/fixtures/glued") and not instructor_only("tests/test_grading_other.py")


def test_what_git_ignores_is_listed_and_a_folder_outside_git_lists_nothing(tmp_path):
    repo = tmp_path / "repo"
    (repo / "staged" / "book").mkdir(parents=True)
    (repo / "book").mkdir()
    (repo / ".gitignore").write_text("staged/\n*.log\n")
    (repo / "book" / "a.ipynb").write_text("{}")
    (repo / "book" / "run.log").write_text("")
    (repo / "staged" / "book" / "a.ipynb").write_text("{}")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    assert student.ignored_by_git(repo) == {"staged", "book/run.log"}
    assert student.ignored_by_git(tmp_path) == set()          # not a checkout: the pattern list stands in


def test_the_student_copy_holds_nothing_git_ignores(student_copy):
    # A copy staged in an ignored folder (e.g. for the device) once stopped every student build.
    ignored = student.ignored_by_git(paths.REPO)
    assert [p for p in ignored if (student_copy / p).exists()] == []

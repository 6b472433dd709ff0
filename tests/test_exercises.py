"""Every exercise's public check, on the lab's own answers: in the instructor's copy they
pass; in a student copy each unsolved exercise fails with "exercise not solved yet"."""
import json
import re
import sys

import numpy as np
import pytest

from gpulab import exercises, paths
from gpulab.exercises import EXERCISES


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_public_check(exercise, backend):
    if exercise.kind == "kernel":
        result = exercises.check(exercise.id, backend=backend)
    elif backend != "cpu":
        pytest.skip("a function exercise runs no kernel")
    else:
        source = exercises.notebook_cell(paths.REPO / exercise.file, exercise.cell)
        assert source is not None, f"{exercise.file} has no cell {exercise.cell}"
        result = exercises.check(exercise.id, {exercise.function: exercises.define(exercise, source)})
    assert "correct" in repr(result)
    for line in result.lines:      # in words: no Python dict, list of lists or 17-digit float
        assert not re.search(r"[{}]|\[\[|\d\.\d{6,}|': ", line), f"{exercise.id}: {line}"


def test_a_right_answer_is_described_in_words():
    describe = exercises.describe_answer
    assert describe({"1": 0.41189, "2": 0.51927}) == "1: 0.4119; 2: 0.5193"
    assert describe({"sums": [[99.0, 1.0], [99.0, 1.0]], "sent_bytes": [40, 40]}) == \
        "sums: 2 equal lists of 2 values: 99, 1; sent_bytes: 40, 40"
    assert describe(2149.09375) == "2149" and describe(19922.5) == "19,922" and describe(32768) == "32,768"
    assert describe(list(range(0, 1024, 16))) == "64 values: 0, 16, 32, 48, ..., 1008"
    assert describe({"fp32": {"x floor": 0.8624}}) == "fp32: (x floor: 0.8624)"
    assert exercises.get("alexnet.3").describe({"1": 0.41, "2": 0.52}) == \
        "step 14 runs layer 1 at 41%, layer 2 at 52% of the measured FP32 rate"
    assert exercises.get("multigpu.1").describe({"sums": [[1.0, 2.0], [1.0, 2.0]], "sent_bytes": [8, 8]}) == \
        "all 2 GPUs end with the same 2 sums; they sent 8, 8 bytes"


def test_declarations_are_complete():
    ids = [e.id for e in EXERCISES]
    assert len(ids) == len(set(ids))
    for exercise in EXERCISES:
        assert (paths.REPO / exercise.file).is_file(), exercise.file
        assert exercise.points > 0
        if exercise.kind == "function":
            assert exercises.notebook_cell(paths.REPO / exercise.file, exercise.cell) is not None


def test_a_wrong_number_is_explained():
    problems = exercises.differences({"a": 2000.0, "b": 0.5}, {"a": 2.0, "b": 2.0}, 0.01)
    assert "factor of 1e3" in problems[0] and "reciprocal" not in problems[0]
    assert "is 0.5, expected 2" in problems[1] and "reciprocal" in problems[1]
    assert exercises.differences({"a": 2.01}, {"a": 2.0}, 0.01) == []
    assert "lacks the keys ['b']" in exercises.differences({"a": 1}, {"a": 1, "b": 2}, 0.01)[0]
    assert exercises.differences(exercises.plain(np.int64(4)), 4, 0.0) == []
    assert exercises.differences("4", 4, 0.0) == ["your answer should be a number, got str '4'"]


def test_unsolved_function_exercise_says_so():
    exercise = exercises.get("fcnet.2")
    with pytest.raises(exercises.ExerciseNotSolved, match="exercise not solved yet"):
        exercises.check(exercise.id, {})
    skeleton = "def ways(vectors, features, row_halves=72):\n    '''doc'''\n    # TODO: your code here\n"
    with pytest.raises(exercises.ExerciseNotSolved, match="exercise not solved yet"):
        exercises.check(exercise.id, {"ways": exercises.define(exercise, skeleton)})


def test_wrong_function_answer_is_explained():
    with pytest.raises(exercises.ExerciseFailed, match="Hint: Two halves share") as info:
        exercises.check("fcnet.2", {"ways": lambda vectors, features, row_halves=72: 32})
    assert "your answer is 32, which is not right" in str(info.value)
    assert "expected" not in str(info.value)           # fcnet.2 does not give its answers away
    with pytest.raises(exercises.ExerciseFailed, match="expected"):
        exercises.check("alexnet.1b", {"speedup_over_step_2": lambda totals: 1e-3})


def test_every_solution_belongs_to_a_declared_exercise():
    """A solution block outside the declared exercises' files and cells would be stripped
    from the student copy but never checked or graded: declare it in book/<chapter>/exercises.py."""
    declared_files = {e.file for e in EXERCISES if e.kind == "kernel"}
    declared_cells = {(e.file, e.cell) for e in EXERCISES if e.kind == "function"}
    undeclared = []
    for path in sorted((paths.REPO / "kernels").rglob("*.cu*")):
        relative = path.relative_to(paths.REPO).as_posix()
        if "// BEGIN SOLUTION" in path.read_text() and relative not in declared_files:
            undeclared.append(relative)
    for path in sorted((paths.REPO / "book").rglob("*.ipynb")):
        relative = path.relative_to(paths.REPO).as_posix()
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and "# BEGIN SOLUTION" in source \
                    and (relative, cell.get("id")) not in declared_cells:
                undeclared.append(f"{relative} cell {cell.get('id')}")
    assert not undeclared, f"solutions outside any declared exercise: {undeclared}"


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_the_book_has_a_check_cell_for_every_exercise(exercise):
    notebook = paths.REPO / "book" / exercise.chapter / f"{exercise.chapter}.ipynb"
    sources = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]]
    assert any(f'exercises.check("{exercise.id}"' in s for s in sources), \
        f"{notebook.name} has no cell calling exercises.check(\"{exercise.id}\", ...)"


def test_a_copy_opened_with_another_labs_gpulab_refuses_to_check_or_show_kernels(tmp_path, monkeypatch):
    # A student copy whose notebook imports the instructors' gpulab (an editable install from
    # elsewhere) would check, and print, the instructors' kernels: it must refuse, saying why.
    from gpulab.errors import OtherLabError
    from gpulab.kernels import show_source
    copy = tmp_path / "student-copy"
    (copy / "gpulab").mkdir(parents=True)
    (copy / "gpulab" / "__init__.py").write_text("")
    (copy / "kernels" / "fcnet").mkdir(parents=True)
    (copy / "book" / "fcnet").mkdir(parents=True)
    monkeypatch.chdir(copy / "book" / "fcnet")
    assert paths.lab_around(copy / "book" / "fcnet") == copy.resolve()
    with pytest.raises(OtherLabError, match=f"in the lab at {copy.resolve()}.*imported gpulab from {paths.REPO}"):
        exercises.check("fcnet.1", backend="cpu")
    with pytest.raises(OtherLabError, match="pip install -e"):
        show_source("fcnet/16_exercise_matmul_relu.cu")
    monkeypatch.chdir(tmp_path)                    # outside any lab: nothing to refuse
    assert "matmul_relu" in show_source("fcnet/16_exercise_matmul_relu.cu").text
    monkeypatch.chdir(paths.REPO / "book" / "fcnet")
    paths.require_this_lab()


@pytest.mark.solutions            # the hidden checks: instructors only, like the solutions
def test_each_chapter_declares_its_own_exercises_beside_its_notebook():
    """Exercises register per chapter: ``book/<chapter>/exercises.py`` and ``hidden_checks.py``,
    found through the toc, in its order; every declared exercise has hidden checks there."""
    from gpulab import chapters
    order = chapters.names()
    assert [e.chapter for e in EXERCISES] == sorted((e.chapter for e in EXERCISES), key=order.index)
    for name in order:
        declared = exercises._declared(name)
        folder = paths.REPO / "book" / name
        assert bool(declared) == (folder / exercises.DECLARATIONS).is_file(), name
        assert bool(declared) == (folder / exercises.HIDDEN_CHECKS).is_file(), name
        assert set(exercises.hidden_checks(name)) == {e.id for e in declared}, name
        for exercise in declared:
            assert exercise.chapter == name and exercises.hidden_cases(exercise), exercise.id
    assert not list((paths.REPO / "gpulab").rglob(exercises.HIDDEN_CHECKS))


def test_a_chapter_declaring_another_chapters_exercise_or_hidden_cases_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "book" / "zzdemo"
    folder.mkdir(parents=True)
    (folder / "exercises.py").write_text(
        "from gpulab.exercises import Exercise\n"
        "EXERCISES = [Exercise('fcnet.9', 'fcnet', 't', 1, 'kernel', 'kernels/x.cu', public=({},))]\n")
    monkeypatch.setattr(paths, "REPO", tmp_path)
    with pytest.raises(exercises.GpulabError, match="declares fcnet.9 of chapter 'fcnet'"):
        exercises._declared("zzdemo")
    other = tmp_path / "book" / "zzdemo2"
    other.mkdir()
    (other / "exercises.py").write_text(
        "from gpulab.exercises import Exercise\n"
        "EXERCISES = [Exercise('zzdemo2.1', 'zzdemo2', 't', 1, 'kernel', 'kernels/x.cu', public=({},))]\n")
    (other / "hidden_checks.py").write_text("HIDDEN = {'zzdemo2.2': ({},)}\n")
    assert [e.id for e in exercises._declared("zzdemo2")] == ["zzdemo2.1"]
    with pytest.raises(exercises.GpulabError, match="it names zzdemo2.2"):
        exercises.hidden_checks("zzdemo2")
    for name in [m for m in sys.modules if m.startswith("gpulab._book.zzdemo")]:
        del sys.modules[name]          # loaded from a folder that is about to go


def test_the_lab_answers_to_the_public_cases_are_not_empty():
    """A solution that finds nothing -- a variant renamed in the run, so that convpool.3's CUDNN_LAYER
    names no row -- would make an empty answer the right one, and every check pass on it."""
    for exercise in EXERCISES:
        if exercise.kind == "function":
            for answer in exercises.expected_answers(exercise):
                assert answer not in (None, {}, [], ""), f"{exercise.id}: the lab's answer is {answer!r}"


_HEADING = re.compile(r"^(?:#+ |\*\*)Exercise (\d+)([a-z]?)\b", re.M)


def _exercise_order(chapter: str) -> list[tuple[str, str]]:
    """("heading", its number) and ("check", the exercise id) in the order the notebook shows them."""
    notebook = paths.REPO / "book" / chapter / f"{chapter}.ipynb"
    order = []
    for cell in json.loads(notebook.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            order += [("heading", number + part) for number, part in _HEADING.findall(source)]
        else:
            order += [("check", i) for i in re.findall(r'exercises\.check\("([^"]+)"', source)]
    return order


@pytest.mark.parametrize("chapter", sorted({e.chapter for e in EXERCISES}))
def test_exercises_are_numbered_in_reading_order(chapter):
    """A chapter's exercise headings read 1, 2, 3 top to bottom (a part, "3b", under its number),
    whatever their grading ids, and each check cell sits under the heading of the number its
    exercise shows (Exercise.number): the id is the grader's, the number the reader's."""
    order = _exercise_order(chapter)
    numbers = [int(re.match(r"\d+", n).group()) for kind, n in order if kind == "heading"]
    assert numbers and numbers == sorted(numbers) and sorted(set(numbers)) == list(range(1, max(numbers) + 1)), (
        f"{chapter}'s exercise headings read {numbers} top to bottom: number them 1, 2, 3 in reading order "
        "(Exercise.number in its exercises.py, not the grading id)")
    heading = None
    for kind, value in order:
        if kind == "heading":
            heading = value
            continue
        shown = exercises.get(value).shown
        assert heading in (shown, re.match(r"\d+", shown).group()), (
            f"{chapter}: the check of {value} (shown as Exercise {shown}) is under the heading 'Exercise {heading}'")


def test_a_check_names_the_exercise_by_its_number_in_the_book_and_its_grading_id():
    moved = exercises.get("fcnet.2")
    assert moved.shown == "1" and exercises.get("fcnet.3").shown == "3" and exercises.get("alexnet.1b").shown == "1b"
    with pytest.raises(exercises.ExerciseNotSolved, match=r"^Exercise 1 \(fcnet\.2: count the bank conflicts"):
        exercises.check("fcnet.2", {})
    with pytest.raises(exercises.ExerciseFailed, match=r"^Exercise 1 \(fcnet\.2: "):
        exercises.check("fcnet.2", {"ways": lambda vectors, features, row_halves=72: 32})
    rows = exercises.table().set_index("id")
    assert rows.loc["fcnet.2", "in the book"] == "Exercise 1" and rows.loc["lenet.1b", "in the book"] == "Exercise 3b"

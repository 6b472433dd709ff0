"""Every exercise's public check, on the lab's own answers: in the instructor's copy they
pass; in a student copy each unsolved exercise fails with "exercise not solved yet"."""
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
    with pytest.raises(exercises.ExerciseFailed, match="Hint: Two halves share"):
        exercises.check("fcnet.2", {"ways": lambda vectors, features, row_halves=72: 32})

import json
import subprocess
import sys

import numpy as np
import pytest

import gpulab
from gpulab import paths
from gpulab.student import strip_notebook, strip_solutions
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
                    {"cell_type": "markdown", "source": "# BEGIN SOLUTION is only a phrase here"}]}
    out = strip_notebook(nb)
    assert out["cells"][0]["source"] == "a = 1\n# TODO: your code here\nprint(a)"
    assert out["cells"][0]["outputs"] == [] and out["cells"][0]["execution_count"] is None
    assert out["cells"][1] == nb["cells"][1]


def test_student_version_of_the_whole_lab(tmp_path):
    dest = tmp_path / "student"
    result = subprocess.run([sys.executable, "-m", "gpulab", "student", str(dest)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    exercise = dest / "kernels" / saxpy.EXERCISE.file
    text = exercise.read_text()
    assert "TODO: your code here" in text and "stride" not in text.split("{", 1)[1]
    for path in list(dest.rglob("*.cu")) + list(dest.rglob("*.ipynb")):
        assert "BEGIN SOLUTION" not in path.read_text(), path
    notebook = json.loads((dest / "book/measuring/measuring.ipynb").read_text())
    assert any("TODO: your code here" in "".join(c["source"]) for c in notebook["cells"])
    # The stripped kernel still compiles, and the exercise's check now fails.
    module = gpulab.load_module(exercise, "cpu")
    x, y = saxpy.make_inputs(1000)
    z = np.full(1000, np.nan, np.float32)
    module.saxpy_grid_stride(saxpy.EXERCISE.grid(1000), saxpy.BLOCK, (1000, saxpy.A, x, y, z))
    assert not gpulab.compare(z, saxpy.reference(saxpy.A, x, y)).passed
    assert (paths.KERNELS / saxpy.EXERCISE.file).read_text() != text  # the original is untouched

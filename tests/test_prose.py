"""The numbers the prose quotes: glued for the text, never shown as a cell's raw result."""
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from gpulab.prose import glue, plain


def test_glue_returns_the_plain_values():
    import numpy as np
    assert plain(np.float32(1.5)) == 1.5 and type(plain(np.int64(3))) is int and plain(np.bool_(True)) == "True"
    with pytest.raises(TypeError, match="glue takes numbers and strings"):
        plain([1, 2])


def test_a_cell_ending_in_glue_shows_no_dict(monkeypatch):
    root = Path(__file__).resolve().parents[1]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from gpulab.prose import glue\nvalues = glue(ratio=1.5, name='step 7')\n"
        "assert values == {'ratio': 1.5, 'name': 'step 7'}\nglue(ratio=1.5, name='step 7')")])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    outputs = nb.cells[0].outputs
    assert [o.output_type for o in outputs if o.output_type != "display_data"] == []
    names = [o["metadata"]["scrapbook"]["name"] for o in outputs]
    assert names == ["ratio", "name", "ratio", "name"]

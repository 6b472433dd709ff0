"""The student site takes the outputs of the notebooks the test run executed in a student copy
with the same digest, and executes the ones it cannot take (gpulab.site, conftest.py)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from gpulab import site


def _lab(root: Path) -> Path:
    (root / "book" / "page").mkdir(parents=True)
    (root / "kernels").mkdir()
    (root / "kernels" / "k.cu").write_text("__global__ void k() {}\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A page"), nbformat.v4.new_code_cell("print(6 * 7)")]
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nbformat.write(nb, root / "book" / "page" / "page.ipynb")
    return root


def test_the_digest_names_every_file_but_caches_and_builds(tmp_path):
    lab = _lab(tmp_path / "lab")
    digest = site.lab_digest(lab)
    for junk in ("_build/x", "book/page/__pycache__/x.pyc", "book/page/.ipynb_checkpoints/x"):
        (lab / junk).parent.mkdir(parents=True, exist_ok=True)
        (lab / junk).write_text("anything")
    assert site.lab_digest(lab) == digest
    (lab / "kernels" / "k.cu").write_text("__global__ void k() { }\n")
    assert site.lab_digest(lab) != digest
    (lab / "kernels" / "k.cu").rename(lab / "kernels" / "j.cu")     # same bytes, another place
    assert site.lab_digest(lab) not in (digest, site.lab_digest(_lab(tmp_path / "again")))


def _executed_twin(lab: Path, relative: str, text: str) -> None:
    """What the test run leaves: the notebook with outputs no execution of it would print."""
    nb = nbformat.read(lab / relative, as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    nbformat.write(nb, site.executed_path(lab / relative))


def test_only_a_copy_with_the_same_digest_is_reused(tmp_path, monkeypatch):
    monkeypatch.setattr(site, "EXECUTED", tmp_path / "executed")
    src = _lab(tmp_path / "src")
    ran = Path(shutil.copytree(src, tmp_path / "executed" / f"student-{site.lab_digest(src)}"))
    _executed_twin(ran, "book/page/page.ipynb", "from the test run\n")
    assert site.executed_notebooks(src) == {src / "book/page/page.ipynb": site.executed_path(ran / "book/page/page.ipynb")}
    (src / "kernels" / "k.cu").write_text("// changed\n")
    assert site.executed_notebooks(src) == {}


@pytest.mark.slow
def test_the_build_shows_the_reused_outputs_and_executes_a_changed_notebook(tmp_path):
    src = _lab(tmp_path / "src")
    (src / "book" / "other").mkdir()
    nb = nbformat.read(src / "book/page/page.ipynb", as_version=4)
    nb.cells[0].source, nb.cells[1].source = "# Another page", "print(6 * 9)"
    nbformat.write(nb, src / "book/other/other.ipynb")
    (src / "_config.yml").write_text(yaml.safe_dump({"title": "t", "only_build_toc_files": True,
                                                     "execute": {"execute_notebooks": "force"}}))
    (src / "_toc.yml").write_text(yaml.safe_dump({"format": "jb-book", "root": "book/page/page",
                                                  "chapters": [{"file": "book/other/other"}]}))
    ran = Path(shutil.copytree(src, tmp_path / "ran"))
    nb.cells[1].source = "print(6 * 8)"          # the test run executed other code
    nbformat.write(nb, ran / "book/other/other.ipynb")
    _executed_twin(ran, "book/page/page.ipynb", "from the test run\n")
    _executed_twin(ran, "book/other/other.ipynb", "stale\n")
    site.reuse_executed(src, {src / "book/page/page.ipynb": site.executed_path(ran / "book/page/page.ipynb"),
                              src / "book/other/other.ipynb": site.executed_path(ran / "book/other/other.ipynb")})
    assert yaml.safe_load((src / "_config.yml").read_text())["execute"]["execute_notebooks"] == "cache"
    result = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", str(src)],
                            capture_output=True, text=True, env=dict(os.environ))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    html = src / "_build" / "html" / "book"
    page, other = (html / "page/page.html").read_text(), (html / "other/other.html").read_text()
    assert "from the test run" in page and "42" not in page
    assert "54" in other and "stale" not in other
    # The page's download is the notebook without outputs.
    assert "from the test run" not in (src / "_build/html/_sources/book/page/page.ipynb").read_text()

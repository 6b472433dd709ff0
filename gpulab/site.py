"""Build the book as a website: ``python -m gpulab site [--solutions]``.

The default is the **student** site: the book of the student version (see
:mod:`gpulab.student`), with no solution in its pages, downloads, search index or
notebook outputs. ``--solutions`` builds the instructors' site from the lab as it is.
Either is built from a copy of the lab under ``_build/<student|solutions>/src`` (its
notebooks executed with that copy's own ``gpulab``, so a student page can only show the
student kernels) into ``_build/<student|solutions>/html``.

Launch and download buttons: every chapter page has a download button for its ``.ipynb``.
With ``--repository URL`` (the deploy workflow passes its own repository's address, so a
fork publishes with its own) the pages also get a repository button and a Colab launch
button that opens the chapter's notebook from branch ``--branch`` of that repository (by
default :data:`STUDENT_BRANCH` for the student site, ``main`` for the instructors'), and
each chapter notebook gets a first code cell that, on Colab only, clones that branch and
installs the lab. Without a URL (a local build) there are no launch buttons, so none is
broken.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from . import paths

COLAB_URL = "https://colab.research.google.com"
#: The branch a student site's Colab buttons open unless ``--branch`` names another: the Pages
#: workflow pushes the student version there. Never ``main``, which holds the solutions.
STUDENT_BRANCH = "student"
#: The id of the Colab set-up cell the build adds to each chapter notebook.
COLAB_CELL_ID = "colab-setup"

_COLAB_CELL = '''# On Google Colab, fetch the lab and install it (elsewhere this cell does nothing).
import sys

if "google.colab" in sys.modules:
    import os
    import subprocess

    if not os.path.isdir("/content/gpulab"):
        subprocess.run(["git", "clone", "--depth", "1", "--branch", {branch!r}, {url!r}, "/content/gpulab"],
                       check=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", "/content/gpulab"], check=True)
    sys.path.insert(0, "/content/gpulab")
    os.chdir({chapter_dir!r})'''


def build_dir(solutions: bool) -> Path:
    return paths.REPO / "_build" / ("solutions" if solutions else "student")


def prepare(solutions: bool = False, repository: str | None = None, branch: str | None = None,
            execute: bool = True) -> Path:
    """Make the copy of the lab the site is built from; return its folder."""
    from .student import make_student_version
    src = build_dir(solutions) / "src"
    if src.exists():
        shutil.rmtree(src)
    if solutions:
        ignore = shutil.ignore_patterns(".git", ".venv", "_build", "__pycache__", ".pytest_cache",
                                        "*.egg-info", ".whl", ".ipynb_checkpoints", ".gpu")
        shutil.copytree(paths.REPO, src, ignore=ignore)
    else:
        make_student_version(src)
    configure(src, repository, branch, execute, solutions)
    return src


def configure(src: Path, repository: str | None, branch: str | None, execute: bool,
              solutions: bool = False) -> None:
    """The copy's _config.yml (launch buttons only with a repository URL) and notebooks
    (the Colab set-up cell, cloning ``branch``: by default :data:`STUDENT_BRANCH`, or
    ``main`` for the instructors' site)."""
    config_path = src / "_config.yml"
    config = yaml.safe_load(config_path.read_text())
    if repository:
        repository = repository.rstrip("/").removesuffix(".git")
        branch = branch or ("main" if solutions else STUDENT_BRANCH)
        config["repository"] = {"url": repository, "branch": branch, "path_to_book": ""}
        config.setdefault("html", {})["use_repository_button"] = True
        config["launch_buttons"] = {"colab_url": COLAB_URL, "notebook_interface": "classic"}
        for notebook in sorted((src / "book").glob("*/*.ipynb")):
            add_colab_cell(notebook, repository, branch)
    if not execute:
        config.setdefault("execute", {})["execute_notebooks"] = "off"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))


def add_colab_cell(notebook: Path, repository: str, branch: str) -> None:
    """Put the Colab set-up cell after the notebook's title (hidden in the site)."""
    nb = json.loads(notebook.read_text())
    cells = [c for c in nb["cells"] if c.get("id") != COLAB_CELL_ID]
    chapter_dir = f"/content/gpulab/{notebook.parent.relative_to(notebook.parents[2]).as_posix()}"
    source = _COLAB_CELL.format(url=repository, branch=branch, chapter_dir=chapter_dir)
    cell = {"cell_type": "code", "execution_count": None, "id": COLAB_CELL_ID,
            "metadata": {"tags": ["remove-cell"]}, "outputs": [], "source": source.splitlines(True)}
    first = 1 if cells and cells[0]["cell_type"] == "markdown" else 0
    nb["cells"] = cells[:first] + [cell] + cells[first:]
    notebook.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def build(solutions: bool = False, repository: str | None = None, branch: str | None = None,
          execute: bool = True, strict: bool = True) -> Path:
    """Build the site; return the folder of its HTML (``_build/<kind>/html``)."""
    src = prepare(solutions, repository, branch, execute)
    command = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(src)]
    if strict:
        command += ["--warningiserror", "--nitpick", "--keep-going"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]))
    subprocess.run(command, check=True, env=env)
    html = build_dir(solutions) / "html"
    if html.exists():
        shutil.rmtree(html)
    shutil.copytree(src / "_build" / "html", html)
    (html / ".nojekyll").write_text("")
    (html / "gpulab-site.json").write_text(json.dumps({"kind": "solutions" if solutions else "student",
                                                       "repository": repository, "branch": branch}) + "\n")
    return html

"""Build the book as a website: ``python -m gpulab site [--solutions]``.

The default is the **student** site: the book of the student version (see
:mod:`gpulab.student`), with no solution in its pages, downloads, search index or
notebook outputs. ``--solutions`` builds the instructors' site from the lab as it is.
Either is built from a copy of the lab under ``_build/<student|solutions>/src`` (its
notebooks executed with that copy's own ``gpulab``, so a student page can only show the
student kernels) into ``_build/<student|solutions>/html``.

Executed once: the test run (``pytest``, with ``--nbmake``) also executes every chapter of the
*student* version (:func:`execute_student_notebook`) in a student copy under
``_build/executed/student-<digest>``, ``<digest>`` naming the copy's every file. A student
site whose fresh copy has the same digest takes those outputs instead of executing the
notebooks again (through myst-nb's cache); any other site executes its notebooks. The
instructors' outputs never reach a student page: they are never executed in a student copy.

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

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
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
    executed = executed_notebooks(src) if execute and not solutions else {}
    configure(src, repository, branch, execute, solutions)
    if executed:
        reuse_executed(src, executed)
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


# ----------------------------------------------------------------- notebooks executed once
#: Where the test run leaves the student notebooks it executed, for the site build to reuse.
EXECUTED = paths.REPO / "_build" / "executed"
#: What a digest leaves out: caches and outputs, never what a notebook reads.
_NOT_LAB = {".git", "_build", "__pycache__", ".pytest_cache", ".ipynb_checkpoints"}


def lab_digest(folder: Path) -> str:
    """A name for everything a notebook of the lab at ``folder`` can read (every file's place
    and bytes) and for the Python that runs it: two copies with one digest execute alike."""
    folder = Path(folder)
    digest = hashlib.sha256(f"{sys.version}\0{platform.machine()}\0{os.environ.get('GPULAB_BACKEND', '')}"
                            .encode())
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and not _NOT_LAB.intersection(relative.parts):
            digest.update(relative.as_posix().encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:20]


def student_lab_for_execution() -> Path:
    """The student copy the test run executes notebooks in, ``_build/executed/student-<digest>``:
    made afresh and named by its digest, kept if one by that name exists (another pytest worker
    made it). Copies of other digests older than six hours are removed."""
    EXECUTED.mkdir(parents=True, exist_ok=True)
    from .student import make_student_version
    tmp = Path(tempfile.mkdtemp(prefix="making-", dir=EXECUTED))
    make_student_version(tmp / "lab")
    name = f"student-{lab_digest(tmp / 'lab')}"
    lab = EXECUTED / name
    try:
        os.rename(tmp / "lab", lab)       # atomic: a concurrent worker sees the whole copy or none
    except OSError:
        if not (lab / "gpulab").is_dir():
            raise
    shutil.rmtree(tmp, ignore_errors=True)
    for other in EXECUTED.glob("student-*"):   # earlier runs' (not a concurrent worker's)
        if other.name != name and time.time() - other.stat().st_mtime > 6 * 3600:
            shutil.rmtree(other, ignore_errors=True)
    return lab


def executed_path(notebook: Path) -> Path:
    return notebook.with_name(notebook.stem + ".executed.ipynb")


def execute_student_notebook(lab: Path, relative: str, timeout: int) -> Path:
    """Execute ``lab/relative`` as the book build would (its folder as the working folder, the
    copy's ``gpulab`` first on the path, an error only where a cell is tagged
    ``raises-exception``) and save it, executed, beside it (:func:`executed_path`). Raises
    nbclient's CellExecutionError naming the cell otherwise."""
    import nbformat
    from nbclient import NotebookClient
    notebook = lab / relative
    nb = nbformat.read(notebook, as_version=4)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(lab), os.environ.get("PYTHONPATH")])))
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(notebook.parent)}}).execute(env=env)
    out = executed_path(notebook)
    tmp = out.with_suffix(".tmp")
    nbformat.write(nb, tmp)
    os.replace(tmp, out)
    return out


def executed_notebooks(src: Path) -> dict[Path, Path]:
    """For the student copy ``src`` (before :func:`configure`), the notebooks the test run
    executed in a copy with the same digest: {notebook in src: its executed twin}."""
    lab = EXECUTED / f"student-{lab_digest(src)}"
    if not lab.is_dir():
        return {}
    found = {}
    for notebook in sorted((src / "book").rglob("*.ipynb")):
        twin = executed_path(lab / notebook.relative_to(src))
        if twin.is_file():
            found[notebook] = twin
    return found


def reuse_executed(src: Path, executed: dict[Path, Path]) -> None:
    """Hand myst-nb the outputs of ``executed`` through its cache (so a page's notebook
    download stays without outputs); a notebook whose code differs from its twin's is
    executed by the build as before."""
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    cache_path = src / "_build" / ".jupyter_cache"
    cache = get_cache(str(cache_path))
    reused = []
    for notebook, twin in executed.items():
        nb = nbformat.read(notebook, as_version=4)
        done = [c for c in nbformat.read(twin, as_version=4).cells if c.cell_type == "code"]
        mine = [c for c in nb.cells if c.cell_type == "code" and c.get("id") != COLAB_CELL_ID]
        if [(c.get("id"), c.source) for c in mine] != [(c.get("id"), c.source) for c in done]:
            continue
        for cell, twin_cell in zip(mine, done):
            cell.outputs, cell.execution_count = twin_cell.outputs, twin_cell.execution_count
        cache.cache_notebook_bundle(CacheBundleIn(nb, str(notebook)), check_validity=False, overwrite=True)
        reused.append(notebook.relative_to(src).as_posix())
    if reused:
        config_path = src / "_config.yml"
        config = yaml.safe_load(config_path.read_text())
        config.setdefault("execute", {}).update(execute_notebooks="cache", cache=str(cache_path))
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    print(f"site: {len(reused)} notebook(s) executed by the test run reused ({', '.join(reused)}); "
          f"{len(list((src / 'book').rglob('*.ipynb'))) - len(reused)} to execute", flush=True)

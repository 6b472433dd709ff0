"""A chapter's notebook executed against its recorded run cut to a smaller GPU's profile.

A live run on a smaller GPU (an 8 GB share of an H100, a T4) skips the cases that do not fit. The
chapter's record builds that run from the recorded one through its own plan
(``record.as_measured_on``), so the notebook can be read as it would be there: every cell executed
under the simulated device (``GPULAB_DEVICE_PROFILE``), with ``gpulab.live_or_recorded`` answering
the cut run. Used by the fcnet, lenet and convpool tests, which then read what the reader sees.
"""
from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Executed:
    #: every output of every code cell, in order
    outputs: list
    #: {name: the glued text, quotes stripped} of every ``glue`` call
    glued: dict[str, str]
    #: the HTML, plain text and streams of every output, JSON-escaped, to search
    text: str


def _kept(statement) -> bool:
    """An import, or an assignment that calls nothing (a list of steps): what a kernel-check
    cell keeps when its checks are left out, for later cells that use the names."""
    return isinstance(statement, (ast.Import, ast.ImportFrom)) or (
        isinstance(statement, ast.Assign) and not any(isinstance(n, ast.Call) for n in ast.walk(statement)))


def is_kernel_check(source: str) -> bool:
    """Whether a code cell only checks kernels: imports and calls, no name bound but an
    import's or an assignment's that calls nothing, and a call of a chapter's ``check_steps``,
    of a ported chapter's ``CHAPTER.check`` or of ``exercises.check``. Such a cell reads no run, so a smaller GPU's profile shows
    nothing new in it (its checks run at the check sizes, which every profile fits); the
    student version of the notebook executes it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    if not tree.body or not all(isinstance(s, ast.Expr) or _kept(s) for s in tree.body):
        return False
    calls = {node.func.attr for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    return "check_steps" in calls or ("check" in calls and ("exercises.check(" in source
                                                         or "CHAPTER.check(" in source))


def execute_on_profile(chapter: str, profile: str, monkeypatch, gpu: str | None = None,
                       timeout: int = 600, kernel_checks: bool = True) -> Executed:
    """Execute ``book/<chapter>/<chapter>.ipynb`` against ``load_run(chapter, gpu)`` cut to
    ``PROFILES[profile]``; assert that no cell raised or wrote to stderr. ``kernel_checks=False``
    leaves out the calls of the cells that only check kernels (:func:`is_kernel_check`), where the profile
    changes none of them (a profile of the book's GPU with less memory: the check sizes fit)."""
    import nbformat
    from nbclient import NotebookClient

    folder = ROOT / "book" / chapter
    nb = nbformat.read(folder / f"{chapter}.ipynb", as_version=4)
    if not kernel_checks:       # such a cell's imports and names stay: later cells may use them
        for cell in nb.cells:
            if cell.cell_type == "code" and is_kernel_check(cell.source):
                cell.source = "\n".join(ast.unparse(s) for s in ast.parse(cell.source).body if _kept(s))
    load = f"gpulab.load_run({chapter!r}{'' if gpu is None else f', {gpu!r}'})"
    nb.cells.insert(0, nbformat.v4.new_code_cell(
        "import gpulab\n"
        "from gpulab.device import PROFILES\n"
        f"from gpulab.workloads.{chapter} import record as _record\n"
        f"_cut = _record.as_measured_on({load}, PROFILES[{profile!r}])\n"
        "gpulab.live_or_recorded = lambda chapter, measure, gpu=None: _cut\n"))
    monkeypatch.setenv("GPULAB_DEVICE_PROFILE", profile)
    # The kernel must still find what the environment put on the path (on the GPU machine, the
    # carried Jupyter wheels live there: without them the kernel dies before it answers).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
                   ).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("name") == "stderr" or o.output_type == "error"]
    glued = {o["metadata"]["scrapbook"]["name"]: next(v for k, v in o["data"].items() if k.endswith("text/plain"))
             .strip("'") for o in outputs if "scrapbook" in o.get("metadata", {})}
    text = json.dumps([o.get("data", {}).get("text/html", "") + o.get("data", {}).get("text/plain", "")
                       + o.get("text", "") for o in outputs])
    return Executed(outputs, glued, text)

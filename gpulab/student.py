"""Make the student version of the lab: every instructor's solution removed.

Solutions sit between ``// BEGIN SOLUTION`` and ``// END SOLUTION`` in .cu
files and between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` in notebook code
cells. Each is replaced by a marked gap of the same indentation, so the file
still compiles (a kernel with an empty body) and the notebook still runs up to
the exercise's check, which then fails until the student fills the gap in.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from . import paths

_BLOCK = {
    "//": re.compile(r"^([ \t]*)// BEGIN SOLUTION[^\n]*\n.*?^[ \t]*// END SOLUTION[^\n]*(\n|$)", re.M | re.S),
    "#": re.compile(r"^([ \t]*)# BEGIN SOLUTION[^\n]*\n.*?^[ \t]*# END SOLUTION[^\n]*(\n|$)", re.M | re.S),
}
_PLACEHOLDER = {"//": "// TODO: your code here", "#": "# TODO: your code here"}


def strip_solutions(text: str, comment: str = "//") -> str:
    """``text`` with every solution block replaced by a TODO line. An unclosed
    BEGIN marker is an error rather than a silently leaked solution."""
    pattern = _BLOCK[comment]
    stripped = pattern.sub(lambda m: f"{m.group(1)}{_PLACEHOLDER[comment]}{m.group(2)}", text)
    if f"{comment} BEGIN SOLUTION" in stripped or f"{comment} END SOLUTION" in stripped:
        raise ValueError(f"unbalanced '{comment} BEGIN SOLUTION' / '{comment} END SOLUTION' markers")
    return stripped


def strip_notebook(notebook: dict) -> dict:
    """A copy of a notebook (as JSON) with solutions stripped from code cells
    and their outputs cleared."""
    result = json.loads(json.dumps(notebook))
    for cell in result.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        stripped = strip_solutions(source, "#")
        if stripped != source:
            cell["source"] = stripped
            cell["outputs"] = []
            cell["execution_count"] = None
    return result


def make_student_version(dest: str | Path, source_root: Path | None = None) -> list[Path]:
    """Copy the repository to ``dest`` with all solutions stripped; return the
    files that were changed."""
    root = source_root or paths.REPO
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} exists and is not empty; choose a new folder")
    ignore = shutil.ignore_patterns(".git", ".venv", "_build", "__pycache__", ".pytest_cache",
                                    "*.egg-info", ".whl", ".ipynb_checkpoints")
    shutil.copytree(root, dest, ignore=ignore, dirs_exist_ok=True)
    changed = []
    for path in sorted(dest.rglob("*")):
        if path.suffix in (".cu", ".cuh"):
            text = path.read_text()
            stripped = strip_solutions(text, "//")
        elif path.suffix == ".ipynb":
            text = path.read_text()
            stripped = json.dumps(strip_notebook(json.loads(text)), indent=1) + "\n"
            if json.loads(stripped) == json.loads(text):
                stripped = text
        else:
            continue
        if stripped != text:
            path.write_text(stripped)
            changed.append(path)
    return changed

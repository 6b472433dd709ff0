"""The numbers each chapter's prose quotes, as the book's notebooks glue them on this machine.

Executes every notebook (nbclient, one kernel each, in the notebook's folder as nbmake runs it)
and writes ``tests/fixtures/glued/<chapter>.json``: ``{name: repr}`` of every ``glue(...)`` call,
the text myst-nb stores and the prose formats. ``tests/test_glued.py`` executes the notebooks
again and compares, so a refactor of the package cannot change a number the book quotes.

Usage: PYTHONPATH=. python tools/glued_values.py [CHAPTER ...]      (default: every chapter)
"""
from __future__ import annotations

import json
import sys
import time

from gpulab import chapters as registry
from gpulab.paths import REPO as ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "glued"
#: The mime type myst-nb's ``glue(..., display=False)`` stores a value under (its repr).
GLUE_MIME = "application/papermill.record/text/plain"


def chapters() -> list[str]:
    """Every chapter of the book (:mod:`gpulab.chapters`), in its order."""
    return registry.names()


def glued(nb) -> dict[str, str]:
    """``{name: repr}`` of every value an executed notebook glued (the last one wins, as in myst-nb)."""
    out = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is not None and GLUE_MIME in output.get("data", {}):
                out[name] = output["data"][GLUE_MIME]
    return out


def execute(chapter: str, timeout: int = 900):
    """Run ``chapter``'s notebook top to bottom; raise on the first failing cell (as nbmake does)."""
    import nbformat
    from nbclient import NotebookClient
    path = registry.chapter(chapter).notebook
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def main(argv: list[str]) -> int:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for chapter in argv or chapters():
        start = time.time()
        values = glued(execute(chapter))
        (FIXTURES / f"{chapter}.json").write_text(json.dumps(values, indent=1, sort_keys=True) + "\n")
        print(f"{chapter}: {len(values)} glued values, {time.time() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

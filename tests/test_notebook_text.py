"""Every notebook's markdown is plain text: no control characters (a `\\t` that
crept into a JSON string turns `$3 \\times 3$` into a tab and "imes")."""
import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
NOTEBOOKS = sorted(BOOK.rglob("*.ipynb"))
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(BOOK)))
def test_markdown_cells_have_no_control_characters(path):
    cells = json.loads(path.read_text())["cells"]
    bad = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        for match in CONTROL.finditer("".join(cell["source"])):
            text = "".join(cell["source"])
            bad.append(f"cell {index}: {match.group()!r} in ...{text[max(0, match.start() - 20):match.end() + 20]!r}...")
    assert not bad, f"{path.name} has control characters in markdown:\n" + "\n".join(bad)


def test_the_check_finds_a_tab():
    assert CONTROL.search("$3 \times 3$") and not CONTROL.search("$3 \\times 3$\n")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(BOOK)))
def test_a_chapter_that_reads_a_recorded_run_lets_the_reader_pick_the_gpu(path):
    # Issue #14: without a GPU, the reader chooses whose recorded run (H100 or H200) a chapter
    # reads, in one line near the top; the chapter's run must then come from that choice.
    code = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    calls = [c for c in code if "live_or_recorded(" in c or "views.load(" in c]
    if not calls:
        pytest.skip("this notebook reads no chapter run")
    assert any(re.search(r'^GPU = "H100"', c, re.M) for c in code[:3]), "no GPU choice among the first code cells"
    assert all("gpu=GPU" in c or "load(GPU)" in c for c in calls), "a call that reads the run ignores the GPU choice"


DOCS = [BOOK.parent / "README.md", BOOK / "instructors.md"]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_commands_run_the_python_the_set_up_made(path):
    # The set-up makes .venv without activating it: a bare `python -m gpulab ...` runs another
    # Python, without the lab's packages.
    bare = [line for line in path.read_text().splitlines()
            if re.search(r"(?<![/\w.])python (-m gpulab|-m pytest|tools/)", line)]
    assert not bare, f"{path.name}: commands with a bare `python` (write .venv/bin/python):\n" + "\n".join(bare)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_the_files_the_docs_name_exist(path):
    named = set(re.findall(r"`((?:tests|tools|gpulab|labdata|book)/[\w./-]*?[\w/])`", path.read_text()))
    missing = sorted(n for n in named if "<" not in n and not (BOOK.parent / n).exists())
    assert named and not missing, f"{path.name} names paths that do not exist: {missing}"

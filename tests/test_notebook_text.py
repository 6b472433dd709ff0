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

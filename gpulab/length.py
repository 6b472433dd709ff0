"""The book's length budget: how much a chapter asks its reader to read, measured from its notebook.

Three limits, each a reader's limit rather than a writer's:

* :data:`CHAPTER_WORDS`, the words of prose a chapter shows: its markdown cells as rendered, a
  ``{glue:text}`` role counted as the words of the value it shows (from the chapter's glued fixture,
  ``tests/fixtures/glued/<chapter>.json``: a number is one word, a glued sentence its words), link
  targets, HTML comments and directive fences left out, and the bodies of ``:::{dropdown}`` blocks
  left out too (they are collapsed: a reader opens them on purpose). Cells tagged ``remove-cell`` or
  ``hide-cell`` are not counted. Code cells' outputs (tables, figures, their captions) are not
  counted: they are the run's, not prose, and a chapter without a recorded run shows other ones.
  A word is a run of non-space characters with a letter or digit in it, as a word processor counts
  (``0.63`` and ``one-GPU`` are one word each; the reviews' ``\\w+`` counts split them and run about
  8% higher).
* :data:`BLOCK_WORDS`, the longest piece of prose read at once: a markdown cell's text outside its
  dropdowns, or one dropdown's body (an opened dropdown is a block like any other).
* :data:`CODE_LINES`, the longest code cell a reader must scroll past: its source's lines, trailing
  blank lines aside, for every code cell not tagged ``hide-input``, ``hide-cell``, ``remove-input``
  or ``remove-cell``.

Why these numbers. Pedagogy review 3 (``\\w+`` over markdown) found the chapters grown since
review 2 (lenet 4,246 to 6,661 words, convpool 4,170 to 6,330, multigpu 2,085 to 5,070, basics 1,418
to 3,822), alexnet at 11,307, multigpu with a 1,403-word cell and a 171-line cell of glue code, and
proposed 5,000 words, 450 and 25. Counted as above, after this budget's first cuts, the chapters
run from 2,600 (basics) to 6,400 words (fcnet, 17 steps of idea, prediction, what we learned).
7,000 shown words is about half an hour of careful reading, the most a lab session gives to prose
beside running and editing kernels: it holds every chapter where it is (alexnet once split in two,
its halves about 7,000 and 4,500), with room for the per-step verdicts still to come in fcnet, and
stops the growth; the reviewer's 5,000 would cut a quarter of fcnet, lenet and convpool,
a rewrite rather than a budget. 450 words is a page: the review's proposal, four times the
chapters' median markdown cell (about 110 words). 25 lines fit on one screen beside the prose (the review's proposal;
GPU-Puzzles' and Triton's tutorials keep every cell shorter): longer harness code belongs in the
chapter's ``views`` module.

:data:`EXEMPT` names the chapters allowed over a limit for now, each with the date and the reason;
``tests/test_length.py`` fails once an exemption is no longer needed, so that it goes.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from . import paths

#: Shown words of prose a chapter may have (dropdowns' bodies aside).
CHAPTER_WORDS = 7_000
#: Words one block of prose may have: a markdown cell outside its dropdowns, or one dropdown's body.
BLOCK_WORDS = 450
#: Lines one visible code cell may have.
CODE_LINES = 25

#: Chapters allowed over a limit for now: {chapter: (date, why)}.
EXEMPT: dict[str, tuple[str, str]] = {}

HIDDEN_MARKDOWN = {"remove-cell", "hide-cell"}
HIDDEN_CODE = {"remove-cell", "remove-input", "hide-cell", "hide-input"}

_WORD = re.compile(r"\S*\w\S*")      # a run of non-space characters with a letter or digit in it
_GLUE = re.compile(r"\{glue(?::\w+)?\}`([^`:]+)(?::[^`]*)?`")
_ROLE = re.compile(r"\{[\w:-]+\}`([^`]*)`")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_FENCE = re.compile(r"^\s*(`{3,}|:{3,})\s*(\{[\w-]+\})?\s*(.*)$")


@dataclass(frozen=True)
class Length:
    """What a chapter's notebook asks its reader to read."""

    chapter: str
    words: int                  # shown words of prose
    longest_block: int          # words of the longest block (a cell outside its dropdowns, or a dropdown)
    longest_block_cell: int     # its cell's index (0-based)
    longest_code: int           # lines of the longest visible code cell
    longest_code_cell: int

    def over(self) -> list[str]:
        """The limits this chapter exceeds, each said with its numbers and where."""
        out = []
        if self.words > CHAPTER_WORDS:
            out.append(f"{self.chapter}: {self.words:,} shown words, over the {CHAPTER_WORDS:,} a chapter may have")
        if self.longest_block > BLOCK_WORDS:
            out.append(f"{self.chapter}: cell {self.longest_block_cell} has a block of {self.longest_block:,} words, "
                       f"over {BLOCK_WORDS} (split it, or put what a reader may skip in a dropdown)")
        if self.longest_code > CODE_LINES:
            out.append(f"{self.chapter}: code cell {self.longest_code_cell} shows {self.longest_code} lines, over "
                       f"{CODE_LINES} (move the harness into the chapter's views module)")
        return out


def glued_values(chapter: str, root: Path | None = None) -> dict:
    """The chapter's glued values as the prose shows them (a number's repr, a string's text)."""
    path = (root or paths.REPO) / "tests" / "fixtures" / "glued" / f"{chapter}.json"
    if not path.is_file():
        return {}
    out = {}
    for name, text in json.loads(path.read_text()).items():
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            text = text[1:-1]
        out[name] = text
    return out


def words(text: str, glued: dict | None = None) -> int:
    """The words ``text`` shows once rendered: a glue role by its value's words (one word when the
    value is not known), another role by its content, links by their text."""
    glued = glued or {}
    text = _COMMENT.sub(" ", text)
    text = _GLUE.sub(lambda m: " " + glued.get(m.group(1), "X") + " ", text)
    text = _ROLE.sub(lambda m: " " + m.group(1) + " ", text)
    text = _LINK_TARGET.sub("]", text)
    return len(_WORD.findall(text))


def blocks(source: str) -> tuple[str, list[str]]:
    """A markdown cell's text outside its dropdowns (their titles included) and each dropdown's body."""
    shown, bodies, body, fence = [], [], None, None
    for line in source.splitlines():
        m = _FENCE.match(line)
        if body is None and m and m.group(2) == "{dropdown}":
            fence, body = m.group(1), []
            shown.append(m.group(3))                  # the title is shown
        elif body is not None and m and m.group(1) == fence and not m.group(2) and not m.group(3):
            bodies.append("\n".join(body))
            body = None
        elif body is not None:
            body.append(line)
        elif m:
            shown.append(m.group(3) if m.group(2) else "")   # another fence: a directive's argument only
        else:
            shown.append(line)
    if body is not None:                              # an unclosed dropdown runs to the cell's end
        bodies.append("\n".join(body))
    return "\n".join(shown), bodies


def code_lines(source: str) -> int:
    return len(source.rstrip().splitlines())


def measure(chapter: str, notebook: Path | None = None, glued: dict | None = None) -> Length:
    """The :class:`Length` of ``book/<chapter>/<chapter>.ipynb`` (or ``notebook``)."""
    notebook = notebook or paths.REPO / "book" / chapter / f"{chapter}.ipynb"
    glued = glued_values(chapter) if glued is None else glued
    cells = json.loads(Path(notebook).read_text())["cells"]
    total, block, code = 0, (0, -1), (0, -1)
    for i, cell in enumerate(cells):
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell["cell_type"] == "markdown" and not tags & HIDDEN_MARKDOWN:
            shown, bodies = blocks(source)
            n = words(shown, glued)
            total += n
            block = max(block, (n, i), *((words(b, glued), i) for b in bodies))
        elif cell["cell_type"] == "code" and not tags & HIDDEN_CODE:
            code = max(code, (code_lines(source), i))
    return Length(chapter, total, block[0], block[1], code[0], code[1])


def table():
    """Every chapter's length against the limits (for a reader's or a reviewer's look)."""
    import pandas as pd
    from . import chapters
    rows = []
    for name in chapters.names():
        m = measure(name)
        rows.append({"chapter": name, "shown words": m.words, "longest block (words)": m.longest_block,
                     "in cell": m.longest_block_cell, "longest code cell (lines)": m.longest_code,
                     "code cell": m.longest_code_cell, "over": "; ".join(m.over()) or "",
                     "exempt": EXEMPT.get(name, ("", ""))[1]})
    return pd.DataFrame(rows)

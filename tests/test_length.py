"""The book's length budget (gpulab.length): every chapter within its limits, and the counting right."""
from __future__ import annotations

import datetime
import json

import pytest

from gpulab import chapters, length


@pytest.mark.parametrize("chapter", chapters.names())
def test_every_chapter_keeps_to_the_length_budget(chapter):
    if chapter in length.EXEMPT:
        pytest.skip(f"exempt until it is split: {length.EXEMPT[chapter][1]}")
    over = length.measure(chapter).over()
    assert not over, "\n".join(over) + (
        f"\n(the limits and how they are counted: gpulab/length.py; "
        f"`python -c 'from gpulab import length; print(length.table())'` lists every chapter)")


def test_each_exemption_is_dated_explained_and_still_needed():
    names = chapters.names()
    for chapter, (date, why) in length.EXEMPT.items():
        datetime.date.fromisoformat(date)
        assert len(why.split()) >= 5, f"{chapter}'s exemption should say why"
        assert chapter in names, f"{chapter} is exempt but is no chapter of the toc: remove its entry"
        assert length.measure(chapter).over(), (
            f"{chapter} now keeps to the budget: remove its entry from gpulab.length.EXEMPT")


def _notebook(tmp_path, cells):
    nb = {"cells": [{"cell_type": kind, "metadata": {"tags": tags} if tags else {}, "source": source,
                     **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                    for kind, source, tags in cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps(nb))
    return path


def test_words_count_what_the_page_shows():
    glued = {"verdict": "held: 0.63 ms, inside the band", "t": "1.5"}
    # a glued sentence by its words, a number as one; a role by its text; a link by its text alone
    assert length.words("Step {glue:text}`verdict` at {glue:text}`t:.2f` ms", glued) == 1 + 6 + 1 + 1 + 1
    assert length.words("{glue:text}`unknown`") == 1
    assert length.words("see [the appendix](../appendix/timing.md) <!-- not shown -->") == 3
    assert length.words("the {doc}`training chapter`") == 3


def test_dropdowns_are_blocks_of_their_own_and_not_shown_words():
    shown, bodies = length.blocks("Intro words here.\n\n:::{dropdown} A title\nbody one two\n:::\n\nafter")
    assert length.words(shown) == 3 + 2 + 1 and [length.words(b) for b in bodies] == [3]


def test_the_measure_reads_a_notebook_as_a_reader_does(tmp_path):
    dropdown = ":::{dropdown} Details\n" + "word " * 500 + "\n:::"
    path = _notebook(tmp_path, [
        ("markdown", "one two three", None),
        ("markdown", "hidden " * 900, ["hide-cell"]),            # collapsed: not counted
        ("markdown", "four five\n\n" + dropdown, None),          # the dropdown: a block, not shown words
        ("code", "x = 1\n" * 30 + "\n\n", ["hide-input"]),        # hidden code: not counted
        ("code", "y = 2\n" * 26 + "\n\n", None)])
    m = length.measure("x", notebook=path, glued={})
    assert (m.words, m.longest_block, m.longest_block_cell, m.longest_code, m.longest_code_cell) == (
        3 + 2 + 1, 500, 2, 26, 4)
    over = m.over()
    assert len(over) == 2 and "cell 2 has a block of 500 words" in over[0] and "code cell 4 shows 26 lines" in over[1]


def test_a_long_chapter_is_over_its_word_limit(tmp_path):
    cells = [("markdown", "word " * 400, None)] * (length.CHAPTER_WORDS // 400 + 1)
    m = length.measure("x", notebook=_notebook(tmp_path, cells), glued={})
    assert m.longest_block == 400 and [o.split(":")[1].strip() for o in m.over()] == [
        f"{m.words:,} shown words, over the {length.CHAPTER_WORDS:,} a chapter may have"]

"""Every number a chapter's prose quotes is the one the book quoted before a refactor.

The fixtures (tests/fixtures/glued/<chapter>.json) hold what each notebook glued when it was
executed on the CPU backend (``python tools/glued_values.py``); this test executes the notebook
again and compares every glued value's text, so a change to the package that moves a quoted
number, drops one or adds one fails here. A deliberate change regenerates the fixture
(``python tools/glued_values.py CHAPTER``) and shows the difference in review.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("glued_values", ROOT / "tools" / "glued_values.py")
glued_values = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(glued_values)

CHAPTERS = sorted(p.stem for p in glued_values.FIXTURES.glob("*.json"))


def test_every_chapter_has_a_fixture():
    assert CHAPTERS == sorted(glued_values.chapters()), (
        "tests/fixtures/glued/ should hold one file per notebook of book/; regenerate with "
        "`python tools/glued_values.py CHAPTER`")


def test_a_chapter_that_continues_another_quotes_the_same_value_under_a_shared_name():
    # alexnet_hopper re-glues the few names its prose shares with alexnet (cuDNN's fastest paths):
    # the same run, so the same text; any other name is glued by one of the two only
    from gpulab import chapters
    for name, other in chapters.CONTINUES.items():
        mine, theirs = (json.loads((glued_values.FIXTURES / f"{n}.json").read_text()) for n in (name, other))
        shared = mine.keys() & theirs.keys()
        assert {k: (mine[k], theirs[k]) for k in shared if mine[k] != theirs[k]} == {}
        assert len(shared) <= 5, f"{name} and {other} glue {sorted(shared)}: a value belongs to one chapter"


def test_glued_reads_the_values_myst_nb_stores():
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook, new_output
    record = glued_values.GLUE_MIME
    cell = new_code_cell("glue(...)", outputs=[
        new_output("display_data", data={record: "1.5"}, metadata={"scrapbook": {"name": "a", "mime_prefix": ""}}),
        new_output("display_data", data={"text/plain": "2"}, metadata={}),       # not a glue
        new_output("display_data", data={record: "'x'"}, metadata={"scrapbook": {"name": "a", "mime_prefix": ""}})])
    assert glued_values.glued(nbformat.from_dict(new_notebook(cells=[cell]))) == {"a": "'x'"}


_same = glued_values.same


def test_only_live_values_are_held_loosely():
    assert _same("multigpu", "worst_replica", "6.175e-07", "6.33e-07")
    assert not _same("multigpu", "worst_replica", "6.175e-07", "9e-07")
    assert not _same("multigpu", "replica_tol", "1e-05", "1.0000001e-05")


def test_a_number_a_few_ulps_apart_is_the_same_number():
    # the GPU image's NumPy gave these for values alexnet's notebook computes itself
    assert _same("alexnet", "wino_err_2", "4.4601276410790255e-07", "4.460127641079172e-07")
    assert not _same("alexnet", "wino_err_2", "4.4601276410790255e-07", "4.4601276e-07")
    assert not _same("alexnet", "s26_target", "'missed by 7%'", "'missed by 8%'")
    assert not _same("alexnet", "n", "0", "1e-300")


def test_a_moved_dropped_or_added_number_fails(monkeypatch, tmp_path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook, new_output
    record = glued_values.GLUE_MIME

    def notebook(**values):
        return nbformat.from_dict(new_notebook(cells=[new_code_cell("glue(...)", outputs=[
            new_output("display_data", data={record: v}, metadata={"scrapbook": {"name": k, "mime_prefix": ""}})
            for k, v in values.items()])]))

    monkeypatch.setattr(glued_values, "FIXTURES", tmp_path)
    (tmp_path / "ch.json").write_text(json.dumps({"a": "1.5", "b": "2"}))
    glued_values.assert_unchanged("ch", notebook(a="1.5", b="2"))
    for wrong in (dict(a="1.6", b="2"), dict(a="1.5"), dict(a="1.5", b="2", c="3")):
        with pytest.raises(AssertionError, match="ch: glued"):
            glued_values.assert_unchanged("ch", notebook(**wrong))


# The comparison of every chapter (each notebook executed as it is) runs beside that chapter's
# student version, as a second test of book/<chapter>/<chapter>.ipynb (conftest.py): pytest-xdist
# then spreads the chapters over the workers instead of running eight notebooks on one.


def test_a_name_glued_twice_is_named_before_the_site_build_fails_on_it():
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook, new_output
    record = glued_values.GLUE_MIME
    glue = lambda name, value: new_output("display_data", data={record: value},   # noqa: E731
                                          metadata={"scrapbook": {"name": name, "mime_prefix": ""}})
    once = [new_code_cell("glue(a=1)", outputs=[glue("a", "1")]), new_code_cell("glue(b=2)", outputs=[glue("b", "2")])]
    assert glued_values.glued_twice(nbformat.from_dict(new_notebook(cells=once))) == []
    again = once + [new_code_cell("glue(a=1)", outputs=[glue("a", "1")])]
    assert glued_values.glued_twice(nbformat.from_dict(new_notebook(cells=again))) == ["a"]


def test_no_text_is_quoted_with_a_number_format():
    """The site build (warnings as errors) fails on ``{glue:text}`name:.1f``` when ``name`` was glued
    as text (a run that lacks the number glues :data:`gpulab.prose.NOT_MEASURED`): such a value is
    glued already formatted (:func:`gpulab.prose.number`) and quoted without a format."""
    import re
    role = re.compile(r"\{glue:text\}`([A-Za-z0-9_]+):([^`]+)`")
    wrong = []
    for chapter in CHAPTERS:
        values = json.loads((glued_values.FIXTURES / f"{chapter}.json").read_text())
        notebook = json.loads(next((ROOT / "book").glob(f"*/{chapter}.ipynb")).read_text())
        for cell in notebook["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for name, spec in role.findall("".join(cell["source"])):
                text = values.get(name, "")
                if text[:1] in "'\"" and spec[-1:] in "fdeg%":
                    wrong.append(f"{chapter}: {name}:{spec} is {text}")
    assert not wrong, "text quoted with a number format (glue it formatted, with prose.number):\n" + "\n".join(wrong)


def test_a_missing_number_reads_as_not_measured():
    from gpulab.prose import NOT_MEASURED, number
    assert number(13.24, ".1f", " µs") == "13.2 µs" and number(float("nan"), ".1f") == NOT_MEASURED
    assert number(None, ".0f") == NOT_MEASURED and number(2, ",d") == "2"

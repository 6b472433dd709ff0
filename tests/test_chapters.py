"""The chapter registry (the toc), the book's folders, the README, the intro and the workloads
agree: adding a chapter is its folder, its workload, one toc entry and its lines of text."""
import importlib
import pkgutil
import re

import pytest
import yaml

import gpulab.workloads
from gpulab import chapters, paths
from gpulab.workloads import workload

NAMES = chapters.names()


def _part(toc: dict, caption: str) -> list[str]:
    part = next(p for p in toc["parts"] if p["caption"] == caption)
    return [entry["file"] for entry in part["chapters"]]


def test_the_registry_reads_the_toc_as_yaml_does():
    toc = yaml.safe_load(chapters.TOC.read_text())
    assert [f"book/{n}/{n}" for n in NAMES] == _part(toc, chapters.CHAPTERS_CAPTION)
    assert len(NAMES) == len(set(NAMES)) and NAMES[0] == "basics"


def test_the_toc_parser_takes_only_the_chapters_part():
    text = ("parts:\n  - caption: Chapters\n    chapters:\n      - file: book/a/a\n      - file: book/b/b\n"
            "  - caption: Appendix\n    chapters:\n      - file: book/c/c\n")
    assert chapters.toc_names(text) == ["a", "b"]
    with pytest.raises(ValueError, match="no chapter found"):
        chapters.toc_names("parts:\n  - caption: Appendix\n    chapters:\n      - file: book/c/c\n")


def test_every_chapter_folder_is_in_the_toc_and_every_toc_chapter_has_its_notebook():
    folders = sorted(p.parent.name for p in (paths.REPO / "book").glob("*/*.ipynb") if p.stem == p.parent.name)
    assert sorted(NAMES) == folders
    assert all(c.notebook.is_file() for c in chapters.chapters())


def test_the_readme_lists_the_chapters_in_the_books_order():
    readme = (paths.REPO / "README.md").read_text()
    row = re.search(r"\| `book/` \| the chapters \(one folder of notebooks each: (.+?)\)", readme)
    assert row, "README.md: the `book/` row of the layout table lists the chapters"
    assert re.findall(r"`(\w+)`", row.group(1)) == NAMES
    summary = re.search(r"The chapters \(`book/`\): (.+?)\n\n", readme, re.S)
    assert summary, "README.md: the paragraph 'The chapters (`book/`): ...' names every chapter"
    named = [n for n in re.findall(r"`(\w+)` \(", summary.group(1))]
    assert named == NAMES


def test_the_intro_has_one_row_per_chapter_in_the_books_order():
    intro = (paths.REPO / "book" / "intro.md").read_text()
    rows = re.findall(r"^\| \{doc\}`(\w+)/(\w+)` \|", intro, re.M)
    assert all(a == b for a, b in rows)
    assert [a for a, _ in rows] == NAMES


def test_every_workload_belongs_to_a_chapter_of_the_toc():
    declared = {}
    for info in pkgutil.iter_modules(gpulab.workloads.__path__):
        module = importlib.import_module(f"gpulab.workloads.{info.name}")
        if hasattr(module, "CHAPTER"):
            declared[info.name] = module.CHAPTER
    assert declared and all(name == chapter for name, chapter in declared.items()), declared
    with_workload = chapters.names(with_workload=True)
    assert with_workload == [n for n in NAMES if n in declared]
    for name in with_workload:
        module = workload(name)
        assert isinstance(module.TITLE, str) and module.TITLE and callable(module.benchmark_all), name


def test_an_unknown_chapter_or_one_without_a_workload_says_so():
    for name in ("nosuch", "alexnet_tc", "../x"):
        with pytest.raises(KeyError, match="the lab's chapters are: basics, "):
            workload(name)
    # a chapter of the book without a workload: `gpulab record basics` says so, not "unknown"
    with pytest.raises(KeyError, match="chapter 'basics' has no workload .*the chapters with one are: measuring"):
        workload("basics")
    with pytest.raises(KeyError, match="has no workload"):
        chapters.chapter("basics").workload()


def test_a_workload_is_found_without_the_toc(monkeypatch, tmp_path):
    # The grader's sandbox holds the package, not the repository: no _toc.yml.
    monkeypatch.setattr(chapters, "TOC", tmp_path / "_toc.yml")
    assert workload("fcnet").CHAPTER == "fcnet"
    with pytest.raises(KeyError, match="see _toc.yml"):
        workload("nosuch")

"""The chapter registry (the toc), the book's folders, the README, the intro and the workloads
agree: adding a chapter is its folder, its workload, one toc entry and its lines of text."""
import importlib
import json
import os
import pkgutil
import re
import subprocess
import sys

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


def test_a_chapter_without_a_workload_is_basics_or_continues_one_before_it():
    """alexnet_hopper has no package: it reads alexnet's package and run, and comes after it."""
    without = [n for n in NAMES if n not in chapters.names(with_workload=True)]
    assert without == ["basics", *chapters.CONTINUES]
    for name, other in chapters.CONTINUES.items():
        assert NAMES.index(other) < NAMES.index(name) and workload(other).CHAPTER == other
        with pytest.raises(KeyError, match=f"continues chapter '{other}'.*record {other} records both"):
            workload(name)


def test_a_workload_is_found_without_the_toc(monkeypatch, tmp_path):
    # The grader's sandbox holds the package, not the repository: no _toc.yml.
    monkeypatch.setattr(chapters, "TOC", tmp_path / "_toc.yml")
    assert workload("fcnet").CHAPTER == "fcnet"
    with pytest.raises(KeyError, match="see _toc.yml"):
        workload("nosuch")


def test_every_workload_is_a_package_of_the_same_modules():
    """Each chapter's workload holds steps, record and views (chapters.WORKLOAD_MODULES), or the
    registry says which it lacks and why (chapters.WORKLOAD_GAPS); a gap that is closed must go."""
    with_workload = chapters.names(with_workload=True)
    assert set(chapters.WORKLOAD_GAPS) <= set(with_workload)
    for name in with_workload:
        package = workload(name)
        assert hasattr(package, "__path__"), f"gpulab/workloads/{name}: expected a package (a folder), found a module"
        held = {info.name for info in pkgutil.iter_modules(package.__path__)}
        gaps = chapters.WORKLOAD_GAPS.get(name, {})
        assert set(gaps) <= set(chapters.WORKLOAD_MODULES) and all(gaps.values()), (name, gaps)
        missing = set(chapters.WORKLOAD_MODULES) - held
        assert missing <= set(gaps), f"gpulab/workloads/{name} lacks {sorted(missing - set(gaps))}"
        assert set(gaps) <= missing, (f"gpulab/workloads/{name} now has {sorted(set(gaps) - missing)}: "
                                      "remove it from chapters.WORKLOAD_GAPS")


# Imports each module named on the command line in a fresh state of its packages (everything of
# theirs loaded before is forgotten; NumPy, pandas and the like stay loaded, which only saves time)
# and prints, as JSON, what failed: an import error (a cycle shows as "partially initialized
# module") or an attempt to import CuPy, which is refused so that it cannot hide behind a try.
IMPORT_EACH_ALONE = r"""
import importlib, importlib.abc, json, sys
asked = []
class NoCupy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "cupy":
            asked.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (refused: importing must not need CuPy)")
sys.meta_path.insert(0, NoCupy())
roots, problems = {name.split(".")[0] for name in sys.argv[1:]}, {}
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m.split(".")[0] in roots]:
        del sys.modules[loaded]
    asked.clear()
    try:
        importlib.import_module(name)
    except Exception as exc:
        problems[name] = f"{type(exc).__name__}: {exc}"
    if asked:
        problems[name] = f"imports CuPy ({asked[0]})"
print(json.dumps(problems))
"""


def import_each_alone(names: list[str], path: str) -> dict:
    done = subprocess.run([sys.executable, "-c", IMPORT_EACH_ALONE, *names], capture_output=True, text=True,
                          cwd=path, env={**os.environ, "PYTHONPATH": path}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow       # every module of every chapter, each from a fresh gpulab: about 7 CPU-s
def test_every_chapter_module_imports_alone_without_cupy():
    names = []
    for name in chapters.names(with_workload=True):
        package = workload(name)
        names += [package.__name__] + [f"{package.__name__}.{info.name}" for info in pkgutil.iter_modules(package.__path__)
                                       if info.name != "__main__"]     # an entry point runs when imported
    assert "gpulab.workloads.measuring.views" in names and len(names) > 40
    assert import_each_alone(names, str(paths.REPO)) == {}


def test_importing_alone_finds_a_cycle_and_a_hidden_cupy(tmp_path):
    (tmp_path / "lab").mkdir()
    for name, text in {"__init__.py": "", "a.py": "from .b import B\nA = 1\n", "b.py": "from .a import A\nB = 2\n",
                       "gpu.py": "try:\n    import cupy\nexcept ImportError:\n    cupy = None\n",
                       "fine.py": "import json\n"}.items():
        (tmp_path / "lab" / name).write_text(text)
    found = import_each_alone(["lab.a", "lab.gpu", "lab.fine"], str(tmp_path))
    assert sorted(found) == ["lab.a", "lab.gpu"]
    assert "partially initialized module" in found["lab.a"] and found["lab.gpu"] == "imports CuPy (cupy)"

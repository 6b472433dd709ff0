"""The book's chapters, registered in one place: the table of contents, ``_toc.yml``.

A chapter is a folder ``book/<name>/`` holding the notebook ``<name>.ipynb`` (and, when it has
exercises, their declarations ``exercises.py`` and hidden checks ``hidden_checks.py``: see
:mod:`gpulab.exercises`), listed under the toc's "Chapters". Its workload, when it has one, is the
package ``gpulab.workloads.<name>`` (its modules: :data:`WORKLOAD_MODULES`) declaring
``CHAPTER`` (the name ``"<name>"``, or a :class:`gpulab.ladder.Chapter` of that name, which a
ported chapter is), ``TITLE`` and ``benchmark_all``; it is found by that name, not listed
anywhere. Everything that goes over every chapter (``python -m gpulab record``,
the exercises, the tests) reads :func:`chapters`, so adding a chapter is: its folder, its
workload, its toc entry and its lines in the README and ``book/intro.md``
(``tests/test_chapters.py`` holds the four to each other). A chapter may instead continue
another's workload (:data:`CONTINUES`: the second AlexNet chapter), and each declares what it
teaches and uses (:mod:`gpulab.concepts`), in an order the toc must keep.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from . import paths

TOC = paths.REPO / "_toc.yml"
#: The toc's part that lists the chapters (the appendix follows it).
CHAPTERS_CAPTION = "Chapters"
_ENTRY = re.compile(r"^\s*-\s*file:\s*book/([A-Za-z0-9_]+)/\1\s*$")
_CAPTION = re.compile(r"^\s*-\s*caption:\s*(.+?)\s*$")
#: The modules every chapter's workload package holds, so that a reader finds the same parts in
#: each: its ladder (``steps``: the steps, how each is launched and checked), its recorded run
#: (``record``) and what its notebook shows of a run (``views``). A chapter may have more.
WORKLOAD_MODULES = ("steps", "record", "views")
#: The chapters whose workload lacks one of :data:`WORKLOAD_MODULES`, and why (basics, which has no
#: workload at all, is not listed). tests/test_chapters.py fails once a gap is closed, so that its
#: entry goes too.
WORKLOAD_GAPS: dict = {}
#: Chapters without a workload of their own that continue another chapter's: they read its package
#: and its recorded run, which ``python -m gpulab record <that chapter>`` records for both.
CONTINUES = {"alexnet_hopper": "alexnet"}


@dataclass(frozen=True)
class Chapter:
    """One chapter: its name is its folder under ``book/``, its notebook's stem and its workload's."""

    name: str

    @property
    def notebook(self) -> Path:
        return paths.REPO / "book" / self.name / f"{self.name}.ipynb"

    @property
    def module_name(self) -> str | None:
        """``gpulab.workloads.<name>`` when the chapter has a workload (basics has none), else None."""
        name = f"{__package__}.workloads.{self.name}"
        return name if importlib.util.find_spec(name) is not None else None

    def workload(self):
        """The chapter's workload module (its steps, checks and ``benchmark_all``)."""
        if self.module_name is None:
            raise KeyError(f"chapter '{self.name}' has no workload: expected a module or package "
                           f"gpulab/workloads/{self.name}")
        return workload(self.name)


def workload(name: str):
    """The workload module of chapter ``name``, found by its name alone: the toc is not read, so
    this works where only the package is (the grader's sandbox has no ``_toc.yml``)."""
    module_name = f"{__package__}.workloads.{name}"
    found = name.isidentifier() and importlib.util.find_spec(module_name) is not None
    module = importlib.import_module(module_name) if found else None
    if module is None or getattr(module, "CHAPTER", None) != name:
        if name in CONTINUES:
            raise KeyError(f"chapter '{name}' has no workload of its own: it continues chapter "
                           f"'{CONTINUES[name]}', whose package and recorded run it reads (python -m gpulab "
                           f"record {CONTINUES[name]} records both)")
        if TOC.is_file() and name in names():
            raise KeyError(f"chapter '{name}' has no workload (nothing to record or profile); the chapters "
                           f"with one are: {', '.join(names(with_workload=True))}")
        known = ", ".join(names()) if TOC.is_file() else "see _toc.yml"
        raise KeyError(f"unknown chapter '{name}' (no module gpulab/workloads/{name} declaring CHAPTER = "
                       f"{name!r}); the lab's chapters are: {known}")
    return module


def toc_names(text: str | None = None) -> list[str]:
    """The chapter names the toc lists under "Chapters", in the book's order."""
    text = TOC.read_text() if text is None else text
    names, part = [], None
    for line in text.splitlines():
        caption = _CAPTION.match(line)
        if caption:
            part = caption.group(1)
            continue
        entry = _ENTRY.match(line)
        if entry and part == CHAPTERS_CAPTION:
            names.append(entry.group(1))
    if not names:
        raise ValueError(f"{TOC}: no chapter found under '- caption: {CHAPTERS_CAPTION}' "
                         "(expected entries '- file: book/<name>/<name>')")
    return names


def chapters(with_workload: bool = False) -> list[Chapter]:
    """Every chapter in the book's order (only those with a workload, if ``with_workload``)."""
    every = [Chapter(name) for name in toc_names()]
    return [c for c in every if c.module_name is not None] if with_workload else every


def names(with_workload: bool = False) -> list[str]:
    return [c.name for c in chapters(with_workload)]


def chapter(name: str) -> Chapter:
    """The chapter called ``name``; an unknown name raises, listing the book's chapters."""
    known = names()
    if name not in known:     # (reads the toc: for a chapter's workload alone, see workload())
        raise KeyError(f"unknown chapter '{name}'; the lab's chapters are: {', '.join(known)}")
    return Chapter(name)

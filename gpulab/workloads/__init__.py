"""Each chapter's workload, declared once, by chapter name.

A workload module provides ``CHAPTER``, ``TITLE`` and ``benchmark_all(repeats,
quick)`` returning tidy timing rows; ``python -m gpulab record`` runs it. The
chapters themselves are registered by the book's table of contents (see
:mod:`gpulab.chapters`): a workload is found by its chapter's name."""
from __future__ import annotations

from ..chapters import chapter, chapters

#: chapter name -> its workload module's name, in the book's order (the chapters with a workload)
CHAPTERS = {c.name: c.module_name for c in chapters(with_workload=True)}


def workload(name: str):
    """The workload module of chapter ``name``."""
    return chapter(name).workload()

"""Each chapter's workload, declared once, by chapter name.

A workload module provides ``CHAPTER``, ``TITLE`` and ``benchmark_all(repeats,
quick)`` returning tidy timing rows; ``python -m gpulab record`` runs it."""
from __future__ import annotations

import importlib

CHAPTERS = {
    "measuring": "gpulab.workloads.measuring",
    "alexnet": "gpulab.workloads.alexnet",
    "fcnet": "gpulab.workloads.fcnet",
    "training": "gpulab.workloads.training",
    "lenet": "gpulab.workloads.lenet",
    "multigpu": "gpulab.workloads.multigpu",
    "convpool": "gpulab.workloads.convpool",
}


def workload(chapter: str):
    if chapter not in CHAPTERS:
        raise KeyError(f"unknown chapter '{chapter}'; the lab's chapters are: {', '.join(CHAPTERS)}")
    return importlib.import_module(CHAPTERS[chapter])

"""Each chapter's workload, declared once, by chapter name.

A workload package provides ``CHAPTER``, ``TITLE`` and ``benchmark_all``, its recorded run
declared as a :class:`gpulab.recorder.Recording` (every chapter's is called
``benchmark_all(repeats=100, quick=False, budget_s=None, log=print)`` and returns
(rows, tables)); ``python -m gpulab record`` runs it. The chapters themselves are registered
by the book's table of contents (see :mod:`gpulab.chapters`): a workload is found by its
chapter's name."""
from ..chapters import workload

__all__ = ["workload"]

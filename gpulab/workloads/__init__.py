"""Each chapter's workload, declared once, by chapter name.

A workload module provides ``CHAPTER``, ``TITLE`` and ``benchmark_all(repeats,
quick)`` returning tidy timing rows; ``python -m gpulab record`` runs it. The
chapters themselves are registered by the book's table of contents (see
:mod:`gpulab.chapters`): a workload is found by its chapter's name."""
from ..chapters import workload

__all__ = ["workload"]

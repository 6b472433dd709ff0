"""How a step is launched: one family, one SAXPY kernel over a 1-D grid of 256-thread blocks
(:data:`SAXPY`), each thread taking ``elements_per_thread`` elements, or a fixed grid that the
kernel strides over (the exercise's grid-stride loop)."""
from __future__ import annotations

from typing import Callable

from ... import ladder
from ...kernels import Backend, Kernel, load_module
from .problem import A

BLOCK = 256


def kernel(step, backend: str | Backend | None = None) -> Kernel:
    """``step``'s kernel, compiled for ``backend``."""
    return load_module(step.file, backend).get_function(step.kernel)


class Saxpy(ladder.Launcher):
    """``kernel(n, a, x, y, z)`` on ``step.grid(n)`` blocks of :data:`BLOCK` threads."""

    def bind(self, step, case, arrays: dict, backend, fn: Kernel | None = None) -> Callable[[], None]:
        fn = fn or kernel(step, backend)
        return fn.bind(step.grid(case.n), BLOCK, (case.n, A, arrays["x"], arrays["y"], arrays[case.output_name]))


SAXPY = Saxpy()


def transfers_launch(step, fn: Kernel) -> Callable:
    """``launch(inputs, output)`` for :mod:`gpulab.transfers`: SAXPY on device arrays."""
    def launch(inputs, output):
        x, y = inputs
        fn(step.grid(output.size), BLOCK, (output.size, A, x, y, output))
    return launch

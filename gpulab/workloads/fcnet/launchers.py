"""How a step is launched: one family, a sequence of kernel launches (:class:`Launch`), each
naming the buffers and sizes it takes (the input X, a form of the weights, the H1/H2 scratch, the
output Y: see :func:`buffers`), with a grid over the vectors; a step is its list of launches."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ... import ladder
from ...device import limits as device_limits
from ...kernels import Backend, Kernel, get_backend, load_module, occupancy
from .problem import HID, OUT, weight_forms

#: CPU backend: the grid "persistent" kernels get (the GPU's is measured).
CPU_PERSISTENT_BLOCKS = 3


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a step. ``args`` name the buffers and sizes the
    kernel takes (see :func:`buffers`). The grid covers the vectors:
    ``ceil(N / vectors_per_block)`` blocks, times ``rows`` along y; a
    ``persistent`` kernel instead gets as many blocks as fit on the GPU at once
    and loops over its work."""

    kernel: str
    args: tuple[str, ...]
    block: tuple[int, ...] = (256,)
    vectors_per_block: int = 256
    rows: int = 1
    persistent: bool = False
    shared_mem: int = 0

    def grid(self, n: int, resident_blocks: int | None = None) -> tuple[int, int]:
        blocks = -(-n // self.vectors_per_block)
        if self.persistent:
            blocks = min(blocks, resident_blocks or CPU_PERSISTENT_BLOCKS)
        return (max(1, blocks), self.rows)


def buffers(be: Backend, x, weights: dict, scratch: bool = False) -> dict:
    """Device copies of the inputs and every weight form, a NaN-poisoned output
    and (for the steps that need them) H1/H2 scratch, by the names launches use."""
    n = x.shape[1]
    bufs = {"n": n, "hid_n": HID * n, "x": be.to_device(x), "y": be.poisoned((OUT, n), np.float32)}
    bufs.update({name: be.to_device(w) for name, w in weight_forms(weights).items()})
    if scratch:
        bufs["h1"] = be.poisoned((HID, n), np.float32)
        bufs["h2"] = be.poisoned((HID, n), np.float32)
    return bufs


def _resolve(token: str, bufs: dict):
    if token.isdigit():
        return int(token)
    return bufs[token]


def resident_blocks(fn: Kernel, launch: Launch) -> int | None:
    """How many blocks of ``launch`` fit on the whole GPU at once (None on the CPU)."""
    if fn.module.backend.name != "gpu":
        return None
    import cupy
    sms = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"]
    threads = int(np.prod(launch.block))
    return sms * max(1, occupancy(fn, threads, launch.shared_mem)["blocks_per_sm"])


def step_kernels(step, backend=None) -> dict[str, Kernel]:
    """Each kernel of ``step``'s launches, compiled, with the dynamic shared memory it asks for allowed."""
    be = get_backend(backend)
    module = load_module(step.file, be)
    fns = {name: module.get_function(name) for name in step.kernels}
    for launch in step.launches:
        if launch.shared_mem > 48 * 1024:
            fns[launch.kernel].allow_shared_memory(launch.shared_mem)
    return fns


class Sequence(ladder.Launcher):
    """A step's :class:`Launch` list, run in order as one inference."""

    def needs(self, step) -> ladder.Needs:
        return ladder.Needs(shared_bytes=max(launch.shared_mem for launch in step.launches))

    def unfit(self, step, backend, limits=None) -> str | None:
        """Why ``step`` cannot run on this device (or the simulated one: see
        :func:`gpulab.device.simulate`), or None when it can: a launch asking for
        more dynamic shared memory per block than the device allows (step 14's
        large kernel asks 105,472 bytes; a T4 allows 65,536, an L4 101,376)."""
        limits = limits if limits is not None else device_limits()
        if limits is None:             # the CPU backend, no profile simulated: no such limit
            return None
        for launch in step.launches:
            why = limits.shared_fits(launch.shared_mem)
            if why:
                return f"step {step.number} ({launch.kernel}) {why}"
        return None

    def bind(self, step, case, arrays: dict, backend, fns: dict[str, Kernel] | None = None) -> Callable[[], None]:
        """One inference of ``step`` over ``arrays`` (by the names launches use; ``n``, the
        vectors, from X unless given, and H1/H2 scratch made where a launch takes them and none
        is given) as a no-argument function, the launches checked once, so the timers measure
        only the launches. ``fns``: the step's kernels, compiled (default :func:`step_kernels`)."""
        be = get_backend(backend)
        fns = step_kernels(step, be) if fns is None else fns
        n = int(arrays["n"]) if "n" in arrays else int(arrays["x"].shape[1])
        bufs = {"n": n, "hid_n": HID * n, **arrays}
        for name in ("h1", "h2"):
            if name not in bufs and any(name in launch.args for launch in step.launches):
                bufs[name] = be.poisoned((HID, n), np.float32)
        calls = []
        for launch in step.launches:
            fn = fns[launch.kernel]
            args = tuple(_resolve(t, bufs) for t in launch.args)
            calls.append(fn.bind(launch.grid(n, resident_blocks(fn, launch)), launch.block, args,
                                 launch.shared_mem))
        if len(calls) == 1:
            return calls[0]

        def inference():
            for call in calls:
                call()
        return inference


SEQUENCE = Sequence()


def runnable_steps(steps, limits=None) -> tuple[list, list[dict]]:
    """The steps this device can run, and one row per step it cannot, with the reason."""
    ok, skipped = [], []
    for step_ in steps:
        why = step_.launcher.unfit(step_, None, limits)
        if why:
            skipped.append({"step": step_.ordinal, "variant": step_.label, "reason": why})
        else:
            ok.append(step_)
    return ok, skipped

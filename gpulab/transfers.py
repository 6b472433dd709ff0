"""Where the time goes when data starts on the host: host-to-device copy,
kernel, device-to-host copy, under four ways of holding host memory, and what
streams buy by overlapping copies with kernels.

A *workload* here is a function ``launch(inputs, output)`` that runs the
kernel on device arrays, plus the host inputs and the output's shape and dtype.
Every phase is timed with CUDA events on one stream, except the host-side
touches of managed memory, which are host work and are timed with the host's
clock after a synchronize (the rows say which).
"""
from __future__ import annotations

import ctypes
import time
from typing import Callable, Sequence

import numpy as np

from .device import gpu_state, require_gpu
from .timing import Timing, warm_up_gpu

#: Milliseconds of busy work before a timed kernel phase (see transfer_breakdown's ``warm``).
WARM_MS = 2.0

#: The ways of holding host data that chapter 1 compares.
MEMORY_KINDS = ("pageable", "pinned", "managed", "managed+prefetch")
PHASES = ("h2d", "kernel", "d2h")

Launch = Callable[[Sequence, object], None]


def _events(stream):
    import cupy
    return [cupy.cuda.Event() for _ in range(4)]


def _elapsed(events) -> list[float]:
    import cupy
    events[-1].synchronize()
    return [cupy.cuda.get_elapsed_time(a, b) for a, b in zip(events[:-1], events[1:])]


def _pinned_copy(array: np.ndarray) -> np.ndarray:
    import cupyx
    pinned = cupyx.empty_pinned(array.shape, array.dtype)
    pinned[...] = array
    return pinned


def _managed_array(shape, dtype):
    """A CuPy array in managed memory and a NumPy view of the same bytes."""
    import cupy
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    memory = cupy.cuda.malloc_managed(nbytes)
    device_view = cupy.ndarray(shape, dtype, memptr=memory)
    buffer = (ctypes.c_byte * nbytes).from_address(memory.ptr)
    host_view = np.frombuffer(buffer, dtype=dtype).reshape(shape)
    return device_view, host_view


def prefetch_to_device(array, stream) -> None:
    """Migrate a managed array's pages to the current GPU ahead of the kernel.

    CUDA 13 changed ``cudaMemPrefetchAsync`` to take a location; try CuPy's
    wrapper first, then the CUDA Python bindings, and say so if neither works."""
    import cupy
    ptr, size, device = array.data.ptr, array.nbytes, cupy.cuda.Device().id
    errors = []
    try:
        cupy.cuda.runtime.memPrefetchAsync(ptr, size, device, stream.ptr)
        return
    except Exception as exc:  # signature differs between CUDA 12 and 13 builds
        errors.append(f"cupy: {exc}")
    try:
        from cuda.bindings import runtime as cudart
        location = cudart.cudaMemLocation()
        location.type = cudart.cudaMemLocationType.cudaMemLocationTypeDevice
        location.id = device
        (err,) = cudart.cudaMemPrefetchAsync(ptr, size, location, 0, stream.ptr)
        if int(err) == 0:
            return
        errors.append(f"cuda.bindings: error {err}")
    except Exception as exc:
        errors.append(f"cuda.bindings: {exc}")
    raise RuntimeError("could not prefetch managed memory: " + "; ".join(errors))


def transfer_breakdown(launch: Launch, host_inputs: Sequence[np.ndarray], out_shape, out_dtype,
                       *, memory: str = "pageable", warmup: int = 3, repeats: int = 20,
                       experiment: str = "transfers", variant: str = "", size: int = 0,
                       warm: bool = True) -> list[dict]:
    """Time h2d, kernel and d2h of one workload with host memory of kind
    ``memory`` (one of :data:`MEMORY_KINDS`); return tidy rows, one per phase
    plus ``total``.

    ``warm``: before the kernel phase, busy work (outside the events) brings the
    SM clock back up after the copy left the SMs idle; without it the kernel
    phase after a pageable copy runs at a ramping clock and reads 2-4x slow on
    small kernels. Each row records the SM clock read just after the repeats
    (``sm_clock_mhz``, from NVML or nvidia-smi where present) and ``warmed``."""
    require_gpu("measuring transfers")
    if memory not in MEMORY_KINDS:
        raise ValueError(f"memory must be one of {MEMORY_KINDS}, got {memory!r}")
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    samples = {phase: [] for phase in PHASES + ("total",)}
    in_bytes = sum(a.nbytes for a in host_inputs)
    out_bytes = int(np.prod(out_shape)) * np.dtype(out_dtype).itemsize
    host_method = {}

    with stream:
        if memory in ("pageable", "pinned"):
            sources = list(host_inputs) if memory == "pageable" else [_pinned_copy(a) for a in host_inputs]
            result = np.empty(out_shape, out_dtype) if memory == "pageable" else \
                _pinned_copy(np.empty(out_shape, out_dtype))
            device_inputs = [cupy.empty(a.shape, a.dtype) for a in host_inputs]
            output = cupy.empty(out_shape, out_dtype)
            for i in range(warmup + repeats):
                ev = _events(stream)
                ev[0].record(stream)
                for d, h in zip(device_inputs, sources):
                    d.set(h, stream=stream)
                copied = cupy.cuda.Event()
                copied.record(stream)
                if warm:
                    warm_up_gpu(WARM_MS, stream)
                ev[1].record(stream)
                launch(device_inputs, output)
                ev[2].record(stream)
                output.get(stream=stream, out=result, blocking=(memory == "pageable"))
                ev[3].record(stream)
                _, kernel, d2h = _elapsed(ev)
                h2d = cupy.cuda.get_elapsed_time(ev[0], copied)
                if i >= warmup:
                    for phase, ms in zip(PHASES + ("total",), (h2d, kernel, d2h, h2d + kernel + d2h)):
                        samples[phase].append(ms)
        else:
            pairs = [_managed_array(a.shape, a.dtype) for a in host_inputs]
            output, output_host = _managed_array(out_shape, out_dtype)
            host_method = {"h2d": "host timer", "d2h": "host timer"}
            for i in range(warmup + repeats):
                # The host writes the inputs into managed memory: the pages live on
                # the host now, and the kernel (or the prefetch) has to move them.
                t0 = time.perf_counter()
                for (_, host_view), a in zip(pairs, host_inputs):
                    host_view[...] = a
                h2d = (time.perf_counter() - t0) * 1e3
                start, prefetched, done = cupy.cuda.Event(), cupy.cuda.Event(), cupy.cuda.Event()
                start.record(stream)
                if memory == "managed+prefetch":
                    # The output too: its pages sit on the host since the host last read it.
                    for device_view in [d for d, _ in pairs] + [output]:
                        prefetch_to_device(device_view, stream)
                mid = cupy.cuda.Event()
                mid.record(stream)
                if warm:
                    warm_up_gpu(WARM_MS, stream)
                prefetched.record(stream)
                launch([d for d, _ in pairs], output)
                done.record(stream)
                done.synchronize()
                h2d += cupy.cuda.get_elapsed_time(start, mid)
                kernel = cupy.cuda.get_elapsed_time(prefetched, done)
                t0 = time.perf_counter()
                np.array(output_host)  # the host reads the result: pages migrate back
                d2h = (time.perf_counter() - t0) * 1e3
                if i >= warmup:
                    for phase, ms in zip(PHASES + ("total",), (h2d, kernel, d2h, h2d + kernel + d2h)):
                        samples[phase].append(ms)
    stream.synchronize()
    clock = gpu_state().get("sm_clock_mhz")
    moved = {"h2d": in_bytes, "kernel": 0, "d2h": out_bytes, "total": in_bytes + out_bytes}
    return [Timing(samples[phase], method=host_method.get(phase, "cuda events")).row(
                experiment, variant or memory, size, phase, bytes=moved[phase], memory=memory,
                warmed=bool(warm), sm_clock_mhz=clock if clock is not None else float("nan"))
            for phase in PHASES + ("total",)]


def overlap_with_streams(launch: Launch, host_inputs: Sequence[np.ndarray], out_shape, out_dtype,
                         *, chunks: int, warmup: int = 3, repeats: int = 20,
                         experiment: str = "streams", variant: str = "", size: int = 0) -> dict:
    """Split the work into ``chunks`` pieces along the first axis, each copied
    in, computed and copied out on its own stream from pinned memory, so one
    chunk's copies overlap another's kernel. Returns one ``total`` row timed
    with events from the first copy to the last."""
    require_gpu("overlapping copies and kernels")
    import cupy

    n = host_inputs[0].shape[0]
    if any(a.shape[0] != n for a in host_inputs) or out_shape[0] != n:
        raise ValueError("overlap_with_streams splits along the first axis: every input and the "
                         "output need the same first dimension")
    bounds = np.linspace(0, n, chunks + 1).astype(int)
    pinned_in = [_pinned_copy(a) for a in host_inputs]
    pinned_out = _pinned_copy(np.empty(out_shape, out_dtype))
    device_in = [cupy.empty(a.shape, a.dtype) for a in host_inputs]
    device_out = cupy.empty(out_shape, out_dtype)
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(chunks)]
    main = cupy.cuda.Stream(non_blocking=True)
    samples = []
    for i in range(warmup + repeats):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(main)
        for s, lo, hi in zip(streams, bounds[:-1], bounds[1:]):
            s.wait_event(start)
            with s:
                for d, h in zip(device_in, pinned_in):
                    d[lo:hi].set(h[lo:hi], stream=s)
                launch([d[lo:hi] for d in device_in], device_out[lo:hi])
                # blocking=False: CuPy's get() otherwise waits for the stream, which
                # would serialise the chunks and hide any overlap.
                device_out[lo:hi].get(stream=s, out=pinned_out[lo:hi], blocking=False)
            main.wait_event(s.record())
        end.record(main)
        end.synchronize()
        if i >= warmup:
            samples.append(cupy.cuda.get_elapsed_time(start, end))
    moved = sum(a.nbytes for a in host_inputs) + pinned_out.nbytes
    return Timing(samples).row(experiment, variant or f"{chunks} streams", size, "total",
                               bytes=moved, chunks=chunks, memory="pinned")

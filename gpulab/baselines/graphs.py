"""Vendor paths captured in CUDA graphs: :func:`in_graph` (one path, PyTorch's or CuPy's capture)
and :func:`graph_paths` (every path that can be captured), so that a small call's launch cost is
the vendor's best too."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from .core import VendorPath


def in_graph(path: VendorPath, launches: int = 10) -> VendorPath:
    """``path`` captured in a CUDA graph of ``launches`` calls and replayed (its
    times are per call). PyTorch paths are captured with ``torch.cuda.graph``
    after three warm-up calls on a side stream (cuDNN's algorithm search
    happens then, outside the capture); CuPy paths with stream capture."""
    if path.graph:
        raise ValueError(f"{path.label} is already a graph path")
    inner = path.setup
    if path.capture == "torch":
        def setup():
            return _torch_graph(inner(), launches)
    elif path.capture == "cupy":
        def setup():
            return _cupy_graph(inner(), launches)
    else:
        raise ValueError(f"{path.label}: cannot capture a path of kind {path.capture!r}")
    return replace(path, label=f"{path.label}, CUDA graph", setup=setup, graph=True, calls=launches)


def graph_paths(paths: Sequence[VendorPath], launches: int = 10) -> list[VendorPath]:
    """Every eager path of ``paths`` that can be captured, in a CUDA graph."""
    return [in_graph(p, launches) for p in paths if not p.graph and p.capture in ("torch", "cupy")]


def _torch_graph(run: Callable[[], Any], launches: int) -> Callable[[], Any]:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            out = run()
    # The output lives in the graph's memory pool and holds whatever was there (on the H100 once,
    # after a capture that failed earlier in the process, the right answer of an earlier path, so a
    # graph that replayed nothing passed its check): poison it, so the check sees only the replay.
    tensor = out[0] if isinstance(out, tuple) else out
    if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
        tensor.fill_(float("nan"))
        torch.cuda.synchronize()

    def replay():
        graph.replay()
        return out
    replay.graph = graph            # keeps the graph (and its memory pool) alive
    # The graph holds the captured kernels' pointers, not the tensors ``run`` launches on (its
    # inputs, weights, workspace): the replay keeps ``run`` alive, or a replay kept for the
    # cross-check ran on freed memory (an illegal address in fcnet's H100 record of 2026-12-07).
    replay.keeps_alive = run
    return replay


def _cupy_graph(run: Callable[[], Any], launches: int) -> Callable[[], Any]:
    """CuPy stream capture of ``run`` (which must launch on the current stream
    and allocate nothing: see :func:`cublas_chain`)."""
    import cupy

    stream = getattr(run, "stream", None) or cupy.cuda.Stream(non_blocking=True)
    state = getattr(run, "state", {})
    with stream:
        run()
        stream.synchronize()
        stream.begin_capture()
        state["capturing"] = True
        try:
            for _ in range(launches):
                out = run()
        finally:
            state["capturing"] = False
            graph = stream.end_capture()
    done = cupy.cuda.get_current_stream()

    def replay():
        # Replayed on the capture stream, ordered after and before the current
        # stream, so events recorded on the current stream bracket it.
        stream.wait_event(done.record())
        graph.launch(stream)
        done.wait_event(stream.record())
        return out
    replay.graph = graph
    replay.keeps_alive = run        # what the captured kernels read and write (see _torch_graph)
    return replay

"""Does the way L2 is flushed explain where the lab's cold loop and do_bench still disagree? (issue 37)

The trial runs of 2026-12-07 left two kinds of cross-check rows off by more than 3%:

* a 4096^3 fp16 GEMM over the H100's power limit, do_bench 8-10% slower than the lab's cold loop
  and the profiler (which also uses the lab's flush): a flush that runs longer, or draws less
  power, leaves the card cooler between GEMMs, and a GEMM at the power limit runs faster;
* calls of 5-10 us, the lab's cold time 0.5-0.7 us above do_bench's: what the flush leaves
  behind (dirty lines in L2 being written back) is what the timed call starts on.

Both timers write 256 MiB before each call, but with different kernels: the lab's own
(``gpulab_l2_flush``: until 2026-12-07 4-byte stores in a grid-stride loop of 65,536 blocks,
``scalar`` here; now one 16-byte store per thread, as PyTorch's ``zero_`` writes) and PyTorch's
``zero_`` (do_bench's ``clear_cache``). This probe swaps the flushes between the timers: the lab's
loop with each flush, do_bench with its own and with the lab's, in interleaved rounds, the order
rotated each round; and times each flush alone (events around 20 back to back) with the SM
clock and power seen (NVML). Nothing here changes the GPU's settings.

Usage on the GPU machine: ``python tools/flush_probe.py OUT_DIR [--rounds 3]``; writes
``flush_probe.csv`` and ``flush_kernels.csv`` and prints the medians.
"""
from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpulab import device, timing  # noqa: E402
from crosscheck_probe import Sampler, summary  # noqa: E402

# The lab's flush before 2026-12-07's change to 16-byte stores: 4-byte stores, grid-stride loop.
_SCALAR = r"""
extern "C" __global__ void probe_flush_scalar(int *buffer, long long n, int value)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        buffer[i] = value;
}
"""


def flushes():
    """name -> flush(stream): each writes the lab's 256 MiB buffer (or, for torch_zero, a
    tensor of the same size, as do_bench's clear_cache does; torch_zero_lab: PyTorch's zero_ of the
    lab's buffer)."""
    import cupy
    import torch

    lab = timing.L2Flusher.get()
    lab_flush = timing.L2Flusher.flush.__get__(lab)
    scalar = cupy.RawKernel(_SCALAR, "probe_flush_scalar")
    n = lab.buffer.size
    counter = [0]

    def flush_scalar(stream):
        counter[0] += 1
        with stream:
            scalar((min((n + 255) // 256, 65_536),), (256,), (lab.buffer, np.int64(n), np.int32(counter[0])))

    cache = torch.empty(lab.buffer.size, dtype=torch.int, device="cuda")

    def torch_zero(stream):
        with timing._torch_stream(stream):
            cache.zero_()

    lab_as_torch = torch.as_tensor(lab.buffer, device="cuda")

    def torch_zero_lab(stream):
        with timing._torch_stream(stream):
            lab_as_torch.zero_()

    def memset(stream):
        counter[0] += 1
        cupy.cuda.runtime.memsetAsync(lab.buffer.data.ptr, counter[0] & 0xFF, lab.nbytes, stream.ptr)

    return {"lab": lab_flush, "scalar": flush_scalar, "torch_zero": torch_zero, "torch_zero_lab": torch_zero_lab,
            "memset": memset}


@contextmanager
def lab_flush_is(flush):
    """The lab's loop flushes with ``flush`` while active."""
    lab = timing.L2Flusher.get()
    lab.flush = flush
    try:
        yield
    finally:
        del lab.flush


@contextmanager
def do_bench_flush_is(flush, stream):
    """do_bench clears its cache with ``flush`` on ``stream`` while active (its own: None)."""
    from triton import runtime
    active = runtime.driver.active
    if flush is None:
        yield
        return
    active.clear_cache = lambda cache: flush(stream)
    try:
        yield
    finally:
        del active.clear_cache


def calls():
    import cupy
    out = []
    a = cupy.random.standard_normal((4096, 4096), dtype=cupy.float32).astype(cupy.float16)
    b = cupy.random.standard_normal((4096, 4096), dtype=cupy.float32).astype(cupy.float16)
    c = cupy.empty_like(a)
    out.append(("cupy.matmul fp16 4096^3", lambda: cupy.matmul(a, b, out=c)))
    for n in (4096, 262_144):
        x = cupy.ones(n, dtype=cupy.float32)
        y = cupy.zeros_like(x)
        saxpy = cupy.RawKernel(r'''extern "C" __global__ void probe_saxpy(float a, const float *x, float *y, int n)
            { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }''', "probe_saxpy")
        out.append((f"saxpy {n:,}", lambda x=x, y=y, saxpy=saxpy:
                    saxpy(((x.size + 255) // 256,), (256,), (np.float32(2), x, y, np.int32(x.size)))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import cupy
    from triton.testing import do_bench

    stream = cupy.cuda.Stream(non_blocking=True)
    flush = flushes()
    print(device.conditions(timing.describe_method()), flush=True)

    # Each flush alone: 20 back to back between two events, five times.
    sampler = Sampler()
    kernel_rows = []
    for name, f in flush.items():
        for _ in range(3):
            f(stream)
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        times = []
        with sampler:
            for _ in range(5):
                a.record(stream)
                for _ in range(20):
                    f(stream)
                b.record(stream)
                b.synchronize()
                times.append(cupy.cuda.get_elapsed_time(a, b) / 20)
        kernel_rows.append({"flush": name, "ms": float(np.median(times)), **sampler.summary()})
        print(kernel_rows[-1], flush=True)
    pd.DataFrame(kernel_rows).to_csv(args.out / "flush_kernels.csv", index=False)

    def lab_cold(name):
        def measure(fn):
            with lab_flush_is(flush[name]):
                return timing.benchmark(fn, warmup=3, repeats=60, flush_l2=True, stream=stream).median_ms
        return measure

    def bench(name):
        def measure(fn):
            with lab_flush_is(flush[name or "torch_zero"]):
                timing._settle(fn, stream, timing.L2Flusher.get(), 0.01, timing.GUARD_MIN_US)
            with do_bench_flush_is(flush[name] if name else None, stream), stream, timing._torch_stream(stream):
                return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
        return measure

    timers = {f"lab_cold[{n}]": lab_cold(n) for n in ("lab", "scalar", "torch_zero")}
    timers["do_bench"] = bench(None)
    timers["do_bench[lab]"] = bench("lab")
    timers["do_bench[scalar]"] = bench("scalar")
    rows = []
    names = list(timers)
    for call, raw in calls():
        fn = timing._on_stream(raw, stream)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for timer in order:
                with sampler:
                    try:
                        ms, note = timers[timer](fn), ""
                    except Exception as exc:          # noqa: BLE001 (the row says why)
                        ms, note = float("nan"), f"{type(exc).__name__}: {exc}"[:200]
                rows.append({"call": call, "timer": timer, "round": r, "ms": ms, **sampler.summary(), "note": note})
                print(f"{call:24s} {timer:18s} round {r}: {ms:.5f} ms at {rows[-1]['sm_mhz']:.0f} MHz, "
                      f"{rows[-1]['power_w']:.0f} W {note}", flush=True)
        pd.DataFrame(rows).to_csv(args.out / "flush_probe.csv", index=False)
    print(summary(pd.DataFrame(rows)).to_string(index=False))


if __name__ == "__main__":
    main()

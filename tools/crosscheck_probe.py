"""Why the lab's loop and Triton's do_bench disagree (issue 37): one GPU call, many timers.

The trial runs of 2026-12-06 (labdata/trials/2026-12-06-queued-timing) found the cross-check off
by more than 3% in two regimes: kernels of a few microseconds (events ~3.9 us, profiler 1.3 us,
do_bench ~5 us) and 8192^3 GEMMs / convpool at batch 32 (the lab's loop 5-14% faster than do_bench
and the profiler). This probe times the same calls every way the lab could, in interleaved rounds,
and samples the SM clock and power (NVML, a thread at 1 kHz) while each timer runs, so that the
criterion the cross-check applies can be chosen from data:

* ``lab_cold`` / ``lab_warm``: gpulab.timing.benchmark, L2 flushed or not (queued, in batches run
  back to back behind a guard, on a settled card, over at least 100 ms of calls);
* ``do_bench``: triton.testing.do_bench, median (256 MB zeroed before each call, calls queued),
  after the lab's settling (as timing.crosscheck runs it); ``do_bench_unsettled``: without it;
* ``profiler``: the kernels' own durations (CUPTI through PyTorch's profiler), gpulab's method,
  after the settling;
* ``lab_cold_alone``: lab_cold with one call per batch (the GPU idle between calls: the trial runs' loop).

The probe of 2026-12-07 (H100 SXM, before the settling) found a 4096^3 fp16 GEMM at 0.181 ms and
1980 MHz in any timer shorter than about 30 ms of calls and at 0.19-0.21 ms and about 1650 MHz in
any longer one (the card over its 700 W limit), so that a timer's reading depended on how long it
ran; the lab's loop now settles the card first and times at least 100 ms of calls.

Usage on the GPU machine: ``python tools/crosscheck_probe.py OUT_DIR [--quick]``; writes
``crosscheck_probe.csv`` (one row per call, timer and round, with the clock and power seen) and
prints the medians. Nothing here changes the GPU's settings.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpulab import device, timing  # noqa: E402


class Sampler:
    """The SM clock (MHz) and power (W) every millisecond while active (NVML)."""

    def __init__(self):
        nv = device._nvml_handle()
        self.nv = nv
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()

    def __enter__(self):
        self.samples.clear()
        self._stop.clear()
        if self.nv is not None:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return self

    def _run(self):
        pynvml, h = self.nv
        while not self._stop.is_set():
            self.samples.append((pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                                 pynvml.nvmlDeviceGetPowerUsage(h) / 1000))
            time.sleep(0.001)

    def __exit__(self, *exc):
        self._stop.set()
        if self.nv is not None:
            self.thread.join()

    def summary(self) -> dict:
        if not self.samples:
            return {"sm_mhz": float("nan"), "power_w": float("nan")}
        a = np.asarray(self.samples)
        return {"sm_mhz": float(np.median(a[:, 0])), "power_w": float(np.median(a[:, 1]))}


def calls(quick: bool):
    """(name, fn) pairs: cuBLAS through CuPy and PyTorch at two sizes, and a kernel of ~1 us."""
    import cupy
    import torch
    out = []
    for n in ((4096,) if quick else (4096, 8192)):
        a = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
        b = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
        c = cupy.empty((n, n), dtype=cupy.float16)
        out.append((f"cupy.matmul fp16 {n}^3", lambda a=a, b=b, c=c: cupy.matmul(a, b, out=c)))
        ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
        tc = torch.empty_like(ta)
        out.append((f"torch.matmul fp16 {n}^3", lambda ta=ta, tb=tb, tc=tc: torch.matmul(ta, tb, out=tc)))
    x = cupy.ones(1 << 16, dtype=cupy.float32)
    y = cupy.zeros_like(x)
    saxpy = cupy.RawKernel(r'''extern "C" __global__ void probe_saxpy(float a, const float *x, float *y, int n)
        { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }''', "probe_saxpy")
    big = cupy.ones(1 << 25, dtype=cupy.float32)
    big_y = cupy.zeros_like(big)
    out.append(("saxpy 33,554,432 (about 0.15 ms)",
                lambda: saxpy((big.size // 256,), (256,), (np.float32(2), big, big_y, np.int32(big.size)))))
    out.append(("saxpy 65,536 (about 1 us)",
                lambda: saxpy((256,), (256,), (np.float32(2), x, y, np.int32(x.size)))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import cupy
    from triton.testing import do_bench

    stream = cupy.cuda.Stream(non_blocking=True)
    def bench(fn, settled=True):
        # As crosscheck() calls it: on the work's stream, so do_bench's events are ordered with it
        # (the first probe, 2026-12-07, timed every call at 2 us on PyTorch's default stream), on
        # a card the lab's settling left as the lab's loop times it.
        if settled:
            timing._settle(fn, stream, timing.L2Flusher.get(), 0.01, timing.GUARD_MIN_US)
        with stream, timing._torch_stream(stream):
            return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))

    def profiled(fn):
        timing._settle(fn, stream, timing.L2Flusher.get(), 0.01, timing.GUARD_MIN_US)
        return timing._profiled_ms(fn, 1)[0]

    timers = {
        "lab_cold": lambda fn: timing.benchmark(fn, warmup=3, repeats=60, flush_l2=True, stream=stream).median_ms,
        "do_bench": bench,
        "lab_warm": lambda fn: timing.benchmark(fn, warmup=3, repeats=60, stream=stream).median_ms,
        "profiler": profiled,
        "do_bench_unsettled": lambda fn: bench(fn, settled=False),
        "lab_cold_alone": lambda fn: timing.benchmark(fn, warmup=3, repeats=60, flush_l2=True, stream=stream,
                                                      batch=1).median_ms,
    }
    rows = []
    sampler = Sampler()
    print(device.conditions(timing.describe_method()), flush=True)
    for name, raw in calls(args.quick):
        fn = timing._on_stream(raw, stream)
        # Each call's rounds start on a card that has run it for a second (its clock and power
        # settled), not on whatever the previous call left.
        heat_until = time.perf_counter() + 1.0
        while time.perf_counter() < heat_until:
            for _ in range(10):
                fn()
            stream.synchronize()
        for r in range(args.rounds):
            for timer, measure in timers.items():
                with sampler:
                    try:
                        ms, note = measure(fn), ""
                    except Exception as exc:          # noqa: BLE001 (the row says why)
                        ms, note = float("nan"), f"{type(exc).__name__}: {exc}"[:200]
                rows.append({"call": name, "timer": timer, "round": r, "ms": ms, **sampler.summary(), "note": note})
                print(f"{name:28s} {timer:15s} round {r}: {ms:.5f} ms at {rows[-1]['sm_mhz']:.0f} MHz, "
                      f"{rows[-1]['power_w']:.0f} W {note}", flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(args.out / "crosscheck_probe.csv", index=False)
    print(summary(df).to_string(index=False))


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Each call's and timer's median over the rounds (time, clock, power), and its time as a
    share of do_bench's for the same call."""
    table = rows.groupby(["call", "timer"], sort=False)[["ms", "sm_mhz", "power_w"]].median().reset_index()
    base = table[table.timer == "do_bench"].set_index("call")["ms"]
    table["of_do_bench"] = table.ms / table.call.map(base)
    return table


if __name__ == "__main__":
    main()

"""The lab's cold loop reads some calls of a few microseconds 0.6 us higher than do_bench does on the
same flush buffer (labdata/trials/2026-12-07-settled-timing/round2/crosscheck_tiny.csv): is it the
lab's flush kernel? This times those calls cold by the lab's loop with three flushes of the lab's
own buffer (its kernel, PyTorch's ``zero_``, ``cudaMemsetAsync``) and by do_bench on that buffer,
in rotated rounds. Usage on the GPU machine: ``python tools/flush_mode_probe.py OUT_DIR``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpulab import timing  # noqa: E402
from gpulab.workloads.measuring.steps import A, BLOCK, STEPS, kernel, make_inputs  # noqa: E402
from flush_probe import lab_flush_is  # noqa: E402


def main() -> None:
    import cupy
    import cupy.cublas
    import torch
    from triton.testing import do_bench
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    lab = timing.L2Flusher.get()
    as_torch = torch.as_tensor(lab.buffer, device="cuda")
    counter = [0]

    def torch_zero(stream):
        with timing._torch_stream(stream):
            as_torch.zero_()

    def memset(stream):
        counter[0] += 1
        cupy.cuda.runtime.memsetAsync(lab.buffer.data.ptr, counter[0] & 0xFF, lab.nbytes, stream.ptr)

    flushes = {"lab": timing.L2Flusher.flush.__get__(lab), "torch_zero": torch_zero, "memset": memset}
    stream = cupy.cuda.get_current_stream()

    def lab_cold(name):
        def measure(fn):
            with lab_flush_is(flushes[name]):
                return timing.benchmark(fn, warmup=3, repeats=60, flush_l2=True, stream=stream).median_ms
        return measure

    def bench(fn):
        with timing._do_bench_clears_the_labs_buffer():
            return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))

    timers = {f"lab_cold[{n}]": lab_cold(n) for n in flushes}
    timers["do_bench[lab buffer]"] = bench
    names = list(timers)
    fns = {step.kernel: kernel(step, "gpu") for step in STEPS}
    rows, keep = [], []
    for n in (16384, 65536, 262144):
        x_host, y_host = make_inputs(n)
        x, y = cupy.asarray(x_host), cupy.asarray(y_host)
        z = cupy.empty(n, dtype=cupy.float32)
        y_blas = y.copy()
        keep.append((x, y, z, y_blas))
        step = STEPS[-1]
        calls = {step.title: fns[step.kernel].bind(step.grid(n), BLOCK, (n, A, x, y, z)),
                 "cuBLAS saxpy": lambda x=x, y_blas=y_blas: cupy.cublas.axpy(A, x, y_blas)}
        for r in range(3):
            for call, fn in calls.items():
                for timer in names[r % len(names):] + names[:r % len(names)]:
                    rows.append({"call": call, "size": n, "timer": timer, "round": r, "ms": timers[timer](fn)})
        pd.DataFrame(rows).to_csv(out / "flush_mode_probe.csv", index=False)
    df = pd.DataFrame(rows)
    table = df.pivot_table(index=["size", "call"], columns="timer", values="ms", aggfunc="median") * 1e3
    print("median over rounds, us:")
    print(table.round(3).to_string())


if __name__ == "__main__":
    main()

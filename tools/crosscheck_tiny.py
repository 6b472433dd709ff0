"""The cross-check of measuring's calls of a few microseconds, alone (issue 37): after do_bench was
given the lab's flush buffer, do the lab's cold loop and do_bench agree on them? One short GPU
call; prints the crosscheck.csv columns and whether each row meets timing.crosscheck_agrees.

Usage on the GPU machine: ``python tools/crosscheck_tiny.py OUT_DIR``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpulab import timing  # noqa: E402
from gpulab.workloads.measuring.launchers import BLOCK, kernel  # noqa: E402
from gpulab.workloads.measuring.problem import A, make_inputs  # noqa: E402
from gpulab.workloads.measuring.steps import STEPS  # noqa: E402

#: The sizes of measuring's cross-checked calls of a few microseconds.
SIZES = (4096, 16384, 65536, 262144, 1048576)


def small_calls(sizes=SIZES):
    """(size, {variant: fn}) for measuring's last step and cuBLAS's SAXPY at each of ``sizes``:
    the calls of a few microseconds whose cold times the cross-check compares (each fn holds its
    own arrays)."""
    import cupy
    import cupy.cublas
    fns = {step.kernel: kernel(step, "gpu") for step in STEPS}
    step = STEPS[-1]
    out = []
    for n in sizes:
        x_host, y_host = make_inputs(n)
        x, y = cupy.asarray(x_host), cupy.asarray(y_host)
        z = cupy.empty(n, dtype=cupy.float32)
        y_blas = y.copy()
        out.append((n, {step.title: fns[step.kernel].bind(step.grid(n), BLOCK, (n, A, x, y, z)),
                        "cuBLAS saxpy (in place)": lambda x=x, y_blas=y_blas: cupy.cublas.axpy(A, x, y_blas)}))
    return out


def main() -> None:
    import cupy
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    stream = cupy.cuda.get_current_stream()
    rows = []
    for n, calls in small_calls():
        found = timing.crosscheck_interleaved([(timing._on_stream(fn, stream), 1) for fn in calls.values()])
        for variant, f in zip(calls, found):
            rows.append({"variant": variant, "size": n, "median_ms": f["crosscheck_cold_ms"],
                         "do_bench_ms": f["do_bench_ms"], "profiler_ms": f["profiler_ms"],
                         "agrees": timing.crosscheck_agrees(f["crosscheck_cold_ms"], f["do_bench_ms"]),
                         "note": f["crosscheck_note"]})
            print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    table.to_csv(out / "crosscheck_tiny.csv", index=False)
    print(table.drop(columns="note").to_string(index=False))
    print(f"{int(table.agrees.sum())} of {len(table)} rows agree")


if __name__ == "__main__":
    main()

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
from gpulab.workloads.measuring.steps import A, BLOCK, STEPS, kernel, make_inputs  # noqa: E402


def main() -> None:
    import cupy
    import cupy.cublas
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    fns = {step.kernel: kernel(step, "gpu") for step in STEPS}
    rows, keep = [], []
    for n in (4096, 16384, 65536, 262144, 1048576):
        x_host, y_host = make_inputs(n)
        x, y = cupy.asarray(x_host), cupy.asarray(y_host)
        z = cupy.empty(n, dtype=cupy.float32)
        step = STEPS[-1]
        launch = fns[step.kernel].bind(step.grid(n), BLOCK, (n, A, x, y, z))
        y_blas = y.copy()
        axpy = lambda x=x, y_blas=y_blas: cupy.cublas.axpy(A, x, y_blas)      # noqa: E731
        keep.append((x, y, z, y_blas))
        stream = cupy.cuda.get_current_stream()
        found = timing.crosscheck_interleaved([(timing._on_stream(launch, stream), 1),
                                               (timing._on_stream(axpy, stream), 1)])
        for variant, f in ((step.title, found[0]), ("cuBLAS saxpy (in place)", found[1])):
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

"""Convpool steps 10-11 (tf32 and 3xTF32 on wgmma) at full size on a Hopper GPU, before a record:
each checked against the float64 reference with a NaN-poisoned y, then timed beside step 9 and
cuDNN's fp32 and tf32 paths (PyTorch, NCHW and channels-last) on the same inputs; the kernels'
registers and local memory. Prints a table last. Usage: python tools/convpool_wgmma32_check.py [--no-cudnn] [N...]"""
import sys
import time

import cupy
import numpy as np

from gpulab import baselines
from gpulab.check import compare
from gpulab.kernels import load_module, resource_table
from gpulab.timing import benchmark
from gpulab.workloads.convpool import baselines as vendor
from gpulab.workloads.convpool.shapes import LAYER, conv_reference, make_inputs, pool_reference
from gpulab.workloads.convpool.steps import STEP, input_forms, input_name, make_launch, weight_forms

started = time.perf_counter()
for number in ("10", "11"):
    module = load_module(STEP[number].file, "gpu", options=STEP[number].options)
    print(resource_table(module).to_string(), flush=True)
rows = []
cudnn = "--no-cudnn" not in sys.argv
for N in [int(a) for a in sys.argv[1:] if a != "--no-cudnn"] or [32]:
    shape = LAYER.batch(N)
    x, w, b = make_inputs(shape, seed=100 + N, xp=cupy)
    ref = pool_reference(conv_reference(x, w, b, xp=cupy), xp=cupy)
    steps = [STEP[n] for n in ("06", "09", "10", "11")] if N == 1 else [STEP[n] for n in ("09", "10", "11")]
    forms, inputs = weight_forms(w, shape, xp=cupy), input_forms(x, steps, xp=cupy)
    y = cupy.empty(shape.y_shape, dtype=cupy.float32)
    for step in steps:
        launch = make_launch(step, shape, inputs[input_name(step)], forms, b, y, "gpu")
        errors = []
        for _ in range(2):                         # twice: a moving error would be a race
            y.fill(cupy.nan)
            launch()
            result = compare(y, ref, step.precision, name=f"{step.label} N={N}")
            errors.append(result.rel_error)
            print(result, flush=True)
        t = benchmark(launch, repeats=30, budget_ms=3000)
        rows.append({"N": N, "what": f"step {step.number} ({step.precision})", "ms": t.median_ms,
                     "TFLOP/s": shape.flops / t.median_ms / 1e9, "rel_error": errors[0],
                     "rerun_error": errors[1], "passed": result.passed, "unwritten": result.unwritten})
        print(f"[{time.perf_counter() - started:5.0f} s] {rows[-1]}", flush=True)
        del launch
    paths = [] if not cudnn else [p for p in vendor.layer_paths(x, w, b, graphs=False, precisions=("fp32", "tf32"))
             if not (N >= 32 and p.precision == "fp32" and p.layout == "NHWC")]   # its 46 s search (record.py)
    measured = baselines.measure(paths, reference=ref, experiment="ladder", size=N, flops=shape.flops,
                                 budget_ms=3000, repeats=30, on_failure="skip")
    for r in measured.rows:
        rows.append({"N": N, "what": r["variant"], "ms": r["median_ms"], "TFLOP/s": shape.flops / r["median_ms"] / 1e9,
                     "rel_error": r.get("rel_error", np.nan)})
    print(f"[{time.perf_counter() - started:5.0f} s] cuDNN done; skipped: {measured.skipped}", flush=True)
    del x, w, b, ref, forms, inputs, y
    cupy.get_default_memory_pool().free_all_blocks()
    baselines._release_memory()
import pandas as pd
pd.set_option("display.width", 200)
print(pd.DataFrame(rows).to_string())

"""Device call 1: full-size checks and timings of every step at N=1, then the record."""
import sys, time, traceback
import numpy as np
import cupy
from gpulab.workloads import convpool as cp
from gpulab.workloads.convpool import steps as st, shapes
from gpulab.check import compare
from gpulab.timing import benchmark
from gpulab.kernels import load_module, resource_table

shape = cp.LAYER
x, w, b = cp.make_inputs(shape, seed=1, xp=cupy)
ref = cp.reference(x, w, b, xp=cupy)
forms = st.weight_forms(w, shape, xp=cupy)
inputs = st.input_forms(x, cp.STEPS, xp=cupy)
y = cupy.empty(shape.y_shape, cupy.float32)
for step in cp.STEPS:
    try:
        mod = load_module(step.file, "gpu", options=step.options)
        print(resource_table(mod).to_string(), flush=True)
        y.fill(cupy.nan)
        launch = st.make_launch(step, shape, inputs[st.input_name(step)], forms, b, y, "gpu")
        launch(); cupy.cuda.runtime.deviceSynchronize()
        res = compare(y, ref, step.precision, name=step.label)
        t = benchmark(launch, repeats=30, budget_ms=300)
        print(f"{step.label:60s} {t.median_ms:8.3f} ms {shape.flops/t.median_ms/1e9:8.1f} TFLOP/s  {res}", flush=True)
    except Exception:
        traceback.print_exc()
# tc stages quick
for number in ("07", "08"):
    for s in (2, 3, 4, 5, 6):
        try:
            step = st.STEP[number]
            y.fill(cupy.nan)
            launch = st.make_launch(step, shape, inputs[st.input_name(step)], forms, b, y, "gpu", options=(f"-DSTAGES={s}",))
            launch()
            res = compare(y, ref, step.precision)
            t = benchmark(launch, repeats=30, budget_ms=300)
            print(f"{number} STAGES={s}: {t.median_ms:.4f} ms {shape.flops/t.median_ms/1e9:.1f} TFLOP/s ok={res.passed}", flush=True)
        except Exception:
            traceback.print_exc()

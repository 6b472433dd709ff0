"""Quick probe of gpulab's GPU paths (not a test suite; see tests/)."""
import traceback
import numpy as np
import gpulab
from gpulab import kernels, device

print(device.describe())
mod = gpulab.load_module("measuring/01_saxpy.cu", "gpu")
print(kernels.resource_table(mod))
print(kernels.occupancy(mod.saxpy, 256))
bad = "extern \"C\" __global__ void k(float* x) {\n  x[0] = undefined_name;\n}\n"
import pathlib, tempfile
p = pathlib.Path(tempfile.mkdtemp()) / "bad.cu"; p.write_text(bad)
try:
    gpulab.load_module(p, "gpu")
except gpulab.KernelCompileError as e:
    print("COMPILE ERROR OK:", e, "| line", e.line)
    print("LOG:", e.log[:500])
from gpulab.workloads import measuring
print(measuring.CHAPTER.check("gpu"))
try:
    mod.saxpy(1, 32, (10, 2.0, np.zeros(10, np.float32), np.zeros(10, np.float32), np.zeros(10, np.float32)))
except gpulab.KernelArgumentError as e:
    print("ARG ERROR OK:", e)

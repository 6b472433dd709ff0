"""Vendor baselines, declared as data and measured in the same run as the lab's kernels.

A speedup is only as honest as its baseline, so a chapter compares its kernels
with *every* reasonable vendor path on the machine (cuBLAS through CuPy,
PyTorch's cuBLAS and cuBLASLt with fused ReLU epilogues, cuDNN in NCHW and
channels-last, tf32 on and off, eager and in CUDA graphs) and quotes the
**fastest one of matching precision**:

* an fp32 kernel against the fastest fp32 path *without* tf32;
* a tf32 kernel against the fastest tf32 path;
* an fp16 (or bf16) kernel against the fastest fp16/bf16 path.

Each path is a :class:`VendorPath`: a precise label, its library, precision
class, layout, graph or eager, and a ``setup()`` that returns a zero-argument
callable whose return value is the output (checked against the chapter's
float64 reference before anything is timed). :func:`measure` runs every path
with :mod:`gpulab.timing` (tf32 set explicitly for each path and restored
after it) and returns tidy rows in the lab's format with ``library``,
``precision``, ``layout`` and ``mode`` columns; paths whose library is missing,
or whose setup fails, come back in ``skipped`` with the reason instead of
crashing the run. :func:`fastest` picks the baseline a kernel is judged by.

Example, for a chapter's benchmark (x on the GPU, W1..W3 NumPy arrays)::

    from gpulab import baselines

    paths = baselines.matmul_chain_paths(x, [W1, W2, W3], relu=[True, True, False])
    paths += baselines.graph_paths(paths, launches=10)         # the same, captured in CUDA graphs
    result = baselines.measure(paths, reference=y64, experiment="ladder", size=n,
                               flops=flops, bytes=nbytes, graph_experiment="graph")
    rows += result.rows                                        # tidy rows, one per path
    skipped += result.skipped                                  # [{"variant", "reason"}]
    best = baselines.fastest(pd.DataFrame(rows), "fp32", size=n)   # a row (pandas Series)

Convolutions: :func:`conv_paths` (cuDNN through PyTorch, NCHW and channels-last,
fp32 / tf32 / fp16 / bf16, optionally followed by ReLU and max-pooling).

The package's parts: :mod:`.core` (a path as data, the measuring loop, the pick of the baseline),
:mod:`.graphs` (paths captured in CUDA graphs), :mod:`.chains` (chains of matrix products),
:mod:`.convolutions` (cuDNN's convolutions) and :mod:`.algorithms` (which kernels a path ran);
every name is read here, ``gpulab.baselines.X``.
"""
from __future__ import annotations

from .core import (  # noqa: F401 (the package's names)
    MATCHING, PRECISIONS, VENDOR_COLUMNS, VendorPath, Measured, precision_mode, _try_import,
    _cupy_linalg, as_reference_array, _torch_plain_dtypes, measure, _release_memory, is_vendor,
    fastest, fastest_table, with_output, _fmt, _TORCH_DTYPES, _torch_dtype, _as_torch,
)
from .graphs import (  # noqa: F401 (the package's names)
    in_graph, graph_paths, _torch_graph, _cupy_graph,
)
from .chains import (  # noqa: F401 (the package's names)
    torch_chain, cupy_chain, cublas_chain, _libcublas, matmul_chain_paths,
)
from .convolutions import (  # noqa: F401 (the package's names)
    conv_path, conv_paths,
)
from .algorithms import (  # noqa: F401 (the package's names)
    cudnn_kernels, path_kernels, _on_gpu, algorithm_family,
)

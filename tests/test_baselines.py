"""The vendor-baseline helper: paths declared as data, matching precision, unavailable paths."""
import numpy as np
import pandas as pd
import pytest

from gpulab import baselines
from gpulab.timing import Timing


def vendor_row(label, precision, ms, mode="eager", size=100, library="cuBLASLt (PyTorch)"):
    return Timing([ms, ms]).row("ladder", label, size, library=library, precision=precision,
                                layout="W@X", mode=mode, rel_error=0.0, vendor_note="")


def rows():
    return pd.DataFrame([
        Timing([0.5]).row("ladder", "our fp32 kernel", 100, precision="fp32"),   # not a vendor row
        vendor_row("A fp32", "fp32", 3.0),
        vendor_row("B fp32 graph", "fp32", 2.0, mode="graph"),
        vendor_row("C tf32", "tf32", 1.0),
        vendor_row("D fp16", "fp16", 0.9),
        vendor_row("E bf16", "bf16", 0.8),
        vendor_row("F fp32 other size", "fp32", 0.1, size=200),
    ])


def test_fastest_of_matching_precision():
    frame = rows()
    # fp32 kernels are judged against fp32 without tf32, never the faster tf32 path.
    assert baselines.fastest(frame, "fp32", size=100)["variant"] == "B fp32 graph"
    assert baselines.fastest(frame, "fp32", size=100, mode="eager")["variant"] == "A fp32"
    assert baselines.fastest(frame, "tf32", size=100)["variant"] == "C tf32"
    # fp16 against fp16 and bf16 alike.
    assert baselines.fastest(frame, "fp16", size=100)["variant"] == "E bf16"
    assert baselines.fastest(frame, "bf16", size=100)["variant"] == "E bf16"
    # The lab's own rows are never a baseline.
    assert baselines.fastest(frame[frame["variant"] == "our fp32 kernel"], "fp32") is None
    assert baselines.fastest(frame, "tf32", size=200) is None


def test_fastest_rejects_bad_arguments():
    with pytest.raises(ValueError, match="precision must be one of"):
        baselines.fastest(rows(), "int8")
    with pytest.raises(ValueError, match="mode must be"):
        baselines.fastest(rows(), "fp32", mode="lazy")
    with pytest.raises(KeyError, match="no column 'layer'"):
        baselines.fastest(rows(), "fp32", layer=2)


def test_fastest_table_one_row_per_precision_class():
    table = baselines.fastest_table(rows())
    at100 = table[table["size"] == 100].set_index("precision class")
    assert at100.loc["fp32", "fastest vendor path"] == "B fp32 graph"
    assert at100.loc["fp32", "paths compared"] == 2
    assert at100.loc["fp16/bf16", "fastest vendor path"] == "E bf16"
    assert set(table[table["size"] == 200]["precision class"]) == {"fp32"}


def test_paths_are_declared_as_data():
    x = np.zeros((72, 10), np.float32)
    weights = [np.zeros((64, 72)), np.zeros((64, 64)), np.zeros((4, 64))]
    paths = baselines.matmul_chain_paths(x, weights, [True, True, False])
    labels = [p.label for p in paths]
    assert len(labels) == len(set(labels)), "every path needs its own label"
    assert "cuBLASLt (PyTorch) fp16, ReLU epilogue, W@X" in labels
    assert {p.precision for p in paths} == {"fp32", "tf32", "fp16", "bf16"}
    graphs = baselines.graph_paths(paths, launches=10)
    # CuPy's matmul cannot be captured; the direct cuBLAS chain and every PyTorch path can.
    assert len(graphs) == len(paths) - 2
    assert all(g.graph and g.calls == 10 and g.label.endswith(", CUDA graph") for g in graphs)
    with pytest.raises(ValueError, match="already a graph path"):
        baselines.in_graph(graphs[0])
    convs = baselines.conv_paths(np.zeros((1, 3, 8, 8)), np.zeros((4, 3, 3, 3)), padding=1, relu=True,
                                 pool=(3, 2))
    assert {(p.precision, p.layout) for p in convs} == {(p, l) for p in ("fp32", "tf32", "fp16", "bf16")
                                                         for l in ("NCHW", "NHWC")}
    assert convs[0].label == "cuDNN (PyTorch) fp32, NCHW, conv + ReLU + maxpool 3/2"
    assert convs[0].tolerance == 1e-4 and convs[2].tolerance is None


def test_bad_declarations_are_refused():
    with pytest.raises(ValueError, match="precision must be one of"):
        baselines.VendorPath("x", "lib", "int8", "W@X", setup=lambda: None)
    with pytest.raises(ValueError, match="one relu flag per weight"):
        baselines.torch_chain(None, [np.zeros((2, 2))], [True, False], precision="fp32")
    with pytest.raises(ValueError, match="layout must be"):
        baselines.conv_path(None, None, precision="fp16", layout="CHWN")


def test_a_missing_library_is_reported_not_crashed_on():
    def never():
        raise AssertionError("setup must not run when a required module is missing")
    path = baselines.VendorPath("no such library", "nolib", "fp32", "W@X", never,
                                requires=("gpulab_no_such_module_xyz",))
    result = baselines.measure([path], reference=np.zeros(4), experiment="ladder", size=4)
    rows, skipped = result
    assert rows == []
    assert skipped[0]["variant"] == "no such library"
    assert skipped[0]["reason"].startswith("unavailable: gpulab_no_such_module_xyz is not available")


def test_a_failing_setup_is_reported_with_its_reason():
    def broken():
        raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED")
    path = baselines.VendorPath("broken path", "numpy", "fp32", "W@X", broken, requires=("numpy",))
    result = baselines.measure([path], reference=np.zeros(4), experiment="ladder", size=4, log=lambda s: None)
    assert result.rows == [] and "CUBLAS_STATUS_NOT_SUPPORTED" in result.skipped[0]["reason"]


def test_a_wrong_output_fails_the_check_before_any_timing():
    from gpulab import CheckFailed
    path = baselines.VendorPath("wrong", "numpy", "fp32", "W@X", lambda: (lambda: np.ones(4)),
                                requires=("numpy",))
    with pytest.raises(CheckFailed, match="wrong"):
        baselines.measure([path], reference=np.zeros(4), experiment="ladder", size=4)
    skipped = baselines.measure([path], reference=np.zeros(4), experiment="ladder", size=4,
                                on_failure="skip").skipped
    assert skipped[0]["reason"].startswith("check failed")


def test_algorithm_family_reads_cudnn_kernel_names():
    assert baselines.algorithm_family(["winograd_4x4_fp32", "other"]) == "Winograd"
    assert baselines.algorithm_family(["void precomputed_convolve_sgemm<float, 128>"]).startswith("implicit GEMM, CUDA cores")
    assert baselines.algorithm_family(["void fft2d_r2c_32x32<float>"]) == "FFT"
    assert baselines.algorithm_family([]) == "not read"


@pytest.mark.skipif(not __import__("gpulab").gpu_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("capture", ["torch", "cupy"])
def test_a_graph_replay_keeps_what_it_launches_on_alive(capture):
    """A replay kept for the cross-check outlives the path and its setup: the tensors the captured
    kernels read (made in setup) must live as long as the replay, or it computes on whatever reuses
    their memory (fcnet's H100 record of 2026-12-07 ended in an illegal address)."""
    import gc

    import cupy
    import torch
    rng = np.random.default_rng(7)
    x = cupy.asarray(rng.standard_normal((72, 3000)).astype(np.float32))
    weights = [rng.standard_normal(shape) for shape in ((64, 72), (64, 64), (4, 64))]
    path = next(p for p in baselines.graph_paths(baselines.matmul_chain_paths(x, weights, [True, True, False]))
                if p.capture == capture and p.precision == "fp32")
    replay = path.setup()
    output = lambda: cupy.asarray(replay()[0] if isinstance(replay(), tuple) else replay()).copy()  # noqa: E731
    before = output()
    del x, path
    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()
    # Whatever memory was freed is written over by new NaN-filled blocks of every size.
    junk = [torch.full((n,), float("nan"), device="cuda") for n in (1 << 14, 1 << 16, 1 << 18) for _ in range(8)]
    junk += [cupy.full((n,), cupy.nan, cupy.float32) for n in (1 << 14, 1 << 16, 1 << 18) for _ in range(8)]
    torch.cuda.synchronize()
    after = output()
    assert bool(cupy.isfinite(before).all()) and bool((after == before).all())
    del junk

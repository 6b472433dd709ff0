"""``python -m gpulab record CHAPTER --quick`` on a machine without a GPU, its measurements stubbed:
what tests/test_recording.py runs to prove the recording path writes the run it should.

    PYTHONPATH=REPO python tests/recording_stubs.py CHAPTER OUT [--fail STEP]

Real: the command line, the chapter's orchestration (which experiments run, in which order, what
is checked before it is timed, what is skipped and why, which side tables are written), its
steps' kernels (on the CPU backend: "gpu" is served by it, and CuPy by NumPy) and their checks,
and writing the run. Stubbed: the timers (a deterministic Timing per call, in call order), the
GPU monitor and description, PyTorch and cuDNN paths, Nsight Compute, the device's ceilings and
the host-device copies, which need a GPU. ``--fail STEP`` makes that step's output wrong. Runs
in a process of its own: the NumPy "cupy" must not leak into other tests.
"""
from __future__ import annotations

import sys
import time
import types
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

# ------------------------------------------------------------------ CuPy, served by NumPy
cupy = types.ModuleType("cupy")
cupy.__getattr__ = lambda name: getattr(np, name)     # arrays, dtypes and functions: NumPy's
cupy.asnumpy = np.asarray


class _Stream:
    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


cupy.cuda = types.SimpleNamespace(get_current_stream=_Stream, Stream=lambda **options: _Stream(),
                                  Device=lambda *a: types.SimpleNamespace(synchronize=lambda: None, id=0))
cupy.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
cupy.cublas = types.ModuleType("cupy.cublas")
cupy.cublas.axpy = lambda a, x, y: np.add(y, np.float32(a) * x, out=y)
sys.modules["cupy"], sys.modules["cupy.cublas"] = cupy, cupy.cublas

# ------------------------------------------------------------------ the GPU's parts of gpulab
from gpulab import device, kernels, roofline, timing, transfers  # noqa: E402
from gpulab.timing import Timing  # noqa: E402

_backend_init = kernels.Backend.__init__
kernels.Backend.__init__ = lambda self, name: _backend_init(self, "cpu" if name == "gpu" else name)
device.require_gpu = lambda purpose="": None
device.describe = lambda: {"gpu": "Stub GPU", "date": "2026-01-01T00:00:00", "driver": "0", "cuda_runtime": "0",
                           "cupy": "NumPy"}


@contextmanager
def _monitor():
    yield types.SimpleNamespace(summary=lambda: {})


device.GpuMonitor = _monitor
_calls = [0]
#: The code of every kind of callable the stub clock has run (see fake_timing).
_timed_kinds: set = set()


def _kind(fn):
    """What makes two timed callables the same kind: their function's code (a closure that
    launches a step, whichever step), else their type."""
    fn = getattr(fn, "__func__", fn)
    return getattr(fn, "__code__", None) or type(fn)


def fake_timing(fn=None, *args, method: str = "cuda events", **options) -> Timing:
    """A Timing of 1, 2, 3 ... ms in call order. ``fn`` runs the first time a callable of its
    kind (:func:`_kind`) is timed, so each kind of timed call is shown to run here: every
    record runs a step's launch and checks its output before timing that same launch, so
    running each one again would show nothing new, at the CPU backend's pace (half the CPU
    time of tests/test_recording.py, before)."""
    if callable(fn) and _kind(fn) not in _timed_kinds:
        _timed_kinds.add(_kind(fn))
        fn()
    _calls[0] += 1
    # The callable is kept, as the real timer keeps it under a recording's cross-check, so that
    # the rows a recording cross-checks (its selector) are chosen and written as on the GPU.
    return Timing([_calls[0], _calls[0], _calls[0] + 0.5], method=method, fn=fn if callable(fn) else None)


def fake_crosscheck(fn, *, calls: int = 1) -> dict:
    """The cross-check's columns, made up on the stub clock (the cross-check's timers need a GPU)."""
    _calls[0] += 1
    return {"crosscheck_cold_ms": _calls[0] / calls, "crosscheck_warm_ms": _calls[0] / calls,
            "do_bench_ms": _calls[0] / calls, "profiler_ms": _calls[0] / calls, "profiler_kernels": 1.0,
            "crosscheck_note": ""}


def fake_rows(experiment: str, variant: str, size: int = 1, **labels) -> list[dict]:
    return [fake_timing().row(experiment, variant, size, **labels)]


def transfer_breakdown(launch, inputs, shape, dtype, *, memory="pageable", experiment="transfers", variant="",
                       size=0, **options):
    if memory == "managed+prefetch":       # as on a platform without prefetch: the record says so, no row
        raise RuntimeError("no prefetch on this platform")
    return [fake_timing().row(experiment, variant or memory, size, phase, memory=memory)
            for phase in ("h2d", "kernel", "d2h")]


timing.benchmark = timing.graph_benchmark = fake_timing
timing.crosscheck = fake_crosscheck
timing.crosscheck_interleaved = lambda items, **options: [fake_crosscheck(fn, calls=calls) for fn, calls in items]
timing.host_timer = lambda fn, synchronize, **options: fake_timing(fn, method=f"host timer, synchronize={synchronize}")
roofline.measure_ceilings = lambda **options: (fake_rows("ceilings", "device copy", 2**30)
                                               + fake_rows("ceilings", "cuBLAS SGEMM", 8192))
transfers.transfer_breakdown = transfer_breakdown
transfers.overlap_with_streams = lambda launch, inputs, shape, dtype, *, chunks, size=0, **options: \
    fake_timing().row("streams", f"{chunks} chunks", size, "total", chunks=chunks)


def vendor_measure(variant, library, skipped_precision):
    """gpulab.baselines.measure for one checked path and one path skipped with its reason."""
    from gpulab import baselines

    def measure(paths, *, experiment="ladder", size=0, labels=None, phase="kernel", **options):
        return baselines.Measured(
            fake_rows(experiment, variant, size, phase=phase, library=library, precision="fp32", **(labels or {})),
            [{"variant": f"{library} {skipped_precision}", "library": library, "precision": skipped_precision,
              "size": size, "reason": f"this {library} has no {skipped_precision} path"}])
    baselines.measure = measure


def wrong_output(check, fail):
    """``check`` with the output of step ``fail`` (its label starts "NN ") made wrong first."""
    def wrong(out, ref, *args, name="", **options):
        return check(out * 3 + 1 if fail and name.startswith(f"{fail} ") else out, ref, *args, name=name, **options)
    return wrong


# ------------------------------------------------------------------ each chapter's stubs
def measuring(fail):
    from gpulab.workloads.measuring import record as m
    m.benchmark, m.graph_benchmark, m.host_timer = timing.benchmark, timing.graph_benchmark, timing.host_timer
    m.fits_in_l2 = lambda n, gpu=None: n <= 2**14
    m.cold_rows = lambda launch, variant, n, repeats: (fake_rows("ladder_cold", variant, n)
                                                       + fake_rows("graph_cold", variant, n))
    m.first_launch_rows = lambda n, x, y, z: fake_rows("first_launch", "compile (NVRTC)", n, phase="compile")
    m.idle_rows = lambda launch, n: fake_rows("idle", "idle 0 ms", n)
    real_kernel = m.kernel

    def kernel(step, backend=None):             # step ``fail`` writes 7 everywhere
        fn = real_kernel(step, backend)
        if step.number != fail:
            return fn
        return types.SimpleNamespace(bind=lambda grid, block, args: lambda: args[-1].fill(7.0))
    m.kernel = kernel


def fcnet(fail):
    from gpulab import baselines
    from gpulab.workloads.fcnet import record as r
    r.benchmark, r.graph_benchmark = timing.benchmark, timing.graph_benchmark
    r.SIZES = {"small": 128, "large": 2_560}            # the CPU backend's pace
    real_reference, real_runnable = r.reference, r.runnable_steps

    class OnDevice(np.ndarray):
        def get(self):
            return np.asarray(self)
    r.reference = lambda *args, **options: np.asarray(real_reference(*args, **options)).view(OnDevice)

    def runnable_steps(*args):                  # the last step does not fit this "GPU"
        ok, skipped = real_runnable(*args)
        last = ok.pop()
        return ok, skipped + [{"step": last.ordinal, "variant": last.label, "reason": "too much shared memory"}]
    r.runnable_steps = runnable_steps
    baselines.matmul_chain_paths = baselines.graph_paths = lambda *args, **options: []
    vendor_measure("cuBLAS fp32", "cuBLAS", "bf16")
    r._vendor_kernel_names = lambda paths, case: [{"case": case, "variant": "PyTorch fp32", "kernels": "gemm"}]
    r._transfer_rows = lambda step_, fns, x_host, weights, n, repeats: [
        {**row, **r._row_labels(step_, n), "variant": step_.label}
        for row in fake_rows("transfers", "pinned", n, memory="pinned")]
    r.resources = lambda fns_by_step: pd.DataFrame({"variant": list(fns_by_step), "registers": 32})
    r.profile_steps = lambda quick=False, case="large": pd.DataFrame({"step": [1], "variant": ["01"], "case": [case]})
    r.check = wrong_output(r.check, fail)


def lenet(fail):
    from gpulab.workloads.lenet import baselines as lenet_baselines
    from gpulab.workloads.lenet import record as r
    r.BATCHES = (2, 3, 4)                               # the CPU backend's pace
    real_runnable = r.runnable_batches

    def runnable_batches(batches, limits=None):         # and a batch over this "GPU"'s memory
        ok, skipped = real_runnable(batches, limits)
        return ok, skipped + [{"variant": "every step and vendor path", "library": "", "precision": "",
                               "size": 99_999, "reason": "over the memory budget"}]
    r.runnable_batches = runnable_batches
    lenet_baselines.layer_paths = lenet_baselines.forward_paths = lambda *args, **options: []
    lenet_baselines.padded_layer_paths = lenet_baselines.padded_forward_paths = lambda *args, **options: []
    vendor_measure("cuDNN fp32", "cuDNN", "fp16")
    r.forward_conv64 = r._pool_relu = lambda *args: np.zeros(1)
    r.pipeline = lambda step, x_host, weights, chunks, reference, repeats=10: (
        fake_timing().row("pipeline", f"{step.label}, {chunks} stream(s)", len(x_host), "total", chunks=chunks,
                          memory="pinned"),
        pd.DataFrame({"lane": ["stream 0"], "kind": ["kernel"], "start_ms": [0.0], "end_ms": [1.0]}))
    r.transfer_rows = lambda step, x_host, weights, repeats: [
        {**row, "step": step.number, "precision": step.precision, "layer": "all"}
        for row in fake_rows("transfers", f"{step.label}, pinned", len(x_host), memory="pinned")]
    r.resources_table = lambda: pd.DataFrame({"kernel": ["conv"], "registers": [32], "step": ["01"]})
    r.profile_table = lambda: pd.DataFrame({"step": ["01"], "layer": ["conv1"], "size": [1000]})
    r.cudnn_kernels_table = lambda run: pd.DataFrame({"layer": ["conv1"], "variant": ["cuDNN fp16"],
                                                      "size": [max(run.batches)], "family": ["GEMM"],
                                                      "kernels": ["xmma_gemm"]})
    real_check = r.check

    def check(out, ref, *args, name="", **options):     # the logits only: the pooled outputs pass
        return (wrong_output(real_check, fail) if "logits" in name else real_check)(out, ref, *args, name=name,
                                                                                   **options)
    r.check = check


def training(fail):
    """Everything but the orchestration stubbed (a real check takes minutes on the CPU backend);
    the clock too, so that the run's budget is spent at a known point."""
    from gpulab.errors import CheckFailed
    from gpulab.workloads.training import data, reference
    from gpulab.workloads.training import record as r
    clock = types.SimpleNamespace(now=0.0)
    time.perf_counter = lambda: clock.now

    class Corpus:
        docs = 4096

        def __init__(self, docs=4096):
            self.docs, self.labels, self.indptr = docs, np.zeros(docs, np.int64), np.arange(docs + 1) * 3

        def rows(self, first, last):
            return Corpus(last - first)
    data.corpus = lambda: (Corpus(), Corpus())
    data.bayes_accuracy = lambda: (0.92, 0.0003)
    data.bayes_predict = lambda test: np.zeros(test.docs, np.int64)
    reference.init_params = lambda: {"W1": np.ones((2, 2), np.float32)}
    reference.forward = lambda batch, params: {"P": None}
    reference.backward = lambda batch, labels, params, acts: {"dW1": 1.0, "dW2": 2.0}
    reference.loss = lambda P, labels: 0.5

    class Plan:                  # step 8 does not fit this "GPU"; step 3 not at batch 32
        notes = ["fewer training documents kept dense"]
        dense_docs = 2048

        def skip_reason(self, number, batch):
            return "too much shared memory" if number == 8 or (number, batch) == (3, 32) else None

        def skipped(self):
            return pd.DataFrame([{"step": 8, "batch": b, "reason": "too much shared memory"} for b in (32, 1024)]
                                + [{"step": 3, "batch": 32, "reason": "too much shared memory"}])

        def summary(self):
            return pd.DataFrame({"step": [1, 2], "device": "Stub GPU"})
    r.fit.plan = lambda batches, train: Plan()
    r.GpuData = lambda train, dense_docs: types.SimpleNamespace(train=train, dense=np.zeros((dense_docs, 1)))

    def check_full_size(step_, gd, params, batch_ref):
        if step_.number == fail:
            raise CheckFailed(f"{step_.label}: relative error 1.0 (tolerance 1e-05)")
        return {"loss": 1e-7, "update of W1": 2e-7, "update of W2": 3e-7}
    r._check_full_size = check_full_size

    def step_variants(rec, run, step_):
        """The step's variants as the ladder loop checks and times them: the real full-size check
        (its result stubbed above), a row per batch the plan runs; step 5's timing crashes."""
        from gpulab.recorder import Variant

        def timer(launch, **options):
            if step_.ordinal == 5:
                raise RuntimeError("step 5's timing crashed")
            return fake_timing()       # a Timing without its callable: nothing here is cross-checked

        def row(b):
            return lambda t, checked, medians: t.row("ladder", step_.label, b, mode="eager", step=step_.ordinal,
                                                     batch=b)
        check = r.full_size_check(run, step_)
        return [Variant(step_.label, lambda: None, check, row(b), where={"step": step_.ordinal}, timer=timer)
                for b in run.batches if not run.plan.skip_reason(step_.ordinal, b)]
    r.step_variants = step_variants
    r.time_vendor = lambda gd, params, repeats, log=print: (
        fake_rows("vendor", "PyTorch eager fp32", 1024, library="PyTorch"),
        [{"variant": "torch.compile", "library": "PyTorch", "precision": "fp32", "size": 1024,
          "reason": "no C compiler"}])
    r.train_curves = lambda gd, test, params, epochs=20, log=print: pd.DataFrame({"variant": ["07"], "epoch": [1]})

    def breakdown(gd, params, plan=None):
        raise RuntimeError("the breakdown crashed")
    r.breakdown = breakdown

    def timeline(gd, params, plan=None):
        clock.now += 400.0                             # past the run's 330 s budget: what follows is skipped
        return pd.DataFrame({"lane": ["stream 0"], "step": [2]})
    r.timeline = timeline
    r.sweep = lambda *args, **options: pd.DataFrame({"batch": [64]})
    r.profile_steps = lambda: pd.DataFrame({"step": [6]})


def hopper(fail):
    """Tiny GEMMs (the CPU backend emulates TMA, mbarriers and wgmma at the check sizes' pace);
    cuBLAS's paths are float64 products rounded to the output type; the kernels' registers, NVRTC's
    version and Nsight Compute's profile, which need a GPU, are stubbed."""
    from gpulab.workloads.hopper import record as r
    from gpulab.workloads.hopper.problem import as_float, poisoned, to_bf16_bits
    r.benchmark = timing.benchmark
    r.QUICK_SIZES = (136,)
    r.SHAPES = (("tiny conv", 200, 136, 712, "a conv layer, smaller"), ("tiny dense", 72, 264, 200, "a dense layer"))
    r.QUICK_SHAPES = ("tiny conv", "tiny dense")
    r.CHECK_SHAPES = ((200, 136, 200),)

    def random(shape, seed, precision):
        x = np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)
        return to_bf16_bits(x) if precision == "bf16" else x.astype(np.float16 if precision == "fp16" else np.float32)
    r._random = random

    def vendor_launches(A, B, precision="fp16"):
        def launch(C):
            def run():
                product = as_float(A, precision) @ as_float(B, precision).T
                C[...] = to_bf16_bits(product) if precision == "bf16" else product.astype(C.dtype)
            return run, C
        names = ("cuBLAS (cupy.matmul)" if precision == "fp16" else "cuBLAS (cublasGemmEx)", "cuBLASLt (torch.matmul)")
        return {f"{name} {precision}": launch(poisoned(np, (A.shape[0], B.shape[0]), precision)) for name in names}
    r.vendor_launches = vendor_launches
    r.FP8_CHECK_SHAPES, r.FP8_QUICK_SIZES = ((72, 264, 208),), (144,)

    def fp8_vendor_launches(inputs):        # cuBLASLt's FP8 GEMM: the float64 product, rounded to bfloat16
        from gpulab import fp8
        def launch():
            held = {}
            def run():
                product = fp8.reference(inputs["A"], inputs["B"]) * (float(inputs["scale_a"]) * float(inputs["scale_b"]))
                held["C"] = to_bf16_bits(product.astype(np.float32))
                return held["C"]
            return run, lambda: held["C"]
        return {f"cuBLASLt (torch._scaled_mm) fp8{what}": launch() for what in (" fast accumulation", "")}
    r.fp8_vendor_launches = fp8_vendor_launches
    r.kernel_resources = lambda step: {"registers": 168, "local_bytes": 0, "static_shared_bytes": 0}
    r.nvrtc_version = lambda: "0.0"
    r.torch_version = lambda: "stub"
    r.ncu_profile = lambda n: pd.DataFrame({"kernel": ["gemm_step07"], "block": ["(384, 1, 1)"], "grid": ["(1, 1, 1)"],
                                            "metric": ["SM Busy"], "unit": ["%"], "value": [50.0]})
    real_compare = r.compare

    def compare(got, ref, *args, name="", **options):   # step ``fail`` made wrong
        wrong = fail and name.startswith(f"step {fail}")
        return real_compare(got * 3 + 1 if wrong else got, ref, *args, name=name, **options)
    r.compare = compare


def convpool(fail):
    """The layer at the check shape (the CPU backend's pace), cuDNN's slow fp32 NHWC search
    left out from batch 8 (so that skip is written), the sweeps, the kernels' resources, the
    tf32 ceiling and Nsight Compute's profile, which need a GPU, stubbed."""
    from gpulab import baselines
    from gpulab.workloads.convpool import baselines as convpool_baselines
    from gpulab.workloads.convpool import record as r
    from gpulab.workloads.convpool import sweeps
    from gpulab.workloads.convpool.problem import Shape
    r.benchmark = timing.benchmark
    r.LAYER = Shape(N=1, C=8, H=6, W=10, M=20)     # the fewest channels steps 6-8 take (8): the CPU backend's pace
    r.QUICK_BATCHES, r.SLOW_SEARCH_BATCH = (1, 2), 2
    convpool_baselines.layer_paths = convpool_baselines.conv_only_paths = lambda *args, **options: []
    vendor_measure("cuDNN (PyTorch) fp32", "cuDNN (PyTorch)", "fp16")
    baselines._release_memory = lambda: None
    baselines.cudnn_kernels = lambda setup: ["stub_cudnn_kernel"]
    r.tensor_ceilings = lambda: fake_rows("ceilings", "cuBLAS TF32 GEMM (PyTorch)", 8192, precision="tf32")
    sweeps.record_sweeps = lambda quick=False, log=None: {"sweeps": pd.DataFrame(
        {"sweep": ["shape"], "step": ["05"], "Q": [2], "status": ["ok"], "median_ms": [1.0]})}
    r.resources_table = lambda: pd.DataFrame({"step": ["05"], "kernel": ["conv_relu_pool_strip"], "registers": [32]})
    r.profile_table = lambda: pd.DataFrame({"step": ["05"], "kernel": ["conv_relu_pool_strip"], "id": [0]})
    real_compare = r.compare

    def compare(got, ref, *args, name="", **options):   # step ``fail`` made wrong
        wrong = fail and name.startswith(f"{fail} ")
        return real_compare(got * 3 + 1 if wrong else got, ref, *args, name=name, **options)
    r.compare = compare


def alexnet(fail):
    """The reduced check layers and batches (the CPU backend's pace): a quick run's batches 1 and
    2, with 2 as the main batch (so that what the record does at N = 128 runs: the cold L2 and
    channels-last-input rows, Winograd's filter transforms, cuDNN's algorithms) and 64 as the
    scaling batch (checked on three of its images, as beyond N = 128); cuDNN's paths, the
    kernels' resources and Nsight Compute's profile, which need a GPU, stubbed. Step ``fail``
    made wrong."""
    from gpulab import baselines
    from gpulab.workloads.alexnet import problem, record as r
    from gpulab.workloads.alexnet.problem import Layer
    r.benchmark = timing.benchmark
    # The layers' strides, paddings and filter sizes, each making a 4 x 4 output
    r.LAYERS = [Layer(1, C=3, H=23, W=23, M=10, R=11, S=11, U=4, P=0), Layer(2, C=10, H=4, W=4, M=17, R=5, S=5, U=1, P=2),
                *(Layer(i, C=c, H=4, W=4, M=m, R=3, S=3, U=1, P=1) for i, c, m in ((3, 17, 20), (4, 20, 19), (5, 19, 13)))]
    # The scaling batch, 32 times the main one: the stub clock's medians (one more ms each timed
    # call) then predict layer 1's steps under the record's 4 s a call and the later layers' over
    # it, so both the timed and the skipped-with-its-estimate paths of the scaling study run.
    r.QUICK_BATCHES, r.MAIN_N, r.QUICK_SCALING_BATCHES = (1, 2), 2, (64,)
    problem.MAIN_N = 2                         # which images are checked beyond the main batch
    r.SCALING_STEPS = ("04", "14", "20")       # three, each kind of kernel
    RECORD_OPTIONS.extend(["--budget-s", "3600"])   # every experiment runs, however slow this machine
    r.vendor_paths = r.nchw_input_paths = lambda *args, **options: []
    vendor_measure("cuDNN (PyTorch) fp32", "cuDNN (PyTorch)", "fp16")
    stub_measure = baselines.measure

    def measure(*args, **options):                      # checked rows carry their error
        measured = stub_measure(*args, **options)
        return baselines.Measured([{**row, "rel_error": 1e-7} for row in measured.rows], measured.skipped)
    baselines.measure = measure
    r._algorithm_rows = lambda layer, paths: [{"layer": layer.index, "variant": "cuDNN (PyTorch) fp32",
                                               "precision": "fp32", "layout": "NCHW", "algorithm": "implicit GEMM",
                                               "kernels": "stub_cudnn_kernel"}]
    r._torch_empty_cache = lambda: None
    r.resources_table = lambda: pd.DataFrame({"step": ["01"], "kernel": ["conv_direct_global"], "registers": [32]})
    r.profile_table = lambda: pd.DataFrame({"kernel": ["conv_registers"], "id": [0], "layer": [2], "step": ["02"],
                                            "size": [32]})
    real_compare = r.compare

    def compare(got, ref, *args, name="", **options):   # step ``fail`` made wrong
        wrong = fail and name.startswith(f"step {fail} ")
        return real_compare(got * 3 + 1 if wrong else got, ref, *args, name=name, **options)
    r.compare = compare


def multigpu(fail):
    """Two "GPUs" (the count), no NCCL, no worker processes, no PyTorch: the one-process
    all-reduce curve, the NCCL-settings sweep, the workers' run and DDP stubbed as what they
    return (rows, checks, choices, a timeline); real: the order of the experiments, the settings
    kept, the side tables and the refusal of a run whose checks failed (``--fail ddp``: DDP's
    processes fail and the run lists why in its problems table instead)."""
    from gpulab.errors import GpulabError
    from gpulab.workloads.multigpu import configs, ddp, record as r, workers
    device.gpu_count = r.gpu_count = lambda: 2
    r.DOCS = 2048
    r.data.sample = lambda docs, vocab, stream=0: types.SimpleNamespace(docs=docs, vocab=vocab)
    r.reference.init_params = lambda: {"W1": np.ones((2, 2), np.float32)}

    class Nccl:
        def __init__(self, devices=(0, 1)):
            self.devices, self.comms = tuple(devices), [types.SimpleNamespace(destroy=lambda: None)] * len(devices)
    r.Nccl = Nccl
    r.time_allreduce = lambda comm, repeats, sizes=None, log=print: [
        row for n in (sizes or r.ALLREDUCE_BYTES[:2])
        for row in fake_rows("allreduce", r.ONE_PROCESS, n, phase="allreduce", bytes=float(n), gpus=2)]
    r.topology = lambda: [{"from": a, "to": 1 - a, "peer_access": True, "name": "Stub GPU"} for a in (0, 1)]

    def run_workers(corpus, params, batches, sizes, repeats, world, timeline_batches=(), env=None, sweep_only=False,
                    every_batch=None):
        nccl = configs.nccl_label(env or {})
        experiment = "nccl settings" if sweep_only else "overlap"
        rows, checks, choices, timeline = [], [], [], []
        for b in batches:
            for config in (configs.Overlap(2, None, True), configs.Overlap(2, None, False),
                           configs.Overlap(2, 8, True, "parameters", overlapped=False)):
                rows += fake_rows(experiment, f"{world} GPUs, bucketed: {config.label}; {nccl}", b, phase="step",
                                  gpus=world, rank=0, form=config.form, overlapped=int(config.overlapped))
                checks.append({"batch": b, "variant": f"bucketed: {config.label}; {nccl}",
                               "quantity": "summed gradient vs the plain step's", "rel_error": 0.0,
                               "tolerance": 1e-5, "passed": fail != "checks"})
            for row in rows[-3:]:
                row["slowest_rank_ms"] = row["median_ms"]
            best = configs.Overlap(2, None, False)
            choices.append({"batch": b, "nccl": nccl, "buckets": best.buckets, "blocks_per_sm": best.blocks_per_sm,
                            "priority": best.priority, "form": best.form, "rare_share": best.rare_share,
                            "overlapped": best.overlapped, "label": best.label, "plain": "split gradient"})
            if not sweep_only:
                rows += [row for mode in configs.MODES
                         for row in fake_rows("step", configs.variant(mode, world), b, phase="step", gpus=world)]
                timeline += [{"batch": b, "mode": "plain", "gpu": g, "lane": "compute", "operation": "forward",
                              "start_us": 0.0, "end_us": 1.0} for g in range(world) if b in timeline_batches]
        if not sweep_only:
            rows += [row for n in sizes for row in fake_rows("allreduce", configs.variant("plain", world), n)]
        return {"rows": rows, "checks": checks, "choices": choices, "digests": [], "timeline": timeline}
    workers.run_workers = r.run_workers = run_workers

    def time_ddp(corpus, params, batches, repeats=30, world=2):
        if fail == "ddp":
            raise GpulabError("DDP's processes did not start")
        return ([row for b in batches for row in fake_rows("ddp", "PyTorch DDP (EmbeddingBag, 2 processes)", b)],
                [{"batch": b, "variant": "PyTorch DDP", "quantity": "W1's gradient vs float64", "rel_error": 0.0,
                  "tolerance": 1e-5, "passed": True} for b in batches])
    ddp.time_ddp = r.time_ddp = time_ddp



#: Options a chapter's stubs add to the record's command line.
RECORD_OPTIONS: list = []


def main(argv) -> int:
    chapter, out = argv[0], Path(argv[1])
    fail = argv[argv.index("--fail") + 1] if "--fail" in argv else None
    globals()[chapter](fail)
    from gpulab import __main__ as cli
    return cli.run(["record", chapter, "--quick", "--repeats", "5", "--out", str(out), *RECORD_OPTIONS])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""How the training chapter's kernels take their arguments: one SGD step as a list of kernel
launches (:class:`Op`), per launch family.

Each family (a :class:`Sgd` launcher) builds, for the batch's dimensions and a launch
configuration, the step's ops: which kernel (from which file: a step launches the kernels it
changed and reuses the others from earlier files), its grid and block, its arguments by buffer
name, and -- from step 3 on -- the stream it runs on and the ops on other streams it must wait
for. The same list drives the CPU backend (ops run in list order, which respects every
dependency), the GPU (streams and events: :class:`BoundStep`), the checks, the per-kernel
breakdown and the streams timeline.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, replace

import numpy as np

from ... import ladder
from ...kernels import Backend, get_backend, load_module
from .problem import Dims, _cdiv, batch_inputs, scratch

F1 = "training/01_one_kernel_per_op.cu"
F2 = "training/02_fused_elementwise.cu"
F3 = "training/03_streams.cu"
F4 = "training/04_unroll4.cu"
F5 = "training/05_shared_tiles.cu"
F6 = "training/06_restrict_readonly.cu"
F7 = "training/07_register_tiles.cu"
F8 = "training/08_tensor_cores.cu"
F9 = "training/09_sparse_first_layer.cu"
F10 = "training/10_cuda_graph.cu"
#: An op whose file is SELF uses its step's own file (so an exercise step can
#: be pointed at a student's copy of the file).
SELF = "<the step's file>"


@dataclass(frozen=True)
class Config:
    """A launch configuration: the block shape of the 2-D element-wise
    launches (the sweep varies it), the learning rate, and compile options
    (``("-DREPORT_GUARD",)`` builds steps 4-6 with the report's bounds test)."""

    block: tuple[int, int] = (16, 16)
    lr: float = 0.3
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Op:
    """One launch of a step."""

    name: str                      # what it computes, as the breakdown shows it
    file: str
    kernel: str
    grid: tuple
    block: tuple
    args: tuple                    # buffer names (str) or numbers
    stream: int = 0
    after: tuple[str, ...] = ()    # ops on other streams that must finish first


def _grid2(rows: int, cols: int, block, per_thread: int = 1) -> tuple[int, int]:
    return (_cdiv(cols, block[0] * per_thread), _cdiv(rows, block[1]))


# ----------------------------------------------------------------- steps 1-6: the report's ladder
def _step1(d: Dims, cfg: Config) -> list[Op]:
    B, V, H, C = d.B, d.V, d.H, d.C
    blk = cfg.block
    g = lambda rows, cols: _grid2(rows, cols, blk)   # noqa: E731
    mm = lambda name, M, N, K, a, b, c: Op(name, F1, "matmul", g(M, N), blk, (M, N, K, a, b, c))  # noqa: E731
    ops = [
        mm("Z1 = X W1", B, H, V, "x", "W1", "z1"),
        Op("Z1 += b1", F1, "add_bias", g(B, H), blk, (B, H, "z1", "b1")),
        Op("H = sigmoid(Z1)", F1, "sigmoid", g(B, H), blk, (B, H, "z1", "h")),
        mm("Z2 = H W2", B, C, H, "h", "W2", "z2"),
        Op("Z2 += b2", F1, "add_bias", g(B, C), blk, (B, C, "z2", "b2")),
        Op("E = exp(Z2)", F1, "exponential", g(B, C), blk, (B, C, "z2", "e")),
        Op("P = E / row sums", F1, "softmax_normalize", (1, _cdiv(B, blk[1])), blk, (B, C, "e", "p")),
        Op("log P", F1, "logarithm", g(B, C), blk, (B, C, "p", "logp")),
        Op("Y * log P", F1, "multiply", g(B, C), blk, (B, C, "yhot", "logp", "prod")),
        Op("loss", F1, "column_sum", (1, 1), blk, (B * C, 1, -1.0 / B, "prod", "loss")),
        Op("dZ2 = P - Y", F1, "subtract", g(B, C), blk, (B, C, "p", "yhot", "dz2")),
        Op("dZ2 /= B", F1, "scale", g(B, C), blk, (B, C, 1.0 / B, "dz2", "dz2")),
        Op("H^T", F1, "transpose", g(B, H), blk, (B, H, "h", "hT")),
        mm("dW2 = H^T dZ2", H, C, B, "hT", "dz2", "dW2"),
        Op("db2 = column sums of dZ2", F1, "column_sum", (_cdiv(C, blk[0]), 1), blk, (B, C, 1.0, "dz2", "db2")),
        Op("W2^T", F1, "transpose", g(H, C), blk, (H, C, "W2", "W2T")),
        mm("dH = dZ2 W2^T", B, H, C, "dz2", "W2T", "dh"),
        Op("dH * H", F1, "multiply", g(B, H), blk, (B, H, "dh", "h", "t1")),
        Op("1 - H", F1, "one_minus", g(B, H), blk, (B, H, "h", "t2")),
        Op("dZ1 = dH H (1 - H)", F1, "multiply", g(B, H), blk, (B, H, "t1", "t2", "dz1")),
        Op("X^T", F1, "transpose", g(B, V), blk, (B, V, "x", "xT")),
        mm("dW1 = X^T dZ1", V, H, B, "xT", "dz1", "dW1"),
        Op("db1 = column sums of dZ1", F1, "column_sum", (_cdiv(H, blk[0]), 1), blk, (B, H, 1.0, "dz1", "db1")),
    ]
    for w, rows, cols in (("W1", V, H), ("b1", 1, H), ("W2", H, C), ("b2", 1, C)):
        ops.append(Op(f"d{w} *= lr", F1, "scale", g(rows, cols), blk, (rows, cols, cfg.lr, "d" + w, "d" + w)))
        ops.append(Op(f"{w} -= d{w}", F1, "subtract", g(rows, cols), blk, (rows, cols, w, "d" + w, w)))
    return ops


@dataclass(frozen=True)
class _Kernels:
    """Which kernel each role uses in steps 2-6, and how it is launched."""

    matmul: tuple = (F1, "matmul")
    transpose: tuple = (F1, "transpose")
    bias_sigmoid: tuple = (F2, "bias_sigmoid")
    layer_error: tuple = (F2, "layer_error")
    sgd_update: tuple = (F2, "sgd_update")
    unrolled: bool = False            # element-wise kernels do 4 columns per thread
    tiled: bool = False               # matmul 16 x 16 tiles, transpose 32 x 32 tiles
    flat_update: bool = False         # the update is 1-D, a float4 per thread (exercise training.1)


def _fused_ops(d: Dims, cfg: Config, k: _Kernels, streams: bool) -> list[Op]:
    B, V, H, C = d.B, d.V, d.H, d.C
    blk = cfg.block
    per = 4 if k.unrolled else 1
    ew = lambda rows, cols: _grid2(rows, cols, blk, per)   # noqa: E731
    s = (lambda i: i) if streams else (lambda i: 0)        # noqa: E731
    a = (lambda *names: names) if streams else (lambda *names: ())   # noqa: E731

    def mm(name, M, N, K, x, y, z, stream=0, after=()):
        if k.tiled:
            return Op(name, *k.matmul, (_cdiv(N, 16), _cdiv(M, 16)), (16, 16), (M, N, K, x, y, z), s(stream), a(*after))
        return Op(name, *k.matmul, _grid2(M, N, blk), blk, (M, N, K, x, y, z), s(stream), a(*after))

    def tr(name, M, N, x, y, stream=0, after=()):
        if k.tiled:
            return Op(name, *k.transpose, (_cdiv(N, 32), _cdiv(M, 32)), (32, 8), (M, N, x, y), s(stream), a(*after))
        return Op(name, *k.transpose, ew(M, N), blk, (M, N, x, y), s(stream), a(*after))

    def sgd(w, rows, cols, stream, after=()):
        if k.flat_update:
            n = rows * cols
            return Op(f"{w} -= lr d{w}", *k.sgd_update, (_cdiv(_cdiv(n, 4), 256),), (256,),
                      (n, cfg.lr, w, "d" + w), s(stream), a(*after))
        return Op(f"{w} -= lr d{w}", *k.sgd_update, ew(rows, cols), blk, (rows, cols, cfg.lr, w, "d" + w),
                  s(stream), a(*after))

    # Streams (step 3 on): 0 carries the critical path (forward, dH, dZ1, dW1);
    # 1 the output layer's gradients and updates; 2 the transpose of X, which
    # depends on nothing computed in the step and can start at once.
    return [
        tr("X^T", B, V, "x", "xT", stream=2),
        tr("W2^T", H, C, "W2", "W2T", stream=1),
        mm("Z1 = X W1", B, H, V, "x", "W1", "z1"),
        Op("H = sigmoid(Z1 + b1)", *k.bias_sigmoid, ew(B, H), blk, (B, H, "z1", "b1", "h")),
        mm("Z2 = H W2", B, C, H, "h", "W2", "z2"),
        Op("P, loss terms, dZ2", F2, "bias_softmax_xent", (1, _cdiv(B, blk[1])), blk,
           (B, C, 1.0 / B, "z2", "b2", "labels", "p", "dz2", "loss_terms")),
        Op("loss", F1, "column_sum", (1, 1), blk, (B, 1, 1.0 / B, "loss_terms", "loss"), s(1),
           a("P, loss terms, dZ2")),
        tr("H^T", B, H, "h", "hT", stream=1),
        mm("dW2 = H^T dZ2", H, C, B, "hT", "dz2", "dW2", stream=1),
        Op("db2", F1, "column_sum", (_cdiv(C, blk[0]), 1), blk, (B, C, 1.0, "dz2", "db2"), s(1)),
        mm("dH = dZ2 W2^T", B, H, C, "dz2", "W2T", "dh", after=("W2^T",)),
        Op("dZ1 = dH H (1 - H)", *k.layer_error, ew(B, H), blk, (B, H, "dh", "h", "dz1")),
        Op("db1", F1, "column_sum", (_cdiv(H, blk[0]), 1), blk, (B, H, 1.0, "dz1", "db1")),
        mm("dW1 = X^T dZ1", V, H, B, "xT", "dz1", "dW1", after=("X^T",)),
        sgd("W1", V, H, 0),
        sgd("b1", 1, H, 0),
        sgd("W2", H, C, 1, after=("dH = dZ2 W2^T",)),
        sgd("b2", 1, C, 1),
    ]


_K2 = _Kernels()
_K4 = _Kernels(matmul=(F4, "matmul_unroll4"), transpose=(F4, "transpose_unroll4"),
               bias_sigmoid=(F4, "bias_sigmoid_unroll4"), layer_error=(F4, "layer_error_unroll4"),
               sgd_update=(F4, "sgd_update_unroll4"), unrolled=True)
_K5 = replace(_K4, matmul=(F5, "matmul_tiled"), transpose=(F5, "transpose_tiled"), tiled=True)
_K6 = _Kernels(matmul=(F6, "matmul_tiled_ro"), transpose=(F6, "transpose_tiled_ro"),
               bias_sigmoid=(F6, "bias_sigmoid_ro"), layer_error=(F6, "layer_error_ro"),
               sgd_update=(F6, "sgd_update_ro"), unrolled=True, tiled=True)


# ----------------------------------------------------------------- steps 7-10: beyond the report
#: Blocks the split-K forward product aims for: two per SM of a 132-SM H100.
SPLIT_K_TARGET_BLOCKS = 264


def split_k(d: Dims) -> int:
    """How many slices the forward product's k (= V) is split into."""
    tiles = _cdiv(d.B, 128) * _cdiv(d.H, 128)
    return max(1, min(_cdiv(SPLIT_K_TARGET_BLOCKS, tiles), _cdiv(d.V, 256)))


def _step7(d: Dims, cfg: Config) -> list[Op]:
    B, V, H, C = d.B, d.V, d.H, d.C
    return [
        Op("Z1 = b1", F7, "fill_bias", (_cdiv(B * H, 256),), (256,), (B, H, "b1", "z1")),
        Op("Z1 += X W1 (split-K)", F7, "forward_product", (_cdiv(H, 128), _cdiv(B, 128), split_k(d)), (256,),
           (B, V, H, "x", "W1", "z1")),
        Op("head: H, P, loss terms, dZ2, dZ1", F7, "dense_head", (B,), (128,),
           (B, H, C, 1.0 / B, "labels", "z1", "W2", "b2", "h", "dz2", "dz1", "loss_terms")),
        Op("W2, b1, b2 updates, loss", F7, "dense_small_updates", (H,), (256,),
           (B, H, C, cfg.lr, "h", "dz2", "dz1", "loss_terms", "W2", "b1", "b2", "loss"), stream=1,
           after=("head: H, P, loss terms, dZ2, dZ1",)),
        Op("W1 -= lr X^T dZ1", F7, "w1_gradient_step", (_cdiv(H, 128), _cdiv(V, 128)), (256,),
           (B, V, H, cfg.lr, "x", "dz1", "W1")),
    ]


def _step8(d: Dims, cfg: Config) -> list[Op]:
    B, V, H, C = d.B, d.V, d.H, d.C
    if H % 8:
        raise ValueError(f"step 8 loads 8 halves at a time: H must be a multiple of 8, got {H}")
    head = "head: H, P, loss terms, dZ2, dZ1"
    return [
        Op("Z1 = b1", F7, "fill_bias", (_cdiv(B * H, 256),), (256,), (B, H, "b1", "z1")),
        Op("Z1 += X W1 (fp16 tensor cores, split-K)", F8, "forward_product_tc",
           (_cdiv(H, 128), _cdiv(B, 128), split_k(d)), (256,), (B, d.Vp, H, "x16", "W1h", "z1")),
        Op(head, F7, "dense_head", (B,), (128,),
           (B, H, C, 1.0 / B, "labels", "z1", "W2", "b2", "h", "dz2", "dz1", "loss_terms")),
        Op("W2, b1, b2 updates, loss", F7, "dense_small_updates", (H,), (256,),
           (B, H, C, cfg.lr, "h", "dz2", "dz1", "loss_terms", "W2", "b1", "b2", "loss"), stream=1, after=(head,)),
        Op("dZ1 to fp16, scaled by B", F8, "to_half_scaled", (_cdiv(B * H, 256),), (256,),
           (B * H, float(B), "dz1", "dz1h")),
        Op("W1 -= lr X^T dZ1 (fp16 tensor cores); W1h = half(W1)", F8, "w1_gradient_step_tc",
           (_cdiv(H, 128), _cdiv(d.Vp, 128)), (256,), (B, V, d.Vp, H, cfg.lr / B, "x16", "dz1h", "W1", "W1h")),
    ]


def _step9(d: Dims, cfg: Config) -> list[Op]:
    B, H, C = d.B, d.H, d.C
    return [
        Op("gather W1 rows, head: H, P, dZ2, dZ1", F9, "sparse_forward_backward", (B,), (128,),
           (B, H, C, 1.0 / B, "indptr", "indices", "values", "labels", "W1", "b1", "W2", "b2", "h", "dz2",
            "dz1", "loss_terms")),
        Op("W2, b1, b2 updates; scatter-add into W1", F9, "sparse_update", (H + B,), (128,),
           (B, H, C, cfg.lr, "indptr", "indices", "values", "h", "dz2", "dz1", "loss_terms", "W1", "W2", "b1",
            "b2", "loss")),
    ]



# ----------------------------------------------------------------- the launch families
@dataclass(frozen=True)
class Sgd(ladder.Launcher):
    """A family of SGD steps: ``ops`` lists one step's launches; ``input`` is the form of the batch
    its kernels read ("dense": X is B x V; "dense16": B x Vp in fp16; "sparse": CSR rows). Bound
    to a case, a step is a :class:`BoundStep` at the case's learning rate, with the step's block
    shape and compile options (its ``config``)."""

    input: str = "dense"

    def build(self, d: Dims, config: Config) -> list[Op]:
        raise NotImplementedError(f"{type(self).__name__} lists a step's launches")

    def ops(self, step, d: Dims, config: Config | None = None) -> list[Op]:
        config = step.config() if config is None else config
        return [replace(op, file=step.file) if op.file == SELF else op for op in self.build(d, config)]

    def uses(self, step, d: Dims) -> set[str]:
        """The buffers the step's launches read or write, by name."""
        return {a for op in self.ops(step, d) for a in op.args if isinstance(a, str)}

    def bind(self, step, case, arrays, backend) -> "BoundStep":
        return BoundStep(step, case.dims, arrays, step.config(case.lr), backend)


class OneKernelPerOp(Sgd):
    """Step 1: a kernel for every operation of the forward pass, the backward pass and the update."""

    def build(self, d, config):
        return _step1(d, config)


@dataclass(frozen=True)
class Fused(Sgd):
    """Steps 2-6 and the exercise: the element-wise chains fused, the products and transposes
    on their own, from step 3 on spread over three streams; ``kernels`` says which kernel each
    role uses and how it is launched."""

    kernels: _Kernels = _Kernels()
    streams: bool = True

    def build(self, d, config):
        return _fused_ops(d, config, self.kernels, self.streams)


class RegisterTiles(Sgd):
    """Step 7: register-tiled products, no transposes, the element-wise work in their epilogues."""

    def build(self, d, config):
        return _step7(d, config)


@dataclass(frozen=True)
class TensorCores(Sgd):
    """Step 8: step 7 with both large products on fp16 tensor cores (fp32 master weights)."""

    input: str = "dense16"

    def build(self, d, config):
        return _step8(d, config)


@dataclass(frozen=True)
class SparseFirstLayer(Sgd):
    """Steps 9-10: the first layer as a gather of W1's rows and a scatter-add into them."""

    input: str = "sparse"

    def build(self, d, config):
        return _step9(d, config)


ONE_KERNEL_PER_OP = OneKernelPerOp()
FUSED = Fused(kernels=_K2, streams=False)
STREAMS = Fused(kernels=_K2)
UNROLLED = Fused(kernels=_K4)
TILED = Fused(kernels=_K5)
READ_ONLY = Fused(kernels=_K6)
REGISTER_TILES = RegisterTiles()
TENSOR_CORES = TensorCores()
SPARSE = SparseFirstLayer()
#: Exercise training.1: step 6 with every parameter updated by the student's float4 kernel.
FLOAT4_UPDATE = Fused(kernels=replace(_K6, sgd_update=(SELF, "sgd_update_float4"), flat_update=True))


# ----------------------------------------------------------------- buffers and binding
def buffers(be: Backend, step_, d: Dims, batch, params: dict, inputs: bool = True) -> dict:
    """Device buffers for one step on ``batch`` (a :class:`~.data.Corpus` of B
    documents): the parameters (copies: the step updates them in place), the
    batch in the step's input form (unless ``inputs`` is False: the caller
    supplies them), and every intermediate it uses, poisoned."""
    uses = step_.launcher.uses(step_, d)
    bufs = {k: be.to_device(v) for k, v in batch_inputs(batch, d, params, step_.input, uses, x=inputs).items()}
    for name, (shape, dtype) in scratch(d, uses).items():
        bufs[name] = be.poisoned(shape, dtype)
    return bufs


def step_kernels(step_, d: Dims, config: Config = Config(), backend=None) -> dict:
    """The compiled kernels a step launches, by (file, kernel)."""
    be = get_backend(backend)
    fns = {}
    for op in step_.ops(d, config):
        if (op.file, op.kernel) not in fns:
            fns[(op.file, op.kernel)] = load_module(op.file, be, options=config.options).get_function(op.kernel)
    return fns


class BoundStep:
    """A step bound to its buffers: ``bound()`` runs one SGD step. On the GPU,
    ops go to their streams, forked from and joined back to the current
    stream with events, so the whole step can also be captured in a graph."""

    def __init__(self, step_, d: Dims, bufs: dict, config: Config = Config(), backend=None, fns=None):
        self.step, self.dims, self.bufs, self.config = step_, d, bufs, config
        self.backend = get_backend(backend)
        self.ops = step_.ops(d, config)
        fns = fns or step_kernels(step_, d, config, self.backend)
        names = {op.name for op in self.ops}
        for op in self.ops:
            missing = [a for a in op.after if a not in names]
            if missing:
                raise ValueError(f"step {step_.number}: op '{op.name}' waits for unknown ops {missing}")
        self.launches = [fns[(op.file, op.kernel)].bind(op.grid, op.block, tuple(
            bufs[a] if isinstance(a, str) else a for a in op.args)) for op in self.ops]
        self.streams = sorted({op.stream for op in self.ops})
        if self.backend.name == "gpu" and len(self.streams) > 1:
            import cupy
            self._streams = {s: cupy.cuda.Stream(non_blocking=True) for s in self.streams if s != 0}
            self._events = {op.name: cupy.cuda.Event(disable_timing=True) for op in self.ops}
            self._fork = cupy.cuda.Event(disable_timing=True)
            self._joins = {s: cupy.cuda.Event(disable_timing=True) for s in self._streams}

    def __call__(self, wrap=None):
        """Run the step. ``wrap(op, stream)``, if given, returns a context
        manager entered around each launch (the timeline records events there)."""
        if self.backend.name != "gpu" or len(self.streams) == 1:
            stream = None
            if self.backend.name == "gpu":
                import cupy
                stream = cupy.cuda.get_current_stream()
            for op, launch in zip(self.ops, self.launches):
                with (wrap(op, stream) if wrap else nullcontext()):
                    launch()
            return
        import cupy
        main = cupy.cuda.get_current_stream()
        self._fork.record(main)
        for s in self._streams.values():
            s.wait_event(self._fork)
        for op, launch in zip(self.ops, self.launches):
            stream = self.stream_of(op, main)
            for name in op.after:
                stream.wait_event(self._events[name])
            with stream:
                with (wrap(op, stream) if wrap else nullcontext()):
                    launch()
                self._events[op.name].record(stream)
        for s, stream in self._streams.items():
            self._joins[s].record(stream)
            main.wait_event(self._joins[s])

    def stream_of(self, op: Op, main=None):
        """The CuPy stream ``op`` runs on (GPU only)."""
        if op.stream == 0 or len(self.streams) == 1:
            import cupy
            return main or cupy.cuda.get_current_stream()
        return self._streams[op.stream]



"""Check and time the hopper chapter's FP8 steps on a GPU, in one call (issue 40's FP8 rung).

Steps 9 and 10 (kernels/hopper/09_fp8.cu, 10_fp8_promotion.cu) were built and checked on the CPU
backend only; this runs on a Hopper GPU with PyTorch and writes what the chapter needs:

1. ``fp8_conversions.csv``: the GPU's cuda_fp8.h (its cvt instructions, through
   tests/kernels/fp8_units.cu) and torch's float8 casts against gpulab.fp8's codec: every code
   decoded, random values of every magnitude encoded (satfinite, and torch's own rule).
2. ``fp8_model.csv``: the share of each step's outputs equal, bit for bit, to gpulab.fp8's model of
   the tensor cores' accumulation (13 fraction bits, cut; Khattak and Mikaitis) -- the CPU backend
   computes that model, so this says whether its results are the H100's.
3. ``fp8_accuracy.csv``: relative error norms against float64 of the FP8 values read, for inputs
   uniform in [-1, 1) and in [0, 1), of steps 9 and 10, torch._scaled_mm with and without fast
   accumulation, and (beside them) step 7 in bf16 and torch's bf16 matmul against float64 of their
   bf16 inputs; every step first checked at sizes that are not multiples of its tile.
4. ``fp8_timing.csv``: gpulab.timing.benchmark (calls queued behind a guard, L2 flushed) of the
   same at 4096^3 and 8192^3, with TFLOP/s; each row says the GPU.

Usage on the GPU machine: ``python tools/fp8_device_check.py OUT_DIR [--quick]`` (``--quick``:
4096^3 only, fewer repeats). ``--dry-run`` runs sections 1-3 on the CPU backend at small sizes,
without torch or timing (what can be tried without a GPU). Nothing here changes the GPU's settings.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpulab import fp8, ladder  # noqa: E402
from gpulab.kernels import get_backend, load_module  # noqa: E402
from gpulab.workloads import hopper  # noqa: E402
from gpulab.workloads.hopper.problem import FP8_CHECK_SHAPES as CHECK_SHAPES, Fp8Gemm, Gemm  # noqa: E402
from gpulab.workloads.hopper.problem import from_bf16_bits, to_bf16_bits  # noqa: E402

UNITS = "tests/kernels/fp8_units.cu"
#: The chapter's FP8 steps by the names this tool's tables use.
STEPS = {"09": hopper.FP8_STEPS[0], "09 e4m3 x e5m2": hopper.FP8_STEPS[1], "10": hopper.FP8_STEPS[2]}
KINDS = {name: ("e4m3", step.launcher.kind_b) for name, step in STEPS.items()}
PROMOTE = {name: step.promote_every for name, step in STEPS.items()}


def log(*what):
    print(time.strftime("%H:%M:%S"), *what, flush=True)


class Session:
    def __init__(self, be, dry: bool):
        self.be, self.xp, self.dry = be, be.xp, dry
        self.units = load_module(UNITS, be, options=hopper.GPU_OPTIONS if be.name == "gpu" else ())
        self.torch = None if dry else __import__("torch")
        self.gpu = "CPU backend (dry run)" if dry else self._gpu_name()

    def _gpu_name(self):
        import cupy
        return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()

    # -- FP8 codes made on the device by its own cvt.rn.satfinite (cuda_fp8.h), for large arrays
    def encode(self, x, kind):
        out = self.xp.zeros(x.size, np.uint8)
        flat = self.xp.ascontiguousarray(x.ravel(), dtype=np.float32)
        self.units.get_function("float_to_fp8").bind(-(-x.size // 256), 256, (flat, out, np.int32(x.size), np.int32(1),
                                                                            np.int32(kind == "e5m2")))()
        return out.reshape(x.shape)

    def inputs(self, M, N, K, kinds, seed, low):
        """A, B as FP8 codes on the device with their per-tensor scales (amax / fp8 max)."""
        xp = self.xp
        rng = xp.random.RandomState(seed)                    # NumPy's and CuPy's alike
        out = []
        for (rows, kind) in ((M, kinds[0]), (N, kinds[1])):
            x = rng.uniform(low, 1, (rows, K)).astype(np.float32)
            scale = np.float32(float(xp.abs(x).max()) / fp8.MAX[kind])
            out += [self.encode(x / scale, kind), float(scale)]
        A, sa, B, sb = out
        return A, B, sa, sb

    def decoded(self, codes, kind):
        return self.xp.asarray(fp8.decode_table(kind))[codes]

    def reference(self, A, B, kinds, sa, sb):
        return (self.decoded(A, kinds[0]) @ self.decoded(B, kinds[1]).T) * (sa * sb)

    def rel(self, out, ref):
        xp = self.xp
        out = xp.asarray(out, dtype=np.float64)
        return float(xp.linalg.norm(out - ref) / xp.linalg.norm(ref))

    def launch(self, step, A, B, sa, sb, C=None):
        """FP8 ``step`` (a key of :data:`STEPS`) bound to device A, B and C (default: poisoned), the
        chapter's launcher (ladder.bind): (the launch, C)."""
        M, K = A.shape
        N = B.shape[0]
        C = self.be.poisoned((M, N), np.uint16) if C is None else C
        arrays = {"A": A, "B": B, "C": C, "scale_a": np.array(sa, np.float32), "scale_b": np.array(sb, np.float32)}
        return ladder.bind(STEPS[step], Fp8Gemm(M, N, K, kind_b=KINDS[step][1]), arrays, self.be), C

    def step(self, step, A, B, sa, sb):
        run, C = self.launch(step, A, B, sa, sb)
        run()
        self.be.synchronize()
        return C

    def bf16_launch(self, Ab, Bb, C):
        """Step 7 in bfloat16 on device A, B (bit patterns) into C."""
        bf16 = hopper.in_precision(hopper.steps.TYPED_STEP, "bf16")
        n_rows, K = Ab.shape
        return ladder.bind(bf16, Gemm(n_rows, Bb.shape[0], K), {"A": Ab, "B": Bb, "C": C}, self.be)

    # -- torch's FP8 GEMM (cuBLASLt) on the same codes
    def scaled_mm(self, A, B, sa, sb, fast: bool):
        torch = self.torch
        a = torch.as_tensor(A, device="cuda").view(torch.float8_e4m3fn)
        b = torch.as_tensor(B, device="cuda").view(torch.float8_e4m3fn)
        s_a = torch.tensor(sa, dtype=torch.float32, device="cuda")
        s_b = torch.tensor(sb, dtype=torch.float32, device="cuda")
        return lambda: torch._scaled_mm(a, b.t(), scale_a=s_a, scale_b=s_b, out_dtype=torch.bfloat16,
                                        use_fast_accum=fast)

    def torch_out(self, t):
        import cupy
        return cupy.asarray(t.float())


def conversions(s: Session) -> pd.DataFrame:
    rows = []
    codes = s.xp.arange(256, dtype=np.uint8)
    for kind in fp8.FORMATS:
        want = fp8.decode_table(kind).astype(np.float32)
        out = s.xp.zeros(256, np.float32)
        s.units.get_function("fp8_to_float").bind(1, 256, (codes, out, np.int32(256), np.int32(kind == "e5m2")))()
        got = s.be.to_host(out)
        same = (np.isnan(got) & np.isnan(want)) | (got.view(np.uint32) == want.view(np.uint32))
        rows.append({"check": "decode all 256 codes", "kind": kind, "path": "cuda_fp8.h", "values": 256,
                     "mismatches": int((~same).sum())})
        rng = np.random.default_rng(1)
        x = (np.exp2(rng.uniform(-20, 18, 200000)) * rng.choice([-1, 1], 200000)).astype(np.float32)
        host = fp8.to_fp8(x, kind)
        dev = s.be.to_host(s.encode(s.be.to_device(x), kind))
        rows.append({"check": "encode (satfinite)", "kind": kind, "path": "cuda_fp8.h cvt.rn.satfinite",
                     "values": x.size, "mismatches": int((dev != host).sum())})
        if s.torch is not None:
            torch = s.torch
            dtype = torch.float8_e4m3fn if kind == "e4m3" else torch.float8_e5m2
            tc = torch.arange(256, dtype=torch.uint8, device="cuda").view(dtype).float().cpu().numpy()
            same = (np.isnan(tc) & np.isnan(want)) | (tc.view(np.uint32) == want.view(np.uint32))
            rows.append({"check": "decode all 256 codes", "kind": kind, "path": "torch", "values": 256,
                         "mismatches": int((~same).sum())})
            inside = np.abs(x) <= fp8.MAX[kind]          # torch's cast past the range is its own rule
            t = torch.as_tensor(x[inside], device="cuda").to(dtype).view(torch.uint8).cpu().numpy()
            rows.append({"check": "encode (in range)", "kind": kind, "path": "torch .to(float8)",
                         "values": int(inside.sum()), "mismatches": int((t != host[inside]).sum())})
    return pd.DataFrame(rows)


def model_match(s: Session, K: int) -> pd.DataFrame:
    rows = []
    M = N = 64 if s.dry else 256
    for low in (-1.0, 0.0):
        for step in KINDS:
            A, B, sa, sb = s.inputs(M, N, K, KINDS[step], seed=2, low=low)
            C = s.be.to_host(s.step(step, A, B, sa, sb))
            acc = fp8.tensor_core_gemm(s.be.to_host(A), s.be.to_host(B), *KINDS[step], promote_every=PROMOTE[step])
            want = to_bf16_bits(acc * (np.float32(sa) * np.float32(sb)))
            float_acc = (fp8.reference(s.be.to_host(A), s.be.to_host(B), *KINDS[step])).astype(np.float32)
            as_float = to_bf16_bits(float_acc * (np.float32(sa) * np.float32(sb)))
            rows.append({"step": step, "inputs": f"uniform [{low:g}, 1)", "M": M, "N": N, "K": K,
                         "equal_to_model": float((C == want).mean()),
                         "equal_to_float_accumulation": float((C == as_float).mean())})
            log(rows[-1])
    return pd.DataFrame(rows)


def accuracy(s: Session, sizes) -> pd.DataFrame:
    rows = []
    for step in KINDS:                                  # first the edges: sizes not multiples of the tile
        for M, N, K in CHECK_SHAPES:
            A, B, sa, sb = s.inputs(M, N, K, KINDS[step], seed=3, low=-1.0)
            err = s.rel(from_bf16_bits(s.step(step, A, B, sa, sb), s.xp), s.reference(A, B, KINDS[step], sa, sb))
            rows.append({"path": f"step {step}", "inputs": "uniform [-1, 1)", "M": M, "N": N, "K": K, "rel_error": err})
            log(rows[-1])
    for n in sizes:
        for low in (-1.0, 0.0):
            start = len(rows)
            inputs = f"uniform [{low:g}, 1)"
            A, B, sa, sb = s.inputs(n, n, n, ("e4m3", "e4m3"), seed=4, low=low)
            ref = s.reference(A, B, ("e4m3", "e4m3"), sa, sb)
            for step in ("09", "10"):
                rows.append({"path": f"step {step}", "inputs": inputs, "M": n, "N": n, "K": n,
                             "rel_error": s.rel(from_bf16_bits(s.step(step, A, B, sa, sb), s.xp), ref)})
            if s.torch is not None:
                for fast in (True, False):
                    out = s.scaled_mm(A, B, sa, sb, fast)()
                    rows.append({"path": f"torch._scaled_mm use_fast_accum={fast}", "inputs": inputs, "M": n, "N": n,
                                 "K": n, "rel_error": s.rel(s.torch_out(out), ref)})
            # bf16 beside: the same values (FP8's are exact in bf16) through step 7 in bf16
            Ab = to_bf16_bits(s.decoded(A, "e4m3").astype(np.float32), s.xp)
            Bb = to_bf16_bits(s.decoded(B, "e4m3").astype(np.float32), s.xp)
            C = s.xp.full((n, n), 0xFFFF, np.uint16)
            s.bf16_launch(Ab, Bb, C)()
            s.be.synchronize()
            rows.append({"path": "step 7 bf16", "inputs": inputs, "M": n, "N": n, "K": n,
                         "rel_error": s.rel(from_bf16_bits(C, s.xp), ref / (sa * sb))})
            for r in rows[start:]:
                log(r)
    return pd.DataFrame(rows)


def timings(s: Session, sizes, quick: bool) -> pd.DataFrame:
    from gpulab import timing
    torch = s.torch
    rows = []
    for n in sizes:
        A, B, sa, sb = s.inputs(n, n, n, ("e4m3", "e4m3"), seed=6, low=-1.0)
        C = s.xp.zeros((n, n), np.uint16)
        paths = {f"step {step}": s.launch(step, A, B, sa, sb, C)[0] for step in ("09", "10")}
        paths["torch._scaled_mm fast accumulation"] = s.scaled_mm(A, B, sa, sb, True)
        paths["torch._scaled_mm"] = s.scaled_mm(A, B, sa, sb, False)
        Ab = to_bf16_bits(s.decoded(A, "e4m3").astype(np.float32), s.xp)
        Bb = to_bf16_bits(s.decoded(B, "e4m3").astype(np.float32), s.xp)
        paths["step 7 bf16"] = s.bf16_launch(Ab, Bb, s.xp.zeros((n, n), np.uint16))
        ta = torch.as_tensor(Ab, device="cuda").view(torch.bfloat16)
        tb = torch.as_tensor(Bb, device="cuda").view(torch.bfloat16)
        paths["torch.matmul bf16"] = lambda: torch.matmul(ta, tb.t())
        for rnd in range(1 if quick else 2):               # two interleaved rounds: drift shows
            for name, fn in paths.items():
                t = timing.benchmark(fn, budget_ms=1000 if quick else 3000, flush_l2=True)
                ms = t.median_ms
                rows.append({"gpu": s.gpu, "path": name, "n": n, "round": rnd, **t.summary(),
                             "tflops": 2 * n ** 3 / (ms * 1e9)})
                log(f"{name} n={n}: {ms:.4f} ms, {rows[-1]['tflops']:.0f} TFLOP/s ({t})")
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--quick", action="store_true", help="4096^3 only, shorter timings")
    parser.add_argument("--dry-run", action="store_true", help="the CPU backend, small sizes, no torch, no timing")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    be = get_backend("cpu" if args.dry_run else "gpu")
    why = hopper.needs_hopper(be)
    if why:
        print(why)
        return 2
    s = Session(be, args.dry_run)
    log("on", s.gpu)
    sizes = (256,) if args.dry_run else (4096,) if args.quick else (4096, 8192)
    for name, make in (("fp8_conversions", lambda: conversions(s)),
                       ("fp8_model", lambda: model_match(s, 512 if args.dry_run else 4096)),
                       ("fp8_accuracy", lambda: accuracy(s, sizes))):
        table = make()
        table.insert(0, "gpu", s.gpu)
        table.to_csv(args.out / f"{name}.csv", index=False)
        print(table.to_string(index=False), flush=True)
    if not args.dry_run:
        table = timings(s, sizes, args.quick)
        table.to_csv(args.out / "fp8_timing.csv", index=False)
        print(table[["path", "n", "round", "median_ms", "tflops"]].to_string(index=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

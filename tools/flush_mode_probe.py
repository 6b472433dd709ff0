"""The lab's cold loop reads some calls of a few microseconds 0.6 us higher than do_bench does on the
same flush buffer (labdata/trials/2026-12-07-settled-timing/round2/crosscheck_tiny.csv): is it the
lab's flush kernel? This times those calls cold by the lab's loop with three flushes of the lab's
own buffer (its kernel, PyTorch's ``zero_``, ``cudaMemsetAsync``) and by do_bench on that buffer,
in rotated rounds. Usage on the GPU machine: ``python tools/flush_mode_probe.py OUT_DIR``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpulab import timing  # noqa: E402
from crosscheck_tiny import small_calls  # noqa: E402
from flush_probe import flushes, lab_flush_is  # noqa: E402


def main() -> None:
    import cupy
    from triton.testing import do_bench
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    every = flushes()
    # Three flushes of the lab's own buffer: its kernel, PyTorch's zero_ and memset.
    chosen = {name: every[name] for name in ("lab", "torch_zero_lab", "memset")}
    stream = cupy.cuda.get_current_stream()

    def lab_cold(flush):
        def measure(fn):
            with lab_flush_is(flush):
                return timing.benchmark(fn, warmup=3, repeats=60, flush_l2=True, stream=stream).median_ms
        return measure

    def bench(fn):
        with timing._do_bench_clears_the_labs_buffer():
            return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))

    timers = {f"lab_cold[{name}]": lab_cold(f) for name, f in chosen.items()}
    timers["do_bench[lab buffer]"] = bench
    names = list(timers)
    rows = []
    for n, calls in small_calls((16384, 65536, 262144)):
        for r in range(3):
            for call, fn in calls.items():
                for timer in names[r % len(names):] + names[:r % len(names)]:
                    rows.append({"call": call, "size": n, "timer": timer, "round": r, "ms": timers[timer](fn)})
        pd.DataFrame(rows).to_csv(out / "flush_mode_probe.csv", index=False)
    table = pd.DataFrame(rows).pivot_table(index=["size", "call"], columns="timer", values="ms",
                                           aggfunc="median") * 1e3
    print("median over rounds, us:")
    print(table.round(3).to_string())


if __name__ == "__main__":
    main()

"""The CPU backend's counters beside Nsight Compute's, recorded on the H100.

The kernels of the recorded profiles (every fcnet step but the tensor-core one,
large case; AlexNet's profiled steps on layers 2 and 1 at N = 32) run on the
CPU backend under :func:`gpulab.cpu.counting` at reduced sizes that keep the
access pattern (fcnet: n = 1000 vectors; AlexNet: the same image, filter,
stride and padding with 8 channels and 16 filters, N = 1).  Sectors per
request and bank conflicts per vector or per wavefront do not depend on the
size, so :func:`comparison` sets them side by side.  ``python -m
gpulab.counter_validation write`` saves the table the appendix shows.
"""
from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from . import paths

RUNS = paths.REPO / "labdata" / "runs" / "nvidia-h100-80gb-hbm3"
#: The comparison as last computed (python -m gpulab.counter_validation write): the appendix shows it.
TABLE = paths.REPO / "labdata" / "cpu_counters_vs_h100.csv"
FCNET_N = 1000
ALEXNET_N = 1
#: Relative difference within which a CPU figure "agrees" with the H100's.
TOLERANCE = 0.15


def alexnet_layer(index: int):
    """The recorded profile's layer (AlexNet's layer 1 or 2 at N = 32) with the
    same filter size, stride and padding (layer 2: the same image too), so the
    same access pattern, but few channels and filters (layer 1: a smaller
    image), so that the CPU backend runs it in seconds."""
    from dataclasses import replace

    from .workloads import alexnet
    layer = alexnet.LAYERS[index - 1]
    if index == 1:   # 131 x 131: 31 x 31 outputs, more than the 28 x 28 block, as on the full image
        return replace(layer, H=131, W=131, M=4)
    return replace(layer, C=min(layer.C, 8), M=16)


def launches(backend: str = "cpu", fcnet_steps=None, alexnet_runs=None):
    """(chapter, step, layer, function running the step's launches) for every
    launch the recorded H100 profiles cover (tensor-core steps left out), or
    only the fcnet steps and AlexNet (layer, step) runs given."""
    from .kernels import get_backend
    from .workloads import alexnet, fcnet
    from .workloads.fcnet.launchers import _resolve
    be = get_backend(backend)
    out = []
    weights = fcnet.make_weights()
    x = fcnet.make_inputs(FCNET_N, 11)
    for step in fcnet.STEPS:
        if step.gpu_only or _uses_wmma(step.file):
            continue
        if fcnet_steps is not None and step.number not in fcnet_steps:
            continue
        bufs = fcnet.buffers(be, x, weights, scratch=True)
        fns = fcnet.step_kernels(step, be)
        calls = []
        for launch in step.launches:
            args = tuple(_resolve(t, bufs) for t in launch.args)
            calls.append(fns[launch.kernel].bind(launch.grid(FCNET_N, None), launch.block, args, launch.shared_mem))
        out.append(("fcnet", int(step.number), None, _sequence(calls)))
    for index, number in alexnet.PROFILE_RUNS if alexnet_runs is None else alexnet_runs:
        step = alexnet.CHAPTER.step(number)
        if step.gpu_only or _uses_wmma(step.file):
            continue
        layer = alexnet_layer(index)
        xh, wh = alexnet.make_inputs(layer, ALEXNET_N, 3)
        dx, dw = be.to_device(xh.astype(step.dtype)), be.to_device(wh.astype(step.dtype))
        y = be.poisoned(layer.y_shape(ALEXNET_N), step.dtype)
        launch = step.launcher.bind(step, alexnet.problem.Conv(layer, ALEXNET_N), {"x": dx, "w": dw, "y": y}, be)
        out.append(("alexnet", number, index, launch))
    return out


def _uses_wmma(file: str) -> bool:
    """Tensor-core steps are left out: the CPU backend does not count nvcuda::wmma's accesses."""
    return "wmma::" in paths.kernel_path(file).read_text()


def _sequence(calls):
    def run():
        for call in calls:
            call()
    return run


def cpu_counts(**which) -> pd.DataFrame:
    """The counters of :func:`launches` on the CPU backend: one row per kernel launch."""
    from .cpu import checking, counting
    rows = []
    for chapter, step, layer, run in launches("cpu", **which):
        with counting() as counted, checking(time_limit_s=None):
            run()
        for launch in counted.launches:
            rows.append({"chapter": chapter, "step": step, "layer": layer, "kernel": launch.kernel,
                         **launch.totals.to_dict()})
    return pd.DataFrame(rows)


def _recorded() -> tuple[pd.DataFrame, pd.DataFrame]:
    from .workloads import fcnet
    fc = pd.read_csv(RUNS / "fcnet.profile.csv")
    fc = fc[fc["case"] == "large"] if "case" in fc.columns else fc
    fc = fc.assign(n=fcnet.SIZES["large"])
    alex = pd.read_csv(RUNS / "alexnet.profile.csv", dtype={"step": str})
    return fc, alex


def _agree(cpu: float, gpu: float, floor: float) -> bool:
    """Within TOLERANCE of each other, or both below ``floor`` (none to speak of)."""
    if np.isnan(cpu) or np.isnan(gpu):
        return bool(np.isnan(cpu) and np.isnan(gpu))
    if cpu < floor and gpu < floor:
        return True
    return abs(cpu - gpu) <= TOLERANCE * max(abs(gpu), floor)


def comparison(cpu: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per kernel launch, the CPU backend's figures beside the recorded H100
    profile's: sectors per global load request, and shared-load bank conflicts
    (fcnet: per vector; AlexNet: per shared-load wavefront)."""
    cpu = cpu_counts() if cpu is None else cpu
    fc, alex = _recorded()
    rows = []
    seen: dict = {}
    for _, c in cpu.iterrows():
        if c["chapter"] == "fcnet":
            match = fc[(fc["step"] == c["step"]) & (fc["kernel"] == c["kernel"])]
        else:
            match = alex[(alex["step"] == c["step"]) & (alex["layer"] == c["layer"]) & (alex["kernel"] == c["kernel"])]
        key = (c["chapter"], c["step"], c["layer"], c["kernel"])
        k = seen.get(key, 0)
        seen[key] = k + 1
        if len(match) <= k:
            continue
        g = match.iloc[k]
        spr_gpu = g["global_load_sectors"] / g["global_load_requests"] if g["global_load_requests"] else np.nan
        if c["chapter"] == "fcnet":
            what = "per vector"
            conf_cpu = c["shared_load_bank_conflicts"] / FCNET_N
            conf_gpu = g["shared_load_bank_conflicts"] / g["n"]
        else:
            what = "per wavefront"
            conf_cpu = (c["shared_load_bank_conflicts"] / c["shared_load_wavefronts"]
                        if c["shared_load_wavefronts"] else 0.0)
            conf_gpu = (g["shared_load_bank_conflicts"] / g["shared_load_wavefronts"]
                        if g["shared_load_wavefronts"] else 0.0)
        where = f"layer {int(c['layer'])}" if c["chapter"] == "alexnet" else ""
        rows.append({"chapter": c["chapter"], "step": str(c["step"]), "layer": where, "kernel": c["kernel"],
                     "sectors/request CPU": round(float(c["sectors_per_request"]), 2),
                     "sectors/request H100": round(float(spr_gpu), 2),
                     "sectors agree": _agree(c["sectors_per_request"], spr_gpu, 0.5),
                     "load conflicts": what,
                     "load conflicts CPU": round(float(conf_cpu), 3),
                     "load conflicts H100": round(float(conf_gpu), 3),
                     "conflicts agree": _agree(conf_cpu, conf_gpu, 0.05)})
    return pd.DataFrame(rows)


def fcnet_beside_recorded(run, steps):
    """For the fcnet chapter: the recorded profile's sectors per request and
    shared-load bank conflicts per vector for ``steps``, and the same counters
    computed now by the CPU backend from the kernels as they are on disk (so
    a reader's edit shows)."""
    from .workloads import fcnet
    source = fcnet.profile_run(run)
    profile = source.tables["profile"]
    recorded = profile[profile["step"].isin(list(steps))].reset_index(drop=True)
    live = cpu_counts(fcnet_steps=list(steps), alexnet_runs=[])
    rows = []
    for (_, r), (_, c) in zip(recorded.iterrows(), live.iterrows()):
        rows.append({"step": r["step"], "kernel": r["kernel"],
                     "sectors/request (H100)": r["sectors_per_request"],
                     "sectors/request (CPU backend)": c["sectors_per_request"],
                     "load conflicts per vector (H100)": r["shared_load_bank_conflicts"] / fcnet.SIZES["large"],
                     "load conflicts per vector (CPU backend)": c["shared_load_bank_conflicts"] / FCNET_N})
    table = pd.DataFrame(rows)
    caption = (f"H100: {source.caption} (n = {fcnet.SIZES['large']:,}). CPU backend: computed live on this "
               f"machine from the kernels on disk, n = {FCNET_N:,}, source as written (the GPU compiler's "
               "vector loads are not imitated; see the appendix)")
    return (table.style.format({c: "{:.3g}" for c in table.columns if c not in ("step", "kernel")})
            .hide(axis="index").set_caption(caption))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gpulab.counter_validation")
    parser.add_argument("what", choices=["compare", "write"],
                        help="compare: print the table; write: also save it where the appendix reads it")
    args = parser.parse_args(argv)
    table = comparison()
    pd.set_option("display.width", 250)
    print(table.to_string(index=False))
    if args.what == "write":
        table.to_csv(TABLE, index=False)
        print(f"written to {TABLE}")


if __name__ == "__main__":
    main()

"""Find a usable CUDA GPU through CuPy, describe it, and pick the backend.

Nothing here may crash on a machine without CuPy, without a driver or without a
GPU: every probe is wrapped, and the reason a GPU is not usable is kept so that
``require_gpu`` can say it.
"""
from __future__ import annotations

import functools
import os
import platform
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from .errors import NoGPUError

#: Environment variable that forces a backend ("cpu" or "gpu").
BACKEND_ENV = "GPULAB_BACKEND"


@functools.lru_cache(maxsize=None)
def _probe() -> tuple[bool, str]:
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install
        return False, f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"CuPy found no CUDA driver or device ({type(exc).__name__}: {exc})"
    if count < 1:
        return False, "the CUDA driver reports no device"
    try:
        # A tiny allocation and launch proves the device works, not only that it exists.
        (cupy.arange(4, dtype=cupy.float32) * 2).sum().item()
    except Exception as exc:
        return False, f"the GPU is present but unusable ({type(exc).__name__}: {exc})"
    return True, "ok"


def gpu_available() -> bool:
    """True when CuPy can allocate and run on a CUDA device here."""
    return _probe()[0]


def gpu_count() -> int:
    """How many GPUs CuPy can use here (0 without a usable GPU)."""
    if not gpu_available():
        return 0
    import cupy
    return int(cupy.cuda.runtime.getDeviceCount())


def why_no_gpu() -> str:
    """Why ``gpu_available()`` is False ("ok" when it is True)."""
    return _probe()[1]


def require_gpu(purpose: str = "this step") -> None:
    """Raise :class:`NoGPUError` naming ``purpose`` if no GPU is usable."""
    ok, reason = _probe()
    if not ok:
        raise NoGPUError(
            f"{purpose} needs an NVIDIA GPU, but {reason}. Without a GPU, kernels run on the "
            "CPU backend for correctness and figures come from the recorded runs in labdata/runs/.")


def default_backend() -> str:
    """"gpu" when a GPU is usable, else "cpu"; ``GPULAB_BACKEND`` overrides."""
    forced = os.environ.get(BACKEND_ENV, "").strip().lower()
    if forced:
        if forced not in ("cpu", "gpu"):
            raise ValueError(f"{BACKEND_ENV} must be 'cpu' or 'gpu', got {forced!r}")
        if forced == "gpu":
            require_gpu(f"{BACKEND_ENV}=gpu")
        return forced
    return "gpu" if gpu_available() else "cpu"


def describe() -> dict:
    """The device and software this process runs on, as a flat dict.

    Without a GPU, the GPU fields are None and ``gpu`` says why.
    """
    import numpy

    info = {
        "gpu": None, "compute_capability": None, "sms": None, "memory_gib": None,
        "sm_clock_mhz": None, "memory_clock_mhz": None, "memory_bus_bits": None,
        "l2_mib": None, "driver": None, "cuda_driver_api": None, "cuda_runtime": None, "cupy": None,
        "numpy": numpy.__version__, "python": platform.python_version(),
        "host": platform.node(), "cpu": platform.processor() or platform.machine(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    if not gpu_available():
        info["gpu"] = f"none ({why_no_gpu()})"
        return info
    import cupy
    from cupy.cuda import runtime

    dev = cupy.cuda.Device()
    props = runtime.getDeviceProperties(dev.id)
    name = props["name"]
    info.update(
        gpu=name.decode() if isinstance(name, bytes) else str(name),
        compute_capability=f"{props['major']}.{props['minor']}",
        sms=int(props["multiProcessorCount"]),
        memory_gib=round(props["totalGlobalMem"] / 2**30, 1),
        # CUDA 13 dropped the clock fields from cudaDeviceProp; ask the attribute API.
        sm_clock_mhz=_attribute_mhz(runtime, "cudaDevAttrClockRate", dev.id, props.get("clockRate")),
        memory_clock_mhz=_attribute_mhz(runtime, "cudaDevAttrMemoryClockRate", dev.id,
                                        props.get("memoryClockRate")),
        memory_bus_bits=int(props.get("memoryBusWidth", 0)) or None,
        l2_mib=round(props.get("l2CacheSize", 0) / 2**20, 1) or None,
        driver=_nvidia_driver() or _version_string(runtime.driverGetVersion()),
        cuda_driver_api=_version_string(runtime.driverGetVersion()),
        cuda_runtime=_version_string(runtime.runtimeGetVersion()),
        cupy=cupy.__version__,
    )
    return info


def _attribute_mhz(runtime, attr_name: str, device_id: int, fallback_khz) -> float | None:
    attr = getattr(runtime, attr_name, None)
    try:
        if attr is not None:
            return round(runtime.deviceGetAttribute(attr, device_id) / 1000)
    except Exception:
        pass
    return round(fallback_khz / 1000) if fallback_khz else None


def _nvidia_driver() -> str | None:
    """The driver's own version (e.g. 580.159.04), from nvidia-smi where present."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] or None
    except Exception:
        return None


def _version_string(code: int) -> str:
    return f"{code // 1000}.{(code % 1000) // 10}"


# --------------------------------------------------------------------------- clocks and limits
#: NVML's clock-event ("throttle") reason bits, by name.
THROTTLE_REASONS = {
    0x1: "gpu idle", 0x2: "application clocks setting", 0x4: "software power cap",
    0x8: "hardware slowdown", 0x10: "sync boost", 0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown", 0x80: "hardware power brake", 0x100: "display clock setting",
}


def decode_throttle(mask: int) -> list[str]:
    """NVML's clock-event reason bits as words ("gpu idle", "software power cap", ...)."""
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit] + (
        [f"unknown bits {mask & ~sum(THROTTLE_REASONS):#x}"] if mask & ~sum(THROTTLE_REASONS) else [])


def _nvml_handle():
    """(pynvml, handle) for the current CUDA device, or None where NVML is not importable."""
    try:
        import pynvml
        import cupy
        pynvml.nvmlInit()
        bus = cupy.cuda.Device().pci_bus_id
        try:
            return pynvml, pynvml.nvmlDeviceGetHandleByPciBusId_v2(bus)
        except Exception:
            return pynvml, pynvml.nvmlDeviceGetHandleByPciBusId(bus.encode())
    except Exception:
        return None


def gpu_state() -> dict:
    """The GPU's state now: SM and memory clocks (MHz), temperature (C), power
    (W) and the active clock-event ("throttle") reasons, from NVML (the
    nvidia-ml-py package) or else nvidia-smi; ``{"source": "unavailable"}``
    where neither answers (or there is no GPU)."""
    if not gpu_available():
        return {"source": "unavailable"}
    nv = _nvml_handle()
    if nv is not None:
        pynvml, h = nv
        try:
            reasons_fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
            mask = int(reasons_fn(h))
            return {"source": "nvml",
                    "sm_clock_mhz": int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                    "memory_clock_mhz": int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
                    "max_sm_clock_mhz": int(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
                    "temperature_c": int(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
                    "power_w": round(pynvml.nvmlDeviceGetPowerUsage(h) / 1000, 1),
                    "throttle_reasons": decode_throttle(mask)}
        except Exception:
            pass
    return _smi_state()


#: How each vendor library's rows are reached from Python (the ``library`` column names the
#: library; this says through which call). Recorded in every run's conditions.
VENDOR_ENTRY_POINTS = {
    "cuBLAS (CuPy)": "cupy.matmul / cupy.cublas (cublasGemmEx, cublasSgemm on CuPy's handle)",
    "cuBLAS (cublasGemmEx)": "cublasGemmEx through ctypes on CuPy's libcublas",
    "cuBLASLt (PyTorch)": "torch.matmul / torch.nn.functional.linear (cuBLASLt, its heuristic's pick)",
    "cuDNN (PyTorch)": "torch.nn.functional.conv2d with torch.backends.cudnn.benchmark = True",
    "cuDNN + cuBLAS (PyTorch)": "torch.nn.functional.conv2d / max_pool2d / linear (cudnn.benchmark = True)",
    "PyTorch (cuBLAS)": "torch.mm and autograd in eager mode",
    "PyTorch (embedding_bag)": "torch.nn.functional.embedding_bag in eager mode",
    "PyTorch (cuSPARSE)": "torch.sparse.mm on a CSR tensor",
    "PyTorch (torch.compile)": "torch.compile (Inductor; Triton kernels, CUDA graphs in reduce-overhead)",
    "CUDA graphs": "torch.cuda.CUDAGraph / cupy.cuda.Graph capture of the eager path, replayed",
}


def _form_factor(name: str, power_limit_w: float | None) -> str:
    """SXM or PCIe, as far as the name and the power limit tell (NVML reports no form factor):
    an H100 80GB HBM3 or an H200 (not NVL) is the SXM module; "PCIe" and "NVL" names are cards."""
    lowered = name.lower()
    if "pcie" in lowered or "nvl" in lowered:
        form = "PCIe card"
    elif "sxm" in lowered or "hbm3" in lowered or lowered.endswith("h200"):
        form = "SXM module"
    else:
        return "unknown (the name does not say)"
    limit = f", power limit {power_limit_w:g} W" if power_limit_w else ""
    return f"{form} (from the name '{name}'{limit})"


def conditions(timing_method: str | None = None) -> dict:
    """Under what conditions a run was measured, beyond :func:`describe`: the power limit in force
    and the card's form, the vendor libraries' versions and how each is called, and the timing
    method (``timing.describe_method()``, passed in: the timing module builds on this one);
    clocks, power draw and throttle reasons during the run are the monitor's (``gpu_state``).
    Fields that cannot be read are None."""
    out = {"power_limit_w": None, "power_limit_default_w": None, "form_factor": None,
           "cublas": None, "cudnn": None, "torch": None, "triton": None,
           "vendor_entry_points": VENDOR_ENTRY_POINTS, "timing": timing_method}
    if not gpu_available():
        return out
    nv = _nvml_handle()
    if nv is not None:
        pynvml, h = nv
        try:
            out["power_limit_w"] = round(pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000, 1)
            out["power_limit_default_w"] = round(pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000, 1)
        except Exception:
            pass
    try:
        import cupy
        name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
        out["form_factor"] = _form_factor(name.decode() if isinstance(name, bytes) else str(name),
                                          out["power_limit_w"])
        from cupy_backends.cuda.libs import cublas
        handle = cupy.cuda.device.get_cublas_handle()
        v = int(cublas.getVersion(handle))        # major * 10000 + minor * 100 + patch
        out["cublas"] = f"{v // 10000}.{(v // 100) % 100}.{v % 100}"
    except Exception:
        pass
    try:
        import torch
        out["torch"] = torch.__version__
        out["cudnn"] = str(torch.backends.cudnn.version())
        out["torch_cuda"] = torch.version.cuda
    except Exception:
        pass
    try:
        import triton
        out["triton"] = triton.__version__
    except Exception:
        pass
    return out


def _smi_state() -> dict:
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return {"source": "unavailable"}
    fields = ["clocks.sm", "clocks.mem", "clocks.max.sm", "temperature.gpu", "power.draw"]
    for reasons in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields + [reasons])}",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
            if out.returncode != 0:
                continue
            values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
            number = lambda v: float(v) if v.replace(".", "", 1).isdigit() else None   # noqa: E731
            return {"source": "nvidia-smi", "sm_clock_mhz": number(values[0]),
                    "memory_clock_mhz": number(values[1]), "max_sm_clock_mhz": number(values[2]),
                    "temperature_c": number(values[3]), "power_w": number(values[4]),
                    "throttle_reasons": decode_throttle(int(values[5], 16)) if values[5].startswith("0x") else []}
        except Exception:
            continue
    return {"source": "unavailable"}


class GpuMonitor:
    """The GPU's state before and after a block of work, and sampled every
    ``interval_s`` during it (through NVML; before/after only with nvidia-smi):

        with GpuMonitor() as monitor:
            rows = benchmark_all()
        meta["gpu_state"] = monitor.summary()
    """

    def __init__(self, interval_s: float = 1.0):
        self.interval_s = interval_s
        self.before: dict = {}
        self.after: dict = {}
        self.samples: list[dict] = []
        self._stop = None
        self._thread = None

    def __enter__(self):
        import threading
        self.before = gpu_state()
        if self.before.get("source") == "nvml":
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(self.interval_s):
            self.samples.append(gpu_state())

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
        self.after = gpu_state()
        return False

    def summary(self) -> dict:
        """before, after, and over the samples: SM clock min/median/max, the
        highest temperature, and every throttle reason seen (with how often)."""
        out = {"before": self.before, "after": self.after, "samples": len(self.samples)}
        clocks = [s["sm_clock_mhz"] for s in self.samples if s.get("sm_clock_mhz")]
        if clocks:
            out["sm_clock_mhz_min"] = min(clocks)
            out["sm_clock_mhz_median"] = float(sorted(clocks)[len(clocks) // 2])
            out["sm_clock_mhz_max"] = max(clocks)
            out["temperature_c_max"] = max(s.get("temperature_c", 0) for s in self.samples)
            seen: dict = {}
            for s in self.samples:
                for reason in s.get("throttle_reasons", []):
                    seen[reason] = seen.get(reason, 0) + 1
            out["throttle_reasons_seen"] = seen
        return out


@dataclass(frozen=True)
class DeviceLimits:
    """The limits a live path sizes itself by: dynamic shared memory one block
    may opt in to, and device memory. ``simulated`` names the profile standing
    in for a smaller GPU (see :data:`PROFILES`, :func:`simulate`)."""

    name: str
    shared_per_block: int       # bytes (cudaDevAttrMaxSharedMemoryPerBlockOptin)
    total_memory: int           # bytes
    sms: int | None = None
    l2_bytes: int | None = None
    simulated: str | None = None
    compute_capability: str | None = None   # "7.5", "8.9", "9.0" (None: not known)

    def memory_budget(self, fraction: float = 0.5) -> float:
        """Bytes one variant of a chapter may use: ``fraction`` of the device
        memory (the rest holds references, other precisions' inputs, caches)."""
        return fraction * self.total_memory

    def shared_fits(self, nbytes: int) -> str | None:
        """None when a block may have ``nbytes`` of shared memory, else the reason it may not."""
        if nbytes <= self.shared_per_block:
            return None
        return (f"needs {nbytes:,} bytes of shared memory per block; {self.name} allows "
                f"{self.shared_per_block:,}")

    def capability_fits(self, required: str, what: str) -> str | None:
        """None when the device's compute capability is at least ``required`` ("8.0"), else
        the reason ``what`` (e.g. "cp.async and tf32 tensor cores") cannot run here."""
        if self.compute_capability is None or _capability(self.compute_capability) >= _capability(required):
            return None
        return (f"needs compute capability {required} or newer for {what}; {self.name} has "
                f"{self.compute_capability}")

    def memory_fits(self, nbytes: float, fraction: float = 0.5) -> str | None:
        budget = self.memory_budget(fraction)
        if nbytes <= budget:
            return None
        return (f"needs {nbytes / 1e9:.1f} GB of device memory; the budget on {self.name} is "
                f"{budget / 1e9:.1f} GB ({fraction:.0%} of {self.total_memory / 1e9:.1f} GB)")


def _capability(text: str) -> tuple[int, int]:
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


def _profile(name: str) -> DeviceLimits:
    """A smaller GPU's limits, named as CUDA reports it, from the lab's one datasheet
    table (:mod:`gpulab.datasheet`)."""
    from . import datasheet
    gpu = datasheet.lookup(name)
    return DeviceLimits(name,
                        shared_per_block=gpu.architecture.shared_per_block_kib * 1024,
                        total_memory=int(gpu.memory_gb * 1e9), sms=gpu.sms, l2_bytes=int(gpu.l2_mb * 2**20),
                        simulated=name.split()[-1], compute_capability=gpu.compute_capability)


#: Smaller GPUs readers have (Colab's T4 and L4), to test the live paths without one:
#: T4 64 KiB of shared memory per block, 16 GB and compute capability 7.5 (no cp.async, no tf32);
#: L4 99 KiB, 24 GB and 8.9.
PROFILES = {"T4": _profile("Tesla T4"), "L4": _profile("NVIDIA L4"),
            #: A reader's 8 GB card, as the lead's parallel live check ran the book: an H100 with
            #: CUPY_GPU_MEMORY_LIMIT at 9% (7.7 GB), its other limits unchanged.
            "8GB": replace(_profile("NVIDIA H100 80GB HBM3"), name="NVIDIA H100 80GB HBM3 with 7.7 GB",
                           total_memory=int(7.7e9), simulated="8GB")}
#: Environment variable naming a profile of PROFILES to simulate (e.g. GPULAB_DEVICE_PROFILE=T4).
PROFILE_ENV = "GPULAB_DEVICE_PROFILE"
_simulated: list[str] = []


@contextmanager
def simulate(profile: str):
    """Run the live paths as if on a smaller GPU: inside the block,
    :func:`limits` reports the profile's limits (never more than the real
    GPU's), so every path sizes itself, or skips, as it would there. Yields those
    limits, named as every message will name them: "Tesla T4" without a GPU,
    "Tesla T4 (simulated on NVIDIA H100 80GB HBM3)" on one."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    _simulated.append(profile)
    try:
        yield limits()
    finally:
        _simulated.pop()


def limits() -> DeviceLimits | None:
    """This device's limits, or a simulated profile's (:func:`simulate` or
    ``GPULAB_DEVICE_PROFILE``), capped by the real GPU's; None on a machine
    without a GPU and with no profile simulated (the CPU backend has no such limits)."""
    name = _simulated[-1] if _simulated else os.environ.get(PROFILE_ENV, "").strip() or None
    if name is not None and name not in PROFILES:
        raise ValueError(f"{PROFILE_ENV} must be one of {sorted(PROFILES)}, got {name!r}")
    real = _real_limits()
    if name is None:
        return real
    sim = PROFILES[name]
    if real is None:
        return sim
    return DeviceLimits(f"{sim.name} (simulated on {real.name})",
                        min(sim.shared_per_block, real.shared_per_block),
                        min(sim.total_memory, real.total_memory), sim.sms, sim.l2_bytes, simulated=name,
                        compute_capability=min(sim.compute_capability, real.compute_capability,
                                               key=lambda cc: _capability(cc) if cc else (99, 0)))


@functools.lru_cache(maxsize=None)
def _real_limits_cached(device_id: int) -> DeviceLimits:
    from cupy.cuda import runtime
    props = runtime.getDeviceProperties(device_id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    optin = int(props.get("sharedMemPerBlockOptin", 0))
    if not optin:
        optin = runtime.deviceGetAttribute(runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, device_id)
    return DeviceLimits(name, int(optin), int(props["totalGlobalMem"]),
                        int(props["multiProcessorCount"]), int(props.get("l2CacheSize", 0)) or None,
                        compute_capability=f"{props['major']}.{props['minor']}")


def _real_limits() -> DeviceLimits | None:
    if not gpu_available():
        return None
    import cupy
    real = _real_limits_cached(cupy.cuda.Device().id)
    return _capped(real, cupy.get_default_memory_pool().get_limit())


def _capped(real: DeviceLimits, pool_limit: int) -> DeviceLimits:
    """``real`` with its memory cut to CuPy's pool limit (``CUPY_GPU_MEMORY_LIMIT``), when one
    is set below it: processes that share one GPU (the book's notebooks checked in parallel)
    then size themselves, or skip with the reason, within their share instead of running out."""
    if not pool_limit or pool_limit >= real.total_memory:
        return real
    return replace(real, name=f"{real.name}, limited to {pool_limit / 1e9:.1f} GB (CUPY_GPU_MEMORY_LIMIT)",
                   total_memory=int(pool_limit))

"""Find a usable CUDA GPU through CuPy, describe it, and pick the backend.

Nothing here may crash on a machine without CuPy, without a driver or without a
GPU: every probe is wrapped, and the reason a GPU is not usable is kept so that
``require_gpu`` can say it.
"""
from __future__ import annotations

import functools
import os
import platform
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

import subprocess
import sys

import pytest

import gpulab
from gpulab import NoGPUError, device


def test_describe_never_crashes_and_names_the_software():
    info = gpulab.describe()
    assert info["numpy"] and info["python"] and info["date"]
    if gpulab.gpu_available():
        assert info["sms"] > 0 and info["memory_gib"] > 0 and info["cupy"]
    else:
        assert info["gpu"].startswith("none (") and device.why_no_gpu() in info["gpu"]


@pytest.mark.skipif(gpulab.gpu_available(), reason="needs a machine without a GPU")
def test_require_gpu_says_what_needed_it_and_what_to_do():
    with pytest.raises(NoGPUError, match="live timing needs an NVIDIA GPU.*CPU backend.*labdata/runs"):
        gpulab.require_gpu("live timing")


@pytest.mark.skipif(gpulab.gpu_available(), reason="needs a machine without a GPU")
def test_backend_choice_without_gpu(monkeypatch):
    assert device.default_backend() == "cpu"
    monkeypatch.setenv(device.BACKEND_ENV, "gpu")
    with pytest.raises(NoGPUError):
        device.default_backend()
    monkeypatch.setenv(device.BACKEND_ENV, "tpu")
    with pytest.raises(ValueError, match="must be 'cpu' or 'gpu'"):
        device.default_backend()


def test_forcing_the_cpu_backend(monkeypatch):
    monkeypatch.setenv(device.BACKEND_ENV, "cpu")
    assert gpulab.get_backend().name == "cpu"


@pytest.mark.skipif(gpulab.gpu_available(), reason="needs a machine without a GPU")
def test_record_without_gpu_fails_clearly():
    result = subprocess.run([sys.executable, "-m", "gpulab", "record", "measuring"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith("error: python -m gpulab record needs an NVIDIA GPU")
    assert "Traceback" not in result.stderr


def test_cli_lists_runs_and_describes_the_machine():
    listed = subprocess.run([sys.executable, "-m", "gpulab", "runs"], capture_output=True, text=True)
    assert listed.returncode == 0 and "measuring" in listed.stdout
    info = subprocess.run([sys.executable, "-m", "gpulab", "info"], capture_output=True, text=True)
    assert info.returncode == 0 and "numpy" in info.stdout

import re
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


def test_simulated_profiles_size_the_live_paths(monkeypatch):
    from gpulab import device
    monkeypatch.delenv(device.PROFILE_ENV, raising=False)
    with device.simulate("T4") as t4:
        limits = device.limits()
        assert limits.shared_per_block <= 64 * 1024 and limits.simulated == "T4"
        assert "105,472 bytes of shared memory" in limits.shared_fits(105_472)
        assert limits.shared_fits(48 * 1024) is None
        assert limits.memory_fits(40e9) is not None and limits.memory_fits(4e9) is None
        assert t4.total_memory < 17e9
    with device.simulate("L4"):
        assert device.limits().shared_fits(70_656) is None         # fits 99 KB
        assert device.limits().shared_fits(105_472) is not None
    monkeypatch.setenv(device.PROFILE_ENV, "L4")
    assert device.limits().simulated == "L4"
    monkeypatch.setenv(device.PROFILE_ENV, "V100x")
    with pytest.raises(ValueError, match="GPULAB_DEVICE_PROFILE must be one of"):
        device.limits()
    with pytest.raises(ValueError, match="profile must be one of"):
        with device.simulate("A1"):
            pass


def test_throttle_reasons_in_words():
    from gpulab import device
    assert device.decode_throttle(0x1 | 0x4) == ["gpu idle", "software power cap"]
    assert device.decode_throttle(0) == []
    assert device.decode_throttle(0x10000)[-1].startswith("unknown bits")


def test_gpu_state_without_a_gpu_says_so():
    from gpulab import device
    if not device.gpu_available():
        assert device.gpu_state() == {"source": "unavailable"}
    with device.GpuMonitor() as monitor:
        pass
    assert set(monitor.summary()) >= {"before", "after", "samples"}


def test_simulated_profiles_know_their_compute_capability_and_refuse_too_much_shared_memory(monkeypatch):
    import gpulab
    from gpulab import device
    from gpulab.errors import KernelArgumentError
    monkeypatch.delenv(device.PROFILE_ENV, raising=False)
    with device.simulate("T4"):
        here = device.limits()
        assert here.compute_capability == "7.5"
        assert "compute capability 8.0" in here.capability_fits("8.0", "cp.async") and "7.5" in \
            here.capability_fits("8.0", "cp.async")
        assert here.capability_fits("7.0", "wmma") is None
        kernel = gpulab.load_module("lenet/11_tensor_cores.cu", "cpu").get_function("conv2_wmma_relu_pool")
        with pytest.raises(KernelArgumentError, match=re.escape(f"{here.name} allows 65,536")):
            kernel.allow_shared_memory(70_000)
        kernel.allow_shared_memory(60_000)
    with device.simulate("L4"):
        assert device.limits().compute_capability == "8.9" and device.limits().capability_fits("8.0", "x") is None
    assert device.DeviceLimits("unknown", 1, 1).capability_fits("9.0", "x") is None


def test_a_profile_simulated_on_a_gpu_says_so_in_every_message(monkeypatch):
    # On a GPU machine the simulated profile names both GPUs; the messages a reader sees and the
    # limits simulate() yields must carry that one name (tests compare against it, not "Tesla T4").
    from gpulab import device
    monkeypatch.delenv(device.PROFILE_ENV, raising=False)
    h100 = device.DeviceLimits("NVIDIA H100 80GB HBM3", 232_448, 85_000_000_000, 132, 50 * 2**20,
                               compute_capability="9.0")
    monkeypatch.setattr(device, "_real_limits", lambda: h100)
    with device.simulate("T4") as t4:
        assert t4 == device.limits() and t4.name == "Tesla T4 (simulated on NVIDIA H100 80GB HBM3)"
        assert t4.shared_per_block == 64 * 1024 and t4.compute_capability == "7.5" and t4.sms == 40
        assert f"{t4.name} has 7.5" in t4.capability_fits("8.0", "cp.async")
        assert f"{t4.name} allows 65,536" in t4.shared_fits(70_000)


def test_a_cupy_memory_limit_is_the_memory_a_chapter_sizes_itself_by():
    # CUPY_GPU_MEMORY_LIMIT caps what the process may allocate (the parallel notebook check gives
    # each notebook a share of one GPU): budgets, and the reasons for a skip, follow that cap.
    from gpulab import device
    h100 = device.DeviceLimits("NVIDIA H100 80GB HBM3", 232_448, 85_000_000_000, 132)
    assert device._capped(h100, 0) is h100 and device._capped(h100, 90_000_000_000) is h100
    share = device._capped(h100, 8_000_000_000)
    assert share.total_memory == 8_000_000_000 and share.shared_per_block == h100.shared_per_block
    why = share.memory_fits(5e9)
    assert "5.0 GB" in why and "limited to 8.0 GB (CUPY_GPU_MEMORY_LIMIT)" in why and "4.0 GB" in why


def test_the_device_sessions_gpu_tests_list_every_test_file_with_a_gpu_path():
    """tools/gpu_session.sh runs the GPU tests on the device (CI has no GPU): every test file whose
    tests take the cpu/gpu ``backend`` fixture, or skip where no GPU is usable, is in its list, so
    that no GPU path goes untested there (test_hopper_fp8 and test_cpu_fp8 once were not)."""
    from gpulab import paths
    script = (paths.REPO / "tools" / "gpu_session.sh").read_text()
    listed = set(re.search(r'gpu_tests="([^"]*)"', script).group(1).split())
    with_gpu_paths = set()
    for path in sorted((paths.REPO / "tests").glob("test_*.py")):
        text = path.read_text()
        if re.search(r"def test_\w+\([^)]*\bbackend\b", text) or re.search(r"(?<![\w.])gpu_available\(\)", text):
            with_gpu_paths.add(path.stem.removeprefix("test_"))
    with_gpu_paths.discard("timing_gpu")                 # run first, alone on the idle GPU
    assert with_gpu_paths - listed == set(), "add to gpu_tests in tools/gpu_session.sh"
    assert len(with_gpu_paths) >= 20

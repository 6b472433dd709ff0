import pytest

from gpulab.device import gpu_available, why_no_gpu


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's addopts): one process per core without a GPU, but none
    on a GPU machine, where the tests that time kernels must not share the GPU."""
    return 0 if gpu_available() else None


@pytest.fixture(params=["cpu", "gpu"])
def backend(request):
    """Run a test on the CPU backend and, where CuPy can use a GPU, on the GPU."""
    if request.param == "gpu" and not gpu_available():
        pytest.skip(f"no GPU: {why_no_gpu()}")
    return request.param


def pytest_runtest_setup(item):
    """Tests marked ``solutions`` use an exercise's solution: skipped in a student copy."""
    if item.get_closest_marker("solutions"):
        from gpulab.exercises import solutions_present
        if not solutions_present():
            pytest.skip("uses an exercise's solution, which the student version does not have")

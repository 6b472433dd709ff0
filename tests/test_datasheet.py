import pytest

from gpulab import datasheet, roofline
from gpulab.cpu import MAX_SHARED_BYTES


def test_h100_facts_the_book_quotes():
    h100 = datasheet.h100()
    assert h100["fp32_tflops"] == 66.9 and h100["memory_gbs"] == 3350 and h100["l2_mb"] == 50
    assert h100["shared_per_block_kib"] == 227 and h100["shared_per_sm_kib"] == 228
    assert h100["registers_per_sm"] == 65536 and h100["max_warps_per_sm"] == 64 and h100["sms"] == 132
    assert h100["ridge_flop_per_byte"] == pytest.approx(20, abs=0.1)
    assert h100["source"] and h100["limits_source"]


@pytest.mark.parametrize("gpu", datasheet.GPUS, ids=lambda g: g.product)
def test_fp32_peak_is_sms_times_lanes_times_clock(gpu):
    # The datasheet's FP32 figure is 2 FLOPs per FMA lane per clock at the boost clock.
    derived = gpu.sms * gpu.architecture.fp32_lanes_per_sm * 2 * gpu.boost_clock_mhz / 1e6
    assert derived == pytest.approx(gpu.fp32_tflops, rel=0.02)


def test_lookup_and_the_roofline_view_agree():
    assert datasheet.lookup("NVIDIA H100 80GB HBM3").product == "H100 SXM5 80GB"
    assert roofline.datasheet("NVIDIA H100 80GB HBM3")["fp32_tflops"] == 66.9
    assert datasheet.lookup("Some Unknown GPU") is None
    assert datasheet.architecture("7.0").shared_per_block_kib == 96     # the V100 could opt in to 96 KB
    with pytest.raises(KeyError, match="compute capability '1.0'"):
        datasheet.architecture("1.0")


def test_cpu_backend_allows_what_an_h100_block_may_have():
    assert MAX_SHARED_BYTES == 227 * 1024


def test_blocks_per_sm_agrees_with_the_occupancy_the_h100_reported():
    # The recorded fcnet run's resource table came from CUDA's occupancy calculator on the H100.
    import gpulab
    from gpulab.workloads import fcnet
    hopper = datasheet.architecture("9.0")
    resources = gpulab.load_run(fcnet.CHAPTER).tables["resources"]
    for row in resources.itertuples():
        shared = int(row.static_shared_bytes) + int(row.dynamic_shared_bytes)
        fit = hopper.blocks_per_sm(int(row.threads_per_block), int(row.registers), shared)
        assert fit["blocks"] == row.blocks_per_sm, row.kernel
    step4 = hopper.blocks_per_sm(256, 44, 39040)
    assert step4["blocks"] == 5 and set(step4["limited_by"]) == {"registers", "shared memory"}
    assert hopper.blocks_per_sm(256, 24)["limited_by"] == ["warps"]
    with pytest.raises(ValueError, match="threads must be"):
        hopper.blocks_per_sm(2048, 32)


def test_simulated_device_profiles_agree_with_the_datasheet():
    from gpulab.device import PROFILES
    for profile in PROFILES.values():
        gpu = datasheet.lookup(profile.name)
        assert gpu is not None, profile.name
        assert profile.shared_per_block == gpu.architecture.shared_per_block_kib * 1024
        assert profile.sms == gpu.sms
        assert profile.total_memory <= gpu.memory_gb * 2**30   # capacity "GB" on datasheets are GiB

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


def _driver_occupancies():
    """Every occupancy a recorded run took from the driver (cudaOccupancyMaxActiveBlocksPerMultiprocessor):
    the convpool sweeps and the convpool and fcnet resource tables, on every recorded GPU."""
    import pandas as pd
    from gpulab import paths
    rows = []
    for path in sorted(paths.RUNS.glob("*/convpool.sweeps.csv")):
        for r in pd.read_csv(path).itertuples():
            if pd.isna(r.blocks_per_sm) or r.blocks_per_sm == 0:   # refused before the calculator was asked
                continue
            # The tile sweep records warps, not threads, per block.
            threads = r.threads if not pd.isna(r.threads) else r.warps_per_sm / r.blocks_per_sm * 32
            shared = 0 if pd.isna(r.shared_bytes) else int(r.shared_bytes)
            rows.append((f"{path.parent.name} {r.sweep}", int(threads), int(r.registers), shared, int(r.blocks_per_sm)))
    for path in sorted(paths.RUNS.glob("*/*.resources.csv")):
        table = pd.read_csv(path)
        if "blocks_per_sm" not in table:
            continue
        for r in table.itertuples():
            rows.append((f"{path.parent.name} {r.kernel}", int(r.threads_per_block), int(r.registers),
                         int(r.static_shared_bytes) + int(r.dynamic_shared_bytes), int(r.blocks_per_sm)))
    return rows


def test_blocks_per_sm_agrees_with_every_occupancy_the_driver_reported():
    hopper = datasheet.architecture("9.0")
    rows = _driver_occupancies()
    assert len(rows) > 200 and {threads for _, threads, *_ in rows} >= {32, 64, 128, 256, 512}
    for where, threads, registers, shared, blocks in rows:
        assert hopper.blocks_per_sm(threads, registers, shared)["blocks"] == blocks, \
            (where, threads, registers, shared)
    # The row that tells the two rules apart: 40 registers x 32 = 1,280 per warp; 16,384 // 1,280 = 12 warps
    # in each of the four sub-partitions, 48 in all, 24 blocks of 2 warps (not 65,536 // 1,280 = 51 warps: 25).
    assert (64, 40, 0, 24) in {row[1:] for row in rows}
    fit = hopper.blocks_per_sm(64, 40)
    assert fit["blocks"] == 24 and fit["limited_by"] == ["registers"] and fit["occupancy"] == 0.75
    step4 = hopper.blocks_per_sm(256, 44, 39040)
    assert step4["blocks"] == 5 and set(step4["limited_by"]) == {"registers", "shared memory"}
    assert hopper.blocks_per_sm(256, 24)["limited_by"] == ["warps"]
    with pytest.raises(ValueError, match="threads must be"):
        hopper.blocks_per_sm(2048, 32)


def test_registers_are_counted_per_sub_partition():
    hopper = datasheet.architecture("9.0")
    # 255 registers -> 8,192 per warp: two warps per sub-partition, so 8 warps an SM; a block of
    # 9 warps cannot launch (CUDA's launch check counts its warps as 12: 98,304 > 65,536 registers).
    assert hopper.blocks_per_sm(256, 255)["blocks"] == 1
    assert hopper.blocks_per_sm(288, 255)["blocks"] == 0
    # 33 registers -> 1,280 per warp (rounded to 256): 12 warps per sub-partition, 48 an SM,
    # 9 blocks of 5 warps (the old single-pool rule said 51 warps: 10 blocks).
    assert hopper.blocks_per_sm(160, 33)["blocks"] == 9
    # Shared memory goes in 128-byte units, plus the 1 KiB each block reserves.
    assert hopper.blocks_per_sm(32, 16, 7 * 1024 - 1)["by_shared_memory"] == 228 // 8
    with pytest.raises(ValueError, match="shared_bytes must be"):
        hopper.blocks_per_sm(32, 16, -1)


def test_simulated_device_profiles_agree_with_the_datasheet():
    from gpulab.device import PROFILES
    for profile in PROFILES.values():
        gpu = datasheet.lookup(profile.name)
        assert gpu is not None, profile.name
        assert profile.shared_per_block == gpu.architecture.shared_per_block_kib * 1024
        assert profile.sms == gpu.sms
        assert profile.total_memory <= gpu.memory_gb * 2**30   # capacity "GB" on datasheets are GiB

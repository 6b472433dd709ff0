"""The arithmetic facts the kernel comments and the chapter state (bank-conflict
ways, sectors, bytes per vector, tiles per block, shuffle counts), computed from
the launch declarations in gpulab.workloads and the kernels' own #defines, and
checked against what the comments say."""
import re

import numpy as np
import pytest

import gpulab
from gpulab import datasheet, paths
from gpulab.access import bank_passes, sectors
from gpulab.workloads import fcnet


def source(step_file: str) -> str:
    return (paths.KERNELS / step_file).read_text()


def opening_comment(step_file: str) -> str:
    """The kernel file's comment lines, joined into one line of text."""
    lines = [line[2:].strip() for line in source(step_file).splitlines() if line.startswith("//")]
    return " ".join(lines)


def defines(step_file: str) -> dict[str, int]:
    """The integer #defines of a kernel file, evaluated in order."""
    values: dict[str, int] = {}
    for name, expr in re.findall(r"^#define\s+(\w+)\s+(.+)$", source(step_file), re.M):
        expr = expr.split("//")[0]
        try:
            values[name] = int(eval(expr.replace("/", "//"), {}, dict(values)))
        except (NameError, SyntaxError, TypeError):
            pass
    return values


def passes(word_addresses) -> int:
    return int(bank_passes(word_addresses)[0])


def warp_lanes(block) -> list[tuple[int, int]]:
    """(threadIdx.x, threadIdx.y) of the 32 threads of a block's first warp:
    a warp is 32 consecutive threads in x-fastest order."""
    bx = block[0]
    return [(t % bx, t // bx) for t in range(datasheet.WARP_SIZE)]


def test_bank_model_on_known_cases():
    assert passes(range(32)) == 1                     # consecutive words: one pass
    assert passes([7] * 32) == 1                      # one word for all lanes: a broadcast
    assert passes([32 * i for i in range(32)]) == 32  # a pitch of 32 words: all in one bank


def test_weight_reads_of_steps_3_and_4_are_8_way_and_32_way():
    # 4 vectors per block of 256 threads: 64 threads per vector, thread j = unit j,
    # so a warp is 32 consecutive units of one vector reading row j of W1s / W2s.
    for number in (3, 4):
        launch = fcnet.CHAPTER.rung(number)[0].launches[0]
        threads_per_vector = launch.block[0] // launch.vectors_per_block
        assert threads_per_vector == fcnet.HID
        units = np.arange(datasheet.WARP_SIZE) % threads_per_vector
        k = 5
        w1 = passes(units * fcnet.IN + k)
        w2 = passes(units * fcnet.HID + k)
        assert (w1, w2) == (8, 32)
    for step_file in ("fcnet/03_fused_shared.cu", "fcnet/04_whole_net_shared.cu"):
        assert "8-way" in opening_comment(step_file) and "32-way" in opening_comment(step_file)
    comment = opening_comment("fcnet/05_shared_and_registers.cu")
    assert "32-way" in comment and "8-way" in comment


def test_step_1_warp_reads_16_floats_in_two_sectors():
    matmul = fcnet.CHAPTER.rung(1)[0].launches[0]
    lanes = warp_lanes(matmul.block)
    columns = {x for x, _ in lanes}              # threadIdx.x runs along the vectors
    rows = {y for _, y in lanes}
    assert (len(columns), len(rows)) == (16, 2)
    n = 4096
    x_bytes = [4 * (3 * n + col) for col, _ in lanes]   # row k = 3 of X, both rows of threads
    assert sectors(x_bytes)[0] == 2
    assert "16 consecutive floats" in opening_comment("fcnet/01_matmul_relu.cu")
    recorded = gpulab.load_run(fcnet.CHAPTER).tables["profile"]
    assert recorded.query("step == 1 and kernel == 'matmul'")["sectors_per_request"].eq(2.0).all()


def test_step_1_hidden_layers_move_2_kb_per_vector():
    # Each launch touches a hidden buffer once per vector and unit, the in-place relu twice.
    bytes_per_vector = 0
    for launch in fcnet.CHAPTER.rung(1)[0].launches:
        for buffer in ("h1", "h2"):
            if buffer in launch.args:
                bytes_per_vector += (2 if launch.kernel == "relu" else 1) * fcnet.HID * 4
    assert bytes_per_vector == 2048
    assert round(bytes_per_vector / fcnet.BYTES_PER_VECTOR, 1) == 6.7
    comment = opening_comment("fcnet/01_matmul_relu.cu")
    assert "2 KB per vector" in comment and "6.7 times" in comment


def test_step_7_input_loads_touch_16_rows_per_warp():
    # 2 vectors per iteration: the fill gives thread t feature t // 2, vector t % 2.
    launch = fcnet.CHAPTER.rung(7)[0].launches[0]
    features = {t // launch.vectors_per_block for t in range(datasheet.WARP_SIZE)}
    assert len(features) == 16


def test_tiles_per_block_of_the_persistent_fp16_steps():
    run = gpulab.load_run(fcnet.CHAPTER)
    for number in (9, 10, 11):
        step = fcnet.CHAPTER.rung(number)[0]
        assert run.tables["resources"].set_index("variant").loc[step.label, "blocks_per_sm"] == 1
        assert fcnet.tiles_per_block(run, step, "large") == pytest.approx(160_000 / 132)
        assert 3 < fcnet.tiles_per_block(run, step, "small") < 4
    assert "~1,200 tiles" in opening_comment("fcnet/10_coalesced_weights.cu")
    for step_file in ("fcnet/09_conflict_free_tile.cu", "fcnet/10_coalesced_weights.cu",
                      "fcnet/11_hide_input_loads.cu"):
        assert "3-4" in opening_comment(step_file)


def test_step_11_output_shuffles_are_most_of_its_shuffles():
    d = defines("fcnet/11_hide_input_loads.cu")
    assert d["TILE"] == fcnet.CHAPTER.rung(11)[0].launches[0].vectors_per_block
    hidden = 2 * d["GROUP_VECTORS"]                               # one xor-1 shuffle per vector and layer
    output = d["GROUP_VECTORS"] * int(np.log2(datasheet.WARP_SIZE))   # a 5-level tree per vector
    assert (hidden, output) == (32, 80)
    assert output / (hidden + output) == pytest.approx(0.71, abs=0.01)
    assert "~70%" in opening_comment("fcnet/13_best_per_size.cu")


@pytest.mark.parametrize("pitch_name", ["X_LD", "W1_LD", "W_LD"])
def test_step_15_fragment_loads_are_conflict_free(pitch_name):
    d = defines("fcnet/15_tensor_cores.cu")
    assert d["SMEM_BYTES"] == fcnet.TC_SHARED_BYTES
    pitch_words = d[pitch_name] // 2                  # halves -> 4-byte words
    starts = [r * pitch_words % datasheet.SHARED_BANKS for r in range(16)]
    assert len(set(starts)) == 8                      # rows r and r + 8 share a start bank
    for phase in (range(0, 8), range(8, 16)):         # a phase serves 8 rows of 16 bytes (4 words)
        words = [r * pitch_words + i for r in phase for i in range(4)]
        assert passes(words) == 1
    assert "8 different" in opening_comment("fcnet/15_tensor_cores.cu")


def test_step_13_ladder_shows_the_faster_kernel_on_each_case():
    run = gpulab.load_run(fcnet.CHAPTER)
    for case in fcnet.SIZES:
        shown = fcnet.ladder(run.timings, case).set_index("step")
        for number in (13, 14):
            labels = [s.label for s in fcnet.CHAPTER.rung(number)]
            rows = run.timings.query("experiment == 'ladder' and size == @fcnet.SIZES[@case]")
            times = rows[rows["variant"].isin(labels)].set_index("variant")["median_ms"]
            assert shown.loc[number, "variant"] == times.idxmin()
    assert fcnet.ladder(run.timings, "large").set_index("step").loc[13, "kernel"] == "best_small"


def test_lenet_step_13_tiles_products_and_shared_memory_are_what_its_comment_says():
    from gpulab.workloads.lenet import launchers as lenet_launchers
    d = defines("lenet/13_both_layers_mma.cu")
    # conv2: 37 tiles of 8 windows (the last 1 of 8), 8 input rows x 2 k-halves x 2 filter tiles
    # x 2 output rows of products, less the 8 that would use filter rows -1 and 7; conv1: 5 bands
    # x 40 tiles x 4.
    assert d["TILES"] == 37 and d["WINDOWS"] - 8 * (d["TILES"] - 1) == 1
    assert d["TILES"] * ((d["KS"] + 1) * 2 * 2 * 2 - 2 * 2 * 2) == lenet_launchers.MMA_PER_IMAGE["conv2"] == 2_072
    assert d["BANDS"] * d["TILES1"] * 4 == lenet_launchers.MMA_PER_IMAGE["conv1"] == 800
    assert (d["BANDS"], d["WARPS"]) == (lenet_launchers.BANDS, lenet_launchers.MMA_WARPS)
    # Every pixel's run of 32 halves starts on 16 bytes in one of conv2's two copies.
    assert d["ROW_BYTES"] % 16 == 0 and d["COPY_BYTES"] % 16 == 0
    conv1_shared = 2 * d["BAND_ROWS"] * d["SLOTS1"] * 2
    assert (d["SMEM_BYTES"], conv1_shared) == (26_880, 7_744)
    text = opening_comment("lenet/13_both_layers_mma.cu")
    assert "2,072 mma.m16n8k16" in text and "7,744 and 26,880 bytes" in text
    useful = 16 * 34 * 34 * 4 * 49 / (lenet_launchers.MMA_PER_IMAGE["conv2"] * 16 * 8 * 16)
    assert round(100 * useful) == 85 and "85% of it useful" in text
    sheet = datasheet.lookup("H100 80GB HBM3")
    assert "989 TFLOP/s" in text and round(sheet.fp16_tensor_tflops) == 989
    assert "3.35 TB/s" in text and sheet.memory_gbs == 3350
    assert "132 SMs, 1.98 GHz" in text and (sheet.sms, sheet.boost_clock_mhz) == (132, 1980)

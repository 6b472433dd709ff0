"""gpulab.diagrams and the chapters' thread-to-data maps: the maps follow the kernels' launches,
and the load counts the diagrams print are what the CPU backend counts when the kernels run."""
import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

import gpulab  # noqa: E402
from gpulab import cpu, diagrams  # noqa: E402
from gpulab.workloads import convpool, lenet  # noqa: E402
from gpulab.workloads.convpool import mapping as cp_mapping  # noqa: E402
from gpulab.workloads.lenet import mapping as le_mapping  # noqa: E402


def test_ownership_paints_owners_and_marks_and_refuses_non_integer_maps():
    import matplotlib.pyplot as plt
    owner = np.array([[0, 0, 1], [2, 2, -1]])
    fig, ax = plt.subplots()
    diagrams.ownership(ax, owner, title="t", highlight={1: "#FF0000"}, marks=[(owner == 2, "#0000FF")])
    image = ax.images[0].get_array()
    assert tuple(image[0, 2]) == to_rgba("#FF0000") and tuple(image[1, 0]) == to_rgba("#0000FF")
    assert tuple(image[1, 2]) == to_rgba(diagrams.UNOWNED)
    assert tuple(image[0, 0]) != tuple(image[0, 2])
    with pytest.raises(ValueError, match="2-D integer array"):
        diagrams.ownership(ax, owner.astype(float), title="t")
    with pytest.raises(ValueError, match="owner's shape"):
        diagrams.ownership(ax, owner, title="t", marks=[(np.ones((3, 3), bool), "red")])
    plt.close(fig)


def test_outline_draws_the_perimeter_of_a_region():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    mask = np.zeros((4, 5), bool)
    mask[1:3, 1:4] = True                                    # 2 x 3 cells: 10 unit edges
    diagrams.outline(ax, mask)
    segments = ax.collections[-1].get_segments()
    assert len(segments) == 10
    assert sum(np.abs(np.diff(s, axis=0)).sum() for s in segments) == 10
    plt.close(fig)


@pytest.mark.parametrize("layer", lenet.LAYERS, ids=lambda layer: layer.name)
def test_lenet_step10_map_gives_every_output_one_thread(layer):
    m = le_mapping.maps(layer)
    s = m["shape"]
    assert m["pooled"].shape == (layer.P, layer.P) and m["conv"].shape == (layer.E, layer.E)
    ids = m["pooled"] + s.threads * m["pooled_block"]                 # a thread of one image
    counts = np.bincount(ids.ravel())
    assert (counts == s.PX).all() and len(counts) == s.threads * s.blocks_per_image
    assert m["reads"].sum() == (2 + layer.K - 1) * s.COLS
    assert m["staged"].sum() == s.ROWS * layer.H


def test_lenet_step10_load_count_is_what_the_kernel_issues():
    """The diagram's count: per channel and filter row, COLS / 2 float2 loads from each of two
    input rows and K x M / 4 float4 weight loads. The CPU backend counts a warp-wide request per
    float read (its build loads a float2 or float4 member by member), so it sees 2 and 4 requests
    for those; over every warp, channel and filter row, nothing else reads shared memory."""
    with cpu.counting() as counted:
        gpulab.assert_ok(lenet.CHAPTER.check("cpu", steps=[lenet.CHAPTER.step("10")], sizes=(2,)))
    fused = [launch for launch in counted.launches if launch.kernel == "conv_relu_pool"]
    assert len(fused) == 2
    for launch in fused:
        layer = lenet.CONV1 if launch.grid[0] > 1 else lenet.CONV2
        s, count = le_mapping.shape(layer), le_mapping.loads_per_fma(layer)
        warps = -(-s.threads // 32) * int(np.prod(launch.grid))
        expected = warps * layer.C * layer.K * (2 * count["input loads"] + 4 * count["weight loads"])
        assert launch.totals["shared_load_requests"] == expected, layer.name
    assert 1 / 14 < le_mapping.loads_per_fma(lenet.CONV1)["loads per FMA"] < 1 / 13


def test_convpool_step6_map_pools_whole_windows_in_one_thread():
    m = cp_mapping.step6_maps()
    tile = m["tile"]
    assert sorted(np.bincount(tile.ravel())) == [64] * 256                 # 8 x 8 sums per thread
    for thread in (0, 37, 255):
        rows, cols = np.nonzero(tile == thread)
        assert len(set(rows)) == 8 and len(set(cols)) == 8
        assert all(c % 4 == 0 for c in sorted(set(cols))[::4])             # whole windows: 4q .. 4q + 3
    pixels, windows = m["pixels"], m["pixel_window"]
    for q in range(32):
        assert len(set(pixels[windows == q])) == 1                          # a window has one owner


def test_convpool_step3_reads_are_one_broadcast_and_one_coalesced_request():
    """The diagram's claims, counted: a warp's reads of the staged input are broadcasts (one
    wavefront each), its reads of 32 filters' weights one 4-sector request."""
    shape = convpool.problem.Shape(N=1, C=8, H=4, W=16, M=32)
    with cpu.counting() as counted:
        gpulab.assert_ok(convpool.CHAPTER.check("cpu", steps=[convpool.CHAPTER.step("03")], shape=shape))
    totals = [launch for launch in counted.launches if launch.kernel == "conv_shared_tiles"][0].totals
    assert totals["shared_load_wavefronts"] == totals["shared_load_requests"] > 0
    weights = convpool.views.input_loads(counted.launches, {"03": "conv_shared_tiles"})   # x: staging only
    assert weights.loc["03", "requests"] > 0
    counts = cp_mapping.load_counts()
    assert counts["03"]["FMAs"] == 400 and counts["02"]["loads per FMA"] == pytest.approx(17 / 40)


def test_the_figures_draw():
    for make in (le_mapping.figure, cp_mapping.step3_figure, cp_mapping.step6_figure, cp_mapping.pipeline_figure):
        fig = make("caption")
        assert fig.axes and fig.texts
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_convpool_ring_follows_the_main_loop():
    """Steps 7-8's ring as the header's loop runs it: in iteration t slot t % STAGES holds slice t
    (the tensor cores read it), the slot read in iteration t - 1 is refilled with slice
    t + STAGES - 1, and no slice is in two slots."""
    c = cp_mapping.tc_constants()
    S = c["STAGES"]
    m = cp_mapping.pipeline_maps(iterations=2 * S + 1)
    held = m["slice"]
    assert held.shape == (S, 2 * S + 2) and list(held[:S - 1, 0]) == list(range(S - 1)) and held[S - 1, 0] == -1
    for t in range(2 * S + 1):
        col = held[:, t + 1]
        assert held[m["computed"][:, t + 1], t + 1].tolist() == [t] and col[t % S] == t
        assert held[m["issued"][:, t + 1], t + 1].tolist() == [t + S - 1]
        assert (t == 0 and col[(t + S - 1) % S] == S - 1) or m["computed"][(t - 1) % S, t]   # refills the slot just read
        assert len(set(col[col >= 0])) == (col >= 0).sum()
    copier = m["copier"]
    assert (np.bincount(copier.ravel()) == c["TC_BM"] * c["TC_CHUNKS"] // 8).all()        # 8 warps copy alike
    assert m["reader"].sum() == c["TC_WM"] * c["TC_CHUNKS"]
    assert (m["reader"] & (copier == 0)).sum() * 8 == m["reader"].sum()                   # warp 0 copied 1/8 of its rows


def test_convpool_ring_counts_cover_the_layer_and_move_every_byte_once():
    c, counts = cp_mapping.tc_constants(), cp_mapping.tc_counts()
    for name, n in counts.items():
        size = cp_mapping.TC_TYPES[name]["bytes"]
        assert n["copies per thread"] * c["TC_THREADS"] * 16 == (c["TC_BM"] + c["TC_BN"]) * n["k per slice"] * size
        K = cp_mapping.RS ** 2 * convpool.problem.LAYER.C
        assert (n["slices"] - 1) * n["k per slice"] < K <= n["slices"] * n["k per slice"]
    assert counts["07 tf32"]["slices"] == 2 * counts["08 fp16"]["slices"]


def test_convpool_ring_constants_are_read_from_the_header(tmp_path, monkeypatch):
    assert cp_mapping.tc_constants()["STAGES"] >= 2
    header = tmp_path / "tc.cuh"
    header.write_text("#define STAGES 4\n#define TC_BN 256\n#define TC_BM 128\n#define TC_THREADS 256\n"
                      "#define TC_WM 64\n#define TC_CHUNKS 4\n")
    monkeypatch.setattr(cp_mapping, "TC_HEADER", str(header))
    assert cp_mapping.tc_constants()["TC_WN"] == 64 and cp_mapping.pipeline_maps(3)["slice"].shape == (4, 4)
    header.write_text("#define STAGES 4\n")
    with pytest.raises(ValueError, match="expected '#define TC_BN"):
        cp_mapping.tc_constants()

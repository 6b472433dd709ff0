"""gpulab.sass: the machine code of the basics chapter's divergence kernels, live where NVRTC and
cuobjdump are installed, and the recorded listing the book falls back on."""
import pytest

from gpulab import paths, sass

FILE = "basics/04_divergence.cu"


def _why_not():
    return sass.unavailable()


def test_the_recorded_listing_is_of_the_current_kernel_file():
    listing = sass.load_recorded(FILE)
    assert listing.source_sha256 == sass._sha256(paths.kernel_path(FILE)), \
        "kernels/basics/04_divergence.cu changed: run tools/record_sass.py"
    assert listing.arch == "sm_90" and "NVRTC" in listing.tools and "cuobjdump" in listing.tools
    assert "recorded in labdata/sass/" in listing.caption


@pytest.mark.parametrize("source", ["live", "recorded"])
def test_the_loops_keep_their_branches_and_the_short_branch_is_predicated(source):
    if source == "live" and _why_not():
        pytest.skip(_why_not())
    listing = sass.disassemble(FILE) if source == "live" else sass.load_recorded(FILE)
    table = sass.summary(listing)
    for kernel in ("by_lane", "by_warp"):
        # One branch picks the path, each loop branches back: the warp can really run one path only.
        assert table.loc[kernel, "branches (BRA)"] >= 3, kernel
        assert table.loc[kernel, "reconvergence (BSSY/BSYNC)"] == 2, kernel
        region = sass.between(listing, kernel, "BSSY", "BSYNC")
        assert sum(" FFMA " in f" {line.split(None, 1)[1]} " for line in region) == 2, region
    short = table.loc["short_by_lane"]
    assert short["branches (BRA)"] == 0 and short["reconvergence (BSSY/BSYNC)"] == 0
    assert short["predicated, not branches"] + short["selects (SEL/FSEL)"] >= 1


def test_parse_drops_padding_and_the_final_self_branch():
    text = """
		Function : k
        /*0000*/                   MOV R1, R2 ;                  /* 0x0 */
        /*0010*/               @P0 BRA 0x30 ;                    /* 0x0 */
        /*0020*/                   EXIT ;                        /* 0x0 */
        /*0030*/                   BRA 0x30;                     /* 0x0 */
        /*0040*/                   NOP;                          /* 0x0 */
"""
    assert sass.parse(text) == {"k": [(0, "MOV R1, R2"), (16, "@P0 BRA 0x30"), (32, "EXIT")]}
    assert sass.summary(sass.Listing("f", "sm_90", sass.parse(text), "t", "d", "")).loc["k", "branches (BRA)"] == 1


def test_a_changed_kernel_file_without_tools_is_refused(monkeypatch):
    monkeypatch.setattr(sass, "unavailable", lambda: "no tools here")
    monkeypatch.setattr(sass, "_sha256", lambda path: "0" * 64)
    with pytest.raises(RuntimeError, match="changed since its SASS was recorded.*record_sass"):
        sass.listing(FILE)

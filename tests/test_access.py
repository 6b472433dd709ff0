import numpy as np
import pytest

from gpulab.access import bank_passes, sectors


def test_sectors_of_strided_float_reads():
    lanes = np.arange(32)
    assert [sectors(4 * lanes * s)[0] for s in (1, 2, 4, 8, 32)] == [4, 8, 16, 32, 32]
    assert sectors(np.zeros(32))[0] == 1                      # one address: one sector
    assert sectors(4 * lanes + 2)[0] == 5                     # misaligned by 2 bytes: one more sector
    assert list(sectors(np.stack([4 * lanes, 8 * lanes]))) == [4, 8]   # several warps at once
    assert sectors(16 * lanes, access_bytes=16)[0] == 16      # float4 per lane: 512 bytes


def test_bank_passes():
    lanes = np.arange(32)
    assert bank_passes(lanes)[0] == 1                         # a row of 32 words
    assert bank_passes(32 * lanes)[0] == 32                   # a column of a 32-word-pitch tile
    assert bank_passes(33 * lanes)[0] == 1                    # padded by one word
    assert bank_passes(np.full(32, 5))[0] == 1                # a broadcast
    assert bank_passes(72 * lanes)[0] == 8                    # fcnet W1s rows


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="warps x 32 lanes"):
        sectors(np.zeros((2, 40)))

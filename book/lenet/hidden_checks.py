"""The hidden checks of the lenet chapter's exercises: instructors only (see gpulab.exercises)."""
HIDDEN = {
    "lenet.1b": (
        {"layer": [3, 37, 5], "N": 7},       # a conv side of 31: pooled to 15, the last row and column dropped
        {"layer": [2, 20, 8], "N": 1000},
        {"layer": [1, 8, 1], "N": 3},
    ),
    "lenet.1a": (
        {"sizes": (2, 13), "seed": 9511},
        {"sizes": (33,), "seed": 9613},
    ),
    "lenet.2": (
        {"threads": 96, "blocks": 5},      # 15 warps: 4 to a quarter, 128; one pool of 65,536 would say 136
        {"threads": 100, "blocks": 4},     # 4 warps a block, not 3
        {"threads": 288, "blocks": 3},
        {"threads": 32, "blocks": 33},     # 33 warps fit, but more than 32 blocks: 0
        {"threads": 1024, "blocks": 3},    # 96 warps: 0
        {"threads": 160, "blocks": 7},
        {"threads": 64, "blocks": 3},      # 2 warps to a quarter: 256 would fit, a thread holds 255
    ),
    "lenet.3": ({"random": 7121}, {"random": 7229, "streams": 1}, {"random": 7331}, {"step": "12h", "streams": 3}),
}

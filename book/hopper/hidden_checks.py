"""The hidden checks of the hopper chapter's exercises: instructors only (see gpulab.exercises)."""
HIDDEN = {
    "hopper.1": (
        {"swizzle": 32, "random": 9311},
        {"swizzle": 64, "stride": 16},
        {"swizzle": 0, "random": 9319},
        {"swizzle": 128, "random": 9323, "span": 65536},
    ),
    "hopper.2": (
        {"count": 3, "phases": 5, "tx": 4096, "seed": 9401},
        {"count": 1, "phases": 6, "seed": 9403},
        {"count": 4, "phases": 3, "tx": 50, "seed": 9413},
    ),
}

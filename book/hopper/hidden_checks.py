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
    "hopper.3": (
        # One slice (the ring never wraps), exactly the ring's 5, and 13 (it wraps twice): every parity.
        {"shapes": [(128, 128, 64), (129, 120, 320), (40, 300, 832)], "seed": 9501},
        # The block's threads in reverse and in a shuffled order (the grader shuffles every hidden
        # case's threads as well): a producer that depends on the order the warps run in.
        {"shapes": [(136, 136, 704)], "seed": 9511, "schedule": "reverse"},
        {"shapes": [(96, 200, 456)], "seed": 9521, "schedule": "shuffle"},
    ),
    "hopper.4": (
        {"seed": 9601, "n": 1000, "sigma": 30.0},
        # exact ties between two e4m3 values (normal and subnormal), at scales 2^-5 and 2^7
        {"ties": -5, "seed": 9611, "n": 400},
        {"ties": 7, "seed": 9613, "n": 400},
        {"seed": 9621, "n": 257, "wide": True, "negative_max": True},
        {"zeros": True, "n": 17},
    ),
}

"""The hidden checks of the fcnet chapter's exercises: instructors only (see gpulab.exercises)."""
HIDDEN = {
    "fcnet.1": (
        {"sizes": (1, 17, 4111), "seed": 9151},
        {"sizes": (257,), "seed": 9203},
    ),
    "fcnet.2": (
        {"random": 5101},
        {"random": 5209, "row_halves": 64},
        {"vectors": [0] * 32, "features": list(range(32))},
        {"vectors": [i // 4 for i in range(32)], "features": [i % 4 for i in range(32)], "row_halves": 40},
        {"vectors": list(range(32)), "features": [0] * 32, "row_halves": 64},
    ),
    "fcnet.3": ({"perturb": 6301}, {"perturb": 6407}),
}

"""The hidden checks of the measuring chapter's exercises: instructors only (see gpulab.exercises)."""
HIDDEN = {
    "measuring.1": (
        {"sizes": [2048, 2049, 65_537, 300_007], "seed": 7103},
        {"sizes": [5000, 123_457], "seed": 7211, "step": {"fixed_grid": 3}},
        {"sizes": [17, 4096], "seed": 7307, "step": {"fixed_grid": 1}},
    ),
    "measuring.2": ({"perturb": 6101}, {"perturb": 6203}),
}

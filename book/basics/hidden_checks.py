"""The hidden checks of the basics chapter's exercises: instructors only (see gpulab.exercises)."""
HIDDEN = {
    "basics.1": (
        {"sizes": [2, 256, 257, 5000, 65_539], "seed": 3301},
        {"sizes": [511, 769], "seed": 3413},
    ),
    "basics.2": (
        {"sizes": [(2, 33), (9, 1), (40, 65)], "seed": 3517},
        {"sizes": [(64, 32), (1, 100)], "seed": 3631},
    ),
    "basics.3": (
        {"sizes": [(5003, 7), (300, 1), (2000, 300)], "seed": 3739},
        # Two threads adding to one bin without an atomic: a data race the checker names.
        {"sizes": [(700, 5)], "seed": 3851, "races": True},
    ),
}

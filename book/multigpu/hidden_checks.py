"""The hidden checks of the multigpu chapter's exercises: instructors only (see gpulab.exercises)."""
HIDDEN = {
    "multigpu.1": (
        {"p": 4, "n": 13, "seed": 8101},
        {"p": 5, "n": 3, "seed": 8117},
        {"p": 2, "n": 1, "seed": 8123},
        {"p": 7, "n": 997, "seed": 8147},
    ),
    "multigpu.2": (
        {"fixed_ms": 0.05, "ms_per_doc": 2e-5, "grad_bytes": 4e6, "bw_gbs": 50.0, "alpha_us": 20.0},
        {"fixed_ms": 0.0, "ms_per_doc": 1e-4, "grad_bytes": 16.8e6, "bw_gbs": 450.0, "alpha_us": 0.0},
        {"fixed_ms": 0.01, "ms_per_doc": 3e-5, "grad_bytes": 64e6, "bw_gbs": 25.0, "alpha_us": 10.0,
         "target": 0.6},
        {"fixed_ms": 2.0, "ms_per_doc": 1e-7, "grad_bytes": 16.8e6, "bw_gbs": 300.0, "alpha_us": 6.0},
    ),
}

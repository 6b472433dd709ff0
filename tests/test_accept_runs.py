"""tools/accept_runs.py: a fresh run replaces the committed one only where its cross-check agrees."""
import importlib.util
import json

import pandas as pd

from gpulab.paths import REPO

spec = importlib.util.spec_from_file_location("accept_runs", REPO / "tools" / "accept_runs.py")
accept_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(accept_runs)


def _run(folder, chapter, rows, conditions=True):
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"chapter": chapter, "date": "2026-12-07 14:02 UTC", **({"conditions": {"timing": "queued"}} if conditions else {})}
    (folder / f"{chapter}.meta.json").write_text(json.dumps(meta))
    if rows is not None:
        pd.DataFrame(rows, columns=["variant", "median_ms", "do_bench_ms"]).to_csv(folder / f"{chapter}.crosscheck.csv",
                                                                                  index=False)
    return folder / f"{chapter}.meta.json"


def test_a_run_is_accepted_only_where_every_row_agrees_with_do_bench(tmp_path):
    gpu = tmp_path / "nvidia-h100-80gb-hbm3"
    good = _run(gpu, "fcnet", [("a", 1.00, 1.02), ("b", 0.0050, 0.0056)])       # 2%; 0.6 us on a 5 us call
    assert accept_runs.judge(good) == (True, "2 of 2 rows agree")
    off = _run(gpu, "lenet", [("a", 1.00, 1.05), ("b", 2.0, 2.0)])
    passed, why = accept_runs.judge(off)
    assert not passed and why.startswith("1 of 2 rows off do_bench")
    unchecked = _run(gpu, "convpool", [("a", 1.0, float("nan"))])
    assert not accept_runs.judge(unchecked)[0]
    assert accept_runs.judge(_run(gpu, "training", None))[1] == "no crosscheck.csv"
    assert not accept_runs.judge(_run(gpu, "alexnet", [("a", 1.0, 1.0)], conditions=False))[0]

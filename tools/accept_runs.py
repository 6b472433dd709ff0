"""Which freshly recorded runs may replace the committed ones: each chapter's cross-check
(``<chapter>.crosscheck.csv``) must agree with do_bench on every row (``timing.crosscheck_agrees``,
the criterion tests/test_runs.py holds every queued run in labdata/runs/ to), and the record must
have written its meta. Prints one line per run; with ``--apply`` copies each passing run's files
into labdata/runs/<gpu>/ (replacing the chapter's files there) and each failing one's into
labdata/trials/<date>-rejected/<gpu>/, with the rows that did not agree.

    tar xzf runs.tgz -C /tmp/new && PYTHONPATH=. python tools/accept_runs.py /tmp/new/runs [--apply]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpulab import paths, timing  # noqa: E402


def judge(meta_file: Path) -> tuple[bool, str]:
    """(whether the run meets the cross-check, what to say of it)."""
    chapter = meta_file.name.split(".")[0]
    meta = json.loads(meta_file.read_text())
    table = meta_file.with_name(f"{chapter}.crosscheck.csv")
    if chapter == "multigpu":
        return True, "no cross-check (its workers time themselves on two GPUs)"
    if "conditions" not in meta:
        return False, "not recorded by the queued loop (no conditions in its meta)"
    if not table.is_file():
        return False, "no crosscheck.csv"
    checked = pd.read_csv(table)
    if checked.empty or checked["do_bench_ms"].isna().any():
        failed = checked[checked["do_bench_ms"].isna()]
        notes = "; ".join(str(n) for n in failed.get("crosscheck_note", pd.Series(dtype=str)).dropna().unique()[:2])
        return False, f"{len(failed)} of {len(checked)} rows not cross-checked ({notes[:200]})"
    off = timing.crosscheck_disagreements(checked)
    if len(off):
        worst = (off["median_ms"] / off["do_bench_ms"] - 1).abs().max()
        return False, f"{len(off)} of {len(checked)} rows off do_bench (largest {worst:.1%})"
    return True, f"{len(checked)} of {len(checked)} rows agree"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="a folder of <gpu>/<chapter>.* files, as `gpulab record --out` writes")
    parser.add_argument("--apply", action="store_true", help="copy them into labdata/runs or labdata/trials")
    args = parser.parse_args(argv)
    found = sorted(args.runs.glob("*/*.meta.json"))
    if not found:
        print(f"no runs under {args.runs} (expected <gpu>/<chapter>.meta.json)")
        return 1
    for meta_file in found:
        chapter, gpu = meta_file.name.split(".")[0], meta_file.parent.name
        passed, why = judge(meta_file)
        print(f"{gpu}/{chapter}: {'ACCEPT' if passed else 'reject'}: {why}")
        if not args.apply:
            continue
        date = json.loads(meta_file.read_text()).get("date", "undated")[:10]
        dest = paths.REPO / "labdata" / ("runs" if passed else f"trials/{date}-rejected") / gpu
        dest.mkdir(parents=True, exist_ok=True)
        if passed:
            for old in dest.glob(f"{chapter}.*"):
                old.unlink()
        for f in meta_file.parent.glob(f"{chapter}.*"):
            shutil.copy2(f, dest / f.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())

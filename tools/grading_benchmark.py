"""What grading the sample submissions costs, here against an earlier commit (issue 38's budget:
at most 1.2x what it cost on main when the issue was filed, 979cca8).

Each revision grades its own sample submissions (tests/fixtures/grading/submissions) with its own
grader (``python -m gpulab grade``, the sandbox on), in a worktree of its own, with this checkout's
``.venv``; the two are run alternately, ``--repeats`` times each, so that a machine growing busier
favours neither. Per run: the wall time and the CPU time of everything the grader started (its
sandboxed children included: the machine's busy CPU time over the run, from /proc/stat, since a
child in bubblewrap's PID namespace is reaped there, not by the grader; run it on an otherwise idle
machine), and the (student, exercise) rows it wrote, so that exercises added
since the base can be told apart from a grader grown slower. Writes ``grading_cost.csv`` to
``--out`` and prints the medians and their ratios.

Usage: PYTHONPATH=. .venv/bin/python tools/grading_benchmark.py [--base 979cca8] [--repeats 3] [--out DIR]
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBMISSIONS = Path("tests/fixtures/grading/submissions")


def worktree(rev: str, where: Path) -> Path:
    """A detached worktree of ``rev`` under ``where`` (HEAD: this checkout's committed tree, so
    that uncommitted edits are not what is measured)."""
    path = where / rev.replace("/", "_")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(path), rev], check=True,
                   capture_output=True)
    return path


def busy_cpu_seconds() -> float:
    """The machine's CPU time spent not idle since boot (user, nice, system, irq, softirq; /proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def grade_once(tree: Path, out: Path, jobs: int | None) -> dict:
    """One ``gpulab grade`` of ``tree``'s sample submissions: wall and children's CPU seconds, rows."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("GPULAB_BACKEND", None)
    grades = out / "grades.csv"
    command = [sys.executable, "-m", "gpulab", "grade", str(tree / SUBMISSIONS), "--out", str(grades)]
    if jobs:
        command += ["--jobs", str(jobs)]
    busy = busy_cpu_seconds()
    start = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    busy = busy_cpu_seconds() - busy
    if done.returncode not in (0, 1):            # 1: some submission is not at full marks
        raise SystemExit(f"grade failed in {tree} (exit {done.returncode}):\n{done.stderr[-3000:]}")
    with open(grades, newline="") as f:
        rows = sum(1 for _ in csv.DictReader(f))
    return {"wall_s": wall, "cpu_s": busy, "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="979cca8", help="the revision compared with HEAD")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=None, help="gpulab grade --jobs (default: its own)")
    parser.add_argument("--out", type=Path, default=None, help="folder for grading_cost.csv (default: print only)")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trees = {}
        try:
            for rev in (args.base, "HEAD"):
                trees[rev] = worktree(rev, tmp)
            commits = {rev: subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], check=True,
                                           capture_output=True, text=True).stdout.strip() for rev, tree in trees.items()}
            for repeat in range(args.repeats):
                for rev, tree in (trees.items() if repeat % 2 == 0 else reversed(trees.items())):
                    out = tmp / f"out-{rev}-{repeat}"
                    out.mkdir()
                    row = {"revision": rev, "commit": commits[rev], "repeat": repeat, **grade_once(tree, out, args.jobs)}
                    results.append(row)
                    print(f"{rev} ({commits[rev]}) run {repeat}: {row['wall_s']:.1f} s wall, {row['cpu_s']:.1f} s CPU, "
                          f"{row['rows']} rows", flush=True)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
    med = {rev: {k: statistics.median(r[k] for r in results if r["revision"] == rev) for k in ("wall_s", "cpu_s", "rows")}
           for rev in (args.base, "HEAD")}
    base, head = med[args.base], med["HEAD"]
    print(f"median wall: {base['wall_s']:.1f} s -> {head['wall_s']:.1f} s ({head['wall_s'] / base['wall_s']:.2f}x); "
          f"CPU {base['cpu_s']:.1f} s -> {head['cpu_s']:.1f} s ({head['cpu_s'] / base['cpu_s']:.2f}x); "
          f"rows {base['rows']:.0f} -> {head['rows']:.0f}; CPU per row "
          f"{base['cpu_s'] / base['rows']:.2f} s -> {head['cpu_s'] / head['rows']:.2f} s "
          f"({(head['cpu_s'] / head['rows']) / (base['cpu_s'] / base['rows']):.2f}x)")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        with open(args.out / "grading_cost.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(results[0]))
            writer.writeheader()
            writer.writerows(results)
        (args.out / "machine.txt").write_text(f"{os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
                                              f"python {sys.version.split()[0]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

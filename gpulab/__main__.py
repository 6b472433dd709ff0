"""Command line: ``python -m gpulab info | runs | record [CHAPTER ...] | profile-driver CHAPTER | student DEST |
grade SUBMISSIONS``."""
from __future__ import annotations

import argparse
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpulab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="describe this machine's GPU (or why there is none) and software")
    sub.add_parser("runs", help="list the recorded runs in labdata/runs/")
    record = sub.add_parser("record", help="run chapters' benchmarks on the GPU and write labdata/runs/")
    record.add_argument("chapters", nargs="*", help="chapter names (default: all)")
    record.add_argument("--repeats", type=int, default=100, help="timed repeats per region")
    record.add_argument("--quick", action="store_true", help="fewer sizes (a smoke test; not for committing)")
    record.add_argument("--out", default=None, help="write under this folder instead of labdata/runs")
    record.add_argument("--budget-s", type=float, default=None,
                        help="seconds for each chapter's run: an optional experiment not started by then is "
                             "skipped, and the run lists it (default: the chapter's own budget, if any)")
    driver = sub.add_parser("profile-driver", help="launch a chapter's profiled kernels once: the child process "
                                                   "Nsight Compute watches (gpulab.profiler.driver names it)")
    driver.add_argument("chapter", help="a chapter with a workload that defines profile_driver")
    driver.add_argument("options", nargs="*", help="passed to the chapter's profile_driver (fcnet: the case)")
    student = sub.add_parser("student", help="copy the lab to a new folder with every solution stripped")
    student.add_argument("dest", help="a new, empty folder")
    grade = sub.add_parser("grade", help="grade a folder of student submissions (one sub-folder per student)")
    grade.add_argument("submissions", help="a folder with one copy of the student version per student")
    grade.add_argument("--out", default="grades.csv", help="the grades, one row per student and exercise")
    grade.add_argument("--feedback", default=None, help="folder for the per-student feedback files "
                       "(default: next to --out, named <out>-feedback)")
    grade.add_argument("--time-limit", type=float, default=60.0,
                       help="CPU seconds per student and exercise (a child that waits instead is stopped "
                            "after --wall-factor times as long)")
    grade.add_argument("--wall-factor", type=float, default=None,
                       help="a child that waits instead of computing is stopped once the grader has waited "
                            "this many times --time-limit for it (default 6: generous, for a busy machine); one "
                            "that computes nothing, 15 s after this many times the CPU time it used")
    grade.add_argument("--launch-limit", type=float, default=None,
                       help="CPU seconds one launch of a student's kernel may compute (default: the CPU "
                            "backend's own, 30 s)")
    grade.add_argument("--unsafe-no-sandbox", action="store_true",
                       help="run submissions' code without a sandbox, as your user, beside your files and "
                            "the hidden checks (only for code you trust)")
    grade.add_argument("--backend", choices=("cpu", "gpu"), default="cpu",
                       help="where kernels run (cpu: bounds checking on; the default)")
    grade.add_argument("--exercise", action="append", help="grade only this exercise (repeatable)")
    grade.add_argument("--jobs", type=int, default=None, help="exercises graded at once")
    sub.add_parser("exercises", help="list the exercises (id, chapter, points, what the student edits)")
    site = sub.add_parser("site", help="build the book's website: the student version (no solution) unless "
                                       "--solutions; into _build/student/html or _build/solutions/html")
    site.add_argument("--solutions", action="store_true", help="the instructors' site, with solutions")
    site.add_argument("--repository", default=None,
                      help="the repository's URL, for launch (Colab) and repository buttons; without it, none")
    site.add_argument("--branch", default=None, help="the branch the Colab buttons open (default: student; main with --solutions)")
    site.add_argument("--no-execute", action="store_true", help="do not run the notebooks (a quick look)")
    site.add_argument("--lenient", action="store_true", help="do not treat warnings as errors")
    args = parser.parse_args(argv)

    if args.command == "grade":
        from .grading import grade
        grades = grade(args.submissions, args.out, args.feedback, args.time_limit, args.backend,
                       args.exercise, args.jobs, progress=lambda line: print(line, flush=True),
                       unsafe_no_sandbox=args.unsafe_no_sandbox, wall_factor=args.wall_factor,
                       launch_limit=args.launch_limit)
        totals = grades.groupby("student")[["points", "max_points"]].sum()
        print(totals.to_string())
        print(f"grades: {args.out} (sha256 {grades.attrs['sha256']})")
        print(f"digests of every file read: {grades.attrs['files']}")
        return 0
    if args.command == "site":
        from .site import build
        html = build(args.solutions, args.repository, args.branch, not args.no_execute, not args.lenient)
        print(f"{'instructors' if args.solutions else 'student'} site: {html}/index.html")
        return 0
    if args.command == "exercises":
        from .exercises import table
        print(table().to_string(index=False))
        return 0

    from . import device, recorder, runs
    from .chapters import names
    from .workloads import workload

    if args.command == "info":
        for key, value in device.describe().items():
            print(f"{key:>18}: {value}")
        return 0
    if args.command == "profile-driver":
        module = workload(args.chapter)
        if not hasattr(module, "profile_driver"):
            raise KeyError(f"chapter '{args.chapter}' has no profile_driver: nothing of it is profiled")
        module.profile_driver(*args.options)
        return 0
    if args.command == "runs":
        print(runs.available_runs().to_string(index=False))
        return 0
    if args.command == "student":
        from .student import make_student_version
        changed = make_student_version(args.dest)
        print(f"student version in {args.dest}: solutions stripped from {len(changed)} files")
        for path in changed:
            print(f"  {path}")
        return 0

    from pathlib import Path
    modules = {chapter: workload(chapter) for chapter in (args.chapters or names(with_workload=True))}
    # A chapter that needs several GPUs (multigpu) fails clearly when named, and
    # is left out, with a note, when every chapter is recorded on a smaller machine.
    for chapter, module in list(modules.items()):
        needed = getattr(module, "GPUS_NEEDED", 1)
        if needed > 1 and device.gpu_count() < needed:
            if args.chapters:
                raise device.NoGPUError(f"chapter '{chapter}' needs {needed} GPUs, found {device.gpu_count()}; "
                                        f"record it on a machine with {needed}: python -m gpulab record {chapter}")
            print(f"{chapter}: left out (needs {needed} GPUs, found {device.gpu_count()})")
            del modules[chapter]
    device.require_gpu("python -m gpulab record")
    failed = 0
    for chapter, module in modules.items():
        start = time.perf_counter()
        path, rows, failures = recorder.record(chapter, module.benchmark_all, repeats=args.repeats,
                                         quick=args.quick, budget_s=args.budget_s,
                                         root=Path(args.out) if args.out else None)
        print(f"{chapter}: {rows} rows in {time.perf_counter() - start:.0f} s -> {path}")
        if failures:
            print(f"{chapter}: {failures} check(s) FAILED: those steps are not timed (see {path.stem}.skipped.csv)",
                  file=sys.stderr)
        failed += failures
    return 1 if failed else 0


def run(argv=None) -> int:
    """``main`` with the lab's own errors printed as one clear line, not a traceback."""
    from .errors import GpulabError
    try:
        return main(argv)
    except (GpulabError, KeyError, FileExistsError, ValueError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run())

"""What each chapter teaches and what it uses, so that no chapter uses an idea the book teaches
only later (in the toc's order: :mod:`gpulab.chapters`).

Each :class:`Concept` is taught in one chapter: its ``label`` is the first column of the basics
chapter's table "Where each idea is introduced", whose second column names that chapter first.
Each chapter declares what it uses of the concepts other chapters teach (:data:`USES`). A
concept's ``marks`` are what a kernel's code contains when it uses the concept (regular
expressions, matched with the comments removed, in the chapter's own ``.cu`` files and every
header they include): a chapter whose kernels carry a mark must declare the concept, as taught
or as used, so the declarations cannot drift from the code. ``tests/test_concept_order.py``
holds all of this to the toc, the kernels and the basics table.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from . import chapters, paths


@dataclass(frozen=True)
class Concept:
    key: str
    label: str            # the row of basics' table "Where each idea is introduced"
    taught_in: str        # the chapter that explains it first
    marks: tuple = ()     # regular expressions: a kernel carrying one uses the concept


CONCEPTS = (
    Concept("launch", "threads, blocks, grids, warps; a launch from Python", "basics"),
    Concept("blocks_2d", "2-D blocks and their warps", "basics"),
    Concept("memory", "registers, shared memory, L1/L2, device memory; sectors and coalescing", "basics"),
    Concept("banks", "shared-memory banks and conflicts", "basics"),
    Concept("occupancy", "occupancy", "basics"),
    Concept("divergence", "divergence and predication", "basics"),
    Concept("constant", "constant memory", "basics", (r"__constant__",)),
    Concept("atomics", "atomics, a tree reduction in shared memory", "basics", (r"\batomic[A-Z]\w*\s*\(",)),
    Concept("shuffles", "warp shuffles", "basics", (r"__shfl\w*_sync\b",)),
    Concept("restrict", "`__restrict__`; read-only loads", "basics", (r"__restrict__",)),
    Concept("counters", "the profiler's counters", "basics"),
    Concept("events", "CUDA events, warm-up, the spread of timings", "measuring"),
    Concept("graphs", "launch overhead and CUDA graphs", "measuring"),
    Concept("float4", "16-byte (`float4`) accesses", "measuring"),
    Concept("host_memory", "pageable, pinned and managed memory; streams", "measuring"),
    Concept("roofline", "the roofline, measured ceilings", "measuring"),
    Concept("grid_stride", "grid-stride loops", "measuring"),
    Concept("half", "half precision", "fcnet", (r"\b__half2?\b", r"__float2half")),
    Concept("register_tiles", "register tiles", "fcnet"),
    Concept("tensor_cores", "tensor cores: `wmma`, `mma.sync`; tf32", "fcnet", (r"\bwmma::", r"\bmma\.sync\.")),
    Concept("ldmatrix_cp_async", "`ldmatrix` and `cp.async`", "fcnet",
            (r"\bldmatrix\.", r"\bcp\.async\.(?:c[ag]\.|commit_group|wait_group)")),
    Concept("im2col", "im2col, implicit GEMM", "alexnet"),
    Concept("split_k", "split-K", "alexnet"),
    Concept("swizzle", "swizzled shared memory", "alexnet"),
    Concept("winograd", "Winograd convolution", "alexnet"),
    Concept("tma", "the tensor memory accelerator (TMA): tensor maps, bulk copies", "hopper",
            (r"\bcp\.async\.bulk\.tensor\.",)),
    Concept("mbarrier", "mbarriers: arrivals, transaction bytes, phase parity", "hopper", (r"\bmbarrier\.",)),
    Concept("wgmma", "`wgmma`, warpgroups, shared-memory matrix descriptors", "hopper", (r"\bwgmma\.",)),
    Concept("warp_specialization", "warp specialization: producer and consumer warpgroups, `setmaxnreg`",
            "hopper", (r"\bsetmaxnreg\.",)),
    Concept("async_proxy", "the async proxy (`fence.proxy.async`), TMA stores", "hopper",
            (r"\bfence\.proxy\.async\b",)),
    Concept("clusters", "thread-block clusters, distributed shared memory, TMA multicast", "hopper",
            (r"__cluster_dims__", r"%cluster_ctarank", r"\bbarrier\.cluster\.", r"\bmapa\.", r"multicast::cluster")),
    Concept("launch_bounds", "`__launch_bounds__`", "lenet", (r"__launch_bounds__",)),
    Concept("fused_epilogues", "fused epilogues", "lenet"),
    Concept("streams_concurrent", "concurrent kernels on streams", "training"),
    Concept("nccl", "NCCL, all-reduce, the ring", "multigpu"),
    Concept("sweeps", "sweeping the launch shape", "convpool"),
)
CONCEPT = {c.key: c for c in CONCEPTS}

#: What each chapter uses of the concepts other chapters teach (every chapter uses basics'
#: threads, blocks and memories; only what its kernels or its prose lean on is listed).
USES = {
    "basics": (),
    "measuring": ("launch", "memory", "restrict"),
    "fcnet": ("memory", "banks", "occupancy", "shuffles", "restrict", "events", "graphs", "float4", "counters",
              "roofline", "launch_bounds"),
    "alexnet": ("memory", "banks", "occupancy", "atomics", "restrict", "counters", "float4", "host_memory",
                "roofline", "half", "register_tiles", "tensor_cores", "ldmatrix_cp_async", "launch_bounds"),
    "hopper": ("restrict", "half", "tensor_cores", "ldmatrix_cp_async", "swizzle", "counters", "roofline",
               "launch_bounds"),
    "alexnet_hopper": ("restrict", "half", "tensor_cores", "ldmatrix_cp_async", "im2col", "swizzle", "winograd",
                       "tma", "mbarrier", "wgmma", "warp_specialization", "async_proxy", "clusters", "counters",
                       "launch_bounds"),
    "lenet": ("constant", "atomics", "shuffles", "restrict", "host_memory", "graphs", "half", "register_tiles",
              "tensor_cores", "ldmatrix_cp_async", "im2col", "wgmma", "counters"),
    "training": ("atomics", "shuffles", "restrict", "graphs", "half", "register_tiles", "tensor_cores", "split_k",
                 "fused_epilogues", "launch_bounds"),
    "multigpu": ("atomics", "shuffles", "restrict", "graphs", "streams_concurrent", "launch_bounds"),
    "convpool": ("restrict", "occupancy", "shuffles", "half", "float4", "tensor_cores", "ldmatrix_cp_async",
                 "im2col", "fused_epilogues", "launch_bounds", "tma", "mbarrier", "wgmma", "warp_specialization",
                 "async_proxy", "clusters"),
}

#: Uses before the teaching chapter that the book has not fixed yet, each with what is wrong.
#: tests/test_concept_order.py fails on any other, and on an entry that is no longer a gap.
KNOWN_GAPS = {
    ("fcnet", "launch_bounds"): "fcnet's kernels write __launch_bounds__ from step 5 on (one argument, and two "
                                "from step 15: a minimum of resident blocks), which its prose never explains; "
                                "lenet's step 10 and Exercise 2 explain it",
    ("alexnet", "launch_bounds"): "alexnet's kernels write __launch_bounds__ from step 14 on, unexplained; "
                                  "lenet's step 10 explains it",
    ("hopper", "launch_bounds"): "hopper's kernels write __launch_bounds__(384, 1), unexplained; lenet's step 10 "
                                 "explains it",
    ("alexnet_hopper", "launch_bounds"): "its kernels write __launch_bounds__(384, 1), unexplained; lenet's "
                                         "step 10 explains it",
}

#: The kernel files a chapter takes from another chapter's folder (each ``.cu`` file belongs to one
#: chapter: its folder's, unless taken here): the second AlexNet chapter runs the steps of the
#: alexnet package that come after the hopper chapter.
def _alexnet_hopper_files() -> tuple:
    from .workloads import alexnet
    return tuple(alexnet.CHAPTER.step(n).file for n in alexnet.CHAPTER_STEPS["alexnet_hopper"])


TAKES = {"alexnet_hopper": _alexnet_hopper_files}


def taught_by(chapter: str) -> tuple:
    """The keys of the concepts ``chapter`` teaches, in :data:`CONCEPTS` order."""
    return tuple(c.key for c in CONCEPTS if c.taught_in == chapter)


def declared(chapter: str) -> set:
    """Every concept ``chapter`` declares: taught there or used."""
    return set(taught_by(chapter)) | set(USES.get(chapter, ()))


def order_problems(order: list | None = None) -> list:
    """(chapter, concept key, the chapter that teaches it) for each concept a chapter uses before,
    in ``order`` (default: the toc's), the chapter that teaches it; a teacher outside ``order``
    counts as after every chapter."""
    order = chapters.names() if order is None else list(order)
    place = {name: i for i, name in enumerate(order)}
    problems = []
    for chapter in order:
        for key in USES.get(chapter, ()):
            teacher = CONCEPT[key].taught_in
            if place.get(teacher, len(order)) > place[chapter]:
                problems.append((chapter, key, teacher))
    return problems


# ------------------------------------------------------------------ what the kernels use
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def code_without_comments(text: str) -> str:
    return _COMMENT.sub(" ", text)


def _relative(path: Path) -> str:
    return path.resolve().relative_to(paths.KERNELS.resolve()).as_posix()


def kernel_files(chapter: str) -> list:
    """The ``.cu`` files of ``chapter`` (relative to ``kernels/``): ``kernels/<chapter>/*.cu``, less
    those another chapter takes (:data:`TAKES`), plus those it takes."""
    taken = {name: set(find()) for name, find in TAKES.items()}
    if chapter in taken:
        return sorted(taken[chapter])
    others = set().union(*taken.values()) if taken else set()
    return sorted(f for f in (_relative(p) for p in (paths.KERNELS / chapter).glob("*.cu")) if f not in others)


@functools.lru_cache(maxsize=None)
def _closure(relative: str) -> tuple:
    """``relative`` and every header of the lab it includes, directly or not (as the compiler
    finds them: beside the including file, then under ``kernels/``)."""
    seen, todo = [], [relative]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.append(name)
        path = paths.KERNELS / name
        for included in _INCLUDE.findall(path.read_text()):
            for candidate in (path.parent / included, paths.KERNELS / included):
                if candidate.is_file():
                    todo.append(_relative(candidate))
                    break
    return tuple(seen)


def marked(chapter: str) -> dict:
    """{concept key: [kernel file or header, ...]} for each concept whose marks ``chapter``'s
    kernels carry (comments removed), each file named once, relative to ``kernels/``."""
    files = sorted({f for cu in kernel_files(chapter) for f in _closure(cu)})
    code = {f: code_without_comments((paths.KERNELS / f).read_text()) for f in files}
    found = {}
    for concept in CONCEPTS:
        where = [f for f in files if any(re.search(mark, code[f]) for mark in concept.marks)]
        if where:
            found[concept.key] = where
    return found


def undeclared(chapter: str) -> dict:
    """The concepts ``chapter``'s kernels use that it does not declare, with the files."""
    return {key: files for key, files in marked(chapter).items() if key not in declared(chapter)}

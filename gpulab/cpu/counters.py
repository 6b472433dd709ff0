"""Memory-access counters and data races from the CPU backend's instrumented builds.

    with cpu.counting() as counted:
        matmul(grid, block, args)
    counted.launches[0].totals          # sectors per request, bank conflicts, ...
    counted.launches[0].by_line         # the same, per source line

A launch inside ``counting()`` (or under ``checking(races=True)``) runs the
kernel compiled with a hook before every load and store and at every basic
block (see instrument.cpp).  Each lane's k-th execution of one instruction is
grouped with the other lanes' into a warp-level request, as the hardware does;
a request to global memory touches some 32-byte sectors, one to shared memory
takes some wavefronts through the 32 banks (a word read by several lanes is
broadcast, not a conflict), one to ``__constant__`` memory reads some distinct
addresses (the constant cache serves one per pass), and an atomic request
updates its busiest address from some lanes (one after the other).
"""
from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import subprocess
from dataclasses import dataclass, field

import pandas as pd

MAX_SITES = 4096
_GLOBAL = 1  # instrument.cpp's Space
MAX_RACES = 16
_RAW = ("gld_req", "gld_sect", "gst_req", "gst_sect", "sld_req", "sld_wave", "sld_ideal", "sst_req", "sst_wave",
        "sst_ideal", "atom_req", "bb_steps", "bb_divergent", "bb_lanes", "const_req", "const_addr", "atom_upd_req",
        "atom_lanes", "atom_most")

#: The counters, per launch and per line, in the names the profiler's tables use.
COLUMNS = ("global_load_requests", "global_load_sectors", "global_store_requests", "global_store_sectors",
           "shared_load_requests", "shared_load_wavefronts", "shared_load_bank_conflicts",
           "shared_store_requests", "shared_store_wavefronts", "shared_store_bank_conflicts",
           "atomic_requests", "atomic_update_requests", "atomic_updates", "atomic_busiest_address_updates",
           "constant_load_requests",
           "constant_load_addresses", "warp_steps", "divergent_warp_steps")


class _Site(ctypes.Structure):
    _fields_ = [("pc", ctypes.c_ulonglong), ("count", ctypes.c_ulonglong * len(_RAW))]


class _Race(ctypes.Structure):
    _fields_ = [("space", ctypes.c_int), ("argument", ctypes.c_int), ("index", ctypes.c_longlong),
                ("pc", ctypes.c_ulonglong * 2), ("write", ctypes.c_int * 2),
                ("block", (ctypes.c_uint * 3) * 2), ("thread", (ctypes.c_uint * 3) * 2)]


class _Counts(ctypes.Structure):
    _fields_ = [("enabled", ctypes.c_int), ("races_enabled", ctypes.c_int), ("nraces", ctypes.c_int),
                ("sites_overflowed", ctypes.c_int), ("site", _Site * MAX_SITES), ("race", _Race * MAX_RACES)]


@dataclass
class Race:
    """Two conflicting accesses: ``space`` "global" or "shared", ``where`` the
    element or shared-memory byte, then (line, thread, block, write) of each."""

    space: str
    where: str
    first: dict
    second: dict

    def __str__(self) -> str:
        def one(a):
            verb = "wrote" if a["write"] else "read"
            return f"thread {_dim(a['thread'])} of block {_dim(a['block'])} {verb} it at {a['line']}"
        order = ("no __syncthreads() between them" if self.space == "shared" or self.first["block"] == self.second["block"]
                 else "different blocks, which nothing orders")
        return (f"data race on {self.where} ({self.space} memory): {one(self.first)}, and {one(self.second)}; "
                f"{order}, and they are not both atomic")


@dataclass
class LaunchCounters:
    """One launch's counters: ``totals`` (a Series) and ``by_line`` (a DataFrame
    indexed by source line), and the data races found (race checking only)."""

    kernel: str
    grid: tuple
    block: tuple
    by_line: pd.DataFrame
    races: list = field(default_factory=list)

    @property
    def totals(self) -> pd.Series:
        total = self.by_line[list(COLUMNS)].sum()
        return with_ratios(total)

    def race_report(self) -> str:
        more = f" ({len(self.races) - 1} more pair{'s' if len(self.races) > 2 else ''} of lines race too)" \
            if len(self.races) > 1 else ""
        return f"kernel '{self.kernel}': {self.races[0]}{more}"


def with_ratios(row: pd.Series) -> pd.Series:
    """Add sectors per request, bank conflicts per shared request, the
    share of warp steps taken by only part of a warp, the constant cache's passes
    per request (distinct addresses) and the updates of an atomic request's
    busiest address."""
    row = row.astype(float)
    row["sectors_per_request"] = row["global_load_sectors"] / row["global_load_requests"] \
        if row["global_load_requests"] else float("nan")
    row["store_sectors_per_request"] = row["global_store_sectors"] / row["global_store_requests"] \
        if row["global_store_requests"] else float("nan")
    shared = row["shared_load_requests"] + row["shared_store_requests"]
    row["bank_conflicts_per_shared_request"] = \
        (row["shared_load_bank_conflicts"] + row["shared_store_bank_conflicts"]) / shared if shared else float("nan")
    row["divergent_share"] = row["divergent_warp_steps"] / row["warp_steps"] if row["warp_steps"] else float("nan")
    row["constant_passes_per_request"] = row["constant_load_addresses"] / row["constant_load_requests"] \
        if row["constant_load_requests"] else float("nan")
    row["atomic_busiest_address_per_request"] = \
        row["atomic_busiest_address_updates"] / row["atomic_update_requests"] if row["atomic_update_requests"] else float("nan")
    return row


class Collector:
    """What :func:`counting` yields: the launches counted inside it."""

    def __init__(self):
        self.launches: list[LaunchCounters] = []

    def add(self, launch: LaunchCounters) -> None:
        self.launches.append(launch)

    def table(self) -> pd.DataFrame:
        """One row per launch: its totals and ratios."""
        rows = [{"kernel": c.kernel, "grid": c.grid, "block": c.block, **c.totals.to_dict()} for c in self.launches]
        return pd.DataFrame(rows)


_active: contextvars.ContextVar[Collector | None] = contextvars.ContextVar("gpulab_cpu_counting", default=None)


def active() -> Collector | None:
    return _active.get()


@contextlib.contextmanager
def counting():
    """Count the memory accesses of the CPU-backend launches inside the block
    (they run an instrumented build: several times slower)."""
    collector = Collector()
    token = _active.set(collector)
    try:
        yield collector
    finally:
        _active.reset(token)


@functools.lru_cache(maxsize=64)
def _source_lines(library: str, offsets: tuple[int, ...]) -> tuple[str, ...]:
    """``file:line`` of each code offset in the shared object (addr2line)."""
    if not offsets:
        return ()
    try:
        out = subprocess.run(["addr2line", "-e", library, *[hex(o) for o in offsets]],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        out = []
    if len(out) != len(offsets):
        return tuple(f"{library}+{hex(o)}" for o in offsets)
    return tuple(line.split(" (discriminator")[0].strip() for line in out)


def read(buffer, function, grid, block, names) -> LaunchCounters:
    """The counters of one launch from the record the worker process left."""
    counts = _Counts.from_buffer_copy(buffer)
    sites = [s for s in counts.site if s.pc] if counts.enabled else []   # a race check alone counts nothing
    races = list(counts.race[:min(counts.nraces, MAX_RACES)])
    # The return address of a hook is just after the call: look up the call itself.
    offsets = sorted({s.pc - 1 for s in sites} | {pc - 1 for r in races for pc in r.pc})
    where = {o: _shown(loc, function.module.filename)
             for o, loc in zip(offsets, _source_lines(str(function.module.path), tuple(offsets)))}
    rows = {}
    for s in sites:
        line = where[s.pc - 1]
        raw = dict(zip(_RAW, s.count))
        acc = rows.setdefault(line, dict.fromkeys(COLUMNS, 0))
        acc["global_load_requests"] += raw["gld_req"]
        acc["global_load_sectors"] += raw["gld_sect"]
        acc["global_store_requests"] += raw["gst_req"]
        acc["global_store_sectors"] += raw["gst_sect"]
        acc["shared_load_requests"] += raw["sld_req"]
        acc["shared_load_wavefronts"] += raw["sld_wave"]
        acc["shared_load_bank_conflicts"] += raw["sld_wave"] - raw["sld_ideal"]
        acc["shared_store_requests"] += raw["sst_req"]
        acc["shared_store_wavefronts"] += raw["sst_wave"]
        acc["shared_store_bank_conflicts"] += raw["sst_wave"] - raw["sst_ideal"]
        acc["atomic_requests"] += raw["atom_req"]
        acc["atomic_update_requests"] += raw["atom_upd_req"]
        acc["atomic_updates"] += raw["atom_lanes"]
        acc["atomic_busiest_address_updates"] += raw["atom_most"]
        acc["constant_load_requests"] += raw["const_req"]
        acc["constant_load_addresses"] += raw["const_addr"]
        acc["warp_steps"] += raw["bb_steps"]
        acc["divergent_warp_steps"] += raw["bb_divergent"]
    table = pd.DataFrame.from_dict(rows, orient="index", columns=list(COLUMNS)).rename_axis("line")
    table = table[(table != 0).any(axis=1)]
    table = table.loc[sorted(table.index, key=_line_order)]
    found = []
    for r in races:
        if r.space == _GLOBAL:
            name = names[r.argument] if 0 <= r.argument < len(names) else "a __device__ variable"
            spot = f"{name}[{r.index}]" if r.argument >= 0 else name
        elif r.index >= 0:
            spot = f"byte {r.index} of the dynamic shared memory"
        else:
            spot = "a __shared__ variable"
        accesses = [{"line": where[r.pc[i] - 1], "write": bool(r.write[i]),
                     "thread": tuple(r.thread[i]), "block": tuple(r.block[i])} for i in range(2)]
        found.append(Race("global" if r.space == _GLOBAL else "shared", spot, *accesses))
    return LaunchCounters(kernel=function.name, grid=tuple(grid), block=tuple(block), by_line=table, races=found)


def _dim(value) -> str:
    return "(" + ",".join(str(v) for v in value) + ")"


def _shown(location: str, filename: str) -> str:
    """``file:line`` with the kernel's file named as the user named it."""
    path, _, line = location.rpartition(":")
    if path == filename or path.endswith("/" + filename.lstrip("./")):
        path = filename
    elif "/gpulab/cpu/include/" in "/" + path:   # relative when the lab's folder was mapped away
        path = "<gpulab-cpu header " + path.rsplit("/", 1)[-1] + ">"
    return f"{path}:{line}"


def _line_order(key: str):
    file, _, line = key.rpartition(":")
    return (file, int(line) if line.isdigit() else 0)

"""The machine code (SASS) a kernel file compiles to, without a GPU.

NVRTC compiles the file to a cubin for an architecture (an H100's ``sm_90`` by
default, as :mod:`gpulab.cpu.resources` does) and ``cuobjdump -sass`` lists its
instructions (the ``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` wheels,
or a CUDA toolkit). Where those tools are missing -- the GPU image has no
cuobjdump -- a listing recorded by ``tools/record_sass.py`` under
``labdata/sass/`` stands in, with the tools' versions and the date it was made.

    listing = sass.listing("basics/04_divergence.cu")
    sass.summary(listing)          # branches, reconvergence points, predicated instructions
"""
from __future__ import annotations

import datetime
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import paths

DEFAULT_ARCH = "sm_90"
RECORDED = paths.LABDATA / "sass"

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"^(@!?U?P\w+\s+)?BRA\b")


@dataclass
class Listing:
    """Per kernel, its instructions in order as ``(offset, text)``; where they came from."""

    file: str
    arch: str
    kernels: dict[str, list[tuple[int, str]]]
    tools: str                      # the compiler and disassembler, with versions
    made: str                       # when: live now, or the recorded file's date
    source_sha256: str
    recorded: Path | None = field(default=None)

    @property
    def caption(self) -> str:
        where = (f"recorded in {self.recorded.relative_to(paths.REPO)} on {self.made}" if self.recorded
                 else "disassembled live")
        return f"SASS of {self.file} for {self.arch}: {self.tools}; {where}"


def _tool_dirs() -> list[Path]:
    from .cpu.resources import _wheel_roots
    dirs = [root / "bin" for root in _wheel_roots()]
    for home in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            dirs.append(Path(home) / "bin")
    return dirs


def _cuobjdump() -> tuple[str | None, dict]:
    """cuobjdump's path (None if missing) and the environment that lets it find nvdisasm."""
    env = dict(os.environ)
    found = None
    for folder in _tool_dirs():
        if (folder / "cuobjdump").is_file() and found is None:
            found = str(folder / "cuobjdump")
        if (folder / "nvdisasm").is_file() and "NVDISASM_PATH" not in env:
            env["NVDISASM_PATH"] = str(folder)
    found = found or shutil.which("cuobjdump")
    if "NVDISASM_PATH" not in env and shutil.which("nvdisasm"):
        env["NVDISASM_PATH"] = str(Path(shutil.which("nvdisasm")).parent)
    return found, env


def unavailable() -> str | None:
    """None when SASS can be made here, else why not."""
    from .cpu import resources
    why = resources.unavailable()
    if why:
        return why
    tool, env = _cuobjdump()
    if tool is None or "NVDISASM_PATH" not in env:
        return "cuobjdump and nvdisasm are not installed (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
    return None


def _tools() -> str:
    from .cpu.resources import _library
    import ctypes
    lib, _ = _library()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    tool, env = _cuobjdump()
    version = subprocess.run([tool, "--version"], capture_output=True, text=True, env=env).stdout
    release = re.search(r"V(\d+\.\d+\.\d+)", version)
    return f"NVRTC {major.value}.{minor.value}, cuobjdump {release.group(1) if release else '(version unknown)'} -sass"


def parse(text: str) -> dict[str, list[tuple[int, str]]]:
    """cuobjdump -sass output (or a recorded listing) -> per kernel, ``(offset, instruction)``
    without the NOPs that pad a kernel and the branch-to-itself that ends it."""
    kernels: dict[str, list[tuple[int, str]]] = {}
    current = None
    for line in text.splitlines():
        name = _FUNCTION.match(line)
        if name:
            current = kernels.setdefault(name.group(1), [])
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction and current is not None:
            offset, text_ = int(instruction.group(1), 16), " ".join(instruction.group(2).split())
            if text_ != "NOP":
                current.append((offset, text_))
    for instructions in kernels.values():
        # After the last EXIT the compiler puts "BRA <its own address>": a guard, never reached.
        if instructions and instructions[-1][1] == f"BRA {instructions[-1][0]:#x}":
            instructions.pop()
    return kernels


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def disassemble(path: str | Path, arch: str = DEFAULT_ARCH) -> Listing:
    """Compile ``path`` (a kernel file, e.g. ``"basics/04_divergence.cu"``) for ``arch`` with NVRTC
    and list its SASS. Raises RuntimeError saying what is missing where the tools are not installed."""
    from .cpu import resources
    why = unavailable()
    if why:
        raise RuntimeError(why)
    real = paths.kernel_path(path)
    cubin = resources.compile_cubin(real.read_text(), paths.display_path(real), arch,
                                    (str(paths.KERNELS), str(real.parent)))
    tool, env = _cuobjdump()
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "kernel.cubin"
        file.write_bytes(cubin)
        done = subprocess.run([tool, "-sass", str(file)], capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"cuobjdump -sass failed on {paths.display_path(real)}: {done.stderr.strip()}")
    return Listing(paths.display_path(real), arch, parse(done.stdout), _tools(),
                   datetime.date.today().isoformat(), _sha256(real))


def recorded_path(path: str | Path, arch: str = DEFAULT_ARCH) -> Path:
    real = paths.kernel_path(path)
    return RECORDED / f"{real.parent.name}_{real.stem}.{arch}.sass"


def record(path: str | Path, arch: str = DEFAULT_ARCH) -> Path:
    """Write the live listing of ``path`` to labdata/sass/, with its tools, date and source hash."""
    listing = disassemble(path, arch)
    lines = [f"# file: {listing.file}", f"# arch: {arch}", f"# tools: {listing.tools}",
             f"# date: {listing.made}", f"# source_sha256: {listing.source_sha256}"]
    for kernel, instructions in listing.kernels.items():
        lines.append(f"\tFunction : {kernel}")
        lines += [f"        /*{offset:04x}*/ {text} ;" for offset, text in instructions]
    out = recorded_path(path, arch)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    return out


def load_recorded(path: str | Path, arch: str = DEFAULT_ARCH) -> Listing:
    """The listing tools/record_sass.py recorded for ``path``."""
    file = recorded_path(path, arch)
    if not file.is_file():
        raise FileNotFoundError(f"no recorded SASS for {path} ({arch}) in {file}: run tools/record_sass.py")
    text = file.read_text()
    header = dict(re.findall(r"^# (\w+): (.*)$", text, flags=re.M))
    return Listing(header["file"], header["arch"], parse(text), header["tools"], header["date"],
                   header["source_sha256"], recorded=file)


def listing(path: str | Path, arch: str = DEFAULT_ARCH) -> Listing:
    """The SASS made live where NVRTC and cuobjdump are installed, else the recorded listing
    (refused if the kernel file changed since it was recorded)."""
    if unavailable() is None:
        return disassemble(path, arch)
    listing = load_recorded(path, arch)
    if listing.source_sha256 != _sha256(paths.kernel_path(path)):
        raise RuntimeError(f"{listing.file} changed since its SASS was recorded in {listing.recorded}, and "
                           f"this machine cannot disassemble it ({unavailable()}): run tools/record_sass.py "
                           "where NVRTC and cuobjdump are installed")
    return listing


def summary(listing: Listing) -> pd.DataFrame:
    """Per kernel: its instructions, the branches among them (BRA), the points where a
    divergent warp's two sides wait for each other (BSSY/BSYNC), the instructions that run
    under a predicate (``@P0 ...``: both sides computed, one kept) and the selects."""
    rows = []
    for kernel, instructions in listing.kernels.items():
        ops = [text for _, text in instructions]
        rows.append({"kernel": kernel, "instructions": len(ops),
                     "branches (BRA)": sum(bool(_BRANCH.match(op)) for op in ops),
                     "reconvergence (BSSY/BSYNC)": sum(op.split()[0] in ("BSSY", "BSYNC") for op in ops),
                     "predicated, not branches": sum(op.startswith("@") and not _BRANCH.match(op)
                                                     and " EXIT" not in op for op in ops),
                     "selects (SEL/FSEL)": sum(op.split()[0] in ("SEL", "FSEL") for op in ops)})
    return pd.DataFrame(rows).set_index("kernel")


def between(listing: Listing, kernel: str, first: str, last: str) -> list[str]:
    """The instructions of ``kernel`` from the first whose opcode is ``first`` to the next ``last``
    (e.g. "BSSY" to "BSYNC": the region a divergent warp runs side by side), with their offsets."""
    instructions = listing.kernels[kernel]
    ops = [text.split()[0] if not text.startswith("@") else text.split()[1] for _, text in instructions]
    if first not in ops:
        return []
    start = ops.index(first)
    end = ops.index(last, start) if last in ops[start:] else len(ops) - 1
    return [f"/*{offset:04x}*/  {text}" for offset, text in instructions[start:end + 1]]

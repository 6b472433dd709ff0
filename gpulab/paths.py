"""Where the lab's files live: the repository root, kernels/ and labdata/."""
from __future__ import annotations

from pathlib import Path

#: The repository root (gpulab is installed in editable mode from it).
REPO = Path(__file__).resolve().parent.parent
KERNELS = REPO / "kernels"
LABDATA = REPO / "labdata"
RUNS = LABDATA / "runs"


def kernel_path(path: str | Path) -> Path:
    """Resolve a kernel file given relative to the repository root
    (``"kernels/measuring/01_saxpy.cu"``), to ``kernels/`` (``"measuring/01_saxpy.cu"``),
    or absolute; raise FileNotFoundError saying where it looked."""
    path = Path(path)
    candidates = [path] if path.is_absolute() else [REPO / path, KERNELS / path, Path.cwd() / path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    looked = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"kernel file '{path}' not found (looked in: {looked})")


def display_path(path: Path) -> str:
    """A path as the reader knows it: relative to the repository root when inside it."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)

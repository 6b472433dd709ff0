"""Where the lab's files live: the repository root, kernels/ and labdata/."""
from __future__ import annotations

import os
from pathlib import Path

#: The repository root (gpulab is installed in editable mode from it).
REPO = Path(__file__).resolve().parent.parent
KERNELS = REPO / "kernels"
LABDATA = REPO / "labdata"
RUNS = LABDATA / "runs"


def lab_around(folder: Path) -> Path | None:
    """The lab ``folder`` is in (the nearest folder holding ``gpulab/`` and ``kernels/``), or None."""
    for candidate in [folder, *folder.parents]:
        if (candidate / "gpulab" / "__init__.py").is_file() and (candidate / "kernels").is_dir():
            return candidate.resolve()
    return None


def require_this_lab() -> None:
    """Refuse to check or show a kernel when the working folder (a notebook's) is in another lab
    than the one this ``gpulab`` belongs to: a student copy opened with the instructors' lab
    installed would otherwise grade, and print, the instructors' kernels instead of the student's."""
    from .errors import OtherLabError
    here = lab_around(Path.cwd())
    if here is not None and here != REPO.resolve():
        raise OtherLabError(
            f"this notebook is in the lab at {here}, but Python imported gpulab from {REPO}: its checks "
            f"and kernels are that copy's, not yours. Make this lab's gpulab the one Python imports "
            f"(pip install -e {here}, or start Jupyter with PYTHONPATH={here}), then restart the kernel.")


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


def toolkit_include_options() -> tuple[str, ...]:
    """CuPy's wheel headers have <mma.h> but not the crt/mma.h it includes; let
    NVRTC find that in a CUDA toolkit's headers, where there is one."""
    roots = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    try:
        import cupy             # optional: only a GPU machine has it
        roots.insert(0, cupy.cuda.get_cuda_path())
    except Exception:
        pass
    for root in roots:
        if root and (Path(root) / "include" / "crt" / "mma.h").is_file():
            return (f"-I{Path(root) / 'include'}",)
    return ()

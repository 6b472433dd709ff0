"""Compile every kernel file to PTX with NVRTC, as the lab builds it for the GPU, and compare two such dumps.

A refactor of kernels/ (moving code a step inherits into a shared header) must leave every step's
machine code as it was. This writes, per kernel file and per set of options the lab builds it with,
the PTX NVRTC makes (no GPU needed: the nvidia-cuda-nvrtc wheel is enough), then compares two dumps
byte for byte. The options are the GPU path's (gpulab/kernels.py): -std=c++17,
--generate-line-info, -I kernels/ and the file's folder, the ``__constant__`` size symbols appended;
the architecture is compute_90 (the recording H100), or compute_90a for files built for sm_90a.
Line info names files, lines and inlined functions, which moving code changes by design, so the
comparison drops the ``.loc`` and ``.file`` lines and the ``.debug_str`` section (the inlined
functions' names); a second build without line info is compared whole. NVRTC is not always
deterministic: a build whose two first compiles differ is compiled up to 8 times and every version
kept; after a change, the PTX must be one of the versions made before.

    git archive main kernels tests/kernels | tar -x -C /tmp/tree_before
    PYTHONPATH=. python tools/ptx_compare.py dump /tmp/ptx_before --tree /tmp/tree_before
    PYTHONPATH=. python tools/ptx_compare.py dump /tmp/ptx_after       # after
    PYTHONPATH=. python tools/ptx_compare.py compare /tmp/ptx_before /tmp/ptx_after

A recorded run that names its kernel sources (``kernel_sources_sha256`` in its meta) can also keep
the PTX they made: ``stamp META...`` rebuilds the tree the run was recorded from (each named file's
version found in git history by its sha256, the rest of kernels/ as it is) and writes into the meta
``kernel_ptx_sha256``: the NVRTC release, and for every build of every kernel file the run names the
sha256 of each PTX version NVRTC made (no line info, compared whole). tests/test_runs.py then lets a
run stand through a code edit of its sources where every build still makes one of those PTX
versions (:func:`unchanged_builds`): a refactor that moves code into a header, say.

    PYTHONPATH=. python tools/ptx_compare.py stamp labdata/runs/*/hopper.meta.json
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from gpulab import paths
from gpulab.cpu import resources
from gpulab.kernels import _with_symbol_sizes

#: Further builds the workloads ask for (``-D`` macros), beside each file's plain build.
VARIANTS = {
    "kernels/lenet/06_constant_weights.cu": [("-DLENET_LAYER=1",), ("-DLENET_LAYER=2",)],
    **{f"kernels/lenet/{name}.cu": [("-DCONV_C=1",), ("-DCONV_C=4",)]
       for name in ("07_restrict_unroll", "08_channel_tree", "09_channel_atomics", "exercise_01_pool_epilogue")},
    "kernels/lenet/10_fused_relu_pool.cu": [("-DCH=1", "-DMF=4", "-DIH=86", "-DBY=8", "-DPX=2"),
                                           ("-DCH=4", "-DMF=16", "-DIH=40", "-DBY=17", "-DPX=1")],
    "kernels/lenet/11_tensor_cores.cu": [("-DWARPS=4",)],
    "kernels/convpool/05_fused_relu_pool.cu": [("-DQ=8",), ("-DQ=4",)],
    **{f"kernels/convpool/{name}.cu": [("-DSTAGES=2", "-DTC_BN=256")]
       for name in ("07_tensor_cores_tf32", "08_tensor_cores_fp16")},
}
#: Files built only for sm_90a (wgmma, setmaxnreg); a file that does not build for compute_90 is too.
SM90A = re.compile(r"wgmma|setmaxnreg|hopper\.h|hopper_conv\.cuh")
DEBUG_LINE = re.compile(r"^\s*\.(loc|file)\b")


def files(tree: Path = paths.REPO, roots=("kernels", "tests/kernels")) -> list[Path]:
    return sorted(p for root in roots for p in (tree / root).rglob("*.cu"))


def ptx(source: str, filename: str, arch: str, options) -> str:
    lib, reason = resources._library()
    if lib is None:
        raise RuntimeError(reason)
    program = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), filename.encode(), 0, None, None)
    try:
        opts = [f"--gpu-architecture={arch}", "-std=c++17", *(f"-I{d}" for d in resources._include_dirs()), *options]
        array = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        status = lib.nvrtcCompileProgram(program, len(opts), array)
        size = ctypes.c_size_t()
        if status:
            lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(program, log)
            raise RuntimeError(log.value.decode(errors="replace")[-2000:])
        lib.nvrtcGetPTXSize(program, ctypes.byref(size))
        out = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(program, out)
        return out.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def builds(path: Path, tree: Path):
    """(name, arch, options) for every build of ``path``."""
    shown = str(path.relative_to(tree))
    text = path.read_text()
    archs = ["compute_90a"] if SM90A.search(text) else ["compute_90"]
    for extra in [(), *VARIANTS.get(shown, [])]:
        for arch in archs:
            yield shown, arch, extra


def _variants(source: str, shown: str, arch: str, options, repeats: int) -> list[str]:
    """The PTX of one build, compiled until two runs agree or ``repeats`` runs are done: NVRTC is
    not always deterministic (fcnet's step 14 comes out in two or three versions), so every
    version seen is kept."""
    seen: list[str] = []
    for attempt in range(repeats):
        try:
            text = ptx(source, shown, arch, options)
        except RuntimeError as exc:
            if arch != "compute_90":
                return [f"NVRTC ERROR\n{exc}"]
            arch = "compute_90a"                        # built for sm_90a only
            continue
        if text not in seen:
            seen.append(text)
        if attempt >= 1 and len(seen) == 1:
            break
    return seen or ["NVRTC ERROR"]


def dump(out: Path, tree: Path = paths.REPO, repeats: int = 8) -> None:
    """Write the PTX of every build of every kernel file of ``tree`` (a checkout) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    count = failed = unstable = 0
    for path in files(tree):
        source = _with_symbol_sizes(path.read_text())
        include = (f"-I{tree / 'kernels'}", f"-I{path.parent}")
        for shown, arch, extra in builds(path, tree):
            tag = shown.replace("/", "__") + "".join("@" + o.lstrip("-") for o in extra)
            for line_info, suffix in ((("--generate-line-info",), ".lineinfo.ptx"), ((), ".ptx")):
                texts = _variants(source, shown, arch, include + line_info + extra, repeats)
                for k, text in enumerate(texts):
                    (out / (tag + (f".v{k}" if k else "") + suffix)).write_text(text)
                count += 1
                failed += texts[0].startswith("NVRTC ERROR")
                unstable += len(texts) > 1
    print(f"{count} PTX builds of {len(files(tree))} files written to {out} ({failed} did not compile, "
          f"{unstable} came out in more than one version)")


_VERSION = re.compile(r"\.v\d+(?=\.(lineinfo\.)?ptx$)")


def _code(text: str, line_info: bool) -> str:
    """The PTX less what only line info carries: .loc and .file lines, and the .debug_str
    section (the names of inlined functions, which line info refers to)."""
    if not line_info:
        return text
    text = re.sub(r"\n\t\.section\t\.debug_str\n\t\{\n.*?\n\t\}\n", "\n", text, flags=re.S)
    return "\n".join(l for l in text.splitlines() if not DEBUG_LINE.match(l)).rstrip() + "\n"


def _load(folder: Path) -> dict[str, set[str]]:
    builds: dict[str, set[str]] = {}
    for p in folder.glob("*.ptx"):
        name = _VERSION.sub("", p.name)
        builds.setdefault(name, set()).add(_code(p.read_text(), name.endswith(".lineinfo.ptx")))
    return builds


def compare(before: Path, after: Path) -> int:
    """Every build's PTX after must be one that NVRTC made of it before (a version of it, where
    NVRTC made more than one); returns 1 where one is not."""
    b, a = _load(before), _load(after)
    names = sorted(set(a) | set(b))
    differ = []
    for name in names:
        if name not in a or name not in b:
            differ.append(f"{name}: only {'before' if name in b else 'after'}")
        elif not a[name] & b[name]:
            differ.append(f"{name}: differs")
    unstable = [n for n in names if len(b.get(n, ())) > 1 or len(a.get(n, ())) > 1]
    print(f"{len(names)} PTX builds compared ({sum(n.endswith('.lineinfo.ptx') for n in names)} with line info, "
          f"less .loc/.file lines and .debug_str; the rest whole): {len(differ)} differ; "
          f"{len(unstable)} came out of NVRTC in more than one version ({', '.join(unstable) or 'none'})")
    for line in differ:
        print("  " + line)
    return 1 if differ else 0


# ------------------------------------------------------------------ a recorded run's PTX
def nvrtc_release() -> str:
    """The NVRTC this machine compiles with: the wheel's version (13.5.37), else NVRTC's own."""
    try:
        from importlib.metadata import version
        return version("nvidia-cuda-nvrtc")
    except Exception:                       # noqa: BLE001 (not a wheel install: ask the library)
        lib, reason = resources._library()
        if lib is None:
            raise RuntimeError(reason)
        major, minor = ctypes.c_int(), ctypes.c_int()
        lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return f"{major.value}.{minor.value}"


def _tag(arch: str, extra) -> str:
    return " ".join((arch, *extra))


def build_digests(path: Path, tree: Path, repeats: int = 8) -> dict[str, list[str]]:
    """``{build: sorted sha256 of each PTX version}`` for every build of ``path`` in ``tree``
    (no line info, whole; the versions :func:`_variants` collects)."""
    source = _with_symbol_sizes(path.read_text())
    include = (f"-I{tree / 'kernels'}", f"-I{path.parent}")
    return {_tag(arch, extra): sorted({hashlib.sha256(text.encode()).hexdigest()
                                       for text in _variants(source, shown, arch, include + extra, repeats)})
            for shown, arch, extra in builds(path, tree)}


def recorded_tree(sources: dict[str, str], dest: Path) -> Path:
    """kernels/ as it is, with each of ``sources`` ({path: sha256}) at the version git history
    holds with that sha256: the tree a run was recorded from. Refused where a version is not found."""
    shutil.copytree(paths.REPO / "kernels", dest / "kernels")
    for name, digest in sources.items():
        found = None
        revisions = subprocess.run(["git", "-C", str(paths.REPO), "rev-list", "--all", "--", name],
                                   capture_output=True, text=True, check=True).stdout.split()
        for rev in revisions:
            blob = subprocess.run(["git", "-C", str(paths.REPO), "show", f"{rev}:{name}"], capture_output=True)
            if blob.returncode == 0 and hashlib.sha256(blob.stdout).hexdigest() == digest:
                found = blob.stdout
                break
        if found is None:
            raise RuntimeError(f"{name}: no version in git history has the recorded sha256 {digest[:12]}")
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(found)
    return dest


def stamp(meta_file: Path) -> dict:
    """Write ``kernel_ptx_sha256`` into ``meta_file`` (see the module's docstring); returns it."""
    meta = json.loads(meta_file.read_text())
    sources = meta.get("kernel_sources_sha256") or {}
    if not sources:
        raise ValueError(f"{meta_file}: the run names no kernel sources (kernel_sources_sha256)")
    with tempfile.TemporaryDirectory() as tmp:
        tree = recorded_tree(sources, Path(tmp))
        stamped = {name: build_digests(tree / name, tree) for name in sorted(sources) if name.endswith(".cu")}
    meta["kernel_ptx_sha256"] = {"nvrtc": nvrtc_release(), "builds": stamped}
    meta_file.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta["kernel_ptx_sha256"]


def unchanged_builds(meta: dict, tree: Path = paths.REPO) -> list[str]:
    """The builds of a run's kernel files (see :func:`stamp`) whose PTX in ``tree`` is none of the
    recorded versions: empty where the run still describes the code. Raises where it cannot tell
    (no stamp, or another NVRTC release than the stamp's)."""
    stamped = meta.get("kernel_ptx_sha256")
    if not stamped:
        raise LookupError("the run has no PTX stamp (tools/ptx_compare.py stamp)")
    here = nvrtc_release()
    if stamped["nvrtc"] != here:
        raise LookupError(f"the run's PTX was stamped with NVRTC {stamped['nvrtc']}, this machine has {here}")
    changed = []
    for name, wanted in stamped["builds"].items():
        now = build_digests(tree / name, tree)
        changed += [f"{name} [{tag}]" for tag in sorted(set(wanted) | set(now))
                    if not set(now.get(tag, ())) & set(wanted.get(tag, ()))]
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--tree", type=Path, default=paths.REPO,
                   help="the checkout whose kernels/ and tests/kernels/ to build (default: this one)")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    st = sub.add_parser("stamp")
    st.add_argument("metas", type=Path, nargs="+", help="recorded runs' meta files")
    args = parser.parse_args(argv)
    if args.command == "stamp":
        for meta_file in args.metas:
            found = stamp(meta_file)
            print(f"{meta_file}: {sum(len(b) for b in found['builds'].values())} builds of "
                  f"{len(found['builds'])} files stamped (NVRTC {found['nvrtc']})")
        return 0
    if args.command == "dump":
        dump(args.out, args.tree.resolve())
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())

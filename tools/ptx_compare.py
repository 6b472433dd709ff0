"""Compile every kernel file to PTX with NVRTC, as the lab builds it for the GPU, and compare two such dumps.

A refactor of kernels/ (moving code a step inherits into a shared header) must leave every step's
machine code as it was. This writes, per kernel file and per set of options the lab builds it with,
the PTX NVRTC makes (no GPU needed: the nvidia-cuda-nvrtc wheel is enough), then compares two dumps
byte for byte. The options are the GPU path's (gpulab/kernels.py): -std=c++17,
--generate-line-info, -I kernels/ and the file's folder, the ``__constant__`` size symbols appended;
the architecture is compute_90 (the recording H100), or compute_90a for files built for sm_90a.
Line info names files and lines, which moving code changes by design, so the comparison drops the
``.loc`` and ``.file`` lines; a second build without line info is compared whole.

    PYTHONPATH=. python tools/ptx_compare.py dump /tmp/ptx_before      # on the tree before
    PYTHONPATH=. python tools/ptx_compare.py dump /tmp/ptx_after       # after
    PYTHONPATH=. python tools/ptx_compare.py compare /tmp/ptx_before /tmp/ptx_after
"""
from __future__ import annotations

import argparse
import ctypes
import re
import sys
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


def files(roots=("kernels", "tests/kernels")) -> list[Path]:
    return sorted(p for root in roots for p in (paths.REPO / root).rglob("*.cu"))


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


def builds(path: Path):
    """(name, arch, options) for every build of ``path``."""
    shown = paths.display_path(path)
    text = path.read_text()
    archs = ["compute_90a"] if SM90A.search(text) else ["compute_90"]
    for extra in [(), *VARIANTS.get(shown, [])]:
        for arch in archs:
            yield shown, arch, extra


def dump(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    count = failed = 0
    for path in files():
        source = _with_symbol_sizes(path.read_text())
        include = (f"-I{paths.KERNELS}", f"-I{path.parent}")
        for shown, arch, extra in builds(path):
            tag = shown.replace("/", "__") + "".join("@" + o.lstrip("-") for o in extra)
            for line_info, suffix in ((("--generate-line-info",), ".lineinfo.ptx"), ((), ".ptx")):
                try:
                    text = ptx(source, shown, arch, include + line_info + extra)
                except RuntimeError as exc:
                    if arch == "compute_90":          # built for sm_90a only
                        try:
                            text = ptx(source, shown, "compute_90a", include + line_info + extra)
                        except RuntimeError:
                            text = f"NVRTC ERROR\n{exc}"
                            failed += 1
                    else:
                        text = f"NVRTC ERROR\n{exc}"
                        failed += 1
                (out / (tag + suffix)).write_text(text)
                count += 1
    print(f"{count} PTX builds of {len(files())} files written to {out} ({failed} did not compile)")


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.glob("*.ptx")} | {p.name for p in after.glob("*.ptx")})
    differ = []
    for name in names:
        a, b = before / name, after / name
        if not (a.exists() and b.exists()):
            differ.append(f"{name}: only in {'before' if a.exists() else 'after'}")
            continue
        ta, tb = a.read_text(), b.read_text()
        if name.endswith(".lineinfo.ptx"):
            ta, tb = ("\n".join(l for l in t.splitlines() if not DEBUG_LINE.match(l)) for t in (ta, tb))
        if ta != tb:
            differ.append(f"{name}: differs")
    print(f"{len(names)} PTX builds compared ({sum(n.endswith('.lineinfo.ptx') for n in names)} with line info, "
          f".loc/.file lines dropped; the rest whole): {len(differ)} differ")
    for line in differ:
        print("  " + line)
    return 1 if differ else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("dump").add_argument("out", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "dump":
        dump(args.out)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())

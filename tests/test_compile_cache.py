"""The CPU backend's compiled modules are shared: by every process using one cache folder
(pytest's workers, the notebooks, the site build) and by every copy of the lab (a student copy
finds what the lab compiled), and a concurrent compile of one module is safe."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from gpulab import cpu, paths
from gpulab.cpu import compiler
from gpulab.errors import KernelLaunchError

HEADER = """// A helper in a header: its __trap() names the header.
__device__ void give_up(int i, int bad) { if (i == bad) __trap(); }
"""
KERNEL = """#include "helper.cuh"
extern "C" __global__ void scale(int n, float a, float* x, int bad)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    give_up(i, bad);
    if (i < n) x[i] *= a;
}
"""


def _lab(root: Path, header: str = HEADER) -> Path:
    (root / "kernels" / "t").mkdir(parents=True)
    (root / "kernels" / "t" / "helper.cuh").write_text(header)
    (root / "kernels" / "t" / "scale.cu").write_text(KERNEL)
    return root


def _compile(lab: Path, monkeypatch):
    monkeypatch.setattr(paths, "REPO", lab)
    folder = lab / "kernels" / "t"
    return cpu.compile_module((folder / "scale.cu").read_text(), filename="kernels/t/scale.cu",
                              include_dirs=[str(lab / "kernels"), str(folder)])


def test_a_copy_of_the_lab_elsewhere_reuses_the_compiled_module(tmp_path, monkeypatch):
    monkeypatch.setenv("GPULAB_CACHE", str(tmp_path / "cache"))
    first = _compile(_lab(tmp_path / "lab"), monkeypatch)
    copy = _compile(_lab(tmp_path / "deeper" / "student"), monkeypatch)
    # (beside the control module a load is compared with: compiler.load_time_code)
    modules = set((tmp_path / "cache" / "cpu").glob("*.so")) - {compiler.control_library(False)}
    assert copy.path == first.path and len(modules) == 1
    # ... and the module names the header as the lab knows it, not where it was compiled.
    x = np.ones(70, np.float32)
    copy.get_function("scale")((3, 1, 1), (32, 1, 1), (np.int32(70), np.float32(2), x, np.int32(-1)))
    assert (x == 2).all()
    try:
        copy.get_function("scale")((3, 1, 1), (32, 1, 1), (np.int32(70), np.float32(2), x, np.int32(40)))
    except KernelLaunchError as exc:
        message = str(exc)
    else:
        raise AssertionError("__trap() did not stop the launch")
    assert "kernels/t/helper.cuh" in message and str(tmp_path) not in message, message
    # A header that differs is another module.
    changed = _compile(_lab(tmp_path / "changed", HEADER.replace("i == bad", "i == bad + 0")), monkeypatch)
    assert changed.path != first.path


def test_processes_compiling_one_module_at_once_all_get_it_from_one_compile(tmp_path):
    source = (paths.REPO / "tests" / "kernels" / "grid3d.cu").read_text() + f"\n// {tmp_path.name}\n"
    (tmp_path / "k.cu").write_text(source)
    # A g++ that notes each compile in a log, first on the path.
    (tmp_path / "bin").mkdir()
    wrapper = tmp_path / "bin" / "g++"
    # Each g++ run noted by what it makes: the runtime's object, a module's object, the module.
    wrapper.write_text(f'#!/bin/sh\ncase " $* " in *runtime.cpp*) echo runtime >> {tmp_path / "compiles"};; '
                       f'*c++-header*) echo prelude >> {tmp_path / "compiles"};; '
                       f'*" -c "*) echo compile >> {tmp_path / "compiles"};; '
                       f'*" -shared "*) echo link >> {tmp_path / "compiles"};; esac\n'
                       'exec /usr/bin/g++ "$@"\n')
    wrapper.chmod(0o755)
    script = ("import sys; from gpulab import cpu; m = cpu.compile_module(open(sys.argv[1]).read(), "
              "filename='k.cu'); print(m.path)")
    env = {"GPULAB_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(paths.REPO),
           "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    runs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "k.cu")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [run.communicate() for run in runs]
    assert all(run.returncode == 0 for run in runs), outputs
    assert len({out.strip() for out, _ in outputs}) == 1
    # One of them precompiled the prelude, compiled the runtime, then the module, and the control
    # module its load is compared with (compiler.load_time_code), while the others waited on the
    # locks, then loaded its result.
    assert (tmp_path / "compiles").read_text().split() == ["prelude", "runtime", "compile", "link",
                                                           "compile", "link"]
    # The module and the runtime written whole under temporary names, then renamed, and their locks:
    # nothing else is left.
    library = Path(outputs[0][0].strip())
    runtime = [p.stem for p in (tmp_path / "cache" / "cpu").glob("runtime-*.o")]
    assert len(runtime) == 1
    prelude = [p.name for p in (tmp_path / "cache" / "cpu").glob("prelude-*") if p.is_dir()]
    assert len(prelude) == 1
    control = compiler.control_library(False)     # (this process's cache: its name, the same)
    assert sorted(p.name for p in (tmp_path / "cache" / "cpu").iterdir()) == sorted(
        [library.stem + ".lock", library.name, runtime[0] + ".lock", runtime[0] + ".o", prelude[0] + ".lock",
         prelude[0], control.stem + ".lock", control.name])
    assert sorted(p.name for p in (tmp_path / "cache" / "cpu" / prelude[0]).iterdir()) == [
        "gpulab_cuda_cpu.h", "gpulab_cuda_cpu.h.gch"]


def test_a_plain_build_reads_the_precompiled_prelude_and_an_instrumented_one_the_header(tmp_path, monkeypatch):
    monkeypatch.setenv("GPULAB_CACHE", str(tmp_path / "cache"))
    commands = []
    real = compiler._compile

    def noting(text, library, flags, *rest):
        commands.append(list(flags))
        return real(text, library, flags, *rest)

    monkeypatch.setattr(compiler, "_compile", noting)
    source = (paths.REPO / "tests" / "kernels" / "grid3d.cu").read_text()
    cpu.compile_module(source, filename="tests/kernels/grid3d.cu")
    compiler.build(source, filename="tests/kernels/grid3d.cu", instrumented=True)
    plain, instrumented = commands
    header = compiler.precompiled_prelude()
    assert header.read_text() == compiler.PRELUDE.read_text()
    assert plain[plain.index("-include") + 1] == str(header)
    assert instrumented[instrumented.index("-include") + 1] == str(compiler.PRELUDE)
    # g++ -H lists the headers it reads; a precompiled one it used is marked '!' (one it found
    # but could not use, made with other options, 'x').
    (tmp_path / "k.cpp").write_text(source)
    result = subprocess.run(["g++", *[f for f in plain if f != "-shared"], "-H", "-c", str(tmp_path / "k.cpp"),
                             "-o", str(tmp_path / "k.o")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert f"! {header}.gch" in result.stderr.splitlines(), result.stderr[:2000]


def test_threads_of_a_distrusting_process_do_not_remove_what_one_of_them_is_making(tmp_path):
    """A grader's child trusts only what it made (compiler.distrust_cache). Another of its threads
    that finds the prelude's header renamed into the cache before its maker has noted it must not
    remove it as a stranger's: the maker's compile then read a header that was gone."""
    source = (paths.REPO / "tests" / "kernels" / "grid3d.cu").read_text() + f"\n// {tmp_path.name}\n"
    (tmp_path / "k.cu").write_text(source)
    # The header's rename is held open for a moment (as a slow disk would), and a second thread
    # asks for the prelude just then.
    script = '''
import os, sys, threading, time
from gpulab import cpu
from gpulab.cpu import compiler
compiler.distrust_cache()
real_replace, renamed, errors = os.replace, threading.Event(), []
def slow_replace(src, dst):
    real_replace(src, dst)
    if str(dst).endswith(compiler.PRELUDE.name):
        renamed.set()
        time.sleep(0.5)
        if not os.path.exists(dst):
            errors.append(f"the header was removed while its maker was renaming it in: {dst}")
compiler.os.replace = slow_replace
def build():
    try:
        cpu.compile_module(open(sys.argv[1]).read(), filename="k.cu")
    except Exception as exc:
        errors.append(repr(exc))
def ask():
    renamed.wait(60)
    try:
        compiler.precompiled_prelude()
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=build), threading.Thread(target=ask)]
[t.start() for t in threads]
[t.join() for t in threads]
print(errors)
sys.exit(1 if errors else 0)
'''
    env = {**os.environ, "GPULAB_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(paths.REPO)}
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "k.cu")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]

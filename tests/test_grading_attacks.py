"""The grader against two classes of attack (issue 38, items 1 and 2; the threat model in
book/instructors.md):

1. **Checks the untrusted child would enforce on itself.** Code of the student's that runs in
   the child before any launch (a global constructor, an indirect function's resolver, a
   runtime function the module redefines, a variable's accessor) could reach the child's
   Python and change its checks: such a module is refused before it loads. Whether a kernel
   wrote past an array's end the parent decides from bytes it owns (a guard region after each
   array the kernel may write); whether it covered every element, from the values (outputs
   poisoned, grids smaller than the data).
2. **State that outlives the sandbox.** Per-uid kernel state (keyrings) and IPC are refused to
   every child by a seccomp filter; a child that hoards the hidden checks' sizes there leaves
   nothing for the next child of its uid to print. No request marks a case as hidden.

Each attack is graded, with honest and do-nothing students beside it. Instructors only (the
student export leaves this file out)."""
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from gpulab import cpu, exercises, grading, paths, sandbox
from gpulab.errors import KernelCompileError
from gpulab.student import strip_solutions
from test_grading import FIXTURES, WRONG, handed_in, solution_text, submission

ATTACKS = FIXTURES / "attacks"
SAXPY, RELU, HISTOGRAM, CELL = (exercises.get(i) for i in ("measuring.1", "basics.1", "basics.3", "fcnet.2"))
WHY_NO_SANDBOX = sandbox.problem()
needs_sandbox = pytest.mark.skipif(WHY_NO_SANDBOX is not None, reason=f"no sandbox here: {WHY_NO_SANDBOX}")
MARK = "GPULAB_ATTACK_RAN"
NO_GRID_STRIDE = """extern "C" __global__ void saxpy_grid_stride(int n, float a, const float* __restrict__ x,
                                             const float* __restrict__ y, float* __restrict__ z)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;     // one element per thread, no loop
    if (i < n) z[i] = a * x[i] + y[i];
}
"""
NO_BOUNDS_TEST = (WRONG / "basics.1" / "no_guard.cu").read_text()
NOT_ATOMIC = (WRONG / "basics.3" / "not_atomic.cu").read_text()


def _constructor(kernel: str) -> str:
    return (ATTACKS / "constructor_takes_over_the_child.cu").read_text().replace("@MARK@", MARK).replace(
        "@KERNEL@", kernel)


# ------------------------------------------------------------------ 1. code that runs when a module loads
#: Ways for a kernel file to run code of its own when its module loads, each beside a right
#: kernel: the CPU backend refuses the module before it is loaded, so none of it runs.
LOAD_TIME = {
    "constructor through the C API": _constructor((paths.REPO / "kernels/measuring/01_saxpy.cu").read_text()),
    "global object": """#include <stdlib.h>
struct Hook { Hook() { setenv("@MARK@", "ran", 1); } };
static Hook hook;
""",
    "dynamic initialiser": """#include <stdlib.h>
static int ran() { return setenv("@MARK@", "ran", 1); }
__device__ int flag = ran();
""",
    "init_array entry in assembly": """#include <stdlib.h>
extern "C" void gpulab_hook() { setenv("@MARK@", "ran", 1); }
asm(".pushsection .init_array,\\"aw\\"\\n.balign 8\\n.quad gpulab_hook\\n.popsection");
""",
    "init_array entry by a section attribute": """#include <stdlib.h>
extern "C" void gpulab_hook() { setenv("@MARK@", "ran", 1); }
__attribute__((section(".init_array"), used)) static void (*gpulab_entry)() = gpulab_hook;
""",
    "code in .init": """#include <stdlib.h>
extern "C" void gpulab_hook() { setenv("@MARK@", "ran", 1); }
asm(".pushsection .init,\\"ax\\"\\ncall gpulab_hook@PLT\\n.popsection");
""",
    "ifunc resolver": """#include <stdlib.h>
extern "C" void gpulab_target() {}
extern "C" void (*gpulab_resolve())() { setenv("@MARK@", "ran", 1); return gpulab_target; }
extern "C" __attribute__((visibility("default"), ifunc("gpulab_resolve"))) void gpulab_indirect();
""",
}
SAXPY_KERNEL = (paths.REPO / "kernels/measuring/01_saxpy.cu").read_text()


@pytest.mark.parametrize("way", sorted(LOAD_TIME))
def test_a_module_that_runs_code_when_it_loads_is_refused_before_it_loads(way, monkeypatch):
    if way == "code in .init" and platform.machine() != "x86_64":
        pytest.skip("the attack's assembly is x86-64's")
    monkeypatch.delenv(MARK, raising=False)
    text = LOAD_TIME[way].replace("@MARK@", MARK)
    source = text if "saxpy" in text else text + SAXPY_KERNEL
    # (The ways in assembly are refused sooner, before the module is linked, as inline assembly.)
    with pytest.raises(KernelCompileError, match="refused: (the compiled module would run code of its own|'asm' is "
                                                 "inline assembly)"):
        cpu.compile_module(source, filename=f"kernels/measuring/attack_{way.replace(' ', '_')}.cu")
    assert MARK not in os.environ, f"{way}: its code ran"
    # The same kernel alone loads, and so does its instrumented build (the race checker's).
    module = cpu.compile_module(SAXPY_KERNEL, filename="kernels/measuring/01_saxpy.cu")
    assert module.instrumented_twin().kernel_names == ["saxpy"]


@pytest.mark.parametrize("definition", [
    'extern "C" int fork(void) { return -1; }',
    '#include <stdlib.h>\nvoid* operator new(size_t n) { return malloc(n); }',
    'extern "C" void __tsan_write4(void*) {}',
    'extern "C" int pthread_sigmask(int, const void*, void*) { return 0; }',
])
def test_a_module_that_defines_a_function_the_runtime_calls_is_refused(definition):
    # The runtime's launch code runs in the Python process; the linker would bind its calls to
    # the module's definitions (fork, the race checker's hooks...).
    # Refused where the runtime linked beside it defines or calls that name: the plain build's,
    # or the instrumented one's (the race checker's, built at the first launch that checks races).
    with pytest.raises(KernelCompileError, match="refused: it defines .*which the CPU backend's runtime"):
        module = cpu.compile_module(definition + "\n" + SAXPY_KERNEL, filename="kernels/measuring/attack_defines.cu")
        module.instrumented_twin()
    # static: its own, which nothing of the runtime's can call.
    cpu.compile_module('static int fork(void) { return -1; }\n' + SAXPY_KERNEL,
                       filename="kernels/measuring/attack_defines.cu")


def test_a_variables_accessor_runs_none_of_the_modules_code(monkeypatch):
    """The Python process calls each variable's accessor: a macro named like the variable, or
    an operator& of its type, would make that a call of the module's code."""
    monkeypatch.delenv(MARK, raising=False)
    source = """#include <stdlib.h>
struct Sneaky { float v; Sneaky* operator&() { setenv("@MARK@", "ran", 1); return this; } };
__device__ Sneaky scale;
static float* hook() { setenv("@MARK@", "ran", 1); static float f; return &f; }
__device__ float offset;
#define offset (*hook())
extern "C" __global__ void shift(int n, float* y) { int i = threadIdx.x; if (i < n) y[i] += offset + scale.v; }
""".replace("@MARK@", MARK)
    module = cpu.compile_module(source, filename="kernels/measuring/attack_accessor.cu")
    assert MARK not in os.environ
    assert module.get_global("scale").nbytes == 4 and module.get_global("offset").nbytes == 4


def test_a_variable_that_reaches_past_itself_is_refused():
    # After each launch the variables' bytes are copied from the worker into the Python process
    # at the place and size the accessor reports: a reference to more than a variable would let
    # a kernel write over that process's memory.
    source = """typedef char Big[1 << 20];
__device__ char small[16];
__device__ Big& big = *reinterpret_cast<Big*>(small);
extern "C" __global__ void touch(int n, float* y) { if (threadIdx.x == 0) big[0] = 1; }
"""
    with pytest.raises(KernelCompileError, match="refused"):
        cpu.compile_module(source, filename="kernels/measuring/attack_reference.cu")


def test_the_lab_kernels_have_no_load_time_code_beyond_the_control():
    """What the checks compare with: the control module (a clean kernel) has the runtime's own
    constructors; a lab kernel with variables (basics step 6) none more, plain or instrumented."""
    from gpulab.cpu import compiler, elf
    for instrumented in (False, True):
        control = compiler.control_profile(instrumented)
        assert control.init_array >= 1          # crtbegin's (and, instrumented, ThreadSanitizer's)
        module = cpu.compile_module((paths.REPO / "kernels/basics/06_constant_scale.cu").read_text(),
                                    filename="kernels/basics/06_constant_scale.cu", instrumented=instrumented)
        assert module.symbols and elf.profile(module.path.read_bytes()).beyond(control) == []


# ------------------------------------------------------------------ 1b. accesses hidden from the race checker
#: A histogram that counts each block's values in shared memory with BUMP, then adds each bin to
#: the total with one atomicAdd. BUMP as a plain increment races (two threads of a block, one
#: bin): its values are right on the CPU backend, whose threads of a block take turns, and only
#: the race checker, which sees each access through the compiler's instrumentation, fails it.
SHARED_HISTOGRAM = """@HELPER@
#define MAX_BINS 1024
extern "C" __global__ void histogram(int n, int bins, const int* __restrict__ values, unsigned int* counts)
{
    __shared__ unsigned int local[MAX_BINS];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (bins > MAX_BINS) {
        if (i < n) atomicAdd(&counts[values[i]], 1u);
        return;
    }
    for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0u;
    __syncthreads();
    if (i < n) BUMP(&local[values[i]]);
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x)
        if (local[b]) atomicAdd(&counts[b], local[b]);
}
"""
_BUMP = "__device__ {} void bump(unsigned int* p) {{ *p += 1u; }}\n#define BUMP bump"
#: Ways to take BUMP's accesses out of the instrumentation's sight. Each passes every check on the
#: CPU backend unless refused (the race checker sees nothing to report).
HIDDEN_ACCESSES = {
    "no_sanitize attribute": _BUMP.format('__attribute__((no_sanitize("thread"), noinline))'),
    "no_sanitize_thread attribute": _BUMP.format("__attribute__((no_sanitize_thread, noinline))"),
    "C++11 attribute": _BUMP.format("[[gnu::no_sanitize_thread, gnu::noinline]]"),
    "attribute pasted by a macro": "#define GLUE(a, b) a##b\n"
                                   + _BUMP.format("__attribute__((GLUE(no_sanit, ize_thread), noinline))"),
    "the prelude's own macro": _BUMP.format("GPULAB_UNCOUNTED"),
    "only in the race checker's build": "#ifdef __SANITIZE_THREAD__\n#define QUIET __attribute__((no_sanitize_thread, "
                                        "noinline))\n#else\n#define QUIET\n#endif\n" + _BUMP.format("QUIET"),
    "in a header of its own": '#include "quiet.cuh"',
    "inline assembly": '__device__ void bump(unsigned int* p) { asm volatile("incl %0" : "+m"(*p)); }\n#define BUMP bump',
}


@pytest.mark.parametrize("way", sorted(HIDDEN_ACCESSES))
def test_a_kernel_that_hides_its_accesses_from_the_race_checker_is_refused(way, tmp_path):
    if way == "inline assembly" and platform.machine() != "x86_64":
        pytest.skip("the attack's assembly is x86-64's")
    folder = submission(HISTOGRAM, SHARED_HISTOGRAM.replace("@HELPER@", HIDDEN_ACCESSES[way]), tmp_path / "sub")
    (folder / "kernels/basics/quiet.cuh").write_text(HIDDEN_ACCESSES["no_sanitize_thread attribute"] + "\n")
    staged = grading.stage(folder, tmp_path / "staged", [HISTOGRAM])
    row = grading._summarise(HISTOGRAM, grading.evaluate(HISTOGRAM, staged))
    assert row["points"] == 0 and row["status"] == "compile error", row
    assert re.match(r"public check .*: kernels/basics/(exercise_03_histogram\.cu|quiet\.cuh) line \d+: refused: "
                    r"'(__)?(no_sanitize\w*|asm)'", row["message"]), row["message"]


@pytest.mark.parametrize("bump, status", [("#define BUMP(p) (*(p) += 1u)", "barrier or race"),
                                          ("#define BUMP(p) atomicAdd(p, 1u)", "passed")])
def test_the_shared_histogram_is_graded_on_its_races(bump, status, tmp_path):
    """The attacks' kernel as it is: the race checker fails it; with an atomic BUMP, it passes."""
    row = grading._summarise(HISTOGRAM, grading.evaluate(HISTOGRAM, _staged(HISTOGRAM, SHARED_HISTOGRAM.replace(
        "@HELPER@", bump), tmp_path)))
    assert row["status"] == status and row["points"] == (HISTOGRAM.points if status == "passed" else 0), row


#: A not-atomic BUMP whose load and store go through the C library: a memcpy of a size g++ cannot
#: know is a call into the uninstrumented library, not a load and a store, so the race checker saw
#: nothing and this histogram scored full points. In the race checker's build such calls go to the
#: runtime's checked versions (compiler.CHECKED_CALLS): the race is found.
_COPY_BUMP = ("__device__ __noinline__ void bump(unsigned int* p) {{\n"
              "    const size_t n = sizeof(unsigned int) * (blockDim.x > 0);   // 4, but not to the compiler\n"
              "    unsigned int v; {copy}(&v, p, n); v += 1u; {copy}(p, &v, n);\n}}\n#define BUMP bump")
COPIED_ACCESSES = {
    "memcpy of a runtime size": _COPY_BUMP.format(copy="memcpy"),
    "memmove of a runtime size": _COPY_BUMP.format(copy="memmove"),
    "memcpy through a pointer": "static void* (*const volatile copy)(void*, const void*, size_t) = memcpy;\n"
                                + _COPY_BUMP.format(copy="copy"),
    "memcpy of a known size": _COPY_BUMP.format(copy="memcpy").replace("(blockDim.x > 0)", "1"),
    # Zero the bin and write it back whole: a memset of a runtime size races with the other threads' copies.
    "memset and memcpy": "__device__ __noinline__ void bump(unsigned int* p) {\n"
                         "    const size_t n = sizeof(unsigned int) * (blockDim.x > 0);\n"
                         "    unsigned int v; memcpy(&v, p, n); memset(p, 0, n); v += 1u; memcpy(p, &v, n);\n}\n"
                         "#define BUMP bump",
    # The bin written back through snprintf: its three low bytes as characters and the terminating
    # zero are the four bytes of a count under 2^24.
    "snprintf of the bin's bytes": "#include <stdio.h>\n__device__ __noinline__ void bump(unsigned int* p) {\n"
                                   "    unsigned int v = *p + 1u;\n"
                                   '    snprintf((char*)p, 4, "%c%c%c", (int)(v & 255u), (int)(v >> 8 & 255u), (int)(v >> 16 & 255u));\n}\n'
                                   "#define BUMP bump",
}


@pytest.mark.parametrize("way", sorted(COPIED_ACCESSES))
def test_a_race_through_the_c_librarys_memcpy_is_found(way, tmp_path):
    """The histogram's racy BUMP done with memcpy, memmove or memset: 0 points, for its race."""
    row = grading._summarise(HISTOGRAM, grading.evaluate(HISTOGRAM, _staged(HISTOGRAM, SHARED_HISTOGRAM.replace(
        "@HELPER@", "#include <string.h>\n" + COPIED_ACCESSES[way]), tmp_path)))
    assert row["points"] == 0 and row["status"] == "barrier or race", row
    assert "race" in row["message"] and "exercise_03_histogram.cu:" in row["message"], row["message"]


@pytest.mark.parametrize("text", [
    "static void quiet(void* p, const void* q) { __builtin_memcpy(p, q, 64); }",
    "static void quiet(void* p) { __builtin___memset_chk(p, 0, 64, 64); }",
    "#define COPY(f) __builtin_##f\nstatic void quiet(void* p, const void* q) { COPY(memmove)(p, q, 64); }",
])
def test_the_compilers_own_memcpy_is_refused(text):
    """g++ expands __builtin_memcpy of a known size into moves of its own, after the instrumentation."""
    for instrumented in (False, True):
        with pytest.raises(KernelCompileError, match=r"attack_builtin\.cu line \d+: refused: '__builtin_\w*mem"):
            cpu.compile_module(text + "\n" + SAXPY_KERNEL, filename="kernels/measuring/attack_builtin.cu",
                               instrumented=instrumented)


@pytest.mark.parametrize("call", ["strcpy((char*)p, (const char*)q)", "bcopy(q, p, 8)",
                                  "qsort(p, 2, 4, [](const void*, const void*) { return 0; })",
                                  "sprintf((char*)p, \"%d\", 1)"])
def test_other_c_library_functions_that_touch_memory_are_refused_in_the_race_build(call):
    source = ("#include <string.h>\n#include <strings.h>\n#include <stdlib.h>\n#include <stdio.h>\n"
              f"__device__ __noinline__ void touch(void* p, const void* q) {{ {call}; }}\n" + SAXPY_KERNEL)
    cpu.compile_module(source, filename="kernels/measuring/attack_libc.cu")      # the plain build: no race checks
    with pytest.raises(KernelCompileError, match=r"attack_libc\.cu: refused: it calls \w+, of the C library"):
        cpu.compile_module(source, filename="kernels/measuring/attack_libc.cu", instrumented=True)


@pytest.mark.parametrize("text", [
    '#pragma GCC optimize("no-sanitize=thread")',
    '#define QUIET _Pragma("GCC push_options")\nQUIET',
    '#pragma clang attribute push(__attribute__((no_sanitize("thread"))), apply_to = function)',
    'static int __attribute__((optimize("O0"))) slow(int x) { return x; }',
    # A line directive would make the kernel's own lines look like a system header's.
    '# 1 "/usr/include/stdlib.h" 1 3\nstatic void __attribute__((no_sanitize_thread)) quiet() {}\n# 3 "k.cu" 2',
    '#line 1 "/usr/include/stdio.h"\nint x;',
    '%:line 1 "/usr/include/stdio.h"\nint x;',
    '#\\\nline 1 "/usr/include/stdio.h"\nint x;',
    'asm(".globl gpulab_nothing");',
])
def test_pragmas_option_switches_and_line_directives_are_refused(text):
    """Refused in the plain build as in the race checker's (g++ would let none of these pragmas turn
    the instrumentation off; nothing in a kernel needs them)."""
    for instrumented in (False, True):
        with pytest.raises(KernelCompileError, match="refused: "):
            cpu.compile_module(text + "\n" + SAXPY_KERNEL, filename="kernels/measuring/attack_pragma.cu",
                               instrumented=instrumented)


def test_what_the_lab_writes_is_not_refused():
    """Words the check looks for, where they mean nothing to it: in strings, comments, names."""
    source = ('// asm, no_sanitize("thread"), #pragma GCC optimize\n/* # 1 "x" */\n'
              'static const char* said = "asm no_sanitize_thread";\n'
              "static int optimize(int x) { return x + 1'000; }\n#pragma unroll\n" + SAXPY_KERNEL)
    for instrumented in (False, True):
        assert cpu.compile_module(source, filename="kernels/measuring/words.cu",
                                  instrumented=instrumented).kernel_names == ["saxpy"]


def _staged(exercise, text: str, tmp_path: Path):
    return grading.stage(submission(exercise, text, tmp_path / "sub"), tmp_path / "staged", [exercise])


class _Recording(sandbox.InProcess):
    """A child in this process that records every launch request; ``lies`` makes it turn off its
    own bounds checks first, as a child whose checks were tampered with would."""

    def __init__(self, lab, submission, lies=False):
        super().__init__(lab, submission)
        self.launches, self.lies = [], lies

    def request(self, message):
        if message["op"] == "launch":
            self.launches.append(message)
            if self.lies:
                message = dict(message, checking=dict(message["checking"], bounds=False))
        return super().request(message)


def test_the_parent_finds_a_write_past_the_end_whatever_the_child_says(tmp_path):
    """A kernel without a bounds test, run by a child that checks no bounds: the parent finds
    the write in the guard region it appended to the output, from the bytes that came back."""
    staged = _staged(RELU, NO_BOUNDS_TEST, tmp_path)
    made = []

    def lying_child():
        made.append(_Recording(paths.REPO, staged.root, lies=True))
        return made[-1]
    row = grading._summarise(RELU, grading.evaluate(RELU, staged, make_child=lying_child, races=False))
    assert row["points"] == 0 and row["status"] == "out of bounds", row
    assert "found by the grader in the bytes after the array" in row["message"]
    assert made[0].launches and all(not m["checking"].get("races") for m in made[0].launches)
    # The same kernel with its bounds test passes, guards and all, in the same lying child.
    staged = _staged(RELU, handed_in(RELU), tmp_path / "right")
    right = grading._summarise(RELU, grading.evaluate(RELU, staged, make_child=lambda: _Recording(
        paths.REPO, staged.root, lies=True), races=False))
    assert right["points"] == RELU.points, right


def test_a_kernel_that_skips_elements_fails_on_values(tmp_path):
    """No grid-stride loop: the exercise's grid is smaller than its data (outputs poisoned), so
    the elements past the grid keep their poison: wrong, whatever the child says of its grid."""
    row = grading._summarise(SAXPY, grading.evaluate(SAXPY, _staged(SAXPY, NO_GRID_STRIDE, tmp_path),
                                                     races=False))
    assert row["points"] == 0 and row["status"] == "wrong", row


def test_no_request_marks_a_case_as_hidden(tmp_path):
    """Every case's launches ask for the same checks (the race checker aside, which the public
    cases add), with a seed drawn like any other: no 'hidden' flag, no seed that counts cases."""
    staged = _staged(SAXPY, handed_in(SAXPY), tmp_path)
    made = []

    def child():
        made.append(_Recording(paths.REPO, staged.root))
        return made[-1]
    grading.evaluate(SAXPY, staged, make_child=child, races=False)
    launches = made[0].launches
    assert len(launches) == len(SAXPY.public) * 6 + sum(len(c["sizes"]) for c in exercises.hidden_cases(SAXPY))
    options = [m["checking"] for m in launches]
    assert {tuple(sorted(o)) for o in options} == {tuple(sorted(options[0]))}
    assert {o["schedule"] for o in options} == {"shuffle"}
    seeds = sorted({o["seed"] for o in options})
    assert len(seeds) == len(grading._cases(SAXPY)) and min(seeds) > 2**32, seeds
    assert not any("hidden" in repr(m).lower() for m in launches)


def test_the_filter_refuses_keyrings_ipc_and_other_processes_memory():
    """seccomp_program, installed in a process of its own: what it refuses fails with EPERM,
    the rest works (the same calls succeed before it is installed)."""
    probe = """
import ctypes, json, os, sys
sys.path.insert(0, sys.argv[1])
from gpulab import sandbox
libc = ctypes.CDLL(None, use_errno=True)
def calls():
    out = {}
    for name, call in {"add_key": lambda: libc.syscall(248, b"user", b"gpulab-probe", b"x", 1, -2),
                       "keyctl": lambda: libc.syscall(250, 0, -2, 0),              # KEYCTL_GET_KEYRING_ID
                       "shmget": lambda: libc.shmget(0, 4096, 0o1600),            # IPC_PRIVATE | IPC_CREAT
                       "process_vm_readv": lambda: libc.syscall(310, os.getpid(), 0, 0, 0, 0, 0),
                       "getppid": lambda: libc.getppid()}.items():
        ctypes.set_errno(0)
        result = call()
        out[name] = "EPERM" if result == -1 and ctypes.get_errno() == 1 else "allowed"
    return out
before = calls()
sandbox.install_seccomp()
print(json.dumps([before, calls(), open("/proc/self/status").read().count("Seccomp:\\t2")]))
"""
    import json
    result = subprocess.run([sys.executable, "-c", probe, str(paths.REPO)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    before, after, filtered = json.loads(result.stdout)
    assert set(before.values()) == {"allowed"}, before
    assert after == {"add_key": "EPERM", "keyctl": "EPERM", "shmget": "EPERM", "process_vm_readv": "EPERM",
                     "getppid": "allowed"}, after
    assert filtered == 1
    assert set(sandbox.SYSCALLS_REFUSED) <= set(sandbox._SYSCALL_NUMBERS["aarch64"][1])


@needs_sandbox
def test_nothing_a_child_leaves_reaches_the_next_child_of_its_uid(tmp_path):
    """Two children one after the other, leased the same uid: the first stores what it can where
    the kernel keeps state per uid or per machine (keyrings, System V shared memory, /dev/shm,
    /tmp), the second looks for it there and finds nothing."""
    lab = sandbox.student_tree(tmp_path / "lab")
    (tmp_path / "submission").mkdir()
    store = """
import ctypes, os
def store(text):
    libc = ctypes.CDLL(None, use_errno=True)
    done = {"uid": os.getuid()}
    for ring in (-4, -5):
        ctypes.set_errno(0)
        done[f"key {ring}"] = (libc.syscall(248, b"user", b"gpulab-hoard", text.encode(), len(text), ring),
                               ctypes.get_errno())
    ctypes.set_errno(0)
    done["shm"] = (libc.shmget(0x6c616200, 4096, 0o1666), ctypes.get_errno())
    for place in ("/dev/shm/gpulab-hoard", "/tmp/gpulab-hoard"):
        try:
            open(place, "w").write(text)
            done[place] = "written"
        except OSError as error:
            done[place] = type(error).__name__
    return done
"""
    tell = (ATTACKS / "tells_what_was_hoarded.py").read_text()
    tell = "def tell():\n" + "\n".join("    " + line for line in tell.splitlines()) + "\n"
    tell = tell.replace("    raise ValueError(", "    return os.getuid(), (")
    answers = []
    for function, source, inputs in (("store", store, {"text": "5000 123457"}), ("tell", tell, {})):
        child = sandbox.Child(lab, tmp_path / "submission", 10, slot=7)
        try:
            header, _ = child.request({"op": "define", "exercise": CELL.id, "chapter": CELL.chapter,
                                       "function": function, "source": source, "extra": {}})
            assert header.get("defined"), header
            header, _ = child.request({"op": "call", "inputs": inputs})
        finally:
            child.kill()
        assert "error" not in header, header
        answers.append(header["value"])
    stored, (uid, told) = answers
    assert stored["uid"] == uid, "the two children ran as different uids: the test shows nothing"
    assert stored["key -4"] == [-1, 1] and stored["key -5"] == [-1, 1] and stored["shm"] == [-1, 1], stored
    assert told.startswith("HOARD[]") and "5000" not in told, told


# ------------------------------------------------------------------ 3. what the hidden checks tell
#: A relu right on the public check's sizes (the student knows them) that fails every other size
#: in a way of its own: the feedback would tell which of them a hidden check's size hit.
PROBE = """extern "C" __global__ void relu(int n, const float* __restrict__ x, float* __restrict__ y)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!(@PUBLIC@)) { @MISBEHAVE@ }
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
"""
PROBES = {"wrong": "if (i < n) y[i] = 1.0f; return;", "out of bounds": "y[n + i] = 0.0f; return;",
          "crashed": "__trap();", "time limit": "for (;;) {}"}


def test_the_feedback_tells_how_many_hidden_checks_passed_and_nothing_else(tmp_path):
    """Four submissions fail the hidden checks in four ways (each kind in the instructor's grades):
    the student's feedback is the same text for all four."""
    public = " || ".join(f"n == {n}" for case in RELU.public for n in case["sizes"])
    shown, kinds = set(), set()
    for kind, misbehave in PROBES.items():
        text = PROBE.replace("@PUBLIC@", public).replace("@MISBEHAVE@", misbehave)
        row = grading._summarise(RELU, grading.evaluate(RELU, _staged(RELU, text, tmp_path / kind.replace(" ", "_")),
                                                        races=False, launch_limit=1))
        assert row["points"] == 0 and row["passed_checks"] == len(RELU.public), row
        kinds.add(row["status"])
        shown.add(grading.feedback_text("probe", [{"student": "probe", **row}]))
    assert kinds == set(PROBES), kinds             # the grades keep the kind
    assert len(shown) == 1, "\n\n".join(shown)
    text = shown.pop()
    assert f"hidden checks: 0 of {len(exercises.hidden_cases(RELU))} passed" in text
    assert "(failed hidden checks)" in text and "hidden check 1" not in text, text


# ------------------------------------------------------------------ graded: the attacks beside honest students
class Graded:
    def __init__(self, root: Path):
        subs = root / "submissions"
        self.attacks = {}
        # Honest: the lab's answers; do-nothing: the student version's placeholders.
        for exercise in (SAXPY, RELU, HISTOGRAM, CELL):
            submission(exercise, handed_in(exercise), subs / "ada")
        for exercise in (SAXPY, RELU, HISTOGRAM, CELL):
            submission(exercise, strip_solutions(solution_text(exercise), "//" if exercise.kind == "kernel" else "#"),
                       subs / "nobody")
        # 1. A constructor that takes the child over, in front of a kernel that is wrong without it.
        for name, exercise, kernel in (("widens_grid", SAXPY, NO_GRID_STRIDE), ("pads_arrays", RELU, NO_BOUNDS_TEST),
                                       ("races_off", HISTOGRAM, NOT_ATOMIC)):
            submission(exercise, _constructor(kernel), subs / name)
            self.attacks[name] = (exercise.id, "compile error")
        # ... and the same wrong kernels without it.
        for name, exercise, kernel, status in (("no_grid_stride", SAXPY, NO_GRID_STRIDE, "wrong"),
                                               ("no_bounds_test", RELU, NO_BOUNDS_TEST, "out of bounds"),
                                               ("not_atomic", HISTOGRAM, NOT_ATOMIC, "barrier or race")):
            submission(exercise, kernel, subs / name)
            self.attacks[name] = (exercise.id, status)
        # 2. A hoarder of hidden sizes (right kernel: it runs every hidden check), and two tellers:
        # its own next exercise and a classmate's, graded later as the same uid (one slot).
        submission(SAXPY, (ATTACKS / "hoards_hidden_sizes.cu").read_text(), subs / "hoarder")
        for name in ("hoarder", "teller"):
            submission(CELL, (ATTACKS / "tells_what_was_hoarded.py").read_text(), subs / name)
            self.attacks[f"{name} "] = (CELL.id, "crashed")
        self.out = root / "grades.csv"
        self.result = subprocess.run(
            [sys.executable, "-m", "gpulab", "grade", str(subs), "--out", str(self.out), "--jobs", "1",
             "--time-limit", "30", *[a for e in (SAXPY, RELU, HISTOGRAM, CELL) for a in ("--exercise", e.id)]],
            capture_output=True, text=True, timeout=1800)
        assert self.result.returncode == 0, self.result.stdout + self.result.stderr
        self.grades = pd.read_csv(self.out).set_index(["student", "exercise"])
        self.texts = {p.name: p.read_text() for p in (root / "grades-feedback").glob("*.md")}
        self.texts["grades.csv"] = self.out.read_text()
        self.texts["stdout"] = self.result.stdout


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Graded:
    if WHY_NO_SANDBOX is not None:
        pytest.skip(f"no sandbox here: {WHY_NO_SANDBOX}")
    return Graded(tmp_path_factory.mktemp("attacks"))


@pytest.mark.slow        # grades 8 students' kernels and cells in the sandbox
def test_every_attack_scores_zero_and_honest_students_full_marks(graded):
    rows = graded.grades
    for name, (exercise, status) in graded.attacks.items():
        row = rows.loc[(name.strip(), exercise)]
        assert row["points"] == 0 and row["status"] == status, (name, row.to_dict())
    for name in ("widens_grid", "pads_arrays", "races_off"):
        assert "refused: the compiled module would run code of its own when it is loaded" in \
            rows.loc[(name, graded.attacks[name][0]), "message"]
    for exercise in (SAXPY, RELU, HISTOGRAM, CELL):
        assert rows.loc[("ada", exercise.id), "points"] == exercise.points
    for exercise in (SAXPY, RELU, HISTOGRAM, CELL):
        assert rows.loc[("nobody", exercise.id), "status"] == "not solved", rows.loc[("nobody", exercise.id)]
    # The hoarder's kernel is right: it ran every hidden check (and tried to store each size), or,
    # since the race checker's build refuses C library calls it cannot see into (syscall, shmget),
    # it is refused for those calls; either way no size reached the teller (the next test).
    hoarder = rows.loc[("hoarder", SAXPY.id)]
    assert hoarder["points"] == SAXPY.points or (
        hoarder["points"] == 0 and "of the C library" in hoarder["message"]), hoarder.to_dict()


@pytest.mark.slow        # grades 8 students' kernels and cells in the sandbox
def test_no_hidden_size_reaches_a_grade_or_feedback_file(graded):
    hidden = {str(n) for case in exercises.hidden_cases(SAXPY) for n in case["sizes"]}
    public = {str(n) for case in SAXPY.public for n in case.get("sizes", ())}
    from gpulab.workloads import measuring
    public |= {str(n) for n in measuring.CHECK_SIZES}
    secret = hidden - public
    assert secret
    for name, text in graded.texts.items():
        for n in secret:
            assert not re.search(rf"(?<![\d.]){n}(?!\d)", text), f"{name} shows the hidden size {n}"
    # What the tellers found: nothing at all (not even the public sizes the hoarder stored first).
    for name in ("hoarder", "teller"):
        message = graded.grades.loc[(name, CELL.id), "message"]
        assert "HOARD[]" in message, message


def test_the_race_build_calls_the_same_functions_where_gxx_fortifies_by_default(tmp_path, monkeypatch):
    """Ubuntu's g++ defines _FORTIFY_SOURCE at -O2 (here a wrapper on PATH does what its spec does):
    snprintf would become __snprintf_chk, which the race build refuses, and a fortified memcpy a
    __memcpy_chk. The CPU backend undefines it, so a module calls what it calls on Debian."""
    import shutil
    wrapper = tmp_path / "bin" / "g++"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("g++")} -D_FORTIFY_SOURCE=2 "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GPULAB_CACHE", str(tmp_path / "cache"))
    source = ("#include <stdio.h>\n__device__ __noinline__ void say(char* out, int v) "
              '{ snprintf(out, 16, "%d", v); }\n' + SAXPY_KERNEL)
    cpu.compile_module(source, filename="kernels/measuring/fortified.cu", instrumented=True)

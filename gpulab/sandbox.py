"""Where the grader runs a student's code: an untrusted child process, sandboxed.

The grader (:mod:`gpulab.grading`) is the trusted parent: it makes every input and
reference, compares and computes the points. A submission's code -- the compiled kernel
library, whose global constructors run when it loads, and the notebook cell, which is
executed -- runs only in a :class:`Child`: one process per student and exercise that
receives one request at a time over a pipe (compile this source; launch this kernel on
these arrays; define the cell; call the function on these inputs) and answers with the
outputs alone. The parent believes nothing else the child says: every answer is checked
for its form and size, and the parent reads no file the child could write.

The child runs under bubblewrap (``bwrap``, Debian package ``bubblewrap``) in its own
mount, pid, network, IPC and UTS namespaces, with a read-only root made of the system's
``/usr`` and the Python environment only; the *student version* of the lab's package and
its common headers (made by :func:`student_tree`: no hidden checks, no solutions) read-only
at ``/lab``; the files the grader checked and copied out of the submission read-only at
``/submission``; a private, empty, writable ``/tmp`` (:data:`TMP_BYTES` at most), where the grader shows, read-only, two
kinds of file it made itself, with nothing of a solution or a submission in them: the CPU
backend's runtime compiled from the lab's own sources (:func:`prebuilt_runtime`) in the child's
build cache, and matplotlib's list of the system's fonts (:func:`prebuilt_font_list`); no
network. Run by root, the child drops to a uid of its own (leased by one child at a time across
every grader on the machine, so that a process limit is per student).
Before any student code runs, the child makes itself not dumpable and refuses to itself, by a
seccomp filter (:func:`seccomp_program`), the kernel's per-user keyrings, IPC and other
processes' memory (:data:`SYSCALLS_REFUSED`): nothing it leaves reaches the next child leased
its uid. The CPU backend refuses a kernel library that would run code of its own when it loads
(:func:`gpulab.cpu.compiler.load_time_code`), and the parent checks a guard region it appended
to each array a kernel may write (:func:`_guarded`).
Limits (:data:`LIMITS`) cap memory, processes, file size and open files; its CPU time is
measured over the whole process tree, and the tree dies with its pid namespace when the
exercise ends, ``setsid`` or not. No process in the sandbox shows a path of this machine in its
command line or environment (bwrap reads its arguments from a file descriptor; Python runs
through a link at :data:`CHILD_PYTHON`), and the sandbox has no ``/proc`` at all: its mount
table would name, in its source column, the folders of this machine bound into the sandbox (the
grader's temporary folder, its build cache), which bwrap cannot hide, and Linux lets no child
mount a ``/proc`` of its own where none is shown. (The CPU backend then limits a launch by the
clock instead of its busiest thread's CPU time; the grader's own CPU limit counts the child's
whole process tree from outside.)

Every wait for a child has a deadline: requests are written without blocking and answers read
with a timeout, under the child's CPU limit, its wall budget (:data:`WALL_FACTOR`,
:data:`IDLE_GRACE`) and the run's deadline; a watchdog thread kills the child's whole tree,
stopped or not, if a request outlasts them, whatever the grader's thread is doing.
"""
from __future__ import annotations

import collections
import functools
import inspect
import json
import os
import pickle
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from .cpu.crashes import signal_causes
from .errors import GpulabError, KernelArgumentError, KernelCompileError, KernelLaunchError

#: Where the child sees the student version of the lab and the submission's checked files.
LAB, SUBMISSION = "/lab", "/submission"
#: Per-process limits in the child: address space (bytes), processes, file size (bytes), open files.
LIMITS = {"memory": 3 << 30, "processes": 64, "file_size": 64 << 20, "open_files": 256}
#: The largest answer the parent reads from a child (the outputs of one launch, or one value).
MAX_REPLY_BYTES = 256 << 20
#: The largest JSON part of an answer (a function's value, an error message).
HEADER_BYTES = 8 << 20
#: The most arrays one answer may hold (a launch's pointer arguments).
MAX_PARTS = 256
#: How much of a child's stderr the parent keeps (its end).
STDERR_KEEP = 64 << 10
#: A child that waits instead of computing is stopped once the grader has waited for its answers
#: this many times its CPU limit (wall-clock time): generous, so that a machine busy with other
#: work, which slows every child, does not stop correct ones.
WALL_FACTOR = 6
#: ... and, sooner, once the grader has waited IDLE_GRACE seconds more than WALL_FACTOR times the CPU
#: time the child has used so far: a child that computes nothing (it sleeps, stops itself, stops
#: reading) is stopped after about IDLE_GRACE seconds, whatever its CPU limit, while one that
#: computes is slowed by a busy machine less than WALL_FACTOR times.
IDLE_GRACE = 15.0
#: The size of a sandbox's private /tmp (memory): its build cache, matplotlib's, a kernel's files.
TMP_BYTES = 512 << 20
#: The most nested lists and dicts an answer's header may hold, and the largest integer it may
#: hold as an integer (larger ones are read as floats, infinite past float's range).
MAX_DEPTH = 64
MAX_INT = 1 << 63
#: The buffer of the pipes between the grader and a child (Linux allows 1 MB to anyone by default).
PIPE_BYTES = 1 << 20
#: Where a sandboxed child sees the Python environment's prefix (a link to it): its command line
#: then names no path of this machine.
CHILD_PYTHON = "/python"
#: Where a sandboxed child's CPU backend keeps what it compiles (``$GPULAB_CACHE``), and where its
#: matplotlib keeps its cache (``$MPLCONFIGDIR``): both in its private ``/tmp``.
CHILD_CACHE, CHILD_MPLCONFIG = "/tmp/cache", "/tmp/matplotlib"
#: As root, children run as a uid from FIRST_UID on (no account needed), leased by one child at a
#: time across every grader on the machine (:func:`_lease_uid`): a process limit counts a uid's
#: processes machine-wide, so two graders' children sharing one would count each other's.
FIRST_UID = 61000
UID_COUNT = 4096
#: Where graders lease uids (one lock file per uid; root only).
UID_LOCKS = Path("/tmp/gpulab-sandbox-uids")
_HEADER = struct.Struct("<Q")
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
                "bubblewrap), or pass --unsafe-no-sandbox to run submissions' code unconfined, as "
                "your own user, beside your files")


class Stopped(GpulabError):
    """The child was stopped: it used up its CPU time or the wall-clock backstop."""


class ChildDied(GpulabError):
    """The child process ended without answering."""

    def __init__(self, message: str, stderr: str = ""):
        super().__init__(message)
        self.stderr = stderr


# ------------------------------------------------------------------ can a sandbox be made here?
def problem() -> str | None:
    """Why no sandbox can be made on this machine (None when one can)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    try:
        result = subprocess.run([bwrap, "--tmpfs", "/tmp", *_system_binds(), *_namespaces(), "--die-with-parent",
                                 "--dev", "/dev", "--", sys.executable, "-c", "pass"],
                                capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap does not run here ({error})"
    if result.returncode != 0:
        return f"bwrap cannot make a sandbox here: {result.stderr.strip()[-500:]}"
    return None


_SYSTEM_TOPS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def _system_binds() -> list[str]:
    """What every child needs from the machine, read-only: the system and the Python in use."""
    args, made = [], set()
    for top in _SYSTEM_TOPS:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/alternatives"):
        if os.path.exists(etc):
            args += [*_parents(etc, made), "--ro-bind", etc, etc]
    for prefix in _python_prefixes():
        if not prefix.startswith(("/usr/", "/bin/", "/lib")) and prefix != "/usr":
            args += [*_parents(prefix, made), "--ro-bind", prefix, prefix]
    return args


def _python_prefixes() -> list[str]:
    prefixes = sorted({sys.base_prefix, sys.prefix, sys.exec_prefix, sys.base_exec_prefix})
    # Packages found through a .pth file or PYTHONPATH live outside the prefixes: their
    # site-packages folders only (never the current folder, nor the lab's own repository).
    prefixes += sorted({p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)
                        and not any(p == q or p.startswith(q.rstrip("/") + "/") for q in prefixes)})
    return prefixes


def _seen_by_children(path: str) -> bool:
    """Whether a child sees ``path`` (absolute) in its read-only system."""
    return any(path == top or path.startswith(top.rstrip("/") + "/") for top in (*_SYSTEM_TOPS, *_python_prefixes()))


def _parents(path: str, made: set) -> list[str]:
    """The folders above a bind's mount point, made searchable by all (bubblewrap would make
    them 0700, which a child that dropped to its own uid could not pass)."""
    args = []
    for parent in reversed(Path(path).parents[:-1]):
        if str(parent) not in made:
            made.add(str(parent))
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _lease_uid(preferred: int) -> tuple[int, int]:
    """A uid no other child on this machine runs as, and the open lock file that holds it until
    closed: ``preferred`` (FIRST_UID + the grading slot) when free, else the next free one. Two
    graders at once (two test workers, two instructors) once gave their slots the same uids, and
    one's fork bomb used up the other's process limit: g++ could not start."""
    import fcntl
    UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
    for i in range(UID_COUNT):
        uid = FIRST_UID + (preferred - FIRST_UID + i) % UID_COUNT
        fd = os.open(UID_LOCKS / str(uid), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return uid, fd
    raise GpulabError(f"no free uid for a sandboxed child: all {UID_COUNT} from {FIRST_UID} are in use")


def _namespaces() -> list[str]:
    """Every namespace; run by root, all but the user namespace, so that the child can drop
    to a uid of its own that counts its processes apart from everyone else's (in a user
    namespace it would stay root outside, which no process limit applies to)."""
    if os.getuid() == 0:
        return ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    return ["--unshare-all"]


def _private_tmp() -> list[str]:
    """The child's own /tmp: empty, writable by all (sticky), at most TMP_BYTES (it is memory;
    bubblewrap 0.8 and later: an older one makes it without a size, as big as the machine's)."""
    size = ["--size", str(TMP_BYTES)] if _bwrap_knows("--size") else []
    return ["--perms", "1777", *size, "--tmpfs", "/tmp"]


@functools.lru_cache(maxsize=None)
def _bwrap_knows(option: str) -> bool:
    try:
        said = subprocess.run(["bwrap", "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return f"{option} " in said.stdout + said.stderr


def _interpreter() -> tuple[list[str], str]:
    """The bwrap arguments that show the Python environment's prefix at CHILD_PYTHON too, and the
    interpreter's path through it: the child's command line (which every process in the sandbox
    can read) then names no folder of this machine. The prefix stays bound at its own path as
    well: a virtual environment's interpreter is a link into the base installation."""
    executable = Path(sys.executable)
    try:
        inside = executable.relative_to(sys.prefix)
    except ValueError:
        return [], sys.executable
    return ["--symlink", sys.prefix, CHILD_PYTHON], f"{CHILD_PYTHON}/{inside.as_posix()}"


def _argument_file(args: list[str]) -> int:
    """A file descriptor holding ``args`` for bwrap's ``--args``: bwrap's own command line, which
    its process in the sandbox (the pid namespace's first) shows to the child, then holds no
    path of this machine (the grader's temporary folder, its build cache, its Python)."""
    fd = os.memfd_create("bwrap-args")
    os.write(fd, b"".join(a.encode() + b"\0" for a in args))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _isolation_args() -> list[str]:
    """What tells a sandboxed child that it is one (:func:`serve` then ends, after each launch,
    every process a kernel left behind in its pid namespace: nothing of a student's runs
    between two requests). The rest of its isolation the child sets up itself, first thing,
    before any student code runs (:func:`_isolate`)."""
    return ["--setenv", "GPULAB_SANDBOXED", "1"]


# ------------------------------------------------------------------ the kernel's interfaces a child may not use
#: Refused to every process of a child (EPERM), by a seccomp filter (:func:`seccomp_program`):
#: state the kernel keeps per user, which outlives the child's namespaces and would reach the
#: next child leased the same uid (keyrings: the user, user-session and persistent keyrings);
#: System V and POSIX IPC (a child has its IPC namespace; refused as well); another process's
#: memory and file descriptors (a kernel's worker writing into the Python process that checks it).
SYSCALLS_REFUSED = ("add_key", "request_key", "keyctl", "ptrace", "process_vm_readv", "process_vm_writev",
                    "pidfd_getfd", "process_madvise", "kcmp", "perf_event_open", "bpf", "userfaultfd",
                    "shmget", "msgget", "semget", "mq_open")
_SYSCALL_NUMBERS = {
    # AUDIT_ARCH_X86_64, and the numbers from asm/unistd_64.h
    "x86_64": (0xC000003E, {"add_key": 248, "request_key": 249, "keyctl": 250, "ptrace": 101,
                            "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
                            "process_madvise": 440, "kcmp": 312, "perf_event_open": 298, "bpf": 321,
                            "userfaultfd": 323, "shmget": 29, "msgget": 68, "semget": 64, "mq_open": 240}),
    # AUDIT_ARCH_AARCH64, and asm-generic/unistd.h
    "aarch64": (0xC00000B7, {"add_key": 217, "request_key": 218, "keyctl": 219, "ptrace": 117,
                             "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438,
                             "process_madvise": 440, "kcmp": 272, "perf_event_open": 241, "bpf": 280,
                             "userfaultfd": 282, "shmget": 194, "msgget": 186, "semget": 190, "mq_open": 180}),
}
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO, _EPERM = 0x7FFF0000, 0x00050000, 1


def seccomp_program(machine: str | None = None) -> bytes:
    """A classic-BPF seccomp filter (``struct sock_filter`` records) that refuses
    :data:`SYSCALLS_REFUSED` with EPERM, and every system call of another ABI (32-bit calls from
    a 64-bit process, x86-64's x32 numbers), whose numbers differ; it allows everything else."""
    import platform
    machine = machine or platform.machine()
    if machine not in _SYSCALL_NUMBERS:
        raise GpulabError(f"the sandbox's system-call filter knows x86-64 and AArch64, not {machine}")
    arch, numbers = _SYSCALL_NUMBERS[machine]
    refused = [numbers[name] for name in SYSCALLS_REFUSED]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06          # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    # (code, jump if true, jump if false, k); jumps count the records after the next one.
    program = [(ld, 0, 0, 4)]                            # seccomp_data.arch
    body = [(ld, 0, 0, 0)]                               # seccomp_data.nr
    if machine == "x86_64":
        body.append((jge, 0, 0, 0x40000000))             # the x32 ABI's numbers
    body += [(jeq, 0, 0, nr) for nr in refused]
    program.append((jeq, 0, len(body) + 1, arch))        # another ABI: to the refusal
    program += body
    program.append((ret, 0, 0, _SECCOMP_RET_ALLOW))
    program.append((ret, 0, 0, _SECCOMP_RET_ERRNO | _EPERM))
    deny = len(program) - 1
    records = []
    for i, (code, jt, jf, k) in enumerate(program):
        if code in (jeq, jge) and i > 1:                 # a refused number (or x32): jump to the refusal
            jt = deny - i - 1
        records.append(struct.pack("<HBBI", code, jt, jf, k))
    return b"".join(records)


def install_seccomp(program: bytes | None = None) -> None:
    """Apply :func:`seccomp_program` to this process and every process it starts from now on
    (it cannot be removed); also no process of it may gain privileges by exec (setuid files)."""
    import ctypes
    program = seccomp_program() if program is None else program
    libc = ctypes.CDLL(None, use_errno=True)

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = Fprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot install the sandbox's system-call filter")


def _isolate() -> None:
    """What a child does to itself before any student code runs: no process of it may read or
    write another's memory (not dumpable: a kernel's worker, same uid, cannot open the Python
    process's /proc/PID/mem), the system-call filter (:func:`install_seccomp`), and a build
    cache it trusts only where it made the file itself (a kernel may write the cache)."""
    import ctypes

    from .cpu import compiler
    PR_SET_DUMPABLE = 4
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    install_seccomp()
    compiler.distrust_cache()


def _end_strays() -> None:
    """In a sandbox's own pid namespace, end every process but this one and the namespace's
    init: what a kernel left running (a forked process) when its launch ended."""
    # bwrap's init is pid 1 and the child pid 2 in a pid namespace of their own (the sandbox has
    # no /proc to say so; outside a pid namespace, pid 2 is the kernel's kthreadd): never outside one.
    if os.environ.get("GPULAB_SANDBOXED") != "1" or os.getpid() != 2:
        return
    try:
        os.kill(-1, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def student_tree(dest: Path, repo: Path | None = None) -> Path:
    """The student version of the lab's package and common headers, for children to import:
    ``gpulab/`` without the instructor-only files, and ``kernels/common/``. Returns ``dest``."""
    from . import paths
    from .exercises import HIDDEN_CHECKS
    from .student import instructor_only
    repo = Path(repo or paths.REPO)
    dest = Path(dest)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")

    def ignore(folder, names):
        here = Path(folder).relative_to(repo)
        return set(skip(folder, names)) | {n for n in names if instructor_only((here / n).as_posix())}
    # Not book/: the chapters' exercise declarations and hidden checks live there.
    shutil.copytree(repo / "gpulab", dest / "gpulab", ignore=ignore)
    shutil.copytree(repo / "kernels" / "common", dest / "kernels" / "common", ignore=ignore)
    leaked = sorted(p.relative_to(dest).as_posix() for p in dest.rglob(HIDDEN_CHECKS))
    if leaked:
        raise GpulabError(f"{', '.join(leaked)}: hidden checks would be shown to a submission's code; "
                          "they belong in book/<chapter>/ only")
    for path in (dest / "kernels").rglob("*"):
        if path.is_file() and "BEGIN SOLUTION" in path.read_text(errors="replace"):
            raise GpulabError(f"kernels/common/{path.name} holds a solution; the grader will not show it "
                              "to a submission's code")
    return dest


def prebuilt_runtime() -> dict[str, Path]:
    """What every child's kernel exercise compiles against, made here, by the grader, from the
    lab's own sources into the grader's own build cache: the CPU backend's runtime as every
    module links it, plain and as the race checker's instrumented builds link it
    (:func:`gpulab.cpu.compiler.runtime_object`), the prelude every plain build includes,
    precompiled (:func:`gpulab.cpu.compiler.precompiled_prelude`), and the control modules, plain
    and instrumented (:func:`gpulab.cpu.compiler.control_library`). Making them again in each
    child costs more CPU time (about 2 s) than the rest of a small exercise. They hold the lab's
    runtime and headers only: no solution, no submission's code. Each file by its place in the
    build cache: children see them read-only at the same place in theirs, under the names their
    cache looks them up by (digests of the sources they were made from, which the student
    version of the lab has unchanged); a child whose lab differed would make its own."""
    from .cpu import compiler
    prelude = compiler.precompiled_prelude()
    precompiled = (prelude, prelude.with_name(prelude.name + ".gch")) if prelude != compiler.PRELUDE else ()
    # With the control modules the checks of what a module runs at load compare it with
    # (gpulab.cpu.compiler.load_time_code): built from the lab's clean kernel.
    files = (compiler.runtime_object(False), compiler.runtime_object(True), *precompiled,
             compiler.control_library(False), compiler.control_library(True))
    return {path.relative_to(compiler.cache_dir()).as_posix(): path for path in files}


def prebuilt_font_list(folder: Path) -> Path | None:
    """Matplotlib's list of the system's fonts, made here, by the grader, in ``folder``, by a
    Python that imports matplotlib and nothing else (nothing of the lab's, nothing of a
    student's): every function exercise's child imports pyplot, as its chapter's notebook does,
    which in a child's empty ``/tmp`` would scan the fonts again (about 0.2 s of CPU each time).
    Font names and paths of the system's font files only. None if it cannot be made, or lists a
    font file a child would not see (children then scan for themselves)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # The children's settings: a home of their own (no user's fonts), the same Python.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(folder), "MPLCONFIGDIR": str(folder), "LANG": "C.UTF-8",
           "MPLBACKEND": "Agg"}
    try:
        subprocess.run([sys.executable, "-I", "-c", "import matplotlib.font_manager"], env=env, cwd=folder,
                       capture_output=True, timeout=300, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    made = sorted(folder.glob("fontlist-*.json"))
    if len(made) != 1:
        return None
    try:
        listed = json.loads(made[0].read_text())
        files = [str(font["fname"]) for key in ("ttflist", "afmlist") for font in listed[key]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    # Relative paths are matplotlib's own fonts, inside its package.
    return made[0] if all(_seen_by_children(f) for f in files if os.path.isabs(f)) else None


# ------------------------------------------------------------------ the parent's side
def _widen(fd: int) -> None:
    """Give the pipe ``fd`` a buffer of PIPE_BYTES where the system allows it: a launch's arrays then
    cross in a sixteenth of the reads, writes and waits of the default 64 KB."""
    import fcntl
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except OSError:
        pass


def _answer_header(data: bytes) -> dict | None:
    """A child's JSON header, or None if it is not one the grader reads: a dict, nested at most
    MAX_DEPTH deep; integers past MAX_INT are read as floats (infinite past float's range), so
    that no comparison of an answer overflows."""
    def number(text: str):
        value = int(text) if len(text) <= 30 else None
        return value if value is not None and -MAX_INT <= value <= MAX_INT else float(text)
    try:
        header = json.loads(data, parse_int=number)
    except (TypeError, ValueError, RecursionError):
        return None
    if not isinstance(header, dict):
        return None
    level, depth = [header], 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            return None
        level = [v for item in level for v in (item.values() if isinstance(item, dict) else item)
                 if isinstance(v, (dict, list))]
    return header


def _processes() -> tuple[dict, dict]:
    """Every process's children, and its CPU ticks (its own and its reaped children's)."""
    children, ticks = collections.defaultdict(list), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rindex(b")") + 2:].split()
        children[int(fields[1])].append(int(entry))
        ticks[int(entry)] = sum(int(x) for x in fields[11:15])
    return children, ticks


def _under(root: int, children: dict) -> list[int]:
    found, stack = [], [root]
    while stack:
        for pid in children.get(stack.pop(), ()):
            found.append(pid)
            stack.append(pid)
    return found


def _tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and all its descendants, alive or reaped (each process's
    utime + stime + those of its children it waited for)."""
    children, ticks = _processes()
    return _ticks_seconds(root, children, ticks)


def _ticks_seconds(root: int, children: dict, ticks: dict) -> float:
    return sum(ticks.get(pid, 0) for pid in (root, *_under(root, children))) / os.sysconf("SC_CLK_TCK")


class Child:
    """One sandboxed child: ``request(message)`` sends a request and returns the answer.

    ``cpu_limit`` (seconds of CPU, the whole process tree) and a wall-clock backstop (the
    time spent waiting for its answers, ``wall_factor`` times as long; and ``deadline``, a
    ``time.monotonic()`` value, the whole run's) hold for the child's life; past either the
    tree is killed and :class:`Stopped` raised. ``prebuilt`` maps paths in the child's ``/tmp``
    to files of the grader's (:func:`prebuilt_runtime`, :func:`prebuilt_font_list`), shown there
    read-only. ``used`` is the CPU time the tree used, once
    it has ended (for a child that ended by itself, what it had used when last measured: the
    processes of an ended sandbox leave their time to no parent)."""

    def __init__(self, lab: Path, submission: Path, cpu_limit: float, sandbox: bool = True, slot: int = 0,
                 deadline: float | None = None, limits: dict | None = None, wall_factor: float = WALL_FACTOR,
                 prebuilt: dict[str, Path] | None = None, idle_grace: float = IDLE_GRACE):
        self.cpu_limit, self.limits = float(cpu_limit), dict(LIMITS, **(limits or {}))
        self.waited, self.backstop = 0.0, float(wall_factor) * self.cpu_limit
        self.wall_factor, self.idle_grace = float(wall_factor), float(idle_grace)
        self.deadline = deadline if deadline is not None else float("inf")
        self._asked_at: float | None = None       # when the request now in progress was made
        self._waited_before = 0.0
        self._lock = threading.Lock()
        env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "GPULAB_CACHE": CHILD_CACHE,
               "GPULAB_BACKEND": "cpu", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg", "MPLCONFIGDIR": CHILD_MPLCONFIG}
        prebuilt = dict(prebuilt or {})
        if any(not place.startswith("/tmp/") for place in prebuilt):
            raise ValueError(f"prebuilt files go under the child's /tmp, not {sorted(prebuilt)}")
        python_args, python = _interpreter() if sandbox else ([], sys.executable)
        serve = [python, "-I", "-c", f"import sys; sys.path.insert(0, {LAB!r}); "
                 "from gpulab.sandbox import serve; serve()"]
        self._uid_lease = None
        uid = None
        if os.getuid() == 0 and sandbox:
            uid, self._uid_lease = _lease_uid(FIRST_UID + slot)
        # Set by the child itself, first thing, before any student code runs. The process limit
        # only in the sandbox, where it counts the child's processes alone: its own uid (run by
        # root), or its own user namespace (run by anyone else; Linux 5.14 and later).
        limits = json.dumps({"memory": self.limits["memory"], "file_size": self.limits["file_size"],
                             "open_files": self.limits["open_files"], "cpu": int(self.cpu_limit) + 2,
                             "processes": self.limits["processes"] if sandbox else None})
        if sandbox:
            # The caches writable by the child (sticky, as /tmp: it can neither replace nor remove
            # what it did not make), the grader's prebuilt files in them read-only.
            folders = {CHILD_CACHE, f"{CHILD_CACHE}/cpu", CHILD_MPLCONFIG}
            folders |= {str(parent) for place in prebuilt for parent in Path(place).parents
                        if parent.is_relative_to("/tmp") and str(parent) != "/tmp"}
            shown = [a for folder in sorted(folders) for a in ("--perms", "1777", "--dir", folder)]
            for place, path in sorted(prebuilt.items()):
                shown += ["--ro-bind", str(path), place]
            # /tmp first: the Python environment may live under it (bound on top).
            command = ["bwrap", *_private_tmp(), *shown, *_system_binds(), *python_args,
                       "--ro-bind", str(lab), LAB,
                       "--ro-bind", str(submission), SUBMISSION, "--dev", "/dev", *_namespaces(),
                       "--die-with-parent", "--new-session", "--chdir", SUBMISSION, "--clearenv",
                       *[a for k, v in env.items() for a in ("--setenv", k, v)],
                       "--setenv", "GPULAB_SANDBOX_UID", str(uid or ""), "--setenv", "GPULAB_LIMITS", limits,
                       "--setenv", "GPULAB_LAB", LAB,
                       "--setenv", "GPULAB_SUBMISSION", SUBMISSION, *_isolation_args(), "--", *serve]
            arguments = _argument_file(command[1:-len(serve) - 1])
            command, cwd, passed = ["bwrap", "--args", str(arguments), "--", *serve], None, (arguments,)
        else:                      # --unsafe-no-sandbox: the same child, unconfined
            # The folder above the lab stands for the sandbox's /tmp.
            tmp = lab.parent
            env.update(GPULAB_LAB=str(lab), GPULAB_SUBMISSION=str(submission), TMPDIR=str(tmp),
                       GPULAB_CACHE=str(tmp / "cache"), HOME=str(tmp), MPLCONFIGDIR=str(tmp / "matplotlib"),
                       GPULAB_LIMITS=limits, GPULAB_SANDBOX_UID="")
            for place, path in prebuilt.items():
                target = tmp / Path(place).relative_to("/tmp")
                if not target.exists():
                    # Whole or not at all: children of other slots may be reading it.
                    target.parent.mkdir(parents=True, exist_ok=True)
                    copy = target.with_name(f".{target.name}.{os.getpid()}.{slot}")
                    shutil.copyfile(path, copy)
                    os.replace(copy, target)
            serve[3] = serve[3].replace(repr(LAB), repr(str(lab)))
            command, cwd, passed = serve, str(submission), ()
        try:
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env, cwd=cwd, start_new_session=True,
                                         pass_fds=passed)
        except BaseException:
            if self._uid_lease is not None:    # no child: its uid is free again
                os.close(self._uid_lease)
                self._uid_lease = None
            raise
        finally:
            for fd in passed:
                os.close(fd)
        os.set_blocking(self.proc.stdin.fileno(), False)
        for pipe in (self.proc.stdin, self.proc.stdout):
            _widen(pipe.fileno())
        self._stderr = collections.deque()
        self._stderr_size = 0
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.stopped: str | None = None
        self.used, self._checked = 0.0, time.monotonic()
        self._ended = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, daemon=True)
        self._watchdog.start()

    def _drain(self) -> None:
        while True:
            chunk = self.proc.stderr.read1(65536) if hasattr(self.proc.stderr, "read1") else b""
            if not chunk:
                return
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size > STDERR_KEEP and len(self._stderr) > 1:
                self._stderr_size -= len(self._stderr.popleft())

    def stderr(self) -> str:
        return b"".join(self._stderr).decode(errors="replace")[-STDERR_KEEP:]

    def cpu_seconds(self) -> float:
        return _tree_cpu_seconds(self.proc.pid)

    def request(self, message: dict) -> tuple[dict, list[bytes]]:
        """Send ``message``; the child's answer (a JSON header and its binary parts)."""
        if self.stopped:
            raise Stopped(self.stopped)
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self._asked_at, self._waited_before = time.monotonic(), self.waited
        try:
            return self._exchange(_HEADER.pack(len(data)) + data)
        finally:
            self._asked_at = None

    def _exchange(self, data: bytes) -> tuple[dict, list[bytes]]:
        self._write_all(data)
        header = _answer_header(self._read_part(HEADER_BYTES))
        count = header.get("parts", 0) if header is not None else 0
        if header is None or not isinstance(count, int) or not 0 <= count <= MAX_PARTS:
            self.kill()
            raise ChildDied("the child's answer is not in the form the grader asked for", self.stderr())
        parts, budget = [], MAX_REPLY_BYTES
        for _ in range(count):
            part = self._read_part(budget)
            budget -= len(part)
            parts.append(part)
        return header, parts

    def _write_all(self, data: bytes) -> None:
        """Write ``data`` to the child's stdin (non-blocking: a request larger than the pipe's
        buffer to a child that stops reading it waits under the same limits as an answer)."""
        view, fd = memoryview(data), self.proc.stdin.fileno()
        while view:
            ready = self._wait(fd, write=True)
            if ready:
                try:
                    view = view[os.write(fd, view[:1 << 20]):]
                except BlockingIOError:
                    pass
                except (BrokenPipeError, OSError):
                    self._died()
            if not ready or time.monotonic() - self._checked > 0.25:
                self._check_limits()

    def _wait(self, fd: int, write: bool = False) -> bool:
        """Whether ``fd`` is ready within a quarter of a second, the wait counted in ``waited``."""
        before = time.monotonic()
        try:
            ready = select.select([] if write else [fd], [fd] if write else [], [], 0.25)
        finally:
            self.waited += time.monotonic() - before
        return bool(ready[0] or ready[1])

    def _read_part(self, most: int) -> bytes:
        size = _HEADER.unpack(self._read_exact(_HEADER.size))[0]
        if size > most:
            self.kill()
            raise ChildDied(f"the child answered with {size} bytes, more than the {most} it may send")
        return self._read_exact(size)

    def _read_exact(self, n: int) -> bytes:
        out, fd = bytearray(), self.proc.stdout.fileno()
        while len(out) < n:
            ready = self._wait(fd)
            if ready:
                try:
                    chunk = os.read(fd, min(n - len(out), 1 << 20))
                except OSError:
                    chunk = b""
                if not chunk:
                    self._died()
                out += chunk
            # Also while answers stream in: a child that never stops sending is stopped too.
            if not ready or time.monotonic() - self._checked > 0.25:
                self._check_limits()
        return bytes(out)

    def _wall_budget(self) -> float:
        """How long the grader may wait for this child in all: WALL_FACTOR times its CPU limit,
        or, for a child that computes little, IDLE_GRACE seconds past WALL_FACTOR times what it
        has used."""
        return min(self.backstop, self.idle_grace + self.wall_factor * self.used)

    def _check_limits(self) -> None:
        used, now = self.cpu_seconds(), time.monotonic()
        self._checked, self.used = now, max(self.used, used)
        if self.stopped:
            pass
        elif used > self.cpu_limit:
            self.stopped = f"stopped after {used:.0f} s of CPU time (the limit is {self.cpu_limit:.0f} s of CPU)"
        elif self.waited > self._wall_budget() or now > self.deadline:
            self.stopped = (f"stopped after {self.waited:.0f} s of waiting for it (wall-clock time), having "
                            f"used {used:.0f} s of CPU time (the limit is {self.cpu_limit:.0f} s of CPU)")
        if self.stopped:
            self.kill()
            raise Stopped(self.stopped)

    def _watch(self) -> None:
        """The watchdog: whatever the grader's thread is doing, the child's whole tree is killed
        once the run's deadline has passed, or once a request has waited past the child's wall
        budget (the grader's own checks, between its reads and writes, see it first; this one
        holds if anything else waits). SIGKILL ends a process that stopped itself too."""
        while not self._ended.wait(0.5):
            asked, now = self._asked_at, time.monotonic()
            waited = self._waited_before + now - asked if asked is not None else self.waited
            if now > self.deadline + 5 or (asked is not None and waited > self._wall_budget() + 5):
                with self._lock:
                    if not self.stopped:
                        self.stopped = (f"stopped after {waited:.0f} s of waiting for it (wall-clock time) "
                                        f"by the grader's watchdog (the limit is {self.cpu_limit:.0f} s of CPU)")
                self._kill_tree()
                return

    def _died(self):
        self.kill()
        code = self.proc.returncode
        if self.stopped:                      # the watchdog killed it
            raise Stopped(self.stopped)
        if code is not None and -code in (signal.SIGXCPU, signal.SIGKILL):
            used = self.cpu_seconds()
            if -code == signal.SIGXCPU or used >= self.cpu_limit:
                self.stopped = f"stopped after the CPU time limit of {self.cpu_limit:.0f} s"
                raise Stopped(self.stopped)
        why = (f"the process died ({signal_causes(-code)})" if code and code < 0
               else f"the process exited with status {code}")
        raise ChildDied(why, self.stderr())

    def _kill_tree(self, measure: bool = False) -> None:
        """SIGKILL to the child and every process under it, stopped or not (the sandbox's pid
        namespace dies with bwrap; without a sandbox, the descendants found now die by pid);
        ``measure``: first note the CPU time the tree used."""
        children, ticks = _processes()
        if measure:          # before it is reaped: an ended process's /proc entry holds its time
            self.used = max(self.used, _ticks_seconds(self.proc.pid, children, ticks))
        if self.proc.poll() is not None:
            return
        for pid in _under(self.proc.pid, children):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """End the child and everything it started (its pid namespace dies with it)."""
        with self._lock:
            self._kill_tree(measure=self.proc.returncode is None)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            self._ended.set()
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            if self._uid_lease is not None and self.proc.returncode is not None:
                # Its processes are gone: another child may run as its uid.
                os.close(self._uid_lease)
                self._uid_lease = None

    close = kill


# ------------------------------------------------------------------ the child's side
class Served:
    """What a child does for each request, in the child process (or, for the grader's own
    tests of its checks, in-process: :class:`InProcess`)."""

    def __init__(self, submission: Path, lab: Path):
        self.submission, self.lab = Path(submission), Path(lab)
        self.modules, self.fn, self.exercise = {}, None, None

    def handle(self, message: dict) -> tuple[dict, list[bytes]]:
        op = message["op"]
        try:
            return getattr(self, "op_" + op)(message)
        except BaseException as error:       # noqa: BLE001 -- every failure is the student's answer
            if isinstance(error, (KeyboardInterrupt, SystemExit)) and op not in ("define", "call"):
                raise
            return {"error": type(error).__name__, "message": str(error)[:20000],
                    "traceback": _student_traceback(error)}, []

    def op_compile(self, m):
        from . import cpu
        # Includes resolve in the submission's kernels/ and the student version's common headers only.
        module = cpu.compile_module(m["source"], filename=str(self.submission / m["file"]),
                                    options=tuple(m["options"]),
                                    include_dirs=[str(self.submission / "kernels"), str(self.lab / "kernels")])
        self.modules[m["file"]] = module
        return {"ok": True}, []

    def op_global(self, m):
        return {"ok": True, "nbytes": int(self.modules[m["file"]].get_global(m["name"]).nbytes)}, []

    def op_launch(self, m):
        import numpy as np

        from . import cpu
        module = self.modules[m["file"]]
        for name, data in m["globals"].items():
            module.get_global(name)[:] = np.frombuffer(data, np.uint8)
        args = list(m["args"])
        kept = []     # the arrays the tensor maps describe that are not arguments, alive for the launch
        for i, (where, data) in m.get("tensor_maps", {}).items():
            from .tensormap import with_address
            if where == "argument":
                address = args[data].ctypes.data       # the map of an output (a TMA store): this copy of it
            else:
                kept.append(np.frombuffer(data, np.uint8).copy())
                address = kept[-1].ctypes.data
            args[i] = np.frombuffer(with_address(args[i].tobytes(), address), args[i].dtype)[0]
        accepted = inspect.signature(cpu.checking).parameters
        try:
            with cpu.checking(**{k: v for k, v in m["checking"].items() if k in accepted}):
                module.get_function(m["kernel"])(tuple(m["grid"]), tuple(m["block"]), args,
                                                 shared_mem=m["shared_mem"])
        finally:
            _end_strays()
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        return {"ok": True, "parts": len(arrays)}, [np.ascontiguousarray(a).tobytes() for a in arrays]

    def op_define(self, m):
        from . import exercises
        # The parent names the chapter and the function: the child has no declarations to look them up in.
        self.fn = exercises.define_cell(m["chapter"], m["function"], m["source"], m["extra"], m["exercise"])
        return {"ok": True, "defined": self.fn is not None}, []

    def op_call(self, m):
        from . import exercises
        value = exercises.plain(self.fn(**m["inputs"]))
        return {"ok": True, "value": value}, []


def _student_traceback(error: BaseException) -> str:
    """The traceback's frames in the student's cell only."""
    import traceback
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<")]
    return "".join(traceback.format_list(frames)).rstrip()


def serve() -> None:
    """The child's loop: read a request from stdin, answer on stdout, until stdin closes.
    First, as root, drop to the slot's uid; keep the protocol's pipes off fds 0 and 1, so
    that whatever the student's code prints goes to stderr, not into an answer."""
    uid = os.environ.get("GPULAB_SANDBOX_UID")
    if uid and os.getuid() == 0:
        os.setgroups([])
        os.setgid(int(uid))
        os.setuid(int(uid))
    limits = json.loads(os.environ.get("GPULAB_LIMITS") or "{}")
    for name, key in ((resource.RLIMIT_AS, "memory"), (resource.RLIMIT_FSIZE, "file_size"),
                      (resource.RLIMIT_NOFILE, "open_files"), (resource.RLIMIT_CPU, "cpu"),
                      (resource.RLIMIT_NPROC, "processes")):
        if limits.get(key) is not None:
            resource.setrlimit(name, (limits[key], limits[key]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _isolate()
    requests, answers = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    served = Served(Path(os.environ["GPULAB_SUBMISSION"]), Path(os.environ["GPULAB_LAB"]))
    inbox = os.fdopen(requests, "rb")
    out = os.fdopen(answers, "wb")
    while True:
        head = inbox.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return
        message = pickle.loads(inbox.read(_HEADER.unpack(head)[0]))   # from the trusted parent
        header, parts = served.handle(message)
        header["parts"] = len(parts)
        try:
            data = json.dumps(header, allow_nan=True).encode()
        except (TypeError, ValueError) as error:
            data = json.dumps({"error": "TypeError", "message": f"the answer cannot be graded: {error}",
                               "parts": 0}).encode()
            parts = []
        out.write(_HEADER.pack(len(data)) + data)
        for part in parts:
            out.write(_HEADER.pack(len(part)) + part)
        out.flush()


class InProcess:
    """A child's work done in this process, for tests of the checks themselves (known-wrong
    answers, which attack nothing): the same requests, no process, no sandbox, no limits."""

    def __init__(self, lab: Path, submission: Path, *args, **kwargs):
        self.served = Served(submission, lab)
        self.stopped = None

    def request(self, message: dict) -> tuple[dict, list[bytes]]:
        header, parts = self.served.handle(pickle.loads(pickle.dumps(message)))
        return json.loads(json.dumps(header)), parts

    def stderr(self) -> str:
        return ""

    def cpu_seconds(self) -> float:
        return 0.0

    def kill(self) -> None:
        pass

    close = kill


# ------------------------------------------------------------------ kernels compiled and run in a child
ERRORS = {"KernelCompileError": KernelCompileError, "KernelLaunchError": KernelLaunchError,
          "KernelArgumentError": KernelArgumentError}


def raise_error(header: dict):
    """An error the child reported, raised in the parent as the same kind of error (its text
    is the child's: shown to the student as their own code's failure, never trusted)."""
    kind, text = header.get("error", "Error"), str(header.get("message", ""))
    cls = ERRORS.get(kind)
    if cls is KernelCompileError:
        raise KernelCompileError(text, path="", line=None, log=text)
    if cls is not None:
        raise cls(text)
    raise StudentError(kind, text, str(header.get("traceback", "")))


class StudentError(Exception):
    """An exception the student's code raised in the child (by name and message only)."""

    def __init__(self, kind: str, text: str, traceback: str = ""):
        super().__init__(text)
        self.kind, self.traceback = kind, traceback


class RemoteModule:
    """The parent's stand-in for a compiled student module: kernels launch in the child.
    ``checking`` (CPU-backend checking options) is turned on for this module's launches, over
    the parent's own settings: the grader checks the student's kernels this way, not the lab's
    kernels that run beside them in the parent."""

    def __init__(self, child, file: str, source: str, options=(), checking: dict | None = None):
        from .signature import parse_kernels
        self.child, self.file, self.checking = child, file, dict(checking or {})
        # Which arguments a kernel may write, read here from the source (as the lab's Module does).
        self.signatures = parse_kernels(source)
        header, _ = child.request({"op": "compile", "file": file, "source": source, "options": list(options)})
        if "error" in header:
            raise_error(header)
        self.globals: dict = {}

    def get_function(self, name: str):
        return RemoteFunction(self, name)

    def get_global(self, name: str):
        import numpy as np
        if name not in self.globals:
            header, _ = self.child.request({"op": "global", "file": self.file, "name": name})
            if "error" in header:
                raise_error(header)
            self.globals[name] = np.zeros(int(header["nbytes"]), np.uint8)
        return self.globals[name]


class RemoteFunction:
    def __init__(self, module: RemoteModule, name: str):
        self.module, self.name = module, name

    def __call__(self, grid, block, args, shared_mem: int = 0) -> None:
        import dataclasses

        import numpy as np

        from . import cpu
        args = tuple(args)
        # A tensor map holds the address of its array in this process: send the array (or name the
        # argument it is) so that the child can point the map at its own copy.
        import ctypes

        from .tensormap import cpu_map_extent
        maps = {}
        for i, a in enumerate(args):
            extent = cpu_map_extent(a.tobytes()) if isinstance(a, np.void) and a.dtype.itemsize >= 16 else None
            if extent is not None:
                same = next((j for j, b in enumerate(args) if isinstance(b, np.ndarray) and b.ctypes.data == extent[0]),
                            None)
                maps[i] = ("argument", same) if same is not None else ("copy", ctypes.string_at(*extent))
        # Guarded after the maps are found: a map names the argument by its position, whose copy
        # (with its guard region) the child receives.
        args, guarded = _guarded(self.module.signatures.get(self.name), args)
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        message = {"op": "launch", "file": self.module.file, "kernel": self.name, "grid": list(grid),
                   "tensor_maps": maps,
                   "block": list(block), "args": args, "shared_mem": int(shared_mem),
                   "checking": {**dataclasses.asdict(cpu.current_checking()), **self.module.checking},
                   "globals": {k: v.tobytes() for k, v in self.module.globals.items()}}
        header, parts = self.module.child.request(message)
        if "error" in header:
            raise_error(header)
        if len(parts) != len(arrays) or any(len(p) != a.nbytes for p, a in zip(parts, arrays)):
            raise KernelLaunchError(f"kernel '{self.name}': the worker's answer does not have the arrays' sizes")
        for part, array in zip(parts, arrays):
            array[...] = np.frombuffer(part, array.dtype).reshape(array.shape)
        _check_guards(self.name, guarded)


#: Bytes of a guard region the parent appends to each array a kernel may write (the most a
#: kernel without a bounds test overruns by: the rest of its last block, 1,024 threads of 16
#: bytes, and more for a two-dimensional grid's last rows); the CPU backend's own bounds
#: checking covers what lies beyond it, in the child.
GUARD_BYTES = 64 << 10


def _guarded(signature, args: tuple) -> tuple[tuple, list]:
    """``args`` with each array the kernel may write (a pointer parameter without ``const``)
    replaced by a copy followed by a guard region of random bytes, made here: the parent
    decides itself, from the bytes that come back, whether the kernel wrote past an array's
    end, whatever the child says. An array passed twice stays one. Returns the arguments and
    (name, the array, its copy, the guard's bytes) for each guarded one."""
    import numpy as np
    if signature is None or len(signature.params) != len(args):
        return args, []
    out, guarded, copies = list(args), [], {}
    for i, (param, value) in enumerate(zip(signature.params, args)):
        if not (param.is_pointer and not param.is_const and isinstance(value, np.ndarray)
                and value.flags.c_contiguous and value.dtype.itemsize and value.size):
            continue
        if id(value) in copies:
            out[i] = copies[id(value)]
            continue
        extra = GUARD_BYTES // value.dtype.itemsize
        copy = np.empty(value.size + extra, value.dtype)
        copy[:value.size] = value.reshape(-1)
        guard = os.urandom(extra * value.dtype.itemsize)
        copy[value.size:].view(np.uint8)[:] = np.frombuffer(guard, np.uint8)
        copies[id(value)] = out[i] = copy
        guarded.append((param.name, value, copy, guard))
    return tuple(out), guarded


def _check_guards(kernel: str, guarded: list) -> None:
    """Each guarded array's data back in place, after its guard was found as the parent made it;
    an out-of-bounds write (KernelLaunchError) where it was not."""
    import numpy as np
    for name, value, copy, guard in guarded:
        after = copy[value.size:].view(np.uint8)
        written = np.flatnonzero(after != np.frombuffer(guard, np.uint8))
        if written.size:
            index = value.size + int(written[0]) // value.dtype.itemsize
            raise KernelLaunchError(
                f"kernel '{kernel}': out-of-bounds write past the end of argument '{name}': element "
                f"{name}[{index}] was written (the array has {value.size} elements, valid indices 0.."
                f"{value.size - 1}; found by the grader in the bytes after the array, once the launch had ended)")
        value[...] = copy[:value.size].reshape(value.shape)

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
``/submission``; a private, empty, writable ``/tmp``, where the grader shows, read-only, two
kinds of file it made itself, with nothing of a solution or a submission in them: the CPU
backend's runtime compiled from the lab's own sources (:func:`prebuilt_runtime`) in the child's
build cache, and matplotlib's list of the system's fonts (:func:`prebuilt_font_list`); no
network. Run by root, the child drops to a uid of its own (leased by one child at a time across
every grader on the machine, so that a process limit is per student).
Limits (:data:`LIMITS`) cap memory, processes, file size and open files; its CPU time is
measured over the whole process tree, and the tree dies with its pid namespace when the
exercise ends, ``setsid`` or not.
"""
from __future__ import annotations

import collections
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
                                 "--proc", "/proc", "--dev", "/dev", "--", sys.executable, "-c", "pass"],
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
    (:func:`gpulab.cpu.compiler.runtime_object`), and the prelude every plain build includes,
    precompiled (:func:`gpulab.cpu.compiler.precompiled_prelude`). Making them again in each
    child costs more CPU time (about 2 s) than the rest of a small exercise. They hold the lab's
    runtime and headers only: no solution, no submission's code. Each file by its place in the
    build cache: children see them read-only at the same place in theirs, under the names their
    cache looks them up by (digests of the sources they were made from, which the student
    version of the lab has unchanged); a child whose lab differed would make its own."""
    from .cpu import compiler
    prelude = compiler.precompiled_prelude()
    precompiled = (prelude, prelude.with_name(prelude.name + ".gch")) if prelude != compiler.PRELUDE else ()
    files = (compiler.runtime_object(False), compiler.runtime_object(True), *precompiled)
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
def _tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and all its descendants, alive or reaped (each process's
    utime + stime + those of its children it waited for)."""
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
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += ticks.get(pid, 0)
        stack += children.get(pid, ())
    return total / os.sysconf("SC_CLK_TCK")


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
                 prebuilt: dict[str, Path] | None = None):
        self.cpu_limit, self.limits = float(cpu_limit), dict(LIMITS, **(limits or {}))
        self.waited, self.backstop = 0.0, float(wall_factor) * self.cpu_limit
        self.deadline = deadline if deadline is not None else float("inf")
        env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "GPULAB_CACHE": CHILD_CACHE,
               "GPULAB_BACKEND": "cpu", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg", "MPLCONFIGDIR": CHILD_MPLCONFIG}
        prebuilt = dict(prebuilt or {})
        if any(not place.startswith("/tmp/") for place in prebuilt):
            raise ValueError(f"prebuilt files go under the child's /tmp, not {sorted(prebuilt)}")
        serve = [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {LAB!r}); "
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
            command = ["bwrap", "--perms", "1777", "--tmpfs", "/tmp", *shown, *_system_binds(),
                       "--ro-bind", str(lab), LAB,
                       "--ro-bind", str(submission), SUBMISSION, "--proc", "/proc", "--dev", "/dev", *_namespaces(),
                       "--die-with-parent", "--new-session", "--chdir", SUBMISSION, "--clearenv",
                       *[a for k, v in env.items() for a in ("--setenv", k, v)],
                       "--setenv", "GPULAB_SANDBOX_UID", str(uid or ""), "--setenv", "GPULAB_LIMITS", limits,
                       "--setenv", "GPULAB_LAB", LAB,
                       "--setenv", "GPULAB_SUBMISSION", SUBMISSION, "--", *serve]
            cwd = None
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
            command, cwd = serve, str(submission)
        try:
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env, cwd=cwd, start_new_session=True)
        except BaseException:
            if self._uid_lease is not None:    # no child: its uid is free again
                os.close(self._uid_lease)
                self._uid_lease = None
            raise
        self._stderr = collections.deque()
        self._stderr_size = 0
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.stopped: str | None = None
        self.used, self._checked = 0.0, time.monotonic()

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
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(_HEADER.pack(len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            self._died()
        try:
            header = json.loads(self._read_part(HEADER_BYTES))
            count = int(header.get("parts", 0))
        except (AttributeError, TypeError, ValueError, RecursionError):     # not an answer the child serves
            header, count = None, 0
        if not isinstance(header, dict) or not 0 <= count <= MAX_PARTS:
            self.kill()
            raise ChildDied("the child's answer is not in the form the grader asked for", self.stderr())
        parts, budget = [], MAX_REPLY_BYTES
        for _ in range(count):
            part = self._read_part(budget)
            budget -= len(part)
            parts.append(part)
        return header, parts

    def _read_part(self, most: int) -> bytes:
        size = _HEADER.unpack(self._read_exact(_HEADER.size))[0]
        if size > most:
            self.kill()
            raise ChildDied(f"the child answered with {size} bytes, more than the {most} it may send")
        return self._read_exact(size)

    def _read_exact(self, n: int) -> bytes:
        out, fd = bytearray(), self.proc.stdout.fileno()
        while len(out) < n:
            before = time.monotonic()
            ready, _, _ = select.select([fd], [], [], 0.25)
            self.waited += time.monotonic() - before
            if ready:
                chunk = os.read(fd, min(n - len(out), 1 << 20))
                if not chunk:
                    self._died()
                out += chunk
            # Also while answers stream in: a child that never stops sending is stopped too.
            if not ready or time.monotonic() - self._checked > 0.25:
                self._check_limits()
        return bytes(out)

    def _check_limits(self) -> None:
        used, now = self.cpu_seconds(), time.monotonic()
        self._checked, self.used = now, max(self.used, used)
        if used > self.cpu_limit:
            self.stopped = f"stopped after {used:.0f} s of CPU time (the limit is {self.cpu_limit:.0f} s of CPU)"
        elif self.waited > self.backstop or now > self.deadline:
            self.stopped = (f"stopped after {self.waited:.0f} s of waiting for it (wall-clock time), having "
                            f"used {used:.0f} s of CPU time (the limit is {self.cpu_limit:.0f} s of CPU)")
        if self.stopped:
            self.kill()
            raise Stopped(self.stopped)

    def _died(self):
        self.kill()
        code = self.proc.returncode
        if code is not None and -code in (signal.SIGXCPU, signal.SIGKILL) and not self.stopped:
            used = self.cpu_seconds()
            if -code == signal.SIGXCPU or used >= self.cpu_limit:
                self.stopped = f"stopped after the CPU time limit of {self.cpu_limit:.0f} s"
                raise Stopped(self.stopped)
        why = (f"the process died ({signal_causes(-code)})" if code and code < 0
               else f"the process exited with status {code}")
        raise ChildDied(why, self.stderr())

    def kill(self) -> None:
        """End the child and everything it started (its pid namespace dies with it)."""
        if self.proc.returncode is None:
            self.used = max(self.used, self.cpu_seconds())
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        if self._uid_lease is not None:        # its processes are gone: another child may run as its uid
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
        with cpu.checking(**{k: v for k, v in m["checking"].items() if k in accepted}):
            module.get_function(m["kernel"])(tuple(m["grid"]), tuple(m["block"]), args,
                                             shared_mem=m["shared_mem"])
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
        self.child, self.file, self.checking = child, file, dict(checking or {})
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
        arrays = [a for a in args if isinstance(a, np.ndarray)]
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
        message = {"op": "launch", "file": self.module.file, "kernel": self.name, "grid": list(grid),
                   "tensor_maps": maps,
                   "block": list(block), "args": tuple(args), "shared_mem": int(shared_mem),
                   "checking": {**dataclasses.asdict(cpu.current_checking()), **self.module.checking},
                   "globals": {k: v.tobytes() for k, v in self.module.globals.items()}}
        header, parts = self.module.child.request(message)
        if "error" in header:
            raise_error(header)
        if len(parts) != len(arrays) or any(len(p) != a.nbytes for p, a in zip(parts, arrays)):
            raise KernelLaunchError(f"kernel '{self.name}': the worker's answer does not have the arrays' sizes")
        for part, array in zip(parts, arrays):
            array[...] = np.frombuffer(part, array.dtype).reshape(array.shape)

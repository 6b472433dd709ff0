"""Turn a CUDA C source into a shared object with g++, cached on disk.

The source is compiled as written, with ``include/gpulab_cuda_cpu.h``
force-included; a generated tail (after a ``#line``, so messages keep the
user's line numbers) adds one ``extern "C"`` thunk per kernel and one accessor per
``__constant__``/``__device__`` variable. The runtime (``runtime.cpp``) is compiled
apart, once per cache (:func:`runtime_object`), and linked into every module: it is
three quarters of a small module's compile time, and a macro of the user's file
does not reach it.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:                   # Windows
    fcntl = None

from .. import paths
from . import unchecked
from ..errors import KernelCompileError
from ..signature import KernelSignature, parse_kernels, strip_comments

HERE = Path(__file__).resolve().parent
INCLUDE_DIR = HERE / "include"
RUNTIME = HERE / "runtime.cpp"
INSTRUMENT = HERE / "instrument.cpp"
PRELUDE = INCLUDE_DIR / "gpulab_cuda_cpu.h"

# -fstack-clash-protection makes a large local array touch its stack page by
# page, so a thread that outgrows its fiber stack hits the guard page below it
# instead of silently writing into another thread's stack.  -fno-builtin-printf
# keeps every printf a call of the module's own (runtime.cpp), which keeps the
# output in the launch's buffer: g++ would turn some into calls of puts.
# -U_FORTIFY_SOURCE: Ubuntu's g++ defines _FORTIFY_SOURCE at -O2, which turns snprintf, memcpy and
# the like into their __*_chk forms: the same module would call other functions on Ubuntu than on
# Debian (the race checker refused step 25's __snprintf_chk on the GPU machine, 2026-12-07).
FLAGS = ("-std=c++17", "-O2", "-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=0", "-fPIC", "-shared", "-pthread", "-fno-strict-aliasing",
         "-fvisibility=hidden", "-fstack-clash-protection", "-fno-builtin-printf", "-Wno-unknown-pragmas", "-Wno-attributes")
# An instrumented build (counters, race checking) compiles the kernel's source
# with ThreadSanitizer's load/store hooks and a hook per basic block, which the
# runtime, compiled apart without them, defines (instrument.cpp).  No
# vectorisation, so that each lane's load stays one access, as on a GPU.
INSTRUMENT_FLAGS = ("-fsanitize=thread", "--param", "tsan-instrument-func-entry-exit=0",
                    "-fsanitize-coverage=trace-pc", "-fno-tree-vectorize", "-fno-tree-slp-vectorize",
                    "-g1", "-gdwarf-4", "-DGPULAB_INSTRUMENTED",
                    *(f"-fno-builtin-{name}" for name in ("memcpy", "memmove", "memset", "mempcpy", "memcmp", "snprintf")))
#: The C library's memory functions whose calls, in the module's own object of an instrumented
#: build, are renamed to the runtime's checked versions (instrument.cpp: each byte they touch is
#: an access the race checker sees). The C library is not instrumented: a memcpy whose size g++
#: does not know (or, without -fno-builtin-memcpy, one it expands inline) would copy in and out of
#: shared memory unseen. INSTRUMENT_FLAGS keeps g++ from expanding them inline.
CHECKED_CALLS = ("memcpy", "memmove", "memset", "mempcpy", "memcmp", "__memcpy_chk", "__memmove_chk",
                 "__memset_chk", "snprintf")
_UNCHECKED_SOURCE = Path(unchecked.__file__).read_bytes()
# Bump when the generated code changes in a way the hashed inputs do not show.
FORMAT_VERSION = "4"

_EXTERN_SHARED = re.compile(
    r"^([ \t]*)extern[ \t]+__shared__[ \t]+(.+?)[ \t]*\b([A-Za-z_]\w*)[ \t]*\[[ \t]*\][ \t]*;", re.M)
_ALIGN = re.compile(r"__align__\s*\(\s*\d+\s*\)")
_VARIABLE_HEAD = re.compile(r"\b(?:__constant__|__device__)\b")
_DECLARED_NAME = re.compile(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.M)
_ERROR = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)$", re.M)
_REQUIRED = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:\d+:)?\s+required from here", re.M)


@dataclass(frozen=True)
class Built:
    """A compiled module on disk and what the generated tail exports."""

    library: Path
    kernels: dict[str, KernelSignature]
    symbols: tuple[str, ...]
    constants: tuple[str, ...] = ()
    instrumented: bool = False


def cache_dir() -> Path:
    """Where compiled modules are kept: ``$GPULAB_CACHE/cpu``, else ``~/.cache/gpulab/cpu``.
    Every process (pytest's workers, the notebooks, the site build) shares it: a module is
    written under a temporary name and renamed, so a reader sees all of it or nothing."""
    root = os.environ.get("GPULAB_CACHE")
    path = Path(root) / "cpu" if root else Path.home() / ".cache" / "gpulab" / "cpu"
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=None)
def compiler_identity() -> str:
    try:
        out = subprocess.run(["g++", "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise KernelCompileError(
            f"the CPU backend needs the GNU C++ compiler g++, which is not usable here ({exc}); "
            "install it (e.g. apt-get install g++)", path="", line=None, log=str(exc)) from exc
    return out.splitlines()[0]


@functools.lru_cache(maxsize=None)
def _runtime_sources() -> bytes:
    files = sorted(INCLUDE_DIR.iterdir()) + [RUNTIME]
    return b"".join(f.name.encode() + b"\0" + f.read_bytes() for f in files if f.is_file())


def rewrite_dynamic_shared(source: str) -> str:
    """Replace each ``extern __shared__ T name[];`` line, on the same line, by
    a pointer to the launch's dynamic shared memory of the running block."""
    clean = strip_comments(source)
    pieces, last = [], 0
    for match in _EXTERN_SHARED.finditer(clean):
        indent, ctype, name = match.group(1), _ALIGN.sub(" ", match.group(2)).strip(), match.group(3)
        depth = clean.count("{", 0, match.start()) - clean.count("}", 0, match.start())
        # The name and element size are for the runtime's messages about an access outside it.
        call = f"gpulab::dynamic_shared({_c_string(name)}, {_c_string(ctype)}, sizeof({ctype}))"
        if depth > 0:
            text = f"{indent}{ctype}* const {name} = static_cast<{ctype}*>({call});"
        else:
            text = f"#define {name} (static_cast<{ctype}*>({call}))"
        pieces += [source[last:match.start()], text]
        last = match.end()
    pieces.append(source[last:])
    return "".join(pieces)


#: The most static ``__shared__`` memory a kernel may declare: 48 KiB on every
#: GPU; more must be dynamic, with the kernel's opt-in
#: (cudaFuncAttributeMaxDynamicSharedMemorySize, ``Kernel.allow_shared_memory``).
STATIC_SHARED_LIMIT = 48 * 1024
#: Static ``__shared__`` arrays after this many in one file keep the unchecked
#: thread-local storage (the runtime's table of guarded arrays has this many slots).
MAX_CHECKED_SHARED = 128

_SHARED = re.compile(r"\b__shared__\b")
_STATIC_SHARED_MARK = "static shared memory: "
_TOTAL = "@TOTAL@"   # where the message gets the size g++'s note gives
_REDUCES = re.compile(r"note: the comparison reduces to .\((\d+) <= \d+\)")
_SHARED_PREFIX = re.compile(r"(?:\s|\bstatic\b|\bvolatile\b|__align__\s*\(\s*\d+\s*\))*")
_ARRAY_DECLARATOR = re.compile(r"^(?P<type>.*?)\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\[\]]+\]\s*)+)$", re.S)


def _scopes(clean: str):
    """The braces of ``clean`` in order: (position, None) for a closing one,
    (position, (kind, name)) for an opening one, kind "function" with the
    function's name when the text before it ends with a parameter list (not
    that of an ``if``, ``for``, ``while``, ``switch`` or ``catch``), "block"
    otherwise."""
    for match in re.finditer(r"[{}]", clean):
        if match.group(0) == "}":
            yield match.start(), None
            continue
        head = clean[max(0, match.start() - 400):match.start()]
        head = re.sub(r"(?:\b(?:const|noexcept|override|final|mutable)\b|\s)+$", "", head)
        kind, name = "block", None
        if head.endswith(")"):
            depth, pos = 0, len(head) - 1
            while pos > 0:
                depth += {")": 1, "(": -1}.get(head[pos], 0)
                if depth == 0:
                    break
                pos -= 1
            found = re.search(r"([A-Za-z_]\w*)\s*$", head[:pos])
            if not (found and found.group(1) in ("if", "for", "while", "switch", "catch")):
                kind, name = "function", found.group(1) if found else ""
        yield match.start(), (kind, name)


def rewrite_static_shared(source: str, filename: str) -> str:
    """Move each function's static ``__shared__`` arrays out of thread-local
    storage into memory the runtime guards like an argument's copy (its end
    against an inaccessible page, a canary region before its start), so an
    access outside one names the array; and reject more than 48 KiB of them in
    one function, as the GPU compiler does.  The replacement text keeps every
    line where it was."""
    clean = strip_comments(source)
    events = list(_scopes(clean))
    pieces, last, counter, k = [], 0, 0, 0
    # The open braces: whether inside a function, which, and the name of the
    # running total of its static shared bytes visible there.
    stack: list[dict] = []
    for match in _SHARED.finditer(clean):
        while k < len(events) and events[k][0] < match.start():
            event = events[k][1]
            if event is None:
                if stack:
                    stack.pop()
            else:
                kind, name = event
                inside = bool(stack) and stack[-1]["in_function"]
                if kind == "function" and not inside:
                    stack.append({"function": name, "total": "0", "in_function": True})
                else:   # a block, or a lambda or a local class's method: part of the enclosing function
                    stack.append({"function": stack[-1]["function"] if inside else None,
                                  "total": stack[-1]["total"] if inside else "0", "in_function": inside})
            k += 1
        if not stack or not stack[-1]["in_function"] or counter >= MAX_CHECKED_SHARED:
            continue
        start = max(clean.rfind(";", 0, match.start()), clean.rfind("{", 0, match.start()),
                    clean.rfind("}", 0, match.start()), clean.rfind("\n", 0, match.start())) + 1
        end = clean.find(";", match.end())
        if end < 0 or start < last:
            continue
        statement = clean[start:end]
        if not _SHARED_PREFIX.fullmatch(clean[start:match.start()]) or re.search(r"\bextern\b|[={}#]", statement):
            continue
        align = max([int(a) for a in re.findall(r"__align__\s*\(\s*(\d+)\s*\)", statement)] or [0])
        text = _ALIGN.sub(" ", statement)
        text = re.sub(r"\b(?:__shared__|static)\b", " ", text)
        declarators, depth, current = [], 0, []
        for ch in text:
            depth += {"[": 1, "]": -1, "(": 1, ")": -1, "<": 1, ">": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                declarators.append("".join(current))
                current = []
            else:
                current.append(ch)
        declarators.append("".join(current))
        first = _ARRAY_DECLARATOR.match(declarators[0].strip())
        if not first or not first.group("type").strip() or "*" in first.group("type") or "&" in first.group("type"):
            continue
        base = " ".join(first.group("type").split())
        parsed = [(first.group("name"), first.group("dims"))]
        for other in declarators[1:]:
            more = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*((?:\[[^\[\]]+\]\s*)+)", other)
            if not more:
                break
            parsed.append((more.group(1), more.group(2)))
        if len(parsed) != len(declarators):
            continue
        function = stack[-1]["function"] or "this function"
        out = []
        for name, dims in parsed:
            dims = " ".join(dims.split())
            t, total = f"gpulab_shared_t{counter}", f"gpulab_shared_total{counter}"
            message = (f"{_STATIC_SHARED_MARK}'{function}' declares {_TOTAL} of static __shared__ memory, "
                       f"counting up to the array '{name}': more than the {STATIC_SHARED_LIMIT // 1024} KiB "
                       f"({STATIC_SHARED_LIMIT:,} bytes) of static shared memory a block may have, so a GPU "
                       "compiler rejects it (ptxas: \"uses too much shared data\"). For more, use dynamic shared "
                       "memory (extern __shared__ T name[]; sized by the launch's shared_mem), which a kernel "
                       "may extend beyond 48 KiB by opting in (Kernel.allow_shared_memory)")
            out.append(f"using {t} = {base} {dims}; constexpr unsigned long long {total} = {stack[-1]['total']} "
                       f"+ sizeof({t}); static_assert({total} <= {STATIC_SHARED_LIMIT}, {_c_string(message)}); "
                       f"{t}& {name} = *gpulab::static_shared<{t}, {counter}>(\"{name}\", {_c_string(base)}, {align});")
            stack[-1]["total"] = total
            counter += 1
        # Keep the statement's newlines, so that the lines after it keep their numbers.
        replacement = " ".join(out) + "\n" * statement.count("\n")
        pieces += [source[last:start], replacement]
        last = end + 1
    pieces.append(source[last:])
    return "".join(pieces)


def global_symbols(source: str) -> tuple[str, ...]:
    """Names of the ``__constant__`` and ``__device__`` variables (not functions)."""
    clean = strip_comments(source)
    clean = re.sub(r'"(?:\\.|[^"\\])*"', '""', clean)
    names = []
    for match in _VARIABLE_HEAD.finditer(clean):
        head, stop = _declaration_head(clean, match.end())
        if stop not in (";", "="):
            continue  # a function or a type, not a variable
        head = _VARIABLE_HEAD.sub(" ", head)
        if re.search(r"\b(extern|typedef|struct|class|using|template)\b", head):
            continue
        found = _DECLARED_NAME.search(head.strip())
        if found and found.group(1) not in names:
            names.append(found.group(1))
    return tuple(names)


def _declaration_head(text: str, start: int) -> tuple[str, str]:
    """The declaration text from ``start`` up to the first ';', '=', '(' or '{'
    outside array brackets, and that character ('' at the end of the text)."""
    depth = 0
    for pos in range(start, len(text)):
        ch = text[pos]
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth == 0 and ch in ";=({":
            return text[start:pos], ch
    return text[start:], ""


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def constant_symbols(source: str) -> tuple[str, ...]:
    """The names of the ``__constant__`` variables among :func:`global_symbols`."""
    clean = strip_comments(source)
    names = global_symbols(source)
    return tuple(n for n in names
                 if re.search(r"__constant__[^;{}()]*?\b" + re.escape(n) + r"\s*(?:\[[^;]*\])?\s*(?:=[^;]*)?;", clean))


def generated_tail(kernels: dict[str, KernelSignature], symbols: tuple[str, ...],
                   instrumented: bool = False) -> str:
    lines = ['#line 1 "<gpulab-cpu generated code>"']
    for name in kernels:
        lines.append(f'GPULAB_EXPORT void gpulab_thunk_{name}(void** args) '
                     f'{{ gpulab::invoke_kernel({name}, args); }}')
    for name in symbols:
        # Called in the Python process itself (not in a launch's worker): no macro of the
        # source's and no operator& of its types may turn it into a call of the source's code.
        lines.append(f"#undef {name}")
        lines.append(f'GPULAB_EXPORT void* gpulab_symbol_{name}(size_t* bytes) '
                     f'{{ *bytes = sizeof({name}); return (void*)__builtin_addressof({name}); }}')
    return "\n".join(lines) + "\n"


def _included_files(source: str, search: list[Path], seen: set[Path]) -> list[Path]:
    """User headers the source includes, recursively (system headers are
    covered by the compiler's identity)."""
    found = []
    # The names are read from the source itself: strip_comments blanks string literals, and
    # with them every name in quotes (keeping each character's place).
    for match in _INCLUDE.finditer(strip_comments(source)):
        name = source[match.start(1):match.end(1)]
        for folder in search:
            candidate = (folder / name).resolve()
            if candidate.is_file() and candidate not in seen and INCLUDE_DIR not in candidate.parents:
                seen.add(candidate)
                found.append(candidate)
                text = candidate.read_text(errors="replace")
                found += _included_files(text, [candidate.parent, *search], seen)
                break
    return found


def _compiler_options(options: tuple[str, ...]) -> list[str]:
    """Keep the options that mean something to g++ (macros, include paths, the
    language standard); NVRTC's code-generation options are dropped."""
    kept = []
    for option in options:
        if option.startswith(("-D", "-U", "-I")):
            kept.append(option)
        elif re.fullmatch(r"--?std=c\+\+\d\d", option):
            kept.append("-" + option.lstrip("-"))
    return kept


def build(source: str, *, filename: str, include_dirs=(), options=(), instrumented: bool = False) -> Built:
    kernels = parse_kernels(source)
    symbols = global_symbols(source)
    constants = constant_symbols(source)
    user_dir = Path(filename).resolve().parent
    search = [d for d in [user_dir, *map(Path, include_dirs)] if d.is_dir()]
    text = (f"#line 1 {_c_string(filename)}\n" + rewrite_dynamic_shared(rewrite_static_shared(source, filename))
            + "\n" + generated_tail(kernels, symbols, instrumented))
    extra = _compiler_options(tuple(options))
    command_flags = [*FLAGS, *(INSTRUMENT_FLAGS if instrumented else ()), *extra, _lab_prefix_map(),
                     "-I", str(INCLUDE_DIR), *(f"-I{d}" for d in search), "-include", str(PRELUDE)]

    # The key names files by their place in the lab, not on this disk: another copy of the
    # lab (the site build's student copy, a second clone) reuses what this one compiled.
    digest = hashlib.sha256()
    for part in (FORMAT_VERSION, compiler_identity(), " ".join(command_flags), text):
        digest.update(_in_lab(part).encode() + b"\0")
    digest.update(_runtime_sources())
    # A module is in the cache only if this version of the check let it through.
    digest.update(_UNCHECKED_SOURCE)
    if instrumented:
        digest.update(INSTRUMENT.read_bytes())
        digest.update(" ".join((*CHECKED_CALLS, *sorted(ALLOWED_CALLS))).encode())
    for path in _included_files(source, search, set()):
        digest.update(_in_lab(str(path)).encode() + b"\0" + path.read_bytes())
    key = digest.hexdigest()[:32]

    folder = cache_dir()
    library = folder / f"{key}.so"
    with _once(library) as needed:
        if needed:
            if not instrumented:          # (the counters read instrumented builds' debug lines)
                at = command_flags.index(str(PRELUDE))
                command_flags[at] = str(precompiled_prelude(tuple(extra)))
            _compile(text, library, command_flags, filename, source, runtime_object(instrumented))
    return Built(library=library, kernels=kernels, symbols=symbols, constants=constants,
                 instrumented=instrumented)


#: Whether files found in the build cache are used as they are (True), or only those this
#: process made (while they still hold what it made) and those on a read-only mount (False: a
#: grader's sandboxed child, whose cache the student's kernels, run as the same user, can write).
_trust_cache = True
_made_here: dict[Path, str] = {}
#: What a thread of this process is making now: renamed into the cache, its digest not yet in
#: ``_made_here``. Trusted meanwhile: another thread that found it there in that moment removed it
#: as not this process's, and the maker's compile then read a header that was gone ("g++ failed:
#: gpulab_cuda_cpu.h: No such file", a grader's child, 2026-12-07).
_making: set[Path] = set()


def distrust_cache() -> None:
    """From now on, use only what this process built, or found read-only (see ``_trust_cache``)."""
    global _trust_cache
    _trust_cache = False


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _trusted(target: Path) -> bool:
    if _trust_cache or target in _making:
        return True
    try:
        if os.statvfs(target).f_flag & os.ST_RDONLY:
            return True
        return _made_here.get(target) == _digest(target)
    except OSError:
        return False


def _distrust(target: Path) -> None:
    """Remove ``target`` from the cache unless it may be used (:func:`_trusted`)."""
    if target.exists() and not _trusted(target):
        try:
            target.unlink()
        except OSError as error:
            raise KernelCompileError(f"the CPU backend's build cache holds {target.name}, which this process "
                                     f"did not make and cannot remove ({error})", path="", line=None,
                                     log=str(error)) from None


@contextlib.contextmanager
def _once(target: Path, lock: Path | None = None):
    """Whether this process is to make ``target`` (True, holding its lock, ``target``'s name with
    ``.lock`` unless given) or another process sharing the cache has made it (False, perhaps
    while this one waited): processes that need it at once make it once. The maker writes it
    under a temporary name and renames it, so a reader sees all of it or nothing."""
    _distrust(target)
    if target.exists():
        yield False
        return
    with _compiling(lock or target.with_suffix(".lock")):
        needed = not target.exists()
        if needed:
            _making.add(target)
        try:
            yield needed
            if needed and not _trust_cache and target.exists():
                _made_here[target] = _digest(target)
        finally:
            _making.discard(target)


@contextlib.contextmanager
def _compiling(lock: Path):
    """Hold ``lock`` while compiling one module: processes sharing the cache (pytest's workers,
    notebook kernels) that need the same module at once wait for one compile instead of each
    running g++ (the lock files stay: removing one would let a third process take another)."""
    if fcntl is None:                 # Windows: each compiles, the rename keeps the module whole
        yield
        return
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lab_prefix_map() -> str:
    """Record the lab's files in the module (``__FILE__`` in a header, the debug lines the
    counters read) relative to the lab, so a module is the same wherever the lab was."""
    return f"-ffile-prefix-map={paths.REPO}/="


def _in_lab(text: str) -> str:
    return text.replace(f"{paths.REPO}/", "<lab>/")


def precompiled_prelude(extra: tuple[str, ...] = ()) -> Path:
    """The prelude for a module compiled with the options ``extra``: a copy of it in the build
    cache beside its precompiled form (``g++ -x c++-header``; g++ reads a header's ``.gch`` in
    place of the header when it was made with the same options), made once per set of options.
    Parsing the prelude's C++ headers was most of a small kernel's compile (0.13 of 0.17 s);
    the precompiled one takes 0.04. PRELUDE itself where it cannot be made (g++ then reads the
    copy's text, as it does for a ``.gch`` made with other options)."""
    flags = [f for f in FLAGS if f != "-shared"] + list(extra)
    digest = hashlib.sha256()
    for part in (FORMAT_VERSION, compiler_identity(), " ".join(flags)):
        digest.update(part.encode() + b"\0")
    digest.update(_runtime_sources())
    folder = cache_dir() / f"prelude-{digest.hexdigest()[:24]}"
    header = folder / PRELUDE.name
    precompiled = folder / (PRELUDE.name + ".gch")
    if not (_trusted(header) and _trusted(precompiled)):
        _distrust(precompiled)
        _distrust(header)
    if precompiled.exists():                        # (a grader's child: shown read-only)
        return header
    try:
        folder.mkdir(exist_ok=True)
        with _once(precompiled, folder.with_suffix(".lock")) as needed:
            if needed:
                with tempfile.TemporaryDirectory(dir=folder, prefix="build-") as tmp:
                    text, out = Path(tmp) / PRELUDE.name, Path(tmp) / (PRELUDE.name + ".gch")
                    shutil.copyfile(PRELUDE, text)
                    result = subprocess.run(["g++", *flags, "-I", str(INCLUDE_DIR), "-x", "c++-header", str(text),
                                             "-o", str(out)], capture_output=True, text=True)
                    if result.returncode != 0:
                        return PRELUDE
                    _making.add(header)
                    try:
                        os.replace(text, header)    # the header first: a .gch is read only beside it
                        if not _trust_cache:
                            _made_here[header] = _digest(header)
                    finally:
                        _making.discard(header)
                    os.replace(out, precompiled)
    except OSError:                                 # a cache this process may read but not write
        return header if precompiled.exists() else PRELUDE
    return header


def runtime_object(instrumented: bool = False) -> Path:
    """The runtime compiled once into an object file every module links: with the hooks
    of instrumented builds (compiled without the hooks' instrumentation) when
    ``instrumented``. Its name is the digest of what it is made from."""
    define = ["-DGPULAB_INSTRUMENTED"] if instrumented else []
    flags = [f for f in FLAGS if f != "-shared"] + ["-c", *define, _lab_prefix_map(),
                                                     "-I", str(INCLUDE_DIR), "-include", str(PRELUDE)]
    digest = hashlib.sha256()
    for part in (FORMAT_VERSION, compiler_identity(), " ".join(flags)):
        digest.update(_in_lab(part).encode() + b"\0")
    digest.update(_runtime_sources())
    if instrumented:
        digest.update(INSTRUMENT.read_bytes())
    obj = cache_dir() / f"runtime-{digest.hexdigest()[:24]}.o"
    with _once(obj) as needed:
        if needed:
            with tempfile.TemporaryDirectory(dir=obj.parent, prefix="build-") as tmp:
                out = Path(tmp) / "runtime.o"
                result = subprocess.run(["g++", *flags, "-x", "c++", str(RUNTIME), "-o", str(out)],
                                        capture_output=True, text=True)
                if result.returncode != 0:
                    raise KernelCompileError(f"the CPU backend's runtime did not compile:\n"
                                             f"{result.stderr[-3000:]}", path=str(RUNTIME), line=None,
                                             log=result.stderr)
                os.replace(out, obj)
    return obj


def _compile(text: str, library: Path, flags: list[str], filename: str, source: str, runtime: Path) -> None:
    folder = library.parent
    with tempfile.TemporaryDirectory(dir=folder, prefix="build-") as tmp:
        cpp = Path(tmp) / "module.cpp"
        cpp.write_text(text)
        # Relative includes must resolve against the user's folder, not the temp one.
        user_dir = str(Path(filename).resolve().parent)
        out, obj = Path(tmp) / "module.so", Path(tmp) / "module.o"
        # -save-temps keeps the preprocessed text g++ compiled (module.ii), which is read for what
        # would hide the kernel's accesses from the checks (gpulab.cpu.unchecked).
        command = ["g++", *[f for f in flags if f != "-shared"], "-save-temps=obj", "-c", "-iquote", user_dir,
                   str(cpp), "-o", str(obj)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise _compile_error(result.stderr or result.stdout, filename, source)
        prelude = flags[flags.index("-include") + 1] if "-include" in flags else str(PRELUDE)
        why = unchecked.refusal((Path(tmp) / "module.ii").read_text(errors="replace"), filename=filename,
                                source=source, main=str(cpp), trusted=(str(INCLUDE_DIR), prelude))
        if why:
            raise KernelCompileError(why, path=filename, line=None, log="")
        _refuse_runtime_names(obj, runtime, filename)
        if "-fsanitize=thread" in flags:
            _check_library_calls(obj, runtime, filename)
        link = ["g++", "-shared", "-pthread", str(obj), str(runtime), "-o", str(out), "-ldl"]
        result = subprocess.run(link, capture_output=True, text=True)
        if result.returncode != 0:
            raise KernelCompileError(f"{filename}: linking the module with the CPU backend's runtime failed:\n"
                                     f"{result.stderr[-3000:]}", path=filename, line=None, log=result.stderr)
        os.replace(out, library)  # atomic: a concurrent process sees all or nothing


def _compile_error(log: str, filename: str, source: str) -> KernelCompileError:
    errors = list(_ERROR.finditer(log))
    if not errors:
        return KernelCompileError(f"{filename}: g++ failed:\n{log.strip()[-3000:]}",
                                  path=filename, line=None, log=log)
    first = next((e for e in errors if e.group("file") == filename), errors[0])
    path, line, message = first.group("file"), int(first.group("line")), first.group("msg")
    if path != filename:
        # An error inside a header's template (a static_assert of the CPU
        # backend's <mma.h>, say) is the user's: name the line that used it.
        used = [r for r in _REQUIRED.finditer(log, 0, first.start()) if r.group("file") == filename]
        if used:
            path, line = filename, int(used[-1].group("line"))
    if path == filename:
        lines = source.splitlines()
    else:
        try:
            lines = Path(path).read_text(errors="replace").splitlines()
        except OSError:
            lines = []
    if message.startswith("static assertion failed: " + _STATIC_SHARED_MARK):
        message = message.split(_STATIC_SHARED_MARK, 1)[1]
        total = _REDUCES.search(log, first.end())
        message = message.replace(_TOTAL, f"{int(total.group(1)):,} bytes" if total else "too many bytes")
    quoted = f"\n{line:>5} | {lines[line - 1]}" if 0 < line <= len(lines) else ""
    return KernelCompileError(f"{path} line {line}: error: {message}{quoted}",
                              path=path, line=line, log=log)


# ------------------------------------------------------------ code a module would run when loaded
#: A clean kernel file, the control the checks below compare a module with: what the CPU
#: backend's own compilation adds to every module (the C runtime's start-up files, the
#: runtime's own constructors, the instrumented builds' ThreadSanitizer initialiser).
CONTROL_SOURCE = """__device__ float gpulab_control_value;
extern "C" __global__ void gpulab_control(int n, const float* x, float* y)
{
    __shared__ float tile[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x % 32] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = tile[threadIdx.x % 32] + gpulab_control_value;
}
"""
CONTROL_FILE = HERE / "control.cu"    # its name only (for the build's key): no such file is read


@functools.lru_cache(maxsize=None)
def control_profile(instrumented: bool):
    """What the control module (:data:`CONTROL_SOURCE`, built as every module is) runs at load."""
    from . import elf
    built = build(CONTROL_SOURCE, filename=str(CONTROL_FILE), instrumented=instrumented)
    return elf.profile(built.library.read_bytes())


def control_library(instrumented: bool) -> Path:
    """The control module's shared object in the build cache (the grader shows it to its children)."""
    return build(CONTROL_SOURCE, filename=str(CONTROL_FILE), instrumented=instrumented).library


def load_time_code(data: bytes, instrumented: bool, filename: str) -> "elf.Profile":
    """The load-time profile of a module's shared object (its bytes, ``data``); raises
    :class:`KernelCompileError` when it would run code of its own when loaded -- global
    constructors, ``.init`` code, indirect functions' resolvers, extra libraries -- beyond what
    the control module has. Nothing of a kernel file needs any of them (the lab's kernels have
    none), and code run at load runs in the Python process that launches the kernels, outside
    every check of a launch: it could change the checks themselves."""
    from . import elf
    try:
        found = elf.profile(data)
    except elf.NotElf:
        return None
    more = found.beyond(control_profile(instrumented))
    if more:
        raise KernelCompileError(
            f"{filename}: refused: the compiled module would run code of its own when it is loaded, before "
            f"any kernel is launched: {'; '.join(more)}. A kernel file must not declare global constructors "
            "(__attribute__((constructor)), a global object with a constructor, a variable initialised by a "
            "function call), indirect functions (ifunc) or code in the .init section: compute in the kernels",
            path=filename, line=None, log="")
    return found


def check_symbol_accessors(found, base: int, accessors: dict[str, tuple[int, int]], filename: str) -> None:
    """Each ``__device__``/``__constant__`` variable's place as the module's accessor reports it
    (name -> (address, bytes)) must be exactly one variable's of the module (``found``, its
    :func:`load_time_code` profile; ``base``, where it was loaded): the launch copies a variable's
    bytes back from the worker into the Python process there, so a reference variable that said
    it were larger would let a kernel write over the process's memory."""
    if found is None:
        return
    extents = {(base + s.value, s.size) for s in found.symbols.values() if s.kind == 1 and s.size}   # STT_OBJECT
    for name, (address, size) in accessors.items():
        if (address, size) not in extents:
            raise KernelCompileError(
                f"{filename}: refused: the variable '{name}' is not a variable of its own {size} bytes (a reference "
                "to other memory?): declare __device__ and __constant__ variables as plain variables or arrays",
                path=filename, line=None, log="")


@functools.lru_cache(maxsize=4)
def _runtime_names(runtime: Path) -> frozenset[str]:
    from . import elf
    return frozenset(s.name for s in elf.object_symbols(runtime.read_bytes())
                     if s.name and s.binding != 0)     # not STB_LOCAL: defined or needed across objects


def _refuse_runtime_names(obj: Path, runtime: Path, filename: str) -> None:
    """A module's object may define none of the names the runtime beside it defines or calls
    (``fork``, ``memcpy``, ``operator new``, the race checker's hooks...): the linker would bind
    the runtime's calls to the module's definitions, and the runtime's launch code runs in the
    Python process, outside every check of a launch. The lab's kernels define none."""
    from . import elf
    try:
        mine = elf.object_symbols(obj.read_bytes())
        theirs = _runtime_names(runtime)
    except elf.NotElf:
        return
    clash = sorted({s.name for s in mine if s.defined and s.binding != 0 and s.name in theirs})
    if clash:
        shown = ", ".join(clash[:5]) + (f" and {len(clash) - 5} more" if len(clash) > 5 else "")
        raise KernelCompileError(
            f"{filename}: refused: it defines {shown}, which the CPU backend's runtime defines or calls itself; "
            "rename your function (or make it static)", path=filename, line=None, log="")


# ------------------------------------------------------------ the C library, where the race checker does not look
#: Functions outside the module and the runtime that an instrumented module's object may call:
#: none of them reads or writes memory it is given (the C library is not instrumented, so a
#: call of strcpy, qsort, sprintf... into shared memory would be unseen by the race checker).
#: The math library's functions, and the C++ runtime's support for exceptions and the stack.
_MATH = """acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp10 exp2 expm1 fabs
    fdim floor fma fmax fmin fmod hypot ilogb ldexp lgamma llrint llround log log10 log1p log2 logb lrint lround
    nearbyint nextafter pow remainder rint round scalbn sin sinh sqrt tan tanh tgamma trunc j0 j1 y0 y1 jn yn"""
ALLOWED_CALLS = frozenset(
    [name + suffix for name in _MATH.split() for suffix in ("", "f", "l")]
    + ["__stack_chk_fail", "__gxx_personality_v0", "_Unwind_Resume", "__cxa_begin_catch", "__cxa_end_catch",
       "__cxa_rethrow", "__cxa_allocate_exception", "__cxa_free_exception", "__cxa_throw", "__cxa_pure_virtual",
       "__cxa_guard_acquire", "__cxa_guard_release", "__cxa_guard_abort", "__cxa_atexit", "__cxa_thread_atexit",
       "__dso_handle", "_GLOBAL_OFFSET_TABLE_", "__tls_get_addr", "abort", "__assert_fail", "__tsan_init",
       # Waits that take no memory: a kernel that sleeps is stopped by the grader's wall-clock
       # budget (tests/fixtures/grading/attacks/sleeps.cu), which only such a call can exercise.
       "sleep", "usleep"])


def _allowed_call(name: str) -> bool:
    # (_ZTH...: a thread-local variable's initialisation function, weak, that the module may not have.)
    if name in ALLOWED_CALLS or name.startswith(("__tsan_", "gpulab_checked_", "_ZTH")):
        return True
    # The C++ library's throwing helpers (std::__throw_length_error...), which touch no memory of the caller's.
    return name.startswith("_ZSt") and "__throw_" in name or name.startswith("_ZSt19__throw")


def _check_library_calls(obj: Path, runtime: Path, filename: str) -> None:
    """In the race checker's build, send the module's calls of the C library's memory functions to
    the runtime's checked versions (:data:`CHECKED_CALLS`), and refuse a call of any other function
    the module does not define, the runtime does not define and :data:`ALLOWED_CALLS` does not
    allow: its loads and stores, in the uninstrumented library, would be unseen."""
    from . import elf
    redefine = [f"--redefine-sym={name}=gpulab_checked_{name}" for name in CHECKED_CALLS]
    result = subprocess.run(["objcopy", *redefine, str(obj)], capture_output=True, text=True)
    if result.returncode != 0:
        raise KernelCompileError(f"{filename}: the race checker's build could not redirect the module's calls of "
                                 f"memcpy and the like (objcopy failed):\n{result.stderr[-3000:]}", path=filename,
                                 line=None, log=result.stderr)
    try:
        mine = elf.object_symbols(obj.read_bytes())
        theirs = _runtime_defined(runtime)
    except elf.NotElf:
        return
    defined = {s.name for s in mine if s.defined}
    unknown = sorted({s.name for s in mine if s.name and not s.defined and s.name not in defined
                      and s.name not in theirs and not _allowed_call(s.name)})
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise KernelCompileError(
            f"{filename}: refused: it calls {shown}, of the C library (or another library), whose reads and writes "
            "the race checker cannot see: a kernel may call the math functions, printf and the CPU backend's own "
            "functions (memcpy, memmove and memset are checked); copy or fill memory with a loop of your own",
            path=filename, line=None, log="")


@functools.lru_cache(maxsize=4)
def _runtime_defined(runtime: Path) -> frozenset[str]:
    from . import elf
    return frozenset(s.name for s in elf.object_symbols(runtime.read_bytes()) if s.name and s.defined)

"""Code in a kernel file that would hide its memory accesses from the CPU backend's checks.

The race checker and the counters see a kernel's loads and stores through the calls that
g++'s ThreadSanitizer instrumentation puts before each of them (``instrument.cpp``). Three
things in a kernel's source take accesses out of its sight, and a kernel whose threads race
would then pass: an attribute that turns the instrumentation off for a function
(``no_sanitize("thread")``, ``no_sanitize_thread``, ``no_sanitize_coverage``, the prelude's own
``GPULAB_UNCOUNTED``...), a pragma or attribute that changes the compiler's options for part
of a file (``#pragma GCC optimize``, ``push_options``, ``__attribute__((optimize))``, ``#pragma
clang``), and inline assembly, whose loads and stores the compiler does not see. None of them
has a place in a CUDA kernel compiled for the CPU: the lab's inline PTX is inside ``#ifndef
GPULAB_CPU_BACKEND``, and assembly that reaches the CPU build is the host's, which no GPU runs.
The compiler's own forms of the C library's memory functions (``__builtin_memcpy`` and the like)
are refused too: g++ expands them into loads and stores after the instrumentation is in place.
(The plain ``memcpy``, ``memmove`` and ``memset`` are checked: ``compiler.CHECKED_CALLS``.)

:func:`refusal` reads the source as g++ compiled it, the preprocessed text that ``-save-temps``
keeps: no macro, ``_Pragma`` or token pasting hides a word from it. It reads the text of the
kernel's own files -- the file and every header it includes that is not the system's or the
CPU backend's own -- which the preprocessed text's line markers name. A ``#line`` directive in
one of those files could make its text look like a system header's, so they may have none.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

#: Words (identifiers, with or without the ``__`` around them) that turn instrumentation off or
#: are inline assembly; refused wherever they appear in the kernel's own text.
REFUSED_WORDS = {
    "asm": "inline assembly, whose loads and stores the race checker cannot see (and which no GPU runs: "
           "on the CPU backend it is the host's assembly)",
    **{word: "an attribute that turns off the instrumentation through which the race checker sees the "
             "function's memory accesses"
       for word in ("no_sanitize", "no_sanitize_thread", "no_sanitize_address", "no_address_safety_analysis",
                    "no_sanitize_undefined", "no_sanitize_coverage", "no_sanitize_memory",
                    "disable_sanitizer_instrumentation", "no_instrument_function",
                    "no_profile_instrument_function")},
}
#: The compiler's own forms of the C library's memory and string functions (``__builtin_memcpy``,
#: ``__builtin___memset_chk``, ``__builtin_strcpy``...): g++ expands one whose size it knows into
#: loads and stores of its own, after the instrumentation has been put in, so the race checker would
#: not see them (the plain names are checked: compiler.CHECKED_CALLS).
_REFUSED_BUILTIN = re.compile(r"__builtin_\w*(?:mem|str|bzero|bcopy)\w*")
_BUILTIN_WHY = ("the compiler's own form of a C library function that reads or writes memory, which g++ "
                "expands into accesses the race checker cannot see (call memcpy, memmove or memset, which it checks)")
#: Attributes refused (as attributes only: ``optimize`` may name a function).
REFUSED_ATTRIBUTES = {"optimize": "an attribute that changes the compiler's options for one function"}
#: ``#pragma GCC`` words refused: they change the compiler's options for the rest of the file.
REFUSED_GCC_PRAGMAS = ("optimize", "push_options", "pop_options", "reset_options", "target")
#: Where the preprocessor's own text comes from (the predefined macros, the command line's).
_PSEUDO_FILES = ("<built-in>", "<command-line>")
#: The CPU backend's generated tail (compiler.generated_tail): the lab's text, but it expands the
#: kernel's names, which a macro of the kernel's file could define: read like the kernel's own.
GENERATED = "<gpulab-cpu generated code>"

_MARKER = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"((?: \d+)*)[ \t]*$', re.M)
_TOKEN = re.compile(r"""
    (?P<raw>(?:u8|[uUL])?R"(?P<delim>[^()\\\s"]{0,16})\((?s:.*?)\)(?P=delim)")
  | (?P<string>(?:u8|[uUL])?"(?:[^"\\\n]|\\.)*")
  | (?P<number>\.?\d(?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*)
  | (?P<char>(?:u8|[uUL])?'(?:[^'\\\n]|\\.)*')
  | (?P<word>[A-Za-z_]\w*)
  | (?P<other>\S)
""", re.X)
# A line directive, conservatively: '#' (or its digraph '%:', or the trigraph '??=') first on a
# line, after blanks, whole comments or the end of one, then 'line', a digit or a comment that
# goes on past the line (whose end could hide the rest of the directive).
_DIRECTIVE = re.compile(r"^(?:.*\*/)?[ \t\f\v]*(?:/\*.*?\*/[ \t\f\v]*)*(?:#|%:|\?\?=)[ \t\f\v]*"
                        r"(?:/\*.*?\*/[ \t\f\v]*)*(?:line\b|\d|/\*)", re.M)


def line_directives(text: str) -> list[int]:
    """The lines of ``text`` (numbered from 1, as written) that hold a ``#line`` directive or a
    GNU line marker (``# 12 "file" 3``), read as the preprocessor reads them: lines continued
    by a backslash joined, comments taken for a space. Conservative: a line of a comment or of
    a string that looks like one counts too."""
    text = text.replace("??/", "\\")
    logical, numbers, pending, first = [], [], "", None
    for n, line in enumerate(text.split("\n"), 1):
        first = n if first is None else first
        continued = re.search(r"\\[ \t\f\v]*\r?$", line)
        if continued:
            pending += line[:continued.start()]
            continue
        logical.append(pending + line)
        numbers.append(first)
        pending, first = "", None
    flat = "\n".join(logical)
    found = {numbers[flat.count("\n", 0, m.start())] for m in _DIRECTIVE.finditer(flat)}
    # Comments taken out (each for a space), as the preprocessor does before it reads directives:
    # a comment that starts after the '#' and ends on a later line leaves the directive whole.
    comments = []                                   # (where in the text without them, its newlines)
    taken = 0

    def blank(match):
        nonlocal taken
        comments.append((match.start() - taken, match.group().count("\n")))
        taken += len(match.group()) - 1
        return " "
    spaced = re.sub(r"/\*.*?\*/", blank, flat, flags=re.S)
    for match in _DIRECTIVE.finditer(spaced):
        line = spaced.count("\n", 0, match.start()) + sum(n for at, n in comments if at < match.start())
        found.add(numbers[min(line, len(numbers) - 1)])
    return sorted(found)


@functools.lru_cache(maxsize=None)
def system_include_dirs() -> tuple[str, ...]:
    """The folders g++ searches for ``<...>`` headers of C++ (resolved), from ``g++ -v``."""
    try:
        said = subprocess.run(["g++", "-x", "c++", "-E", "-v", "-"], input="", capture_output=True, text=True,
                              timeout=60).stderr
    except (OSError, subprocess.SubprocessError):
        return ()
    block = said.split("#include <...> search starts here:", 1)[-1].split("End of search list.", 1)[0]
    return tuple(sorted({os.path.realpath(line.strip()) for line in block.splitlines() if line.strip()}))


def _unescape(name: str) -> str:
    return re.sub(r"\\([0-7]{1,3}|.)", lambda m: chr(int(m.group(1), 8)) if m.group(1).isdigit()
                  else m.group(1), name)


def _within(path: str, folders) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def refusal(preprocessed: str, *, filename: str, source: str, main: str, trusted: tuple[str, ...]) -> str | None:
    """Why the module whose preprocessed text is ``preprocessed`` is refused (None: it is not).

    ``filename`` is the kernel file's name as its ``#line`` gives it, ``source`` its text;
    ``main`` the file g++ compiled (the kernel's text and the generated tail); ``trusted`` the
    files and folders, other than the system's headers, whose text is the lab's (the CPU
    backend's include folder, the prelude)."""
    trusted_places = tuple(os.path.realpath(t) for t in trusted) + system_include_dirs()
    regions = []                                    # (file, first line, text)
    last = 0
    current, line = main, 1
    for match in _MARKER.finditer(preprocessed):
        regions.append((current, line, preprocessed[last:match.start()]))
        current, line, last = _unescape(match.group(2)), int(match.group(1)), match.end() + 1
    regions.append((current, line, preprocessed[last:]))

    def own(name: str) -> bool:
        if name in (filename, GENERATED, main):
            return True
        if name in _PSEUDO_FILES:
            return False
        return not _within(os.path.realpath(name), trusted_places)

    problems = []
    checked = {}
    # (Regions without text name no file to read: the working folder's marker, "# 1 "/folder//"",
    # that g++ writes for the debug information.)
    # The kernel's file always (a directive on its first line leaves it no text of its own).
    for name in dict.fromkeys([filename, *(name for name, _, text in regions if text.strip())]):
        if not own(name) or name in (GENERATED, main):
            continue
        if name == filename:
            text = source
            if os.path.isfile(name):            # (the kernel's file may include itself)
                text += "\n" + Path(name).read_text(errors="replace")
        else:
            try:
                text = Path(name).read_text(errors="replace")
            except OSError:
                problems.append((0, f"{name}: refused: the compiler read it, but the CPU backend cannot read "
                                    "it to check it"))
                continue
        checked[name] = line_directives(text)
    for name, lines in checked.items():
        if lines:
            return (f"{name} line {lines[0]}: refused: a #line directive (or a line marker, '# N \"file\"'), "
                    "which makes the compiler take the lines after it for another file's: a kernel file and "
                    "its headers may have none")
    for name, first, text in regions:
        if not own(name):
            continue
        found = _refused_in(text)
        for offset, word, why in found:
            shown = filename if name in (GENERATED, main) else name
            at = "" if name in (GENERATED, main) else f" line {first + offset}"
            problems.append((1, f"{shown}{at}: refused: '{word}' is {why}. The CPU backend checks a kernel's "
                                "memory accesses (races, and the counters) through the compiler's "
                                "instrumentation, which nothing in a kernel file may switch off or go around"))
            break
    if problems:
        return sorted(problems, key=lambda p: -p[0])[0][1]
    return None


def _refused_in(text: str) -> list[tuple[int, str, str]]:
    """(line offset, word, why) for each refused word, attribute or pragma in ``text``."""
    found = []
    lines = text.split("\n")
    code = []
    for offset, line in enumerate(lines):
        pragma = re.match(r"[ \t]*#[ \t]*pragma[ \t]+(\w+)(?:[ \t]+(\w+))?", line)
        if pragma:
            first, second = pragma.group(1), pragma.group(2) or ""
            if first == "clang":
                found.append((offset, f"#pragma clang {second}".strip(),
                              "a pragma of clang's (it may apply attributes to every function after it)"))
            elif first == "GCC" and second in REFUSED_GCC_PRAGMAS:
                found.append((offset, f"#pragma GCC {second}",
                              "a pragma that changes the compiler's options for the rest of the file"))
            code.append("")
        else:
            code.append(line)
    text = "\n".join(code)
    tokens = [(m.lastgroup, m.group(), m.start()) for m in _TOKEN.finditer(text)]
    depth, attribute_depth, brackets = 0, None, 0
    for i, (kind, value, start) in enumerate(tokens):
        if kind != "word" and kind != "other":
            continue
        if kind == "other":
            if value == "(":
                depth += 1
            elif value == ")":
                depth -= 1
                if attribute_depth is not None and depth <= attribute_depth:
                    attribute_depth = None
            elif value == "[" and i + 1 < len(tokens) and tokens[i + 1][1] == "[":
                brackets += 1
            elif value == "]" and brackets and i + 1 < len(tokens) and tokens[i + 1][1] == "]":
                brackets -= 1
            continue
        word = value[2:-2] if value.startswith("__") and value.endswith("__") and len(value) > 4 else value
        word = "asm" if word in ("__asm", "__asm__") else word
        if value in ("__attribute__", "__attribute", "__declspec"):
            attribute_depth = depth
            continue
        why = REFUSED_WORDS.get(word) or (_BUILTIN_WHY if _REFUSED_BUILTIN.fullmatch(value) else None)
        if why is None and (attribute_depth is not None or brackets):
            why = REFUSED_ATTRIBUTES.get(word)
        if why is not None:
            found.append((text.count("\n", 0, start), value, why))
    return sorted(found)

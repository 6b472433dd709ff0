"""Make the student version of the lab: every instructor's solution removed.

Solutions sit between ``// BEGIN SOLUTION`` and ``// END SOLUTION`` in .cu
files and between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` in notebook code
cells. Each is replaced by a marked gap of the same indentation, so the file
still compiles (a kernel with an empty body) and the notebook still runs up to
the exercise's check, which then fails until the student fills the gap in.

Besides the solution blocks, the student copy leaves out what only instructors need
(:data:`INSTRUCTOR_ONLY`: the hidden checks, the grader's tests and their fixtures, which
hold right and nearly right answers), clears every notebook output (an output can show a
solution: a rendered kernel file, a printed answer), tags each exercise's check cell
``raises-exception`` (so the student book builds and shows "exercise not solved yet"
under each unsolved exercise instead of failing), and stores the public answers of the
function exercises (``labdata/exercises/expected.json``) for the check cells.
"""
from __future__ import annotations

import fnmatch
import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

from . import paths

_BLOCK = {
    "//": re.compile(r"^([ \t]*)// BEGIN SOLUTION[^\n]*\n.*?^[ \t]*// END SOLUTION[^\n]*(\n|$)", re.M | re.S),
    "#": re.compile(r"^([ \t]*)# BEGIN SOLUTION[^\n]*\n.*?^[ \t]*# END SOLUTION[^\n]*(\n|$)", re.M | re.S),
}
_PLACEHOLDER = {"//": "// TODO: your code here", "#": "# TODO: your code here"}
#: Paths (relative to the repository root, ``*`` for any name) the student copy leaves out, with
#: everything under them: each chapter's hidden checks, the grader's tests and their fixtures.
INSTRUCTOR_ONLY = ("book/*/hidden_checks.py", "tests/test_grading.py", "tests/test_grading_sandbox.py",
                   "tests/test_student.py", "tests/fixtures/grading",
                   "tests/test_grading_robust.py", "tests/test_grading_attacks.py")
#: What marks a check cell in a notebook.
CHECK_CALL = "exercises.check("


def instructor_only(relative: str | PurePosixPath) -> bool:
    """Whether ``relative`` (a path relative to the repository root) is, or lies under, a path of
    :data:`INSTRUCTOR_ONLY`."""
    parts = PurePosixPath(relative).parts
    return any(fnmatch.fnmatchcase("/".join(parts[:i]), pattern)
               for pattern in INSTRUCTOR_ONLY for i in range(1, len(parts) + 1))


def strip_solutions(text: str, comment: str = "//") -> str:
    """``text`` with every solution block replaced by a TODO line. An unclosed
    BEGIN marker is an error rather than a silently leaked solution."""
    pattern = _BLOCK[comment]
    stripped = pattern.sub(lambda m: f"{m.group(1)}{_PLACEHOLDER[comment]}{m.group(2)}", text)
    if f"{comment} BEGIN SOLUTION" in stripped or f"{comment} END SOLUTION" in stripped:
        raise ValueError(f"unbalanced '{comment} BEGIN SOLUTION' / '{comment} END SOLUTION' markers")
    return stripped


def strip_notebook(notebook: dict) -> dict:
    """A copy of a notebook (as JSON) with solutions stripped from code cells, every
    output cleared, and the exercises' check cells tagged ``raises-exception``."""
    result = json.loads(json.dumps(notebook))
    for cell in result.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        stripped = strip_solutions(source, "#")
        if stripped != source:
            cell["source"] = stripped
        cell["outputs"] = []
        cell["execution_count"] = None
        if CHECK_CALL in stripped:
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if "raises-exception" not in tags:
                tags.append("raises-exception")
    return result


def ignored_by_git(root: Path) -> set[str]:
    """The paths below ``root`` that git ignores (files, and folders ignored whole), relative and
    in posix form; empty where ``root`` is not a git checkout or git is not installed."""
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "--others", "--ignored", "--exclude-standard",
                                 "--directory"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return set()
    return {line.rstrip("/") for line in listed.splitlines() if line}


def make_student_version(dest: str | Path, source_root: Path | None = None) -> list[Path]:
    """Copy the repository to ``dest`` with all solutions stripped; return the
    files that were changed."""
    root = source_root or paths.REPO
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} exists and is not empty; choose a new folder")
    # What git ignores (a virtual environment, build output, a copy staged for the device) is no
    # part of the lab; the pattern list stands in where the repository is not a git checkout.
    skip = shutil.ignore_patterns(".git", ".venv", "_build", "__pycache__", ".pytest_cache",
                                  "*.egg-info", ".whl", ".ipynb_checkpoints", ".gpu")
    ignored = ignored_by_git(root)
    changed = []

    def ignore(folder, names):
        here = Path(folder).relative_to(root)
        left_out = {n for n in names if instructor_only((here / n).as_posix())}
        changed.extend(dest / here / n for n in sorted(left_out))       # never copied
        by_git = {n for n in names if (here / n).as_posix() in ignored}
        return set(skip(folder, names)) | left_out | by_git
    shutil.copytree(root, dest, ignore=ignore, dirs_exist_ok=True)
    for path in sorted(dest.rglob("*")):
        if path.suffix in (".cu", ".cuh"):
            text = path.read_text()
            stripped = strip_solutions(text, "//")
        elif path.suffix == ".ipynb":
            text = path.read_text()
            stripped = json.dumps(strip_notebook(json.loads(text)), indent=1, sort_keys=True,
                                  ensure_ascii=False) + "\n"
            if json.loads(stripped) == json.loads(text):
                stripped = text
        else:
            continue
        if stripped != text:
            path.write_text(stripped)
            changed.append(path)
    from .exercises import store_expected_answers
    changed.append(store_expected_answers(dest))
    return changed


# ----------------------------------------------------------------- proving a copy has no solution
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{5,}")
_TAG = re.compile(r"<[^>]+>")


def _solution_blocks(text: str, comment: str) -> list[str]:
    return [m.group(0) for m in _BLOCK[comment].finditer(text)]


def _lab_files(root: Path) -> list[Path]:
    """Every file under ``root`` but in hidden folders, ``_build`` and ``__pycache__``, which are
    not entered at all: a build cache there changes while it is read (a compile's temporary
    folder vanished under rglob during a CI run)."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("_build", "__pycache__"))
        found += [Path(folder) / f for f in files if not f.startswith(".")]
    return sorted(p for p in found if p.is_file())


def solution_fingerprints(root: Path | None = None) -> dict[str, set[str]]:
    """What identifies the solutions of the lab at ``root``: ``lines``, the solution lines
    (stripped, 16 characters or more) found nowhere outside a solution, and ``tokens``, the
    identifiers (6 characters or more) likewise. A copy that shows none has no solution."""
    root = Path(root or paths.REPO)
    inside, outside = [], []
    for path in _lab_files(root):
        relative = path.relative_to(root).as_posix()
        if (instructor_only(relative)
                or path.suffix not in (".cu", ".cuh", ".ipynb", ".py", ".md", ".yml", ".txt", ".toml")):
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".ipynb":
            text = "\n".join(_notebook_text(json.loads(text), outputs=False))
        comment = "//" if path.suffix in (".cu", ".cuh") else "#"
        blocks = _solution_blocks(text, comment) if path.suffix in (".cu", ".cuh", ".ipynb") else []
        inside += blocks
        outside.append(_BLOCK[comment].sub("", text) if blocks else text)
    outside_text = "\n".join(outside)
    outside_lines = {line.strip() for line in outside_text.splitlines()}
    outside_tokens = set(_TOKEN.findall(outside_text))
    lines, tokens = set(), set()
    for block in inside:
        body = block.splitlines()[1:-1]
        lines |= {line.strip() for line in body if len(line.strip()) >= 16} - outside_lines
        tokens |= set(_TOKEN.findall("\n".join(body))) - outside_tokens
    return {"lines": lines, "tokens": tokens}


def _notebook_text(notebook: dict, outputs: bool = True) -> list[str]:
    texts = []
    for cell in notebook.get("cells", []):
        source = cell.get("source", "")
        texts.append("".join(source) if isinstance(source, list) else source)
        for output in cell.get("outputs", []) if outputs else []:
            for value in [output.get("text", "")] + list(output.get("data", {}).values()):
                texts.append("".join(value) if isinstance(value, list) else str(value))
            texts.append("\n".join(output.get("traceback", [])))
    return texts


def readable_text(path: Path) -> str:
    """A file's text as a reader (or a search) sees it: notebooks' sources and outputs,
    HTML without tags."""
    text = path.read_text(errors="replace")
    if path.suffix == ".ipynb":
        try:
            return "\n".join(_notebook_text(json.loads(text)))
        except json.JSONDecodeError:
            return text
    if path.suffix in (".html", ".htm"):
        return html.unescape(_TAG.sub("", text))
    return text


def find_solutions(tree: str | Path, fingerprints: dict[str, set[str]] | None = None) -> list[str]:
    """Every place under ``tree`` (a student copy, a built site) that shows a solution:
    ``"path: line"`` for each solution line found, ``"path: identifier"`` for each
    solution-only identifier in a search index."""
    fingerprints = fingerprints or solution_fingerprints()
    hits = []
    for path in sorted(Path(tree).rglob("*")):
        if not path.is_file() or path.suffix in (".png", ".svg", ".jpg", ".woff", ".woff2", ".ttf", ".so",
                                                 ".o", ".pyc", ".ico", ".gif", ".pdf", ".eot"):
            continue
        text = readable_text(path)
        lines = {line.strip() for line in text.splitlines()}
        hits += [f"{path}: {line}" for line in sorted(fingerprints["lines"] & lines)]
        if path.name.startswith("searchindex"):
            hits += [f"{path}: {token}" for token in sorted(fingerprints["tokens"] & set(_TOKEN.findall(text)))]
    return hits

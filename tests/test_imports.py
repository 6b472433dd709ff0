"""No import cycle inside gpulab, and no function-local import hiding one: read from the source,
so every module counts, whichever order a notebook or a test imports them in. An import inside a
function is fine for what must stay optional at import time (CuPy, PyTorch) and for a gpulab
module that never imports the importer back; two modules that import each other, at the top or
inside functions, are one module split in the wrong place."""
from __future__ import annotations

import ast
from pathlib import Path

from gpulab import paths

#: Function-local imports known to close a cycle: (module, imported module) -> why it is left.
KNOWN_CYCLES: dict[tuple[str, str], str] = {}


def module_names(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Every module of ``package`` below ``root``: dotted name -> (file, whether it is a package)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _packages_above(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def imports(root: Path, package: str) -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    """``package``'s own imports: the module-level graph (module -> the modules its top runs,
    ``if`` and ``try`` blocks included) and the imports made inside a function or a lambda, as
    (module, imported module, line). Importing ``a.b.c`` runs ``a`` and ``a.b`` too, unless they
    hold the importer (Python has started them already): those count as imported."""
    modules = module_names(root, package)
    graph, local = {name: set() for name in modules}, []
    for name, (path, is_package) in modules.items():
        here = name.split(".") if is_package else name.split(".")[:-1]

        def targets(node):
            if isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            else:
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module
                named = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            return {t for t in named if t in modules and t != name}

        def visit(node, in_function):
            for child in ast.iter_child_nodes(node):
                inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in targets(child):
                        if inside:
                            local.append((name, target, child.lineno))
                        else:
                            graph[name] |= {target} | (_packages_above(target) - _packages_above(name) - {name})
                visit(child, inside)
        visit(ast.parse(path.read_text(), str(path)), False)
    return graph, local


def path_between(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A shortest chain of imports from ``start`` to ``goal``, or None."""
    came_from, todo = {start: None}, [start]
    while todo:
        node = todo.pop(0)
        if node == goal:
            chain = [node]
            while came_from[chain[-1]] is not None:
                chain.append(came_from[chain[-1]])
            return chain[::-1]
        for nxt in sorted(graph.get(node, ())):
            if nxt not in came_from:
                came_from[nxt] = node
                todo.append(nxt)
    return None


def cycles(graph) -> list[list[str]]:
    """Per module that its own top-level imports lead back to, one such chain."""
    found = []
    for name in sorted(graph):
        back = next((chain for nxt in sorted(graph[name]) if (chain := path_between(graph, nxt, name))), None)
        if back:
            found.append([name, *back])
    return found


def hidden_cycles(graph, local) -> dict[tuple[str, str], str]:
    """The function-local imports that lie on a cycle of imports, at the top or inside functions:
    (module, imported module) -> where and the chain back."""
    every = {name: set(targets) for name, targets in graph.items()}
    for module, target, _ in local:
        every[module] |= {target} | (_packages_above(target) - _packages_above(module) - {module})
    found = {}
    for module, target, line in local:
        back = path_between(every, target, module)
        if back:
            found.setdefault((module, target), f"{module} line {line}: " + " -> ".join([module, *back]))
    return found


def test_gpulab_has_no_import_cycle():
    graph, _ = imports(paths.REPO, "gpulab")
    # it read the package: the measuring chapter's record imports its steps and, through them, the ladder
    assert "gpulab.workloads.measuring.steps" in graph["gpulab.workloads.measuring.record"]
    assert "gpulab.ladder" in graph["gpulab.workloads.measuring.steps"]
    assert cycles(graph) == []


def test_no_function_local_import_hides_a_cycle():
    graph, local = imports(paths.REPO, "gpulab")
    assert len(local) > 20
    found = hidden_cycles(graph, local)
    assert {pair: where for pair, where in found.items() if pair not in KNOWN_CYCLES} == {}


def test_the_checks_find_cycles_at_the_top_inside_functions_and_through_a_package(tmp_path):
    pkg = tmp_path / "lab"
    (pkg / "chapter").mkdir(parents=True)
    for name, text in {"__init__.py": "from . import kernels\n",
                       "kernels.py": "import numpy\nfrom .cpu import resources\n",
                       "cpu.py": "from .kernels import load\n",
                       "views.py": "def figure():\n    from .chapter import record\n",
                       "fit.py": "def plan():\n    from .views import figure\n",
                       "chapter/__init__.py": "from .. import fit\n",
                       "chapter/record.py": "from ..views import figure\nfrom ... import nowhere\n",
                       "chapter/steps.py": "def ok():\n    from .. import cpu\n"}.items():
        (pkg / name).write_text(text)
    graph, local = imports(tmp_path, "lab")
    assert graph["lab.kernels"] == {"lab.cpu"} and graph["lab.chapter.record"] == {"lab.views"}
    assert graph["lab.chapter"] == {"lab.fit"}
    assert cycles(graph) == [["lab.cpu", "lab.kernels", "lab.cpu"], ["lab.kernels", "lab.cpu", "lab.kernels"]]
    assert local == [("lab.chapter.steps", "lab.cpu", 2), ("lab.fit", "lab.views", 2),
                     ("lab.views", "lab.chapter.record", 2)]
    # views -> chapter.record imports the package lab.chapter first, whose top imports fit, which
    # imports views inside a function: both local imports lie on that cycle; steps -> cpu on none.
    assert hidden_cycles(graph, local) == {
        ("lab.fit", "lab.views"): "lab.fit line 2: lab.fit -> lab.views -> lab.chapter -> lab.fit",
        ("lab.views", "lab.chapter.record"): "lab.views line 2: lab.views -> lab.chapter.record -> lab.views"}


def test_the_cpu_backend_never_imports_a_chapter():
    """The CPU backend sits under the kernels: nothing in gpulab.cpu reaches up into the chapters
    (the counters' comparison with the H100, which runs chapter kernels, is gpulab.counter_validation)."""
    graph, local = imports(paths.REPO, "gpulab")
    upward = {(a, b) for a, deps in graph.items() if a.startswith("gpulab.cpu") for b in deps
              if b.startswith("gpulab.workloads")}
    upward |= {(a, b) for a, b, _ in local if a.startswith("gpulab.cpu") and b.startswith("gpulab.workloads")}
    assert upward == set()

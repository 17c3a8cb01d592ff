"""The import rules of docs/ARCHITECTURE.md, read from the table there and checked against every module's imports.

Each module's imports are read with ``ast`` (nothing is imported). A module may import its own package, and any
package of a lower tier of the table; a row whose "may import" column names modules allows only those. Imports
at module level form no cycle. A package-internal import inside a function is allowed only where
:data:`LAZY_IMPORTS` lists it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "transformer_xl"
DOC = REPO / "docs" / "ARCHITECTURE.md"

#: Package-internal imports made inside a function, and why: (importing module, imported module).
LAZY_IMPORTS = {
    # lm_eval imports the optional lm-evaluation-harness; `txl --help` and the rest of the CLI must not
    ("cli.lm_eval_command", "lm_eval"),
    # the entry point imports torch and the commands inside its Ctrl-C guard (one line, exit 130, at any moment)
    ("cli", "cli.app"),
}

Edge = Tuple[str, str, int, bool]  # importing module, imported module, line, inside a function


# ---------------------------------------------------------------------------- the rules, from the document
def layer_table() -> List[Tuple[int, List[str], List[str]]]:
    """``(tier, units, allowed)`` per row of the layer table: units are top-level packages or modules (``model``,
    ``errors``); ``allowed`` lists the only modules the row may import from lower tiers (empty: any of them)."""
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\|\s*(\d+)\s*\|([^|]*)\|([^|]*)\|", line)
        if match:
            units = re.findall(r"`([\w.]+)`", match.group(2))
            allowed = re.findall(r"`([\w.]+)`", match.group(3))
            rows.append((int(match.group(1)), units, allowed))
    return rows


TABLE = layer_table()
TIER = {unit: tier for tier, units, _ in TABLE for unit in units}
ONLY = {unit: allowed for _, units, allowed in TABLE for unit in units if allowed}


def unit_of(module: str) -> str:
    """``model.attention.layers`` -> ``model``; the root package is ``transformer_xl``."""
    return module.split(".")[0] if module else "transformer_xl"


# ---------------------------------------------------------------------------- the imports, from the code
def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: Dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(base: str, name: str) -> str:
    """``base.name`` when that is a module of the package (``from . import checkpoint_files``), else ``base``."""
    full = f"{base}.{name}" if base else name
    return full if full in MODULES else base


def _targets(module: str, is_package: bool, node) -> List[str]:
    """The package modules an import statement reads (relative to the package root: ``data.corpus``)."""
    if isinstance(node, ast.Import):
        return [a.name[len("transformer_xl."):] if a.name != "transformer_xl" else ""
                for a in node.names if a.name.split(".")[0] == "transformer_xl"]
    if node.level == 0:
        if not (node.module or "").startswith("transformer_xl"):
            return []
        base = node.module[len("transformer_xl"):].lstrip(".")
    else:
        parts = module.split(".") if module else []
        parts = parts if is_package else parts[:-1]
        parts = parts[:len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    return [_resolve(base, a.name) for a in node.names]


def imports(module: str) -> List[Edge]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    edges: List[Edge] = []

    def visit(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, path.name == "__init__.py", child):
                    edges.append((module, target, child.lineno, inner))
            visit(child, inner)

    visit(tree, False)
    return edges


EDGES = [edge for module in MODULES for edge in imports(module)]


def allowed(source: str, target: str) -> bool:
    """Whether ``source`` may import ``target`` under the table (module docstring)."""
    a, b = unit_of(source), unit_of(target)
    if a == b:
        return True
    if a in ONLY:
        return any(target == m or target.startswith(m + ".") for m in ONLY[a]) or TIER[b] == 0
    return TIER[b] < TIER[a] or TIER[a] == TIER[b] == 0


def _where(source: str, line: int) -> str:
    return f"{MODULES[source].relative_to(REPO)}:{line}"


# ---------------------------------------------------------------------------- the tests
def test_the_document_has_the_layer_table():
    assert len(TABLE) >= 8 and TIER.get("model") == 1 and TIER["cli"] > TIER["jobs"] > TIER["pretrained"]
    assert len(TIER) == sum(len(units) for _, units, _ in TABLE), "a package named in two rows"


def test_every_module_belongs_to_a_layer():
    missing = sorted({unit_of(m) for m in MODULES} - set(TIER))
    assert not missing, f"add these to the layer table of docs/ARCHITECTURE.md: {missing}"


def test_no_upward_or_sideways_import():
    bad = [f"{_where(s, line)}: {unit_of(s)} (tier {TIER[unit_of(s)]}) imports {t or 'transformer_xl'} "
           f"(tier {TIER[unit_of(t)]})" for s, t, line, _ in EDGES if not allowed(s, t)]
    assert not bad, "imports against docs/ARCHITECTURE.md:\n" + "\n".join(bad)


def test_no_package_internal_import_inside_a_function_unless_listed():
    bad = [f"{_where(s, line)}: imports {t} inside a function" for s, t, line, lazy in EDGES
           if lazy and (s, t) not in LAZY_IMPORTS]
    assert not bad, "\n".join(bad)
    listed = {(s, t) for s, t, _, lazy in EDGES if lazy}
    assert LAZY_IMPORTS <= listed, f"listed but no longer made: {sorted(LAZY_IMPORTS - listed)}"


def test_no_import_cycle():
    graph: Dict[str, Set[str]] = {m: set() for m in MODULES}
    for source, target, _, lazy in EDGES:
        if not lazy and target != source:
            graph[source].add(target)
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


def _strongly_connected(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Tarjan's components of ``graph``, iteratively."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    out: List[List[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                out.append(component)
    return out


@pytest.mark.parametrize("source,target,expected", [
    ("model.transformer", "errors", True),
    ("model.transformer", "checkpoints.hub", False),   # upward
    ("data.corpus", "text.vocab", True),
    ("text.tokenizer", "data.corpus", False),           # upward
    ("evaluation.score", "generation.generate", False),  # sideways
    ("jobs.checkpoint_eval", "pretrained", True),
    ("lm_eval", "cli.app", False),
])
def test_the_rules_themselves(source, target, expected):
    assert allowed(source, target) is expected


def test_file_names_are_unique():
    names: Dict[str, List[str]] = {}
    for module, path in MODULES.items():
        if path.name != "__init__.py":
            names.setdefault(path.name, []).append(module)
    assert not {n: m for n, m in names.items() if len(m) > 1}

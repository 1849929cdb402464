"""The package's layers (docs/architecture.md), held by its imports.

Every ``import`` and ``from ... import`` of ``skbert`` (top-level or inside a function) is read
with :mod:`ast`; imports under ``if TYPE_CHECKING:`` are annotations only and are skipped. A
module may import from its own layer or a lower one, never a higher one, and the imports form
no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "skbert"

#: Layers from the top (0) down. A module's layer is that of the longest prefix of its dotted
#: name listed here; public modules rank with what they hold.
LAYERS = [
    # 0: the public face: the package, the estimators, the public workflows
    (
        "skbert",
        "skbert.classifier",
        "skbert.regressor",
        "skbert.sentence",
        "skbert.pretraining",
        "skbert.dask",
        "skbert.datasets",
        "skbert.metrics",
        "skbert.onnx",
    ),
    # 1: estimator machinery: base, read-out resolution, validation, targets, persistence
    ("skbert._estimator",),
    # 2: running the networks: the training loop and the prediction path with its CPU wing
    ("skbert._training", "skbert._inference", "skbert.optim"),
    # 3: torch modules
    ("skbert._nn", "skbert.pooling"),
    # 4: texts to token rows, storage
    ("skbert._text", "skbert.truncation", "skbert._storage"),
    # 5: foundation: devices, precision, messages, the launch, errors
    ("skbert._core", "skbert.exceptions"),
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _layer(module: str) -> int:
    best, rank = -1, None
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, rank = len(name), i
    if rank is None:
        raise AssertionError(f"{module} is in no layer of LAYERS: add it")
    return rank


def _type_checking_nodes(tree) -> set:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(id(n) for n in ast.walk(child))
    return skipped


def _imports(path: Path) -> list:
    """(line, imported skbert module) of every import in ``path``."""
    module = _module_name(path)
    package = module if _is_package(path) else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "skbert"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "skbert":
                continue
            for alias in node.names:  # `from pkg import module` imports the module
                sub = f"{target}.{alias.name}"
                found.append((node.lineno, sub if (_path_of(sub) is not None) else target))
    return found


def _path_of(module: str):
    relative = Path(*module.split(".")[1:])
    for candidate in (PACKAGE / relative.with_suffix(".py"), PACKAGE / relative / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _graph() -> dict:
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        graph[_module_name(path)] = (path, _imports(path))
    return graph


def test_every_module_has_a_layer():
    for module in _graph():
        _layer(module)


def test_no_module_imports_a_higher_layer():
    upward = []
    for module, (path, imports) in _graph().items():
        for line, target in imports:
            if _layer(target) < _layer(module):
                where = f"{path.relative_to(PACKAGE.parent)}:{line}"
                upward.append(
                    f"{where}: {module} (layer {_layer(module)}) imports {target} "
                    f"(layer {_layer(target)})"
                )
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_imports_form_no_cycle():
    graph = {m: {t for _, t in imports if t != m} for m, (_, imports) in _graph().items()}
    # a package's __init__ importing its own modules is no cycle of concepts
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_persistence_allow_list_imports_no_estimator():
    estimators = {"skbert.classifier", "skbert.sentence"}
    for module, (path, imports) in _graph().items():
        if module.startswith("skbert._estimator"):
            bad = [t for _, t in imports if t in estimators]
            assert not bad, f"{path}: imports {bad}"


def test_no_module_is_over_600_lines():
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert not long, f"modules over 600 lines: {long}"


@pytest.mark.parametrize("word", ["tile", "fixed_block", "in_fixed_blocks", "kernel"])
def test_torch_modules_know_nothing_of_the_speed_wing(word):
    """The nn.Modules read as plain PyTorch: no tiles, fixed blocks or kernels."""
    for path in [*(PACKAGE / "_nn").rglob("*.py"), PACKAGE / "pooling.py"]:
        text = path.read_text(encoding="utf-8")
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        if word == "kernel":  # CNN kernel sizes are a pooling parameter, not a compute kernel
            code = code.replace("kernel_sizes", "").replace("kernel_size", "")
        assert word not in code, f"{path.relative_to(PACKAGE.parent)} mentions {word!r}"

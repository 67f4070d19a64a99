"""Import contracts: the packages of rowgate form layers, and imports only point down.

A package may import from packages in layers below its own (and from itself), never from a
layer above: policy decides without knowing about gRPC, rewriters place filters without
knowing the pipeline, and the transport moves bytes without deciding anything. The layers
are data; `KNOWN_UPWARD` lists the imports that still point up and must go. The list may
only shrink: an entry that no longer exists fails the test too, so it is removed from here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rowgate

ROOT = Path(rowgate.__file__).parent

# Top to bottom. Packages in one tuple are peers and may not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("cli_policies", "app"),
    ("admin", "health", "probe"),
    ("transport",),
    ("pipeline",),
    ("responses",),
    ("rewrite", "policy_service"),
    ("catalog",),
    ("observability",),
    ("upstream",),
    ("policy",),
    ("identity",),
    # refusal.py: the one refusal type, raised by rewrite/, policy_service and the pipeline alike.
    ("embedded", "config", "logs", "message_walk", "spark_protocol", "refusal"),
)

# (importing module, imported package) pairs that still point up. Each is a debt.
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()

# The middle, the same way: the parts of rowgate.pipeline (its sub-packages and top-level
# modules), top to bottom. Enforcement may use what the statements, operations and sessions
# parts know; they never reach into enforcement, and sessions know nothing of the steps
# above them. core.py (Call, Facts, Step, Pipeline) is below everything.
PIPELINE_LAYERS: tuple[tuple[str, ...], ...] = (
    ("assembly",),
    ("enforce",),
    ("statements", "operations"),
    ("session", "compressed_plans", "dependency_errors"),
    ("core",),
)


def _rank() -> dict[str, int]:
    return {package: level for level, peers in enumerate(LAYERS) for package in peers}


def _imports(root: Path = ROOT, prefix: tuple[str, ...] = ("rowgate",)) -> set[tuple[str, str, str]]:
    """(module, its part, imported part) for every import between the parts of `root`.

    A part is a sub-package or a top-level module of the package at `root`, named `prefix`;
    imports of `root`'s own `__init__` do not count (it imports nothing)."""
    found = set()
    depth = len(prefix)
    for path in root.rglob("*.py"):
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")) or path.parent == root and path.name == "__init__.py":
            continue
        relative = path.relative_to(root).with_suffix("")
        module = ".".join((*prefix, *relative.parts)).removesuffix(".__init__")
        part = relative.parts[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
                if node.module == ".".join(prefix):  # from rowgate.pipeline import enforce
                    names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                if tuple(parts[:depth]) == prefix and len(parts) > depth and parts[depth] != part:
                    found.add((module, part, parts[depth]))
    return found


def test_every_package_has_a_layer():
    packages = {
        p.name if p.is_dir() else p.stem for p in ROOT.iterdir() if p.name != "__init__.py" and not p.name.startswith("__")
    }
    packages = {p for p in packages if (ROOT / p).is_dir() or (ROOT / f"{p}.py").exists()}
    assert packages - set(_rank()) == set(), "add the new package to LAYERS"


def test_imports_point_down_the_layers():
    rank = _rank()
    upward = {(module, target) for module, package, target in _imports() if rank[target] <= rank[package]}
    new = sorted(upward - KNOWN_UPWARD)
    assert not new, f"imports that point up or sideways: {new}"


def test_known_upward_imports_still_exist():
    rank = _rank()
    upward = {(module, target) for module, package, target in _imports() if rank[target] <= rank[package]}
    gone = sorted(KNOWN_UPWARD - upward)
    assert not gone, f"fixed, remove from KNOWN_UPWARD: {gone}"


def _pipeline_rank() -> dict[str, int]:
    return {part: level for level, peers in enumerate(PIPELINE_LAYERS) for part in peers}


def test_every_part_of_the_pipeline_has_a_layer():
    pipeline = ROOT / "pipeline"
    parts = {p.stem for p in pipeline.iterdir() if p.name != "__init__.py" and not p.name.startswith("__")}
    parts = {p for p in parts if (pipeline / p).is_dir() or (pipeline / f"{p}.py").exists()}
    assert parts - set(_pipeline_rank()) == set(), "add the new sub-package or module to PIPELINE_LAYERS"


def test_imports_inside_the_pipeline_point_down():
    rank = _pipeline_rank()
    found = _imports(ROOT / "pipeline", ("rowgate", "pipeline"))
    assert found, "the pipeline's parts import each other: the contract must see them"
    upward = sorted((module, target) for module, part, target in found if rank[target] <= rank[part])
    assert not upward, f"imports inside the pipeline that point up or sideways: {upward}"

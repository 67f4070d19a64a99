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
    ("embedded", "config", "logs", "message_walk", "spark_protocol"),
)

# (importing module, imported package) pairs that still point up. Each is a debt.
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()


def _rank() -> dict[str, int]:
    return {package: level for level, peers in enumerate(LAYERS) for package in peers}


def _imports() -> set[tuple[str, str, str]]:
    """(module, its package, imported rowgate package) for every import in the tree."""
    found = set()
    for path in ROOT.rglob("*.py"):
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        relative = path.relative_to(ROOT).with_suffix("")
        module = ".".join(("rowgate", *relative.parts)).removesuffix(".__init__")
        package = relative.parts[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "rowgate" and len(parts) > 1 and parts[1] != package:
                    found.add((module, package, parts[1]))
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

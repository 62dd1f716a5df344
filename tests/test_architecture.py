"""The layering holds: imports flow down only (engine < wire < service | client, and the layers
inside engine/ and client/ that pyproject.toml declares), and no package has an import cycle."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "wire", "service", "client")


def test_import_linter_contracts_are_kept():
    command = shutil.which("lint-imports") or shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if command is None:
        pytest.fail("lint-imports is not installed (pip install -e '.[dev]')")
    done = subprocess.run([command, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "broken" in done.stdout and " 0 broken" in done.stdout


def test_no_import_cycles():
    sys.path.insert(0, str(ROOT))
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    cycles = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            # a package's __init__ gathering its own modules is not a cycle: it is what importing it means
            if importer in PACKAGES or imported in PACKAGES or imported.startswith(importer + "."):
                continue
            if graph.chain_exists(importer=imported, imported=importer):
                cycles.append(graph.find_shortest_chain(importer=imported, imported=importer) + (imported,))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


# --- the narrow waist: above the engine, only engine.api and the engine's public modules ------------------
WAIST = "wire, service and client use the engine through engine.api, not its internal modules"

# Underscore attributes of engine objects used in wire/ and client/ (see `engine_private_uses`): none.
PRIVATE_USES_ALLOWED = 0


def _waist_contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["name"] == WAIST]
    return contract


def test_every_engine_module_not_declared_public_is_forbidden_above_the_engine():
    sys.path.insert(0, str(ROOT))
    from engine.api import PUBLIC_MODULES

    children = {f"engine.{p.stem}" for p in (ROOT / "engine").glob("*.py") if p.stem != "__init__"}
    children |= {f"engine.{p.parent.name}" for p in (ROOT / "engine").glob("*/__init__.py")}
    contract = _waist_contract()
    assert contract["type"] == "forbidden" and set(contract["source_modules"]) == {"wire", "service", "client"}
    internal = children - set(PUBLIC_MODULES)
    assert set(contract["forbidden_modules"]) == internal, (
        "a new engine module is internal unless engine.api.PUBLIC_MODULES names it: add it to the forbidden contract "
        f"in pyproject.toml (missing: {sorted(internal - set(contract['forbidden_modules']))}, "
        f"not an engine module or public: {sorted(set(contract['forbidden_modules']) - internal)})"
    )


def test_the_waist_has_no_exceptions():
    """Every layer above the engine goes through engine.api: the forbidden contract ignores no import."""
    assert not _waist_contract().get("ignore_imports"), "an import of an engine internal above the engine"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_names(package: str, everything: bool) -> set[str]:
    """The private names a package's classes define (methods, class attributes, `__slots__`, attributes set on
    self or cls); with `everything`, also its module-level private functions and classes and attributes it sets
    on any object."""
    names = set()
    for path in (ROOT / package).rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(item.name):
                        names.add(item.name)
                    targets = item.targets if isinstance(item, ast.Assign) else []
                    targets += [item.target] if isinstance(item, ast.AnnAssign) else []
                    for target in targets:
                        if isinstance(target, ast.Name) and _private(target.id):
                            names.add(target.id)
                        elif isinstance(target, ast.Name) and target.id == "__slots__":
                            strings = (e.value for e in ast.walk(item.value) if isinstance(e, ast.Constant))
                            names.update(s for s in strings if isinstance(s, str) and _private(s))
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                if everything or (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    names.add(node.attr)
        if everything:
            names.update(
                n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and _private(n.name)
            )
    return names


def _uses_in(source: str, where: str, engine: set[str], own: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        line = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr in engine - own:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"{line}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "engine":
            if not node.module.startswith(("engine.nn", "engine.optim", "engine.utils")):
                found.extend(f"{line}: import {a.name}" for a in node.names if _private(a.name))
    return found


def engine_private_uses() -> list[str]:
    """Where wire/ and client/ reach into engine objects: `x._name` on anything but self or cls where the engine
    defines `_name` and the package's own classes do not (the client's Variable has its own `_data`, `_node`...:
    those are the client's), and private names imported from engine modules other than torch's nn and optim."""
    engine = _private_names("engine", everything=True)
    found = []
    for package in ("wire", "client"):
        own = _private_names(package, everything=False)
        for path in sorted((ROOT / package).rglob("*.py")):
            found += _uses_in(path.read_text(), str(path.relative_to(ROOT)), engine, own)
    return found


def test_wire_and_client_use_no_more_engine_private_attributes_than_allowed():
    uses = engine_private_uses()
    assert len(uses) <= PRIVATE_USES_ALLOWED, (
        f"{len(uses)} uses of engine objects' private attributes in wire/ and client/ (allowed: "
        f"{PRIVATE_USES_ALLOWED}); use engine.api instead:\n" + "\n".join(uses)
    )


def test_the_private_attribute_count_sees_a_private_use():
    # an engine attribute read, an engine private imported; not self's, not the package's own, not a public name
    source = (
        "from engine.func import _flat\nfrom engine.nn.init import _calculate_fan_in_and_fan_out\n"
        "def f(self, v):\n    return v._data, v._result, self._node, v._graph_value, v.shape, v._nowhere\n"
    )
    engine, own = _private_names("engine", everything=True), _private_names("client", everything=False)
    assert {"_data", "_result", "_node"} <= engine and "_graph_value" in own
    uses = [u.split(": ")[1] for u in _uses_in(source, "probe.py", engine, own - {"_data"})]
    assert sorted(uses) == ["._data", "._result", "import _flat"]

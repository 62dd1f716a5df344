"""The layering holds: imports flow down only (engine < wire < service | client, and the layers
inside engine/ and client/ that pyproject.toml declares), and no package has an import cycle."""

from __future__ import annotations

import shutil
import subprocess
import sys
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

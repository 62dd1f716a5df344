"""Static checks: ruff (lint and format), mypy (pyproject's config), the generated surface
declarations being current, and a user's program type-checking with `mypy --strict` against the
installed packages (their py.typed and *.pyi), while a program with type errors is rejected."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = Path(__file__).resolve().parent / "typing"


def _run(*command: str, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _passes(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"{' '.join(map(str, result.args))} failed:\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize("command", [("check", "."), ("format", "--check", ".")], ids=["lint", "format"])
def test_ruff(command):
    pytest.importorskip("ruff")
    _passes(_run(sys.executable, "-m", "ruff", *command))


def test_mypy_on_the_tree():
    pytest.importorskip("mypy")
    _passes(_run(sys.executable, "-m", "mypy"))


def test_the_surface_declarations_are_generated_from_the_current_registry():
    pytest.importorskip("ruff")
    _passes(_run(sys.executable, "-m", "engine.stubgen", "--check"))


def sysconfig_paths() -> list[str]:
    import sysconfig

    return sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A Python whose site-packages hold a non-editable install of this tree (what `pip install .` gives)."""
    pytest.importorskip("mypy")
    base = tmp_path_factory.mktemp("installed")
    site = base / "site"
    _passes(
        _run(
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            ".",
        )
    )
    env = base / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env)
    purelib = next((env / "lib").glob("python3*/site-packages"))
    # the install first; then, when this Python is itself a venv (system_site_packages reaches only the
    # base interpreter's), this one's site-packages, where mypy is
    outer = [path for path in sysconfig_paths() if sys.prefix != sys.base_prefix]
    (purelib / "gradserve_under_test.pth").write_text("\n".join([str(site), *outer]) + "\n")
    programs = base / "programs"  # outside the repository, so mypy finds the packages installed, not as sources
    shutil.copytree(PROGRAMS, programs)
    return env / "bin" / "python", programs


def test_a_user_program_type_checks_strictly_against_the_installed_packages(installed):
    python, programs = installed
    _passes(_run(str(python), "-m", "mypy", "--strict", "--no-incremental", "user_program.py", cwd=programs))


def test_mypy_rejects_a_program_with_type_errors(installed):
    python, programs = installed
    result = _run(str(python), "-m", "mypy", "--strict", "--no-incremental", "type_error_program.py", cwd=programs)
    assert result.returncode == 1, result.stdout + result.stderr
    for expected in ('has no attribute "expp"', 'variable has type "str"', 'Argument "retain_graph" to "backward"'):
        assert expected in result.stdout, result.stdout

"""The CPU image, built from the Dockerfile's `cpu` target and run with podman.

The base `python:3.11.11-slim-bookworm` cannot be pulled here or in CI (no Docker Hub): unless the real image is
already in podman's storage, a local stand-in is built and imported under that name first (a minimal Debian
bookworm root with python3.11, venv, pip, `python` and CA certificates; tests/container_image.py), and the
test run says which base it used. The build's `pip install .` reaches PyPI. The container then runs the
image's CMD as its USER on a read-only root filesystem, and is asked for /healthz, a gradient, and its own
HEALTHCHECK.

Without podman this module skips on a developer machine; where GRADSERVE_REQUIRE_IMAGE_TEST=1 (.ci/run sets it)
it fails instead.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import tomllib
import uuid
from pathlib import Path

import httpx
import pytest
import yaml

from tests.container_image import ImageToolMissing, Podman, ensure_base, from_images

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
TARGET = "cpu"
PORT = 8000
REQUIRED = os.environ.get("GRADSERVE_REQUIRE_IMAGE_TEST") == "1"

# The first run builds a Debian root and installs the project from PyPI: minutes, not pytest.ini's 300 s.
pytestmark = pytest.mark.timeout(1800)


def say(request: pytest.FixtureRequest, message: str) -> None:
    """A line on the terminal even when output is captured: which base the image was built on matters."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print(f"\n[image] {message}", flush=True)


def compose_tag() -> str:
    """The tag `docker compose build` gives the CPU image: the test builds exactly that one."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    (tag,) = {svc["image"] for svc in compose["services"].values() if svc.get("build", {}).get("target") == TARGET}
    return tag


@pytest.fixture(scope="module")
def podman() -> Podman:
    try:
        return Podman.find()
    except ImageToolMissing as missing:
        if REQUIRED:
            pytest.fail(f"{missing}; GRADSERVE_REQUIRE_IMAGE_TEST=1 requires the image test to run")
        pytest.skip(f"{missing}: the image is not built on this machine (CI builds it)")


@pytest.fixture(scope="module")
def image(podman: Podman, request, tmp_path_factory) -> str:
    started = time.monotonic()
    try:
        for base in from_images(DOCKERFILE, TARGET):
            ensure_base(podman, base, lambda message: say(request, message))
    except ImageToolMissing as missing:
        if REQUIRED:
            pytest.fail(f"{missing}; GRADSERVE_REQUIRE_IMAGE_TEST=1 requires the image test to run")
        pytest.skip(str(missing))
    tag = compose_tag()
    log = tmp_path_factory.mktemp("image") / "build.log"
    podman.build(ROOT, TARGET, tag, log, timeout=1500)
    say(request, f"built {tag} (target {TARGET}) in {time.monotonic() - started:.0f} s; log: {log}")
    return tag


def published_port(podman: Podman, name: str) -> int:
    out = podman.run("port", name, f"{PORT}/tcp").stdout.strip().splitlines()[0]
    return int(out.rsplit(":", 1)[1])


def container_logs(podman: Podman, name: str) -> str:
    logs = podman.run("logs", name, check=False)  # the container's stderr comes back on podman's stderr
    return (logs.stdout + logs.stderr)[-4000:]


@pytest.fixture(scope="module")
def container(podman: Podman, image: str):
    name = f"gradserve-image-test-{uuid.uuid4().hex[:8]}"
    podman.run(
        "run", "--detach", "--name", name, "--read-only", "--publish", f"127.0.0.1::{PORT}", *podman.limits(), image
    )
    try:
        base_url = f"http://127.0.0.1:{published_port(podman, name)}"
        deadline = time.monotonic() + 60
        while True:
            state = podman.inspect("container", name)["State"]
            if not state["Running"]:
                pytest.fail(f"the container exited ({state['ExitCode']}):\n{container_logs(podman, name)}")
            try:
                if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"/healthz did not answer within 60 s:\n{container_logs(podman, name)}")
            time.sleep(0.5)
        yield name, base_url
    finally:
        podman.run("rm", "--force", "--time", "5", name, check=False)


def test_image_answers_healthz(container):
    _, base_url = container
    response = httpx.get(f"{base_url}/healthz", timeout=10)
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_image_computes_a_gradient(container):
    _, base_url = container
    request = {
        "graph": {
            "version": 1,
            "nodes": [
                {"id": "x", "op": "input", "requires_grad": True},
                {"id": "y", "op": "mul", "inputs": ["x", "x"]},
                {"id": "s", "op": "sum", "inputs": ["y"]},
            ],
            "outputs": ["s"],
        },
        "inputs": [{"name": "x", "shape": [3], "datatype": "FP64", "data": [1, 2, 3]}],
    }
    response = httpx.post(f"{base_url}/backward", json=request, timeout=30)
    assert response.status_code == 200, response.text
    (grad,) = response.json()["grads"]
    assert grad["name"] == "x" and grad["shape"] == [3]
    assert grad["data"] == pytest.approx([2.0, 4.0, 6.0])  # d/dx sum(x*x) = 2x


def test_image_healthcheck_passes_inside_the_container(podman, image, container):
    name, _ = container
    inspected = podman.inspect("image", image)
    check = inspected.get("Healthcheck") or inspected["Config"].get("Healthcheck") or {}
    test = check.get("Test") or []
    assert test[:1] == ["CMD"] and "/healthz" in " ".join(test), f"the image carries no HEALTHCHECK: {check}"
    result = podman.run("healthcheck", "run", name, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    # The same command against a port nothing listens on fails: the check is not vacuous.
    probe = [arg.replace(f"127.0.0.1:{PORT}", "127.0.0.1:1") for arg in test[1:]]
    assert podman.run("exec", name, *probe, check=False).returncode != 0


def test_image_server_runs_as_uid_10001(podman, container):
    name, _ = container
    status = podman.run("exec", name, "cat", "/proc/1/status").stdout
    uids = re.search(r"^Uid:\s+(.*)$", status, re.M)[1].split()
    gids = re.search(r"^Gid:\s+(.*)$", status, re.M)[1].split()
    assert set(uids) == {"10001"} and set(gids) == {"10001"}, status
    cmdline = podman.run("exec", name, "cat", "/proc/1/cmdline").stdout.split("\0")
    assert "serve" in cmdline and cmdline[-3:] == ["--port", str(PORT), ""], cmdline


def test_image_root_filesystem_is_read_only(podman, container):
    name, _ = container
    assert podman.inspect("container", name)["HostConfig"]["ReadonlyRootfs"] is True
    # root inside the container, so a refusal can only come from the read-only mount, not from permissions
    write = podman.run("exec", "--user", "0", name, "python", "-c", "open('/etc/probe', 'w')", check=False)
    assert write.returncode != 0 and "Read-only file system" in write.stderr, write.stderr


def test_image_ships_every_package_pyproject_installs(podman, container):
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = sorted({pattern.rstrip("*").rstrip(".") for pattern in include})
    name, _ = container
    code = f"import importlib; [importlib.import_module(p) for p in {packages!r}]"
    result = podman.run("exec", "--workdir", "/", name, "python", "-c", code, check=False)
    assert result.returncode == 0, result.stderr

"""Build and run the Dockerfile's images with podman, without Docker Hub.

Podman needs no daemon, and as root it needs a few choices spelled out on these machines (a VM without
systemd, cgroup v1 with a v2 hierarchy mounted beside it, a lowered hard limit on open files):

- `--cgroup-manager=cgroupfs --events-backend=file`: there is no systemd or journald;
- builds use chroot isolation: RUN steps need no OCI runtime, cgroups or network namespace;
- containers run under runc when it is installed: crun 1.8 (Debian 12's) refuses hosts whose cgroups are in
  "hybrid" mode, runc accepts them;
- explicit `nofile`/`nproc` limits at or below the host's: podman's defaults are higher than an unprivileged
  sandbox may set, and the container fails to start ("setrlimit: operation not permitted").

Only PyPI and Debian's mirror are reachable, so a base image the Dockerfile names (`python:3.11.11-slim-bookworm`)
cannot be pulled. `ensure_base` puts a stand-in under that name: a minimal Debian root of the same release with
its python3 (the same minor version), venv, pip and CA certificates, built by mmdebstrap from Debian's mirror and
imported with `podman import`. It has `python` as a symlink and the official image's PATH, as the real image does.
Its tarball is cached under GRADSERVE_IMAGE_CACHE (default ~/.cache/gradserve/image-bases), named after the FROM
and a hash of the recipe, so a second run only imports it (or finds it already in podman's storage). A base that
is already in podman's storage without the stand-in label (a real pulled image) is used as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

STAND_IN_LABEL = "org.gradserve.stand-in"
DEBIAN_MIRROR = os.environ.get("GRADSERVE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# Debian release -> the python3 minor version it ships; a stand-in must match the FROM's version.
DEBIAN_PYTHON = {"bookworm": "3.11", "trixie": "3.13"}
OFFICIAL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


class ImageToolMissing(RuntimeError):
    """podman or mmdebstrap is not installed."""


def full_name(image: str) -> str:
    """Docker's resolution of a short name: `python:3.11` is `docker.io/library/python:3.11`."""
    first, _, rest = image.partition("/")
    if not rest:
        return f"docker.io/library/{image}"
    if "." in first or ":" in first or first == "localhost":
        return image
    return f"docker.io/{image}"


def from_images(dockerfile: Path, target: str) -> list[str]:
    """The external base images the stages `target` depends on (through FROM and COPY --from) start from."""
    stages: dict[str, tuple[str, set[str]]] = {}
    current = None
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0].upper() == "FROM":
            match = re.fullmatch(r"FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", line.strip(), re.I)
            current = match[2] or str(len(stages))
            stages[current] = (match[1], set())
        elif words[0].upper() == "COPY" and current:
            stages[current][1].update(re.findall(r"--from=(\S+)", line))
    needed, todo = [], [target]
    seen = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        base, copied = stages[name]
        for parent in [base, *copied]:
            if parent in stages:
                todo.append(parent)
            elif parent not in needed:
                needed.append(parent)
    return needed


@dataclass
class Podman:
    """The podman command line with the options this machine (and CI's) needs; see the module docstring."""

    executable: str

    @classmethod
    def find(cls) -> Podman:
        executable = shutil.which("podman")
        if not executable:
            raise ImageToolMissing("podman is not installed (apt-get install podman)")
        return cls(executable)

    def command(self, *args: str) -> list[str]:
        runtime = ["--runtime", "runc"] if shutil.which("runc") else []
        return [self.executable, "--cgroup-manager=cgroupfs", "--events-backend=file", *runtime, *args]

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(self.command(*args), capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
        return result

    def inspect(self, kind: str, name: str) -> dict | None:
        result = self.run(kind, "inspect", name, check=False)
        return json.loads(result.stdout)[0] if result.returncode == 0 else None

    @staticmethod
    def limits() -> list[str]:
        """`--ulimit` options no higher than this process's own hard limits."""
        nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536)
        return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", "nproc=4096:4096"]

    def build(self, context: Path, target: str, tag: str, log: Path, timeout: float) -> None:
        """`docker build --target <target> -t <tag> <context>`, with the base images already in local storage.

        `--format docker` keeps HEALTHCHECK (the OCI image format has no field for it). The host's CA bundle is
        mounted for the RUN steps so that pip reaches PyPI through a TLS-intercepting proxy too.
        """
        ca = ["--volume", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"] if HOST_CA_BUNDLE.is_file() else []
        args = ["build", "--pull=never", "--isolation=chroot", "--format=docker", "--layers", *ca]
        args += ["--target", target, "--tag", tag, str(context)]
        with log.open("w") as sink:
            result = subprocess.run(self.command(*args), stdout=sink, stderr=subprocess.STDOUT, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"podman build exited {result.returncode}:\n{log.read_text()[-6000:]}")


def cache_dir() -> Path:
    configured = os.environ.get("GRADSERVE_IMAGE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "gradserve" / "image-bases"


def stand_in_recipe(image: str) -> list[str]:
    """The mmdebstrap arguments (less the output path) for a stand-in of an official `python:X.Y.Z-slim-<debian>`."""
    match = re.fullmatch(r"(?:docker\.io/library/)?python:(\d+\.\d+)(?:\.\d+)?-slim-(\w+)", image)
    if not match or DEBIAN_PYTHON.get(match[2]) != match[1]:
        raise RuntimeError(
            f"no stand-in recipe for {image!r}: only python:X.Y-slim-<release> where Debian <release> ships "
            f"python X.Y ({DEBIAN_PYTHON}); pull the real image into podman's storage instead"
        )
    return [
        "--variant=minbase",
        "--include=python3,python3-venv,python-is-python3,ca-certificates",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        "--dpkgopt=force-unsafe-io",
        match[2],
    ]


def ensure_base(podman: Podman, image: str, say) -> None:
    """Make `image` resolvable by `podman build --pull=never`: found in storage, imported from the cache, or built."""
    name = full_name(image)
    recipe = stand_in_recipe(image)
    digest = hashlib.sha256(json.dumps([recipe, OFFICIAL_PATH]).encode()).hexdigest()[:12]
    present = podman.inspect("image", name)
    if present is not None:
        label = (present.get("Labels") or {}).get(STAND_IN_LABEL)
        if label is None:
            say(f"base {image}: the real image, found in podman's storage")
            return
        if label == digest:
            say(f"base {image}: a local Debian stand-in (recipe {digest}), already in podman's storage")
            return
    tarball = cache_dir() / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}-{digest}.tar"
    if tarball.is_file():
        say(f"base {image}: a local Debian stand-in, imported from the cached {tarball}")
    else:
        mmdebstrap = shutil.which("mmdebstrap")
        if not mmdebstrap:
            raise ImageToolMissing(f"{image} is not in podman's storage and mmdebstrap is not installed to build it")
        say(f"base {image}: cannot be pulled here; building a Debian stand-in with mmdebstrap into {tarball}")
        tarball.parent.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(".partial.tar")
        result = subprocess.run(
            [mmdebstrap, "--quiet", *recipe, str(partial), DEBIAN_MIRROR], capture_output=True, text=True, timeout=1200
        )
        if result.returncode != 0:
            raise RuntimeError(f"mmdebstrap exited {result.returncode}:\n{result.stdout}{result.stderr}"[-6000:])
        partial.rename(tarball)
    changes = [f"ENV PATH={OFFICIAL_PATH}", "ENV LANG=C.UTF-8", 'CMD ["python3"]', f"LABEL {STAND_IN_LABEL}={digest}"]
    podman.run("import", *(arg for change in changes for arg in ("--change", change)), str(tarball), name, timeout=600)

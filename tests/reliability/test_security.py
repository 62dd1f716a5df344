"""Runs nothing but its own ops: no dynamic code, ops only from the registry, auth, safe defaults."""

from __future__ import annotations

import ast
import os

import numpy as np
import pytest

from .conftest import ROOT, assert_error, json_tensor, settings_class, simple_request

SCANNED = ("engine", "service", "client")
BANNED_MODULES = {"cPickle", "_pickle", "dill", "cloudpickle", "marshal", "shelve"}
BANNED_CALLS = {"eval", "exec", "__import__"}
# `pickle` gives the hand-written weights-only reader and writer of PyTorch's files (engine/pickle_reader.py,
# pickle_writer.py) their opcodes and its error class; nothing that loads or dumps (load, loads, Unpickler...)
PICKLE_NAMES_ALLOWED = {"UnpicklingError", "PicklingError", "PickleError"}


def _pickle_name_allowed(name: str) -> bool:
    return name.isupper() or name in PICKLE_NAMES_ALLOWED  # an opcode constant (pickle.REDUCE) or an error class


def _sources():
    for top in SCANNED:
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith(".py"):
                    yield os.path.join(dirpath, name)


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def findings(source: str, path: str = "<src>"):
    """Banned constructs in one module's source: (line, what)."""
    out = []
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, f"import {a.name}") for a in node.names if a.name.split(".")[0] in BANNED_MODULES]
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in BANNED_MODULES:
                out.append((node.lineno, f"from {node.module} import"))
            if node.module == "pickle":
                out += [
                    (node.lineno, f"from pickle import {a.name}")
                    for a in node.names
                    if not _pickle_name_allowed(a.name)
                ]
            if node.module == "importlib" and any(a.name == "import_module" for a in node.names):
                out.append((node.lineno, "from importlib import import_module"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "pickle":
            if not _pickle_name_allowed(node.attr):
                out.append((node.lineno, f"pickle.{node.attr}"))
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if (
                name in BANNED_CALLS
                or name.split(".")[-1] in {"import_module", "__import__"}
                or name in {"builtins.eval", "builtins.exec"}
                or name.split(".")[0] in BANNED_MODULES
            ):
                out.append((node.lineno, f"call {name}()"))
        elif isinstance(node, ast.Name) and node.id in {"eval", "exec", "__import__"}:
            out.append((node.lineno, f"reference to {node.id}"))
    return out


def test_the_scanner_finds_what_it_looks_for():
    bad = (
        "import pickle\nfrom importlib import import_module\nx = eval('1')\nexec('y=1')\n__import__('os')\n"
        "import importlib\nimportlib.import_module('os')\nf = eval\npickle.loads(b'')\nu = pickle.Unpickler\n"
        "from pickle import load\nimport marshal\n"
    )
    kinds = " ".join(what for _, what in findings(bad))
    for word in ("pickle.loads", "pickle.Unpickler", "from pickle import load", "marshal", "import_module", "eval"):
        assert word in kinds
    for word in ("exec", "__import__"):
        assert word in kinds
    # the weights-only reader's and writer's use: opcodes and the error class, nothing that loads
    assert findings("import pickle\nk = pickle.REDUCE\nraise pickle.UnpicklingError('no')\n") == []


def test_no_dynamic_code_in_engine_service_client():
    problems = []
    for path in _sources():
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
        problems += [f"{os.path.relpath(path, ROOT)}:{line}: {what}" for line, what in findings(source, path)]
    assert not problems, "dynamic code / unsafe deserialisation found:\n" + "\n".join(problems)
    assert any(p.startswith(os.path.join(ROOT, "engine")) for p in _sources())


@pytest.mark.parametrize(
    "op",
    [
        "__class__",
        "os.system",
        "__import__",
        "eval",
        "exec",
        "__builtins__",
        "getattr",
        "Variable.__init__",
        "numpy.load",
        "__dict__",
        "mro",
        "subprocess.run",
        "F",
        "OPS",
    ],
)
def test_op_names_resolve_only_against_the_registry(client, op):
    graph = {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input"},
            {"id": "y", "op": op, "inputs": ["x"], "attrs": {"command": "touch /tmp/gradserve-pwned"}},
        ],
        "outputs": ["y"],
    }
    response = client.post("/forward", json={"graph": graph, "inputs": [json_tensor("x", np.ones(2, np.float32))]})
    body = assert_error(response, {422})
    assert body["node"] == "y" and body["field"] == "op"
    assert not os.path.exists("/tmp/gradserve-pwned")


COMPUTE = [("post", "/forward"), ("post", "/backward")]


def test_api_key_guards_compute_endpoints(make_client):
    client = make_client(api_key="s3cret-key")
    good = {"Authorization": "Bearer s3cret-key"}
    body = simple_request()
    for method, path in COMPUTE:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": "s3cret-key"},
            {"Authorization": "Basic s3cret-key"},
            {"Authorization": "Bearer "},
        ):
            assert_error(client.request(method, path, json=body, headers=headers), {401})
        assert client.request(method, path, json=body, headers=good).status_code == 200
    assert client.get("/healthz").status_code == 200
    unauth = client.post("/forward", json=body)
    assert "s3cret-key" not in unauth.text


def test_default_bind_host_is_loopback():
    assert settings_class().model_fields["host"].default == "127.0.0.1"


def test_no_cors_headers_by_default(client):
    origin = {"Origin": "https://evil.example"}
    assert "access-control-allow-origin" not in client.get("/healthz", headers=origin).headers
    preflight = client.options("/forward", headers={**origin, "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in preflight.headers
    assert "access-control-allow-origin" not in client.post("/forward", json=simple_request(), headers=origin).headers


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"[]",
        b'{"graph": 1}',
        b'{"graph": {"nodes": [{"id": "a", "op": "nope"}]}}',
        b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": ["oops"]}]}',
    ],
)
def test_errors_never_leak_tracebacks_or_paths(client, body):
    response = client.post("/forward", content=body, headers={"Content-Type": "application/json"})
    assert_error(response)
    assert 'File "' not in response.text and ".py" not in response.text

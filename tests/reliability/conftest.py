"""Shared helpers of the reliability tests (issue 7): apps, servers, bodies, strict JSON.

The service is built by `service.app:create_app(settings=None)`; its settings read environment
variables with the prefix GRADSERVE_. Tests configure an app by setting those variables (and
building the app afterwards), so they don't depend on the settings class's name.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER_LENGTH = "Inference-Header-Content-Length"
# measured figures of the last run (quoted in docs/reliability.md), kept out of the source tree
FIGURES = os.environ.get("RELIABILITY_FIGURES_DIR", os.path.join(tempfile.gettempdir(), "gradserve-reliability"))


# --------------------------------------------------------------------------------------------
# strict JSON and error bodies


def _reject_constant(c):
    raise AssertionError(f"non-strict JSON constant {c!r} in a response")


def strict_json(content: bytes | str):
    """Parse a body as strict JSON: NaN/Infinity literals are a failure."""
    return json.loads(content, parse_constant=_reject_constant)


def assert_error(response, statuses=None):
    """A JSON error `{"error", "node", "field"}` with a non-empty message and no internals: a 4xx,
    or one of `statuses` (which may name 503/507); never a 500."""
    assert response.status_code != 500, f"server error {response.status_code}: {response.text[:500]}"
    if statuses is None:
        assert 400 <= response.status_code < 500, f"expected 4xx, got {response.status_code}: {response.text[:300]}"
    else:
        assert response.status_code in statuses, (
            f"expected {statuses}, got {response.status_code}: {response.text[:300]}"
        )
    body = strict_json(response.content)
    assert isinstance(body, dict), body
    assert isinstance(body.get("error"), str) and body["error"].strip(), body
    assert "node" in body and "field" in body, body
    assert "Traceback" not in response.text
    assert ROOT not in response.text and "site-packages" not in response.text
    return body


def record_figure(name: str, value):
    """Store a measured figure (JSON) so docs/reliability.md can quote the latest run."""
    os.makedirs(FIGURES, exist_ok=True)
    path = os.path.join(FIGURES, "figures.json")  # noqa: PTH118
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        data = {}
    data[name] = value
    with open(path, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)


# --------------------------------------------------------------------------------------------
# tensors and bodies


DATATYPE = {
    np.dtype("float32"): "FP32",
    np.dtype("float64"): "FP64",
    np.dtype("int64"): "INT64",
    np.dtype("int32"): "INT32",
    np.dtype("bool"): "BOOL",
}


def spell(values):
    return [v if np.isfinite(v) else ("NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")) for v in values]


def json_tensor(name, array):
    array = np.asarray(array)
    flat = array.ravel().tolist()
    if array.dtype.kind == "f":
        flat = spell(flat)
    return {"name": name, "shape": list(array.shape), "datatype": DATATYPE[array.dtype], "data": flat}


def binary_body(header: dict, arrays: dict, where="inputs"):
    """(body bytes, headers) of a Triton binary-extension request: tensors of `arrays` go binary."""
    buffers, objs = [], []
    for name, array in arrays.items():
        array = np.asarray(array)  # not ascontiguousarray: that makes 0-d arrays 1-d
        raw = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes(order="C")
        buffers.append(raw)
        objs.append(
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": DATATYPE[array.dtype],
                "parameters": {"binary_data_size": len(raw)},
            }
        )
    header = dict(header)
    header[where] = list(header.get(where) or []) + objs
    head = json.dumps(header).encode()
    return head + b"".join(buffers), {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(head))}


def decode_tensor(obj, tail: bytes | None, offset: int):
    """(array, new offset) of a response tensor object (JSON or binary)."""
    dtype = {v: k for k, v in DATATYPE.items()}.get(obj["datatype"]) or np.dtype(
        {"FP16": "float16"}.get(obj["datatype"], "float64")
    )
    size = (obj.get("parameters") or {}).get("binary_data_size")
    if size is not None:
        array = np.frombuffer(
            tail, dtype=dtype.newbyteorder("<"), count=int(np.prod(obj["shape"], dtype=np.int64)), offset=offset
        ).reshape(obj["shape"])
        return array, offset + size
    data = obj["data"]
    conv = [
        {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}.get(v, v) if isinstance(v, str) else v
        for v in (np.asarray(data, dtype=object).ravel().tolist() if isinstance(data, list) else [data])
    ]
    return np.asarray(conv, dtype=dtype).reshape(obj["shape"]), offset


def decode_response(response):
    """{'outputs': {name: array}, 'grads': {name: array} or None, 'tape': ...} of a 200 response."""
    assert response.status_code == 200, f"{response.status_code}: {response.text[:500]}"
    length = response.headers.get(HEADER_LENGTH)
    content = response.content
    if length is not None:
        head, tail = content[: int(length)], content[int(length) :]
    else:
        head, tail = content, None
    body = strict_json(head)
    out, offset = {"outputs": {}, "grads": None, "tape": body.get("tape"), "id": body.get("id")}, 0
    for obj in body.get("outputs", []):
        out["outputs"][obj["name"]], offset = decode_tensor(obj, tail, offset)
    if "grads" in body and body["grads"] is not None:
        out["grads"] = {}
        for obj in body["grads"]:
            out["grads"][obj["name"]], offset = decode_tensor(obj, tail, offset)
    return out


def assert_same(actual, expected, exact=False):
    """Equal arrays, NaN == NaN, same shape (dtype compared by kind). Floats may differ by a few ulps
    unless `exact`: NumPy's SIMD reductions depend on buffer alignment, and binary tensors are views
    at arbitrary offsets of the body, so the same sum can round differently."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if expected.dtype.kind == "f":
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(e))
        np.testing.assert_array_equal(np.isinf(a) * np.sign(a), np.isinf(e) * np.sign(e))
        if exact:
            np.testing.assert_array_equal(a, e)
        else:
            tol = 1e-5 if expected.dtype.itemsize <= 4 else 1e-12
            np.testing.assert_allclose(a, e, rtol=tol, atol=tol, equal_nan=True)
    else:
        np.testing.assert_array_equal(actual, expected)


def simple_graph(requires_grad=True, shape=(2,)):
    """x (input) * 2 -> sum: the smallest useful graph."""
    return {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input", "requires_grad": requires_grad, "shape": list(shape), "dtype": "FP32"},
            {"id": "c", "op": "constant", "attrs": {"value": 2.0}},
            {"id": "y", "op": "mul", "inputs": ["x", "c"]},
            {"id": "s", "op": "sum", "inputs": ["y"]},
        ],
        "outputs": ["s"],
    }


def simple_request(values=(1.0, 2.0)):
    x = np.asarray(values, dtype=np.float32)
    return {"graph": simple_graph(shape=x.shape), "inputs": [json_tensor("x", x)]}


def matmul_chain(n: int, links: int):
    """x [n, n] @ x repeated `links` times, then sum: slow on purpose (backpressure tests)."""
    nodes = [{"id": "x", "op": "input", "requires_grad": True, "shape": [n, n], "dtype": "FP32"}]
    prev = "x"
    for i in range(links):
        nodes.append({"id": f"m{i}", "op": "matmul", "inputs": [prev, "x"]})
        nodes.append({"id": f"t{i}", "op": "tanh", "inputs": [f"m{i}"]})
        prev = f"t{i}"
    nodes.append({"id": "s", "op": "sum", "inputs": [prev]})
    return {"version": 1, "nodes": nodes, "outputs": ["s"]}


# --------------------------------------------------------------------------------------------
# apps (in-process, ASGI)

ENV_KEYS = (
    "API_KEY",
    "MAX_BODY_BYTES",
    "MAX_TENSOR_ELEMENTS",
    "MAX_TOTAL_ELEMENTS",
    "MAX_NODES",
    "MAX_DEPTH",
    "MAX_TAPES",
    "MAX_TAPE_BYTES",
    "TAPE_TTL_S",
    "MAX_CONCURRENCY",
    "COMPUTE_TIMEOUT_S",
)


def _clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("GRADSERVE_"):
            monkeypatch.delenv(key, raising=False)


@pytest.fixture
def make_app(monkeypatch):
    """make_app(max_nodes=10, ...) -> a fresh ASGI app configured through GRADSERVE_* env vars."""
    from service.app import create_app

    def make(**settings):
        _clean_env(monkeypatch)
        for key, value in settings.items():
            monkeypatch.setenv(f"GRADSERVE_{key.upper()}", str(value))
        return create_app()

    yield make
    _clean_env(monkeypatch)


@pytest.fixture
def make_client(make_app):
    """make_client(**settings) -> a started fastapi TestClient on a fresh app."""
    from fastapi.testclient import TestClient

    clients = []

    def make(**settings):
        client = TestClient(make_app(**settings), raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client):
    return make_client()


def settings_class():
    """The service's settings class (pydantic-settings, env prefix GRADSERVE_)."""
    from service.settings import Settings

    return Settings


# --------------------------------------------------------------------------------------------
# real server processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, proc, port):
        self.proc, self.port = proc, port
        self.url = f"http://127.0.0.1:{port}"

    @property
    def pid(self):
        return self.proc.pid

    def rss_kb(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self, timeout=15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise AssertionError("server did not exit within 15 s of SIGTERM") from None
        return self.proc.returncode


def start_server(env: dict | None = None, timeout=30.0) -> Server:
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSERVE_")}
    full_env.update({f"GRADSERVE_{k.upper()}": str(v) for k, v in (env or {}).items()})
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    log = tempfile.TemporaryFile()  # a file, not a pipe: access logs must never block the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Server(proc, port)
    server.log = log
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}: {server.output()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(server.url + "/healthz", timeout=1.0).status_code == 200:
                return server
        time.sleep(0.1)
    proc.kill()
    proc.wait(5)
    raise AssertionError("server did not answer /healthz within 30 s")


@pytest.fixture
def server_factory():
    servers = []

    def make(**env):
        server = start_server(env)
        servers.append(server)
        return server

    yield make
    for server in servers:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(5)
        server.log.close()


@pytest.fixture(scope="module")
def module_client():
    """One default-configured TestClient shared by a module (hypothesis tests can't use function fixtures)."""
    from fastapi.testclient import TestClient

    from service.app import create_app

    with pytest.MonkeyPatch.context() as mp:
        _clean_env(mp)
        app = create_app()
        with TestClient(app, raise_server_exceptions=False) as client:
            yield client

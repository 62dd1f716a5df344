"""Helpers of the service tests: the example request, error checks, binary bodies, servers."""

from __future__ import annotations

import copy
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest

from wire.codec import HEADER_LENGTH  # noqa: F401 - re-exported for the tests

with warnings.catch_warnings():  # starlette's notice about httpx in its TestClient is not ours to act on
    warnings.filterwarnings("ignore", message=".*httpx.*", category=UserWarning)
    from fastapi.testclient import TestClient
from service.app import create_app
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]

# Small limits so the limit tests stay fast; everything else at its default.
SETTINGS = {
    "device": "cpu",
    "log_level": "warning",
    "max_body_bytes": 256 * 1024,
    "max_nodes": 500,
    "max_tapes": 16,
    "max_concurrency": 4,
    "compute_timeout_s": 30.0,
    "timeout_graceful_shutdown": 10.0,
}

EXAMPLE = {
    "id": "r1",
    "graph": {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input"},
            {"id": "w", "op": "input", "requires_grad": True},
            {"id": "h", "op": "mm", "inputs": ["x", "w"]},
            {"id": "r", "op": "clamp", "inputs": ["h"], "attrs": {"min": 0}},
            {"id": "two", "op": "constant", "attrs": {"value": 2.0}},
            {"id": "s", "op": "mul", "inputs": ["r", "two"]},
            {"id": "loss", "op": "sum", "inputs": ["s"]},
        ],
        "outputs": ["loss"],
    },
    "inputs": [
        {"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6]},
        {"name": "w", "shape": [3, 1], "datatype": "FP32", "data": [0.1, 0.2, 0.3]},
    ],
}


def example(**changes) -> dict:
    body = copy.deepcopy(EXAMPLE)
    body.update(changes)
    return body


def assert_error(response, status: int, *fragments: str, node=None, field=None):
    """An error answer: its status, the one JSON shape, and the message's key words."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error", "node", "field", "request_id"}, body
    assert body["request_id"] == response.headers["x-request-id"]
    assert isinstance(body["error"], str) and body["error"]
    assert "Traceback" not in body["error"]
    for fragment in fragments:
        assert fragment in body["error"], body
    if node is not None:
        assert body["node"] == node, body
    if field is not None:
        assert body["field"] == field, body
    return body


def assert_still_serves(client):
    """The example /backward still answers correctly (run after every bad request)."""
    response = client.post("/backward", json=EXAMPLE)
    assert response.status_code == 200, response.text
    grads = {g["name"]: g for g in response.json()["grads"]}
    assert grads["w"]["data"] == pytest.approx([10.0, 14.0, 18.0])


# --------------------------------------------------------------------------- binary bodies


def binary_tensor(name: str, array: np.ndarray, buffers: list) -> dict:
    from wire.codec import datatype_of

    array = np.ascontiguousarray(array)
    buffers.append(array.tobytes())
    return {
        "name": name,
        "shape": list(array.shape),
        "datatype": datatype_of(array.dtype),
        "parameters": {"binary_data_size": array.nbytes},
    }


def binary_body(header: dict, buffers: list) -> tuple[bytes, dict]:
    """(body, headers) of a binary-extension request."""
    head = orjson.dumps(header)
    return head + b"".join(buffers), {HEADER_LENGTH: str(len(head)), "Content-Type": "application/octet-stream"}


def decode_response(response) -> dict:
    """A JSON or binary response body as {"outputs"|"grads": {name: ndarray}, ...}."""
    from wire.codec import DATATYPES

    length = response.headers.get(HEADER_LENGTH)
    if length is None:
        assert response.headers["content-type"].startswith("application/json")
        body, tail = response.json(), None
    else:
        assert response.headers["content-type"] == "application/octet-stream"
        raw = response.content
        body, tail = orjson.loads(raw[: int(length)]), raw[int(length) :]
    offset = 0
    out = dict(body)
    for key in ("outputs", "grads"):
        if key not in body:
            continue
        arrays = {}
        for t in body[key]:
            dtype = DATATYPES[t["datatype"]]
            if "data" in t:
                assert tail is None
                arrays[t["name"]] = np.asarray(t["data"], dtype=dtype).reshape(t["shape"])
            else:
                size = t["parameters"]["binary_data_size"]
                arrays[t["name"]] = np.frombuffer(
                    tail, dtype=dtype, count=size // dtype.itemsize, offset=offset
                ).reshape(t["shape"])
                offset += size
        out[key] = arrays
    if tail is not None:
        assert offset == len(tail)
    return out


# --------------------------------------------------------------------------- apps and servers


@contextmanager
def asgi_client(**overrides):
    """A TestClient on a fresh app (lifespan run), with SETTINGS plus overrides."""
    app = create_app(Settings(**{**SETTINGS, **overrides}))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(**overrides) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSERVE_")}
    for name, value in {**SETTINGS, **overrides}.items():
        env[f"GRADSERVE_{name.upper()}"] = str(value)
    return env


class Server:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path):
        self.proc, self.port, self.log = proc, port, log
        self.base_url = f"http://127.0.0.1:{port}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            pytest.fail(f"server ignored SIGTERM for {timeout} s:\n{self.text()}")


@contextmanager
def running_server(log: Path, command: list[str] | None = None, **overrides):
    """`python -m service` on a free loopback port with env settings; stopped with SIGTERM."""
    port = free_port()
    env = server_env(host="127.0.0.1", port=port, **overrides)
    command = command or [sys.executable, "-m", "service"]
    with log.open("w") as sink:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
    server = Server(proc, port, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}:\n{server.text()}")
            try:
                if httpx.get(f"{server.base_url}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"/healthz not up within 30 s:\n{server.text()}")
            time.sleep(0.1)
        yield server
    finally:
        if proc.poll() is None:
            server.stop()


def conv_request(op, attrs, inputs=("x", "w"), x_shape=(1, 4, 6, 6), w_shape=(2, 4, 3, 3)):
    """A request for node 'c' = `op` of `inputs` (x, w, b: linspace values of the given shapes), and its sum."""
    shapes = {"x": x_shape, "w": w_shape, "b": (w_shape[0],)}
    nodes = [{"id": name, "op": "input", "requires_grad": True} for name in inputs]
    nodes.append({"id": "c", "op": op, "inputs": list(inputs), "attrs": attrs})
    nodes.append({"id": "loss", "op": "sum", "inputs": ["c"]})
    tensors = [
        {
            "name": name,
            "shape": list(shapes[name]),
            "datatype": "FP64",
            "data": np.linspace(-1, 1, int(np.prod(shapes[name]))).tolist(),
        }
        for name in inputs
    ]
    return {"graph": {"version": 1, "nodes": nodes, "outputs": ["c", "loss"]}, "inputs": tensors}


def assert_answer_is_torchs(answer, loss, tensors):
    """A /backward answer whose first output is torch's `loss` and whose gradients are `tensors`' (by name)."""
    assert answer["outputs"][0]["data"][0] == pytest.approx(loss.item(), rel=1e-12)
    assert {g["name"] for g in answer["grads"]} == set(tensors)
    for grad in answer["grads"]:
        expected = tensors[grad["name"]].grad.numpy()
        np.testing.assert_allclose(np.asarray(grad["data"]).reshape(expected.shape), expected, rtol=1e-12, atol=1e-12)

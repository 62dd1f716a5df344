"""Hostile tensor objects, body types and paths against a real server process: each is a 4xx
with the JSON error naming the field, never a 500, and the server answers /healthz after."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from .conftest import (
    HEADER_LENGTH,
    ROOT,
    assert_error,
    binary_body,
    free_port,
    simple_graph,
    start_server,
)

JSON_TYPE = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server():
    server = start_server()
    yield server
    server.stop()
    server.log.close()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        yield client


def assert_healthy(http):
    assert http.get("/healthz").json() == {"status": "ok"}


def _request(shape, **tensor):
    return {"graph": simple_graph(shape=(1,)), "inputs": [{"name": "x", "shape": shape, "datatype": "FP32", **tensor}]}


@pytest.mark.parametrize(
    ("shape", "status"),
    [  # orjson reads integers past 2**64 - 1 as floats: not a shape, 422
        ([0, 2**63], 413),
        ([0, 2**64 - 1, 2], 413),
        ([0, 2**62, 4], 413),
        ([2**63], 413),
        ([0, 2**64, 2], 422),
        ([0, 10**30], 422),
        ([1] * 65, 422),
    ],
)
@pytest.mark.parametrize("encoding", ["json", "binary"])
def test_absurd_tensor_shapes_are_4xx_naming_the_shape(http, shape, status, encoding):
    if encoding == "json":
        response = http.post("/forward", content=json.dumps(_request(shape, data=[])), headers=JSON_TYPE)
    else:
        header = _request(shape, parameters={"binary_data_size": 0})
        head = json.dumps(header).encode()
        response = http.post(
            "/forward",
            content=head,
            headers={"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(head))},
        )
    body = assert_error(response, {status})
    assert body["field"] == "inputs[0].shape", body
    assert_healthy(http)


def test_a_tensor_with_both_data_and_binary_data_size_is_422_naming_data(http):
    import numpy as np

    header = {
        "graph": simple_graph(shape=(2,)),
        "inputs": [
            {"name": "x", "shape": [2], "datatype": "FP32", "data": [5.0, 6.0], "parameters": {"binary_data_size": 8}}
        ],
    }
    head = json.dumps(header).encode()
    response = http.post(
        "/backward",
        content=head + np.float32([1, 2]).tobytes(),
        headers={"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(head))},
    )
    body = assert_error(response, {422})
    assert body["field"] == "inputs[0].data" and "both" in body["error"], body
    assert_healthy(http)


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "text/plain; charset=utf-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
        "application/json-patch+json",
    ],
)
@pytest.mark.parametrize("path", ["/forward", "/backward"])
def test_compute_bodies_of_another_type_are_415(http, path, content_type):
    request = json.dumps(
        {"graph": simple_graph(shape=(2,)), "inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}
    )
    headers = {"Origin": "https://evil.example"} if content_type is None else {"Content-Type": content_type}
    body = assert_error(http.post(path, content=request, headers=headers), {415})
    assert body["field"] == "Content-Type", body
    assert_healthy(http)


def test_a_body_without_a_type_is_read_only_from_callers_that_are_not_browsers(http):
    """Triton's HTTP client sends no Content-Type; browsers always send Origin with a POST."""
    request = json.dumps(
        {"graph": simple_graph(shape=(2,)), "inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}
    )
    assert_error(http.post("/backward", content=request, headers={"Content-Type": ""}), {415})  # declared, wrong
    bare = http.build_request("POST", "/backward", content=request)
    assert "content-type" not in bare.headers
    answer = http.send(bare)
    assert answer.status_code == 200, answer.text
    assert answer.json()["grads"][0]["data"] == [2.0, 2.0]
    bare = http.build_request("POST", "/backward", content=request, headers={"Origin": "null"})
    assert_error(http.send(bare), {415})


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON", "application/octet-stream"],
)
def test_json_and_octet_stream_bodies_with_parameters_are_accepted(http, content_type):
    import numpy as np

    if content_type == "application/octet-stream":
        content, headers = binary_body({"graph": simple_graph(shape=(2,))}, {"x": np.float32([1, 2])})
    else:
        content, headers = (
            json.dumps(
                {
                    "graph": simple_graph(shape=(2,)),
                    "inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}],
                }
            ),
            {"Content-Type": content_type},
        )
    response = http.post("/backward", content=content, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["grads"][0]["data"] == [2.0, 2.0]


def test_the_415_comes_before_the_body_is_read(server, http):
    """A text/plain request declaring 1 GiB whose body never comes is answered at once."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /forward HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
            b"Content-Length: 1073741824\r\n\r\n{"
        )
        started = time.monotonic()
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 415"), answer[:200]
    assert time.monotonic() - started < 5
    assert_healthy(http)


@pytest.mark.parametrize("path", ["/forward/", "/backward/", "/healthz/", "/info/"])
def test_no_redirect_echoes_the_host_header(http, path):
    response = http.request(
        "POST" if path.startswith(("/forward", "/backward")) else "GET",
        path,
        content=b"{}",
        headers={**JSON_TYPE, "Host": "evil.example"},
    )
    assert not 300 <= response.status_code < 400 and "location" not in response.headers, response.headers
    assert "evil.example" not in response.text
    assert_error(response, {404})
    assert_healthy(http)


def _serve(host: str, env: dict) -> str:
    """Output of `python -m service serve --host <host>` until it answers, then SIGTERM."""
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSERVE_")} | env
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--host", host, "--port", str(port)],
        cwd=ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise AssertionError("the server did not answer /healthz")
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=20)
    return output.decode(errors="replace")


def test_binding_a_public_address_without_an_api_key_warns_loudly():
    output = _serve("0.0.0.0", {})
    assert "WARNING" in output and "without an API key" in output and "0.0.0.0" in output, output


@pytest.mark.parametrize(("host", "env"), [("127.0.0.1", {}), ("0.0.0.0", {"GRADSERVE_API_KEY": "s3cret"})])
def test_no_warning_on_loopback_or_with_a_key(host, env):
    output = _serve(host, env)
    assert "without an API key" not in output, output

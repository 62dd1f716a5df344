"""What the server keeps between requests is charged for what it holds, and deciding how to run a
request costs the event loop only the request's own bytes (issue 21, items 1 and 6): against real
server processes, with their RSS, /metrics and /healthz latency."""

from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest

from tests.reliability.conftest import assert_error, binary_body, json_tensor, matmul_chain
from tests.reliability.edge_kit import links_for

MiB = 2**20


def metric(server, name: str, headers=None) -> float:
    text = httpx.get(server.url + "/metrics", headers=headers, timeout=30).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def scalar_chain(n: int) -> dict:
    """x -> sin/tanh alternating n times -> sum: n small steps (a plan big in steps, tiny in values)."""
    nodes = [{"id": "x", "op": "input", "requires_grad": True}]
    prev = "x"
    for i in range(n):
        nodes.append({"id": f"n{i}", "op": "tanh" if i % 2 else "sin", "inputs": [prev]})
        prev = f"n{i}"
    nodes.append({"id": "s", "op": "sum", "inputs": [prev]})
    return {"version": 1, "nodes": nodes, "outputs": ["s"]}


def grad_components(count: int = 2000, depth: int = 9) -> dict:
    """`count` chains of `depth` steps from x, each ending in a grad node: 20,000 nodes, 2,000 grad
    nodes by default, whose shape inference and costing take seconds for each new input signature."""
    nodes = [{"id": "x", "op": "input", "requires_grad": True}]
    for c in range(count):
        prev = "x"
        for d in range(depth):
            nodes.append({"id": f"n{c}_{d}", "op": "tanh" if d % 2 else "sin", "inputs": [prev]})
            prev = f"n{c}_{d}"
        nodes.append({"id": f"g{c}", "op": "grad", "inputs": [prev, "x"]})
    nodes.append({"id": "s", "op": "sum", "inputs": [prev]})
    return {"version": "1.1", "nodes": nodes, "outputs": ["s"]}


def cache_plan(server, graph, x) -> str:
    response = httpx.post(server.url + "/forward", json={"graph": graph, "inputs": [json_tensor("x", x)]}, timeout=300)
    assert response.status_code == 200, response.text[:300]
    return response.json()["plan"]


# ------------------------------------------------------------------------------------------ tapes


def test_tapes_of_a_cached_big_plan_are_charged_for_their_nodes(server_factory):
    """A 200-byte request naming a cached 20,000-step plan with retain_graph keeps ~11 MiB per tape
    (its recorded nodes): counted, so max_tape_bytes bounds them and RSS follows."""
    server = server_factory(max_tape_bytes=48 * MiB)
    pid = cache_plan(server, scalar_chain(20_000), np.float32(0.5))
    body = {"plan": pid, "inputs": [json_tensor("x", np.float32(0.5))], "parameters": {"retain_graph": True}}
    first = httpx.post(server.url + "/forward", json=body, timeout=120)
    assert first.status_code == 200, first.text[:300]
    one = metric(server, "gradserve_tape_bytes")
    assert one > 20_000 * 400  # the nodes, not the 8 bytes of its values
    base = server.rss_kb() * 1024
    tapes = [first.json()["tape"]]
    for _ in range(15):
        response = httpx.post(server.url + "/forward", json=body, timeout=120)
        assert response.status_code == 200, response.text[:300]
        tapes.append(response.json()["tape"])
    held = metric(server, "gradserve_tape_bytes")
    assert held <= 48 * MiB
    assert metric(server, "gradserve_tapes") < 16 / 2  # the oldest were evicted
    assert server.rss_kb() * 1024 - base < 48 * MiB + 48 * MiB  # before: 16 tapes, ~180 MiB more
    assert_error(httpx.post(server.url + "/backward", json={"tape": tapes[0]}, timeout=60), [404])
    assert httpx.post(server.url + "/backward", json={"tape": tapes[-1]}, timeout=120).status_code == 200


def square_function_graph(n: int) -> dict:
    """y = x * 2; f = Square(y), a custom Function that saves its argument y (and its output for
    the backward); s = sum(f). Liveness drops y and f from the run's values once read: only the
    Function's ctx keeps them."""
    square = {
        "name": "Square",
        "forward": {
            "nodes": [{"id": "a", "op": "arg", "attrs": {"index": 0}}, {"id": "sq", "op": "mul", "inputs": ["a", "a"]}],
            "outputs": ["sq"],
        },
        "backward": {
            "nodes": [
                {"id": "a", "op": "arg", "attrs": {"index": 0}},
                {"id": "g", "op": "grad_output"},
                {"id": "f", "op": "forward_value", "attrs": {"node": "sq"}},
                {"id": "ga", "op": "mul", "inputs": ["a", "g"]},
                {"id": "gf", "op": "mul", "inputs": ["ga", "f"]},
            ],
            "outputs": ["gf"],
        },
    }
    return {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input", "requires_grad": True, "shape": [n], "dtype": "FP32"},
            {"id": "two", "op": "constant", "attrs": {"value": 2.0}},
            {"id": "y", "op": "mul", "inputs": ["x", "two"]},
            {"id": "f", "op": "function", "inputs": ["y"], "attrs": square},
            {"id": "s", "op": "sum", "inputs": ["f"]},
        ],
        "outputs": ["s"],
    }


def test_custom_function_saved_values_are_charged(server_factory):
    """x, y (saved by the Function's save_for_backward) and sq (its ctx's forward value): three
    arrays of x's size (before: y was read as `ctx._saved` and missed, 2 of 3 counted)."""
    server = server_factory()
    n = 2**20
    x = np.linspace(0, 1, n, dtype=np.float32)
    body, headers = binary_body({"graph": square_function_graph(n), "parameters": {"retain_graph": True}}, {"x": x})
    response = httpx.post(server.url + "/forward", content=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text[:300]
    assert metric(server, "gradserve_tape_bytes") >= 3 * x.nbytes
    tape = response.json()["tape"]
    grads = httpx.post(server.url + "/backward", json={"tape": tape, "parameters": {"binary_data_output": True}})
    assert grads.status_code == 200, grads.text[:300]
    assert metric(server, "gradserve_tape_bytes") == 0


def test_a_tape_in_use_is_409_not_expired(server_factory):
    """Two backwards through one retained tape at once: the second is told the tape is in use
    (409, retry), never that it expired; the tape serves again afterwards."""
    server = server_factory(max_concurrency=4, max_request_work=10**14, max_request_bytes=2**31)
    n = 2048  # a backward of 0.5 s or more on this machine (a fixed 40 links of 300 took 30 ms on a fast one),
    graph = matmul_chain(n, links_for(0.25, n))  # in few links, as the tape holds each link's values
    x = (np.random.default_rng(0).standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    body, headers = binary_body({"graph": graph, "parameters": {"retain_graph": True}}, {"x": x})
    forward = httpx.post(server.url + "/forward", content=body, headers=headers, timeout=120)
    assert forward.status_code == 200, forward.text[:300]
    tape = forward.json()["tape"]
    again = {"tape": tape, "parameters": {"retain_graph": True, "binary_data_output": True}}
    answers = []

    def backward():
        answers.append(httpx.post(server.url + "/backward", json=again, timeout=120))

    threads = [threading.Thread(target=backward) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(r.status_code for r in answers)
    assert 200 in statuses and set(statuses) <= {200, 409}, [r.text[:200] for r in answers]
    for response in answers:
        if response.status_code == 409:
            assert "in use" in assert_error(response, [409])["error"]
    assert 409 in statuses  # three backwards of 0.5 s or more each: they overlap
    assert httpx.post(server.url + "/backward", json=again, timeout=120).status_code == 200


# ------------------------------------------------------------------------------- caches and loop


def test_signatures_of_cached_plans_are_charged_to_the_plan_cache(server_factory):
    """Each new input signature of a cached 4,000-step plan keeps its shapes and costs (~0.5 MiB):
    charged to plan_cache_bytes, so the cache evicts instead of growing (before: 64 signatures
    per plan, uncounted)."""
    server = server_factory(plan_cache_bytes=8 * MiB)
    pid = cache_plan(server, scalar_chain(4000), np.float32(0.5))
    base = server.rss_kb() * 1024
    for k in range(1, 41):
        body = {"plan": pid, "inputs": [json_tensor("x", np.zeros(k, np.float32))]}
        response = httpx.post(server.url + "/forward", json=body, timeout=120)
        if response.status_code == 404:  # evicted: its signatures went with it
            assert "no longer" in response.json()["error"]
            break
        assert response.status_code == 200, response.text[:300]
    assert metric(server, "gradserve_cached_plan_bytes") <= 8 * MiB
    assert server.rss_kb() * 1024 - base < 8 * MiB + 32 * MiB


def test_healthz_answers_while_a_new_signature_of_a_big_plan_is_planned(server_factory):
    """A 120-byte request naming a cached 20,000-node plan (2,000 grad nodes) with a new input
    shape: its shape inference and costing (seconds) run on a compute thread, not on the event
    loop (before: /healthz froze for all of it)."""
    server = server_factory()
    pid = cache_plan(server, grad_components(), np.float32(0.5))
    body = {"plan": pid, "inputs": [json_tensor("x", np.zeros((1, 1), np.float32))]}
    assert len(str(body)) < 200
    done, latencies = threading.Event(), []
    answer = []

    def request():
        start = time.perf_counter()
        answer.append(httpx.post(server.url + "/forward", json=body, timeout=300))
        answer.append(time.perf_counter() - start)
        done.set()

    thread = threading.Thread(target=request)
    thread.start()
    while not done.is_set():
        start = time.perf_counter()
        assert httpx.get(server.url + "/healthz", timeout=30).status_code == 200
        latencies.append(time.perf_counter() - start)
        time.sleep(0.05)
    thread.join()
    assert answer[0].status_code == 200, answer[0].text[:300]
    # the planning took long enough to have frozen /healthz (a first request is not recorded since issue 24: ~1 s),
    # and no /healthz waited for a large part of it
    assert answer[1] > 0.3, answer[1]
    assert max(latencies) < min(1.0, answer[1] / 3), (max(latencies), answer[1])


# ------------------------------------------------------------------------------------ /v2 models


def model_graph(zeros: int) -> dict:
    """x * c, with c a constant of `zeros` FP64 zeros (2 bytes of JSON each, 8 once parsed)."""
    return {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input", "shape": [zeros], "dtype": "FP64"},
            {"id": "c", "op": "constant", "attrs": {"value": [0] * zeros, "dtype": "FP64"}},
            {"id": "y", "op": "mul", "inputs": ["x", "c"]},
            {"id": "s", "op": "sum", "inputs": ["y"]},
        ],
        "outputs": ["s"],
    }


def load(server, name, graph, **kw):
    return httpx.post(
        f"{server.url}/v2/repository/models/{name}/load", json={"parameters": {"config": graph}}, timeout=60, **kw
    )


def test_models_are_charged_for_what_they_hold_once_parsed(server_factory):
    """A model's constants count by their arrays (8 bytes a zero), not their JSON (2): models
    whose JSON fits max_model_bytes 4 times over are refused once parsed, and RSS stays near it."""
    server = server_factory(max_model_bytes=8 * MiB)
    base = server.rss_kb() * 1024
    loaded = 0
    for i in range(16):
        response = load(server, f"m{i}", model_graph(250_000))  # 0.5 MB of JSON, 2 MB parsed
        if response.status_code == 413:
            assert "as parsed" in assert_error(response, [413])["error"]
            break
        assert response.status_code == 200, response.text[:300]
        loaded += 1
    assert 1 <= loaded <= 4
    assert metric(server, "gradserve_model_bytes") <= 8 * MiB
    assert server.rss_kb() * 1024 - base < 8 * MiB + 40 * MiB  # before: all 16 loaded, ~35 MiB of arrays


def test_unloading_a_model_during_infer_drops_its_series(server_factory):
    server = server_factory(max_request_work=10**14, max_request_bytes=2**31)
    n = 2048  # an infer of 1 s or more on this machine, so the unload lands while it runs (in few links: the
    assert load(server, "slow", matmul_chain(n, links_for(1, n))).status_code == 200  # infer holds each one's values
    x = np.ones((n, n), np.float32) / n
    body, headers = binary_body({"parameters": {"binary_data_output": True}}, {"x": x})
    answer = []
    thread = threading.Thread(
        target=lambda: answer.append(
            httpx.post(server.url + "/v2/models/slow/infer", content=body, headers=headers, timeout=120)
        )
    )
    thread.start()
    deadline = time.monotonic() + 30
    while metric(server, "gradserve_computations_in_flight") < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert metric(server, "gradserve_computations_in_flight") >= 1  # the infer is running
    assert httpx.post(server.url + "/v2/repository/models/slow/unload", timeout=30).status_code == 200
    thread.join()
    assert answer[0].status_code == 200, answer[0].text[:300]
    assert 'model="slow"' not in httpx.get(server.url + "/metrics", timeout=30).text


def test_metrics_need_the_api_key_when_one_is_set(server_factory):
    server = server_factory(api_key="s3cret")
    body = assert_error(httpx.get(server.url + "/metrics", timeout=30), [401])
    assert body["field"] == "Authorization"
    good = {"Authorization": "Bearer s3cret"}
    assert metric(server, "gradserve_tapes", headers=good) == 0
    assert httpx.get(server.url + "/healthz", timeout=30).status_code == 200  # probes stay open


@pytest.mark.parametrize("path", ["models/m/load", "models/m/unload", "index"])
def test_repository_posts_refuse_what_a_browser_sends_without_preflight(server_factory, path):
    """text/plain (or a form) with Origin: a page could post it to a local server with no CORS
    preflight. 415, like the compute endpoints; tritonclient (no type, no Origin) still works."""
    server = server_factory()
    config = json.dumps(model_graph(3))
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        response = httpx.post(
            f"{server.url}/v2/repository/{path}",
            content=json.dumps({"parameters": {"config": config}}),
            headers={"Content-Type": content_type, "Origin": "http://evil.example"},
            timeout=30,
        )
        assert "Content-Type" in assert_error(response, [415])["error"]
    tritonclient_http = pytest.importorskip("tritonclient.http")
    client = tritonclient_http.InferenceServerClient(server.url.removeprefix("http://"))
    client.load_model("m", config=config)
    assert [m["name"] for m in client.get_model_repository_index()] == ["m"]
    client.unload_model("m")
    assert client.get_model_repository_index() == []


# ------------------------------------------------------------------------------- in-process units


def test_what_a_custom_function_node_holds():
    """`Node.holds` of a custom Function's node: what save_for_backward saved and what else its
    forward put on ctx (the engine's public answer that tapes are charged by)."""
    from engine.function import Function
    from engine.variable import Variable

    class Scaled(Function):
        @staticmethod
        def forward(ctx, x):
            y = x * 3.0
            ctx.save_for_backward(y)
            ctx.extra = {"z": y * 2.0}
            return y * y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y * 6.0

    x = Variable(np.ones(4, np.float32), requires_grad=True)
    out = Scaled.apply(x)
    held = out._node.holds()
    assert len(held) == 2 and all(isinstance(v, Variable) for v in held)
    assert sorted(float(v._data[0]) for v in held) == [3.0, 6.0]

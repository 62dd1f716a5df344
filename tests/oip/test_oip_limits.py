"""The repository's bounds, and the limits, executor and compute pool that infer shares with
/forward and /backward: a request cannot get around them by coming through /v2."""

from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest
import tritonclient.http as tritonclient_http
from tritonclient.utils import InferenceServerException

from tests.oip.oip_testkit import MLP, W, X, config, host_port, infer_input, requested
from tests.reliability.conftest import matmul_chain
from tests.service.service_testkit import asgi_client, running_server


def load(client, name, graph_config, **params):
    return client.post(f"/v2/repository/models/{name}/load", json={"parameters": {"config": graph_config, **params}})


def infer_body(**arrays):
    return {
        "inputs": [
            {"name": n, "shape": list(a.shape), "datatype": "FP32", "data": a.ravel().tolist()}
            for n, a in arrays.items()
        ]
    }


def test_max_models_counts_names_not_loads():
    with asgi_client(max_models=2) as client:
        assert load(client, "a", config(MLP)).status_code == 200
        assert load(client, "b", config(MLP)).status_code == 200
        refused = load(client, "c", config(MLP))
        assert refused.status_code == 409 and "max_models=2" in refused.json()["error"]
        for _ in range(5):  # reloading a name replaces it: no room taken
            assert load(client, "a", config(MLP)).status_code == 200
        assert client.post("/v2/repository/models/b/unload").status_code == 200
        assert load(client, "c", config(MLP)).status_code == 200
        assert sorted(m["name"] for m in client.post("/v2/repository/index").json()) == ["a", "c"]


def test_max_model_bytes_holds_across_reloads_and_spellings():
    with asgi_client() as probe:
        assert load(probe, "a", config(MLP)).status_code == 200
        size = probe.app.state.models.nbytes  # what a model holds once parsed: its plan, constants and JSON
    assert size > len(config(MLP))
    with asgi_client(max_model_bytes=2 * size + 10) as client:
        models = client.app.state.models
        assert load(client, "a", config(MLP)).status_code == 200
        for _ in range(5):
            assert load(client, "a", config(MLP)).status_code == 200
        assert models.nbytes == size
        assert load(client, "b", MLP).status_code == 200  # the graph as an object counts the same
        assert models.nbytes == 2 * size
        refused = load(client, "c", config(MLP))
        assert refused.status_code == 413 and refused.json()["field"] == "parameters.config"
        padded = load(client, "a", config(MLP) + " " * (2 * size))  # JSON over the bound is refused unparsed
        assert padded.status_code == 413
        # the old "a" serves; the Shapes of its new signature are kept only where they fit
        assert client.post("/v2/models/a/infer", json=infer_body(x=X, w=W)).status_code == 200
        assert models.nbytes <= 2 * size + 10


def test_load_body_over_max_body_bytes_is_413():
    with asgi_client(max_body_bytes=2000) as client:
        response = load(client, "big", json.dumps(MLP, indent=40))
        assert response.status_code == 413 and response.json()["field"] == "body"


def test_infer_tensors_meet_the_element_limits():
    with asgi_client(max_tensor_elements=1000) as client:
        graph = {
            "version": 1,
            "nodes": [{"id": "x", "op": "input", "requires_grad": True}, {"id": "s", "op": "sum", "inputs": ["x"]}],
            "outputs": ["s"],
        }
        assert load(client, "sum", config(graph)).status_code == 200
        small = client.post("/v2/models/sum/infer", json=infer_body(x=np.ones(10, np.float32)))
        assert small.status_code == 200
        big = {"inputs": [{"name": "x", "shape": [10**6], "datatype": "FP32", "data": []}]}
        response = client.post("/v2/models/sum/infer", json=big)
        assert response.status_code == 413 and response.json()["field"] == "inputs[0].shape"
        seed = {
            "inputs": [
                *infer_body(x=np.ones(10, np.float32))["inputs"],
                {"name": "grad_output:s", "shape": [2000], "datatype": "FP32", "data": []},
            ]
        }
        assert client.post("/v2/models/sum/infer", json=seed).status_code == 413


def test_models_are_planned_by_the_executor_of_forward_and_backward():
    """Load plans the graph in the executor's plan cache; /forward with the same graph finds it."""
    with asgi_client() as client:
        plans = client.app.state.executor.plans
        assert load(client, "mlp", config(MLP)).status_code == 200
        assert (plans.misses, len(plans)) == (1, 1)
        forward = client.post("/forward", json={"graph": MLP, **infer_body(x=X, w=W)})
        assert forward.status_code == 200
        infer = client.post("/v2/models/mlp/infer", json={**infer_body(x=X, w=W), "outputs": [{"name": "loss"}]})
        assert infer.json()["outputs"][0]["data"] == forward.json()["outputs"][0]["data"]
        # /forward found the model's plan; infer runs the model's own plan, never looked up again
        assert (plans.misses, len(plans), plans.hits) == (1, 1, 1)


def metric(url, name) -> float:
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name} missing")


def test_infer_shares_the_compute_pool_and_its_timeout(tmp_path):
    """max_concurrency=1: while a slow infer holds the only slot, a light infer still runs (inline,
    never refused as busy), while another pooled infer and a pooled /forward wait queue_timeout_s
    for the slot and get 503; the slow one finishes, or is cancelled at compute_timeout_s. (3000 links of a
    384x384 matmul take seconds; cancelled after 3 s, a few hundred MiB at most are held.)"""
    settings = {
        "max_concurrency": 1,
        "compute_timeout_s": 3.0,
        "queue_timeout_s": 0.2,
        "max_nodes": 20000,
        "max_body_bytes": 16 * 2**20,
        "max_request_work": 10**14,
    }  # the slow graph is over the default budget
    slow_graph = matmul_chain(384, 3000)  # 3.6e11 flop: seconds past the timeout on any machine
    with running_server(tmp_path / "server.log", **settings) as server:
        triton = tritonclient_http.InferenceServerClient(url=host_port(server), network_timeout=120)
        triton.load_model("slow", config=config(slow_graph))
        triton.load_model("mlp", config=config(MLP))
        x = (np.random.default_rng(0).standard_normal((384, 384)) / np.sqrt(384)).astype(np.float32)
        outcome = {}

        def slow():  # over plain HTTP: tritonclient's sync client shares its event hub across threads
            body = {
                "inputs": [{"name": "x", "shape": [384, 384], "datatype": "FP32", "data": x.ravel().tolist()}],
                "outputs": [{"name": "s"}],
            }
            outcome["slow"] = httpx.post(server.base_url + "/v2/models/slow/infer", json=body, timeout=120)

        thread = threading.Thread(target=slow)
        thread.start()
        deadline = time.monotonic() + 30
        while metric(server.base_url, "gradserve_computations_in_flight") < 1:
            assert time.monotonic() < deadline, "the slow infer never started"
            time.sleep(0.02)
        light = triton.infer("mlp", [infer_input("x", X, False), infer_input("w", W, False)])
        assert light.as_numpy("loss") is not None
        with pytest.raises(InferenceServerException) as busy:
            triton.infer("slow", [infer_input("x", x, True)], outputs=requested("s", binary=True))
        assert busy.value.status() == "503" and "busy" in busy.value.message()
        heavy = httpx.post(server.base_url + "/forward", json={"graph": slow_graph, **infer_body(x=x)}, timeout=60)
        assert heavy.status_code == 503, heavy.text
        thread.join(60)
        slow = outcome["slow"]  # finished, or cancelled at compute_timeout_s on a slower machine
        assert slow.status_code == 200 or (slow.status_code == 503 and "compute_timeout_s" in slow.json()["error"])
        assert metric(server.base_url, "gradserve_computations_timed_out_total") == (slow.status_code == 503)
        assert metric(server.base_url, "gradserve_computations_rejected_total") >= 2


def test_concurrent_loads_cannot_pass_max_models(tmp_path):
    """Loads parse on the compute pool, so several can be in flight at once: each is checked
    again when it registers, and no interleaving gets past max_models."""
    import asyncio

    async def load_all(url):
        async with httpx.AsyncClient(timeout=30) as client:
            return await asyncio.gather(
                *(
                    client.post(f"{url}/v2/repository/models/m{i}/load", json={"parameters": {"config": config(MLP)}})
                    for i in range(12)
                )
            )

    with running_server(tmp_path / "server.log", max_models=2, max_concurrency=8) as server:
        statuses = [r.status_code for r in asyncio.run(load_all(server.base_url))]
        index = httpx.post(server.base_url + "/v2/repository/index").json()
    assert set(statuses) <= {200, 409, 503}, statuses
    assert statuses.count(200) == len(index) == 2, (statuses, index)

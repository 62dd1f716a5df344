"""Plan ids: an answer names the plan the server keeps for its graph, and a later request may send
that id instead of the graph; everything else is checked as if the graph had come again."""

from __future__ import annotations

import copy

import httpx
import numpy as np
import orjson
import pytest
from service_testkit import EXAMPLE, assert_error, assert_still_serves

import client
from client import Variable
from wire.errors import GraphError, RequestError
from wire.executor import Executor
from wire.limits import Limits
from wire.messages import decode_request


def _request(body, limits=None):
    return decode_request(orjson.loads(orjson.dumps(body)), None, limits or Limits())


def _without_graph(body, plan_id):
    body = {k: v for k, v in copy.deepcopy(body).items() if k != "graph"}
    return {**body, "plan": plan_id}


def test_an_answer_names_its_plan_and_the_id_stands_for_the_graph():
    executor = Executor()
    first = executor.backward(_request(EXAMPLE))
    assert isinstance(first.plan, str) and len(first.plan) == 32
    again = executor.backward(_request(_without_graph(EXAMPLE, first.plan)))
    assert again.plan == first.plan
    np.testing.assert_array_equal(again.grads["w"], first.grads["w"])
    np.testing.assert_array_equal(again.outputs["loss"], first.outputs["loss"])
    other = {"graph": {**EXAMPLE["graph"], "outputs": ["h"]}, "inputs": EXAMPLE["inputs"]}
    assert executor.forward(_request(other)).plan != first.plan


def test_an_unknown_or_evicted_plan_is_not_found_and_names_the_field():
    executor = Executor(Limits(plan_cache_size=1))
    first = executor.backward(_request(EXAMPLE))
    with pytest.raises(RequestError) as err:
        executor.backward(_request(_without_graph(EXAMPLE, "0" * 32)))
    assert (err.value.kind, err.value.field) == ("not_found", "plan")
    other = {"graph": {**EXAMPLE["graph"], "outputs": ["h"]}, "inputs": EXAMPLE["inputs"]}
    executor.forward(_request(other))  # evicts the first graph's plan (the cache holds one)
    with pytest.raises(RequestError) as err:
        executor.backward(_request(_without_graph(EXAMPLE, first.plan)))
    assert err.value.kind == "not_found"


def test_plan_is_a_string_sent_instead_of_the_graph():
    with pytest.raises(RequestError) as err:
        _request({**EXAMPLE, "plan": "abc"})
    assert err.value.field == "plan"
    with pytest.raises(RequestError) as err:
        _request(_without_graph(EXAMPLE, 12))
    assert err.value.field == "plan"


def test_a_plan_id_gets_around_no_limit():
    """Inputs sent with a plan id meet the same shape checks and budgets as with the graph."""
    limits = Limits(max_request_work=10**6)
    executor = Executor(limits)
    plan_id = executor.backward(_request(EXAMPLE, limits)).plan
    big = _without_graph(EXAMPLE, plan_id)
    big["inputs"] = [
        {"name": "x", "shape": [300, 300], "datatype": "FP32", "data": [0.0] * 90000},
        {"name": "w", "shape": [300, 300], "datatype": "FP32", "data": [0.0] * 90000},
    ]
    with pytest.raises(RequestError) as err:
        executor.backward(_request(big, limits))
    assert err.value.kind == "too_large" and "work" in str(err.value)
    wrong = _without_graph(EXAMPLE, plan_id)
    wrong["inputs"] = [wrong["inputs"][0]]
    with pytest.raises(GraphError) as err:
        executor.backward(_request(wrong, limits))
    assert err.value.node == "w"


def test_plan_ids_over_http(http):
    answer = http.post("/backward", json=EXAMPLE)
    assert answer.status_code == 200, answer.text
    plan_id = answer.json()["plan"]
    again = http.post("/backward", json=_without_graph(EXAMPLE, plan_id))
    assert again.status_code == 200, again.text
    assert again.json()["grads"] == answer.json()["grads"]
    assert_error(http.post("/backward", json=_without_graph(EXAMPLE, "f" * 32)), 404, "plan", field="plan")
    assert_error(http.post("/backward", json={**EXAMPLE, "plan": plan_id}), 422, "plan", field="plan")
    assert_still_serves(http)


class Recording(httpx.BaseTransport):
    """Passes requests on to a real server, keeping their JSON headers (binary tails cut off)."""

    def __init__(self):
        self.inner = httpx.HTTPTransport()
        self.headers = []

    def handle_request(self, request):
        body = request.read()
        length = request.headers.get("inference-header-content-length")
        self.headers.append(orjson.loads(body[: int(length)] if length else body))
        return self.inner.handle_request(request)


def test_the_client_sends_a_repeated_graph_by_its_plan_id(server):
    rng = np.random.default_rng(0)
    x, w0 = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))
    transport = Recording()
    with client.connect(server.base_url, transport=transport):
        w = Variable(w0.copy(), requires_grad=True)
        for _ in range(3):
            loss = (Variable(x).mm(w).clamp(min=0) ** 2).sum()
            loss.backward()
            w.data -= 0.1 * w.grad.data
            w.grad = None
    sent = [h for h in transport.headers]
    assert len(sent) == 3
    assert "graph" in sent[0] and "plan" not in sent[0]
    assert all("graph" not in h and h["plan"] == sent[1]["plan"] for h in sent[1:])
    expected = w0.copy()
    for _ in range(3):
        h = x @ expected
        expected -= 0.1 * (x.T @ (2 * np.maximum(h, 0) * (h > 0)))
    np.testing.assert_allclose(w.data, expected, rtol=1e-12)


def test_the_client_sends_the_graph_again_when_the_server_lost_the_plan(server):
    transport = Recording()
    with client.connect(server.base_url, transport=transport) as session:
        w = Variable(np.ones((2, 2)), requires_grad=True)
        (w * 3).sum().backward()
        assert len(session._plans) == 1
        session._plans[next(iter(session._plans))] = "0" * 32  # as if the server had restarted
        w.grad = None
        (w * 3).sum().backward()
        np.testing.assert_array_equal(w.grad.data, np.full((2, 2), 3.0))
    assert ["graph" in h for h in transport.headers] == [True, False, True]
    assert transport.headers[1]["plan"] == "0" * 32

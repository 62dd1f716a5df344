"""GET /plans/{id}.dot: a cached plan as DOT, the same text the client renders for the graph it sent;
404 for an unknown id, 413 over the node bound, the API key when one is set, described in OpenAPI."""

from __future__ import annotations

import re

import numpy as np
import pytest
from service_testkit import EXAMPLE, asgi_client, assert_error

import client
from client import Function, Variable
from service import plans

KEY = "s3cret-key"


@pytest.fixture
def app():
    with asgi_client() as test_client:
        yield test_client


def plan_of(test_client, body=EXAMPLE, headers=None) -> str:
    response = test_client.post("/backward", json=body, headers=headers or {})
    assert response.status_code == 200, response.text
    return response.json()["plan"]


class Square(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a * a

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return 2 * a * g


@pytest.fixture(params=["asgi", "uvicorn"])
def target(request):
    """(connect() arguments, an httpx-like client) for the in-process app and for the real server."""
    if request.param == "asgi":
        test_client = request.getfixturevalue("app")
        return {"url": "http://testserver", "transport": test_client._transport}, test_client
    return {"url": request.getfixturevalue("server").base_url}, request.getfixturevalue("http")


def test_the_client_renders_what_the_server_cached(target):
    options, http = target
    with client.connect(retries=0, **options) as session:
        x = Variable(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
        w = Variable(np.full((3, 1), 0.5, np.float32))
        loss = Square.apply((x @ w).clamp(min=0) * 2).sum()
        seen = loss.to_dot()
        loss.backward()
        (handed_out,) = session._plans.values()  # the plan id the server gave the graph it was sent
    assert f"label=<plan {handed_out}>" in seen  # the client names the plan it sends
    response = http.get(f"/plans/{handed_out}.dot")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/vnd.graphviz")
    assert response.text == seen
    assert "[2, 3] float32" in seen and "clamp" in seen and "function Square" in seen and "filled" in seen


def test_a_plan_sent_by_its_graph_renders_its_nodes(app):
    pid = plan_of(app)
    text = app.get(f"/plans/{pid}.dot").text
    for node in EXAMPLE["graph"]["nodes"]:
        assert f"<B>{node['id']}</B><BR/>{node['op']}" in text
    assert re.search(
        r'<B>loss</B><BR/>sum<BR/><FONT COLOR="#555555">\[\] float32</FONT>>, style="rounded,filled"', text
    )


def test_an_unknown_plan_is_a_404_naming_it(app):
    assert_error(app.get("/plans/0123abc.dot"), 404, "'0123abc'", "not (or no longer) held", field="plan_id")
    assert_error(app.get("/plans/.dot"), 404)


def test_plans_over_the_bound_are_refused(app, monkeypatch):
    pid = plan_of(app)
    monkeypatch.setattr(plans, "MAX_DOT_NODES", 3)
    assert_error(app.get(f"/plans/{pid}.dot"), 413, "7 nodes", "more than the 3", field="plan_id")


def test_the_api_key_guards_it():
    with asgi_client(api_key=KEY) as test_client:
        pid = plan_of(test_client, headers={"Authorization": f"Bearer {KEY}"})
        assert_error(test_client.get(f"/plans/{pid}.dot"), 401, "missing API key", field="Authorization")
        wrong = test_client.get(f"/plans/{pid}.dot", headers={"Authorization": "Bearer nope"})
        assert_error(wrong, 401, "wrong API key")
        unknown = test_client.get("/plans/feed.dot")
        assert unknown.status_code == 401  # the key first: no answer tells which ids exist
        right = test_client.get(f"/plans/{pid}.dot", headers={"Authorization": f"Bearer {KEY}"})
        assert right.status_code == 200 and right.text.startswith("digraph plan {")


def test_openapi_describes_it(app):
    operation = app.get("/openapi.json").json()["paths"]["/plans/{plan_id}.dot"]["get"]
    assert "text/vnd.graphviz" in operation["responses"]["200"]["content"]
    assert {"404", "413"} <= set(operation["responses"])
    assert operation["parameters"][0]["name"] == "plan_id"

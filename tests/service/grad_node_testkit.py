"""Helpers of the grad-node tests: a small graph builder, and one call that runs a request
through the embedded Executor or a live server and answers the same way for both.

Not a test module; `conftest.py` puts this folder on `sys.path`.
"""

from __future__ import annotations

import numpy as np
import orjson

from service.errors import STATUS
from wire.errors import GraphError
from wire.executor import Executor
from wire.limits import Limits
from wire.messages import decode_request

EMBEDDED = Executor(Limits())


class GraphBuilder:
    """Nodes in the order they are added; every method returns the new node's id."""

    def __init__(self, version="1.1"):
        self.nodes = []
        self.version = version

    def _add(self, node: dict) -> str:
        node.setdefault("id", f"n{len(self.nodes)}")
        self.nodes.append(node)
        return node["id"]

    def input(self, name: str, requires_grad: bool = False) -> str:
        return self._add({"id": name, "op": "input", **({"requires_grad": True} if requires_grad else {})})

    def const(self, value) -> str:
        return self._add({"op": "constant", "attrs": {"value": value}})

    def op(self, op: str, *inputs: str, id: str | None = None, **attrs) -> str:
        node = {"op": op, "inputs": list(inputs), **({"attrs": attrs} if attrs else {})}
        return self._add({**node, **({"id": id} if id else {})})

    def grad(self, output: str, wrt: str, grad_output: str | None = None, id: str | None = None) -> str:
        return self.op("grad", output, wrt, *([grad_output] if grad_output else []), id=id)

    def total(self, node: str) -> str:
        return self.op("sum", node)

    def dot(self, a: str, b: str) -> str:
        """sum(a * b): a scalar that a grad node differentiates to a vector-Jacobian product."""
        return self.total(self.op("mul", a, b))

    def graph(self, *outputs: str) -> dict:
        return {"version": self.version, "nodes": list(self.nodes), "outputs": list(outputs)}


def tensor(name: str, array) -> dict:
    array = np.asarray(array, dtype=np.float64)
    return {"name": name, "shape": list(array.shape), "datatype": "FP64", "data": array.ravel().tolist()}


def body(graph: dict | None, inputs: dict, grad_outputs: dict | None = None, **fields) -> dict:
    out = {"inputs": [tensor(n, a) for n, a in inputs.items()], **fields}
    if graph is not None:
        out["graph"] = graph
    if grad_outputs:
        out["grad_outputs"] = [tensor(n, a) for n, a in grad_outputs.items()]
    return out


class Answer(dict):
    """A decoded answer: {"status", "outputs": {name: array}, "grads": {...}, "tape", "error"...}."""


def call(target, endpoint: str, request: dict) -> Answer:
    """POST `request` to `endpoint` ("forward" or "backward"): `target` is "embedded" (the
    in-process Executor, fed the same JSON) or an httpx client of a live server."""
    if target == "embedded":
        return _embedded(endpoint, orjson.loads(orjson.dumps(request)))
    response = target.post(f"/{endpoint}", content=orjson.dumps(request), headers={"Content-Type": "application/json"})
    answer = Answer(response.json(), status=response.status_code)
    for key in ("outputs", "grads"):
        if key in answer:
            answer[key] = {t["name"]: np.asarray(t["data"], dtype=np.float64).reshape(t["shape"]) for t in answer[key]}
    return answer


def _embedded(endpoint, header) -> Answer:
    try:
        request = decode_request(header, None, EMBEDDED.limits)
        result = getattr(EMBEDDED, endpoint)(request)
    except GraphError as err:
        return Answer(status=STATUS[err.kind], error=str(err), node=err.node, field=err.field)
    answer = Answer(status=200, outputs={k: np.asarray(v) for k, v in result.outputs.items()})
    if result.grads is not None:
        answer["grads"] = {k: np.asarray(v) for k, v in result.grads.items()}
    if result.tape is not None:
        answer["tape"] = result.tape
    return answer


def ok(answer: Answer) -> Answer:
    assert answer["status"] == 200, answer
    return answer

"""The everyday surface's ops in the graph format (issue 22, item 4): the rounding and modular ops,
`prod` and `floor_divide` computed and differentiated by the service, and hostile index nodes
(an index out of range, an index list whose broadcast result is huge) refused with a 4xx that
names the node."""

from __future__ import annotations

import numpy as np
import pytest
from service_testkit import assert_error


def graph(*nodes, outputs=("s",)):
    return {"version": 1, "nodes": list(nodes), "outputs": list(outputs)}


def node(id, op, *inputs, **attrs):
    out = {"id": id, "op": op, "inputs": list(inputs)}
    if attrs:
        out["attrs"] = attrs
    return out


def tensor(name, values, datatype="FP32"):
    array = np.asarray(values)
    return {"name": name, "shape": list(array.shape), "datatype": datatype, "data": array.reshape(-1).tolist()}


X = {"id": "x", "op": "input", "requires_grad": True}
I = {"id": "i", "op": "input"}
XS = tensor("x", [5.5, -2.5, 3.0])


@pytest.mark.parametrize(
    ("nodes", "want"),
    [
        ([node("s", "floor", "x")], [5.0, -3.0, 3.0]),
        ([node("s", "round", "x", decimals=-1)], [10.0, -0.0, 0.0]),
        ([node("c", "constant", value=2.0), node("s", "floor_divide", "x", "c")], [2.0, -2.0, 1.0]),
        ([node("c", "constant", value=-2.0), node("s", "remainder", "x", "c")], [-0.5, -0.5, -1.0]),
        ([node("c", "constant", value=-2.0), node("s", "fmod", "x", "c")], [1.5, -0.5, 1.0]),
        ([node("s", "prod", "x")], -41.25),
        ([node("s", "exp2", "x")], [2**5.5, 2**-2.5, 8.0]),
    ],
)
def test_new_ops_compute_over_the_wire(asgi, nodes, want):
    response = asgi.post("/forward", json={"graph": graph(X, *nodes), "inputs": [XS]})
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(response.json()["outputs"][0]["data"], want, rtol=1e-6)


def test_prod_and_remainder_gradients_over_the_wire(asgi):
    body = {
        "graph": graph(
            X,
            node("c", "constant", value=2.0),
            node("r", "remainder", "x", "c"),
            node("p", "prod", "x"),
            node("s", "add", "r", "p"),
            node("t", "sum", "s"),
            outputs=("t",),
        ),
        "inputs": [tensor("x", [1.5, 0.0, 3.0])],
    }
    response = asgi.post("/backward", json=body)
    assert response.status_code == 200, response.text
    # remainder passes 1; the product, broadcast to 3 elements, gives 3 * (1.5 * 3.0) at the zero and 0 elsewhere
    np.testing.assert_allclose(response.json()["grads"][0]["data"], [1.0, 1.0 + 3 * 4.5, 1.0])


@pytest.mark.parametrize(
    ("name", "nodes", "inputs", "status", "words"),
    [
        (
            "index array out of range",
            [I, node("s", "getitem", "x", "i", index=[{"tensor": 0}])],
            [tensor("i", [0, 5], "INT64")],
            422,
            "out of bounds",
        ),
        (
            "negative index array out of range",
            [I, node("s", "setitem", "x", "x", "i", index=[{"tensor": 0}])],
            [tensor("i", [-4, 0, 1], "INT64")],
            422,
            "out of bounds",
        ),
        ("int index out of range", [node("s", "getitem", "x", index=[7])], [], 422, "out of bounds"),
        (
            "index_add out of range",
            [I, node("s", "index_add", "x", "i", index=[{"tensor": 0}], shape=[2])],
            [tensor("i", [0, 1, 9], "INT64")],
            422,
            "out of bounds",
        ),
        (
            "huge broadcast index lists",
            [
                I,
                {"id": "j", "op": "input"},
                node("s", "getitem", "x", "i", "j", index=[{"tensor": 0}, {"tensor": 1}]),
            ],
            [tensor("i", np.zeros(40000, np.int64), "INT64"), tensor("j", np.zeros((40000, 1), np.int64), "INT64")],
            413,
            "elements",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_hostile_index_is_4xx_naming_the_node(asgi, name, nodes, inputs, status, words):
    x = XS if name != "huge broadcast index lists" else tensor("x", np.zeros((3, 3)))
    response = asgi.post("/forward", json={"graph": graph(X, *nodes), "inputs": [x, *inputs]})
    assert_error(response, status, words, node="s")

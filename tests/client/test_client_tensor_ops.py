"""torch's tril/triu, masked_fill, gather, scatter_add, index_select, cumsum, bmm, chunk, split,
repeat, sort, topk, argsort and einsum as tutorial programs use them: on the engine, the embedded
client and a live server, against PyTorch (values, dtypes, gradients); float64 gradients by finite
differences; and bad calls or hostile graphs refused with a message naming the node or field."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

import client
from client.errors import RequestError
from tests import everyday_programs as programs

CAUSAL = "att = x @ y.T\nmask = torch.tril(torch.ones(3, 3)) == 0\n"
PROGRAMS = {
    "tril/triu": "out = torch.tril(x) + x.triu(diagonal=1) * 2 + torch.tril(x, -1) + x.triu(-5)",
    "tril_ masked_fill_": "z = x * 1\nz.tril_()\nz.masked_fill_(z > 1, 0.5)\nout = z",
    "causal masked_fill": CAUSAL + "out = att.masked_fill(mask, float('-inf')).softmax(-1)",
    "masked_fill(int)": "out = n.masked_fill(n > 2, 7)",
    "masked_fill(tensor value)": "out = torch.masked_fill(x, x < 0, y[0, 0])",
    "gather": "out = x.gather(1, torch.tensor([[0, 3], [1, 1], [2, 0]])) * 2",
    "gather cross entropy": "out = -x.log_softmax(-1).gather(1, ys.unsqueeze(1)).mean()",
    "gather(dim=0, larger index)": "out = torch.gather(y, 0, torch.tensor([[2, 0, 1, 1], [0, 0, 2, 1]] * 3))",
    "scatter_add": "out = torch.zeros(3, 5).scatter_add(1, torch.tensor([[0, 4, 4, 1]]).expand(3, 4), x)",
    "scatter_add_": "z = torch.ones(3, 5)\nz.scatter_add_(1, torch.tensor([[0, 4, 4, 1]] * 3), x * y)\nout = z",
    "torch.scatter_add": "out = torch.scatter_add(x, 0, torch.tensor([[2, 2, 0, 1]]), y[:1])",
    "index_select": "out = torch.index_select(x, 0, ix % 3) + x.index_select(0, torch.tensor([2, 2, 0]))",
    "index_select(dim=1)": "out = y.index_select(1, torch.tensor([3, 0]))",
    "cumsum": "out = x.cumsum(1) * torch.cumsum(y, dim=0) + x.cumsum(-1)",
    "cumsum(int)": "out = torch.cumsum(n, 0)",
    "cumsum_": "z = x * 1\nz.cumsum_(0)\nout = z",
    "bmm": "out = torch.bmm(x.reshape(3, 2, 2), y.reshape(3, 2, 2)) + x.reshape(3, 2, 2).bmm(y.reshape(3, 2, 2))",
    "chunk/split": "a, b = x.chunk(2, dim=1)\nc, d = torch.split(y, [1, 2])\nout = a * b + torch.cat([c, d], 0).sum()",
    "split(int)": "out = torch.cat(x.split(3, dim=1), 1) * torch.cat(torch.chunk(y, 3), 0)",
    "chunk(uneven)": "p = y.chunk(3, 1)\nout = p[0].sum() + p[1].sum() * 2 + p[-1].sum() * len(p)",
    "repeat": "out = x.repeat(2, 1, 3) + y.repeat(2, 1, 3)",
    "repeat(list)": "out = x[0].repeat([2, 2])",
    "sort": "v, i = torch.sort(x, dim=1, descending=True)\nout = v * 2 + i.float()",
    "sort.values": "out = x.sort(0).values * y",
    "topk": "r = torch.topk(x, 2)\nout = r.values + r.indices.float()",
    "topk(smallest, dim=0)": "out = x.topk(2, dim=0, largest=False)[0] * 3",
    "argsort": "out = torch.argsort(x, dim=0) + x.argsort(descending=True)",
    "einsum": "out = torch.einsum('ij,kj->ik', x, y)",
    "einsum batched": "out = torch.einsum('bij,bjk->bik', x.reshape(3, 2, 2), y.reshape(3, 2, 2))",
    "einsum sum": "out = torch.einsum('ij->j', x) + torch.einsum('ij', y).sum(0) + torch.einsum('ji', y)[:, 1]",
    "einsum ellipsis": "out = torch.einsum('...j,j', [x, y[0]])",
    "einsum trace/diagonal": "out = torch.einsum('ii', x[:, :3]) * torch.einsum('ii->i', y[:, 1:])",
    "einsum outer": "out = torch.einsum('i,j->ij', x[0], y[:, 1])",
    "attention": CAUSAL + "w = att.masked_fill(mask, -1e9).softmax(-1)\nout = torch.einsum('ij,jk->ik', w, x)",
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_matches_torch(name, torch_like):
    programs.assert_matches_torch(torch_like, PROGRAMS[name], name)


CHECKED = {
    "tril": lambda t, a, b: t.tril(a, 1) * b.triu(),
    "masked_fill": lambda t, a, b: a.masked_fill(b > 0, 2.0) * b.masked_fill(a < 0, a[0, 0]),
    "gather": lambda t, a, b: t.gather(a, 1, t.tensor([[0, 2, 2], [1, 0, 1], [3, 3, 3]])) * b[:, :3],
    "scatter_add": lambda t, a, b: t.scatter_add(a, 1, t.tensor([[0, 2, 2, 0], [1, 3, 1, 1], [3, 3, 3, 0]]), b * b),
    "index_select": lambda t, a, b: t.index_select(a * b, 1, t.tensor([3, 0, 3])),
    "cumsum": lambda t, a, b: t.cumsum(a * b, 1).cumsum(0),
    "sort/topk": lambda t, a, b: t.sort(a * b, 0).values + t.topk(b, 3, 0).values.sum(),
    "einsum": lambda t, a, b: t.einsum("ij,kj->ik", a, b * b) + t.einsum("ij->i", a).reshape(3, 1),
    "bmm/repeat/chunk": lambda t, a, b: (
        t.bmm(a.reshape(3, 2, 2), b.reshape(3, 2, 2)).repeat(1, 2, 1) + sum(c.sum() for c in a.chunk(3, 1))
    ),
}


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_float64_gradients_by_finite_differences(name, torch_like):
    programs.assert_gradients_check(torch_like, CHECKED[name])


@pytest.mark.parametrize(
    ("program", "error", "match"),
    [
        ("torch.tril(torch.ones(3))", Exception, "at least 2 dimensions"),
        ("x.masked_fill(torch.ones(3, 4), 0.0)", Exception, "only supports boolean masks"),
        ("x.masked_fill(x > 0, torch.ones(2))", Exception, "0-dimensional value tensor"),
        ("x.gather(1, torch.tensor([0, 1]))", Exception, "same number of dimensions"),
        ("x.gather(1, torch.zeros(4, 4).long())", Exception, "no larger than self"),
        ("x.gather(1, torch.tensor([[0.0]]))", RuntimeError, "Expected dtype int32/int64 for index"),
        ("torch.index_select(x, 1, torch.tensor([[0]]))", Exception, "supposed to be a vector"),
        ("torch.cumsum(x, 2)", Exception, "out of range"),
        ("torch.bmm(x, x)", RuntimeError, "batch1 must be a 3D tensor"),
        ("x.chunk(0)", RuntimeError, "greater than 0"),
        ("x.split([1, 2], 1)", RuntimeError, "sum exactly to 4"),
        ("x.repeat(2)", RuntimeError, "can not be smaller"),
        ("torch.topk(x, 5)", RuntimeError, "selected index k out of range"),
        ("torch.einsum('ij,jk', x, x)", Exception, "does not broadcast"),
        ("torch.einsum('ij->k', x)", Exception, "invalid output subscripts"),
        ("torch.einsum('i$', x)", Exception, "einsum equation"),
    ],
)
def test_bad_calls_raise_pytorchs_errors(torch_like, program, error, match):
    x = torch_like.ones(3, 4, requires_grad=True)
    with pytest.raises(error, match=match):
        out = eval(program, {"torch": torch_like, "x": x})
        out.sum().backward()


@pytest.mark.parametrize(
    ("program", "op"),
    [
        ("x.gather(0, torch.tensor([3]))", "gather"),
        ("x.gather(0, torch.tensor([-1]))", "gather"),
        ("torch.index_select(x, 0, torch.tensor([0, 7]))", "index_select"),
        ("x.scatter_add(0, torch.tensor([5]), x)", "scatter_add"),
    ],
)
def test_an_index_out_of_range_is_a_4xx_naming_the_node(program, op, server):
    with client.connect(server.url):
        x = client.tensor([1.0, 2.0, 3.0], requires_grad=True)
        with pytest.raises(RequestError, match="out of bounds|index out of range in self") as err:  # (PyTorch's)
            out = eval(program, {"torch": client, "x": x})
            out.sum().backward()
    assert err.value.status == 422 and f"node {err.value.node!r} ({op})" in err.value.message


def _post(server, op, attrs, shapes_, data=None):
    nodes = [{"id": f"i{k}", "op": "input"} for k in range(len(shapes_))]
    nodes.append({"id": "y", "op": op, "inputs": [n["id"] for n in nodes], "attrs": attrs})
    inputs = [
        {
            "name": f"i{k}",
            "shape": list(s),
            "datatype": "INT64" if k and op != "einsum" else "FP32",
            "data": (data or {}).get(k, [0] * int(np.prod(s))),
        }
        for k, s in enumerate(shapes_)
    ]
    body = {"graph": {"version": 1, "nodes": nodes, "outputs": ["y"]}, "inputs": inputs}
    return httpx.post(server.url + "/forward", content=json.dumps(body), timeout=30)


def test_a_json_graph_names_the_new_ops(server):
    reply = _post(server, "gather", {"dim": 1}, [(2, 3), (2, 2)], {0: [1, 2, 3, 4, 5, 6], 1: [2, 0, 1, 1]})
    assert reply.status_code == 200, reply.text
    assert reply.json()["outputs"][0]["data"] == [3.0, 1.0, 5.0, 5.0]
    reply = _post(server, "einsum", {"equation": "ij,kj->ik"}, [(2, 3), (1, 3)], {0: [1] * 6, 1: [1, 2, 3]})
    assert reply.status_code == 200 and reply.json()["outputs"][0]["data"] == [6.0, 6.0]
    ops = httpx.get(server.url + "/ops", timeout=30).json()
    names = {op["name"] for op in (ops["ops"] if isinstance(ops, dict) else ops)}
    assert {
        "tril",
        "triu",
        "masked_fill",
        "gather",
        "scatter_add",
        "index_select",
        "cumsum",
        "argsort",
        "einsum",
    } <= names


@pytest.mark.parametrize(
    ("op", "attrs", "shapes_", "field"),
    [
        ("tril", {"diagonal": 2**70}, [(3, 4)], "diagonal"),
        ("cumsum", {"dim": -(2**40)}, [(3, 4)], "out of range"),
        ("gather", {"dim": 5}, [(3, 4), (3, 4)], "out of range"),
        ("gather", {"dim": 1}, [(3, 4), (9, 4)], "no larger than self"),
        ("index_select", {"dim": 0}, [(3, 4), (2, 2)], "vector"),
        ("argsort", {"dim": 1, "descending": "yes"}, [(3, 4)], "descending"),
        ("einsum", {"equation": "i" * 10_000}, [(3,)], "equation"),
        # 10^12 output elements from four small vectors: refused by the plan, nothing allocated
        ("einsum", {"equation": "a,b,c,d->abcd"}, [(1000,)] * 4, "elements"),
    ],
)
def test_a_hostile_graph_is_a_4xx_naming_the_node_or_field(server, op, attrs, shapes_, field):
    reply = _post(server, op, attrs, shapes_)
    assert 400 <= reply.status_code < 500, reply.text
    assert field in reply.text, reply.text
    assert "'y'" in reply.text or field in ("diagonal", "descending", "equation"), reply.text

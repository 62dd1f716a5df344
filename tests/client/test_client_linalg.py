"""`torch.linalg` (of its decompositions, parts that do not depend on the signs of vectors), `torch.inverse`/`det`/
`slogdet`/`logdet`/`cross`/`matrix_power`/`matrix_exp`/`svd`/`qr`/`pinverse` and `cumprod` on the engine, the
embedded client and a live server (`torch_like`): values and gradients against PyTorch in float64, errors,
and a server that refuses a hostile factorization before it allocates."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from tests.client.test_client_nn_optim import values


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


RNG = np.random.default_rng(7)
M = RNG.uniform(-1, 1, (3, 3)) + 2.5 * np.eye(3)
BATCH = RNG.uniform(-1, 1, (2, 3, 3)) + np.eye(3) * np.array([2.0, -2.0])[:, None, None]
V = RNG.uniform(-1, 1, (4, 3))

CASES = {
    "vector_norm": lambda t, m, b, v: t.linalg.vector_norm(v),
    "vector_norm_dim": lambda t, m, b, v: t.linalg.vector_norm(v, 3, dim=1, keepdim=True),
    "vector_norm_inf": lambda t, m, b, v: t.linalg.vector_norm(v, float("inf"), dim=0),
    "vector_norm_1": lambda t, m, b, v: t.linalg.vector_norm(v, 1),
    "matrix_norm_fro": lambda t, m, b, v: t.linalg.matrix_norm(b),
    "matrix_norm_1": lambda t, m, b, v: t.linalg.matrix_norm(m, 1),
    "matrix_norm_-inf": lambda t, m, b, v: t.linalg.matrix_norm(b, float("-inf"), keepdim=True),
    "norm_vector": lambda t, m, b, v: t.linalg.norm(v, dim=1),
    "norm_matrix": lambda t, m, b, v: t.linalg.norm(m),
    "norm_ord_inf": lambda t, m, b, v: t.linalg.norm(m, float("inf")),
    "norm_dims": lambda t, m, b, v: t.linalg.norm(b, "fro", dim=(1, 2)),
    "inv": lambda t, m, b, v: t.linalg.inv(b),
    "inverse": lambda t, m, b, v: t.inverse(m) + m.inverse(),
    "det": lambda t, m, b, v: t.linalg.det(b) + t.det(m) + m.det(),
    "slogdet": lambda t, m, b, v: tuple(t.linalg.slogdet(b)),
    "slogdet_fn": lambda t, m, b, v: t.slogdet(m).logabsdet,
    "logdet": lambda t, m, b, v: t.logdet(b),
    "solve_vector": lambda t, m, b, v: t.linalg.solve(m, v[0]),
    "solve_matrix": lambda t, m, b, v: t.linalg.solve(b, v[:3]),
    "solve_right": lambda t, m, b, v: t.linalg.solve(m, v, left=False),
    "cholesky": lambda t, m, b, v: t.linalg.cholesky(m @ m.mT),
    "cholesky_upper": lambda t, m, b, v: t.linalg.cholesky(b @ b.mT, upper=True),
    "cross": lambda t, m, b, v: t.linalg.cross(v, m[:1]),
    "cross_dim": lambda t, m, b, v: t.cross(m, m.flip(0), dim=0),
    "matrix_power_3": lambda t, m, b, v: t.linalg.matrix_power(b, 3),
    "matrix_power_0": lambda t, m, b, v: t.matrix_power(m, 0),
    "matrix_power_neg": lambda t, m, b, v: t.linalg.matrix_power(m, -2),
    "matrix_exp": lambda t, m, b, v: t.linalg.matrix_exp(b) + t.matrix_exp(m * 0.01) + (m - m.mT).matrix_exp(),
    "matrix_exp_squared": lambda t, m, b, v: t.matrix_exp(b * t.tensor([[[0.3]], [[6.0]]], dtype=b.dtype)),
    "householder_product": lambda t, m, b, v: t.linalg.householder_product(v, m[0] * 0.5),
    "multi_dot": lambda t, m, b, v: t.linalg.multi_dot([v, m, m.mT]),
    "vecdot": lambda t, m, b, v: t.linalg.vecdot(v, v.flip(0)),
    "eigh": lambda t, m, b, v: (lambda r: (r.eigenvalues, r.eigenvectors.abs()))(t.linalg.eigh(b + b.mT)),
    "eigh_upper": lambda t, m, b, v: (lambda r: (r.eigenvalues, r.eigenvectors.abs()))(t.linalg.eigh(m, UPLO="U")),
    "eigvalsh": lambda t, m, b, v: t.linalg.eigvalsh(m @ m.mT),
    "svd": lambda t, m, b, v: (lambda r: (r.U.abs(), r.S, r.Vh.abs()))(t.linalg.svd(v, full_matrices=False)),
    "svd_full": lambda t, m, b, v: (lambda r: (r.U[..., :3].abs(), r.S, r.U.shape[-1] * r.Vh.abs()))(
        t.linalg.svd(v.mT)
    ),
    "svd_product": lambda t, m, b, v: (lambda r: r.U @ r.S.diag_embed() @ r.Vh)(t.linalg.svd(b)),
    "svdvals": lambda t, m, b, v: t.linalg.svdvals(b),
    "svd_old": lambda t, m, b, v: (lambda r: (r.U.abs(), r.S, r.V.abs()))(v.svd()),
    "qr": lambda t, m, b, v: tuple(t.linalg.qr(v)),
    "qr_complete": lambda t, m, b, v: tuple(t.linalg.qr(v.mT, mode="complete")),
    "qr_old": lambda t, m, b, v: tuple(t.qr(b)),
    "pinv": lambda t, m, b, v: t.linalg.pinv(v) + t.pinverse(v) + v.pinverse(),
    "lstsq": lambda t, m, b, v: t.linalg.lstsq(v, v[:, :2].sin()).solution,
    "matrix_norm_nuc": lambda t, m, b, v: t.linalg.matrix_norm(b, "nuc") + t.linalg.matrix_norm(b, 2),
    "norm_2": lambda t, m, b, v: t.linalg.norm(v, 2) + t.linalg.norm(m, -2),
    "cond": lambda t, m, b, v: t.linalg.cond(v) + t.linalg.cond(b, -2),
    "matrix_rank": lambda t, m, b, v: t.linalg.matrix_rank(t.cat([v, v[:, :1]], 1)),
    "cumprod": lambda t, m, b, v: t.cumprod(v + 2, 1),
    "cumprod_method": lambda t, m, b, v: (b * 0.5).cumprod(0),
}


def _run(torch, name):
    m, b, v = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (M, BATCH, V))
    out = CASES[name](torch, m, b, v)
    outs = list(out) if isinstance(out, tuple) else [out]
    live = [o for o in outs if o.requires_grad]
    if live:
        sum((o * torch.arange(1.0, 1.0 + o.numel(), dtype=o.dtype).reshape(o.shape)).sum() for o in live).backward()
    grads = [np.zeros(a.shape) if x.grad is None else values(x.grad) for a, x in ((M, m), (BATCH, b), (V, v))]
    return [values(o) for o in outs] + grads


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(torch_like, oracle, name):
    for ours, theirs in zip(_run(torch_like, name), _run(oracle, name), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-11)


def test_a_singular_matrix_raises_linalg_error(torch_like):
    singular = torch_like.ones(3, 3, dtype=torch_like.float64)
    with pytest.raises((torch_like.linalg.LinAlgError, ValueError), match="(?i)singular"):
        torch_like.linalg.inv(singular).tolist()
    assert issubclass(torch_like.linalg.LinAlgError, RuntimeError)


def test_unsupported_pieces_say_so(torch_like):
    with pytest.raises(NotImplementedError, match="eig"):
        torch_like.linalg.eig(torch_like.eye(2))
    with pytest.raises(RuntimeError, match="length 3"):
        torch_like.linalg.cross(torch_like.ones(2), torch_like.ones(2))


def _post(server, nodes, inputs):
    body = {"graph": {"version": 1, "nodes": nodes, "outputs": [nodes[-1]["id"]]}, "inputs": inputs}
    return httpx.post(server.url + "/forward", content=json.dumps(body), timeout=30)


def test_the_server_refuses_a_hostile_inverse_before_it_allocates_and_names_a_singular_one(server):
    one = [{"name": "x", "shape": [1, 1], "datatype": "FP64", "data": [1.0]}]
    huge = [
        {"id": "x", "op": "input"},
        {"id": "big", "op": "expand", "inputs": ["x"], "attrs": {"shape": [11000, 11000]}},
        {"id": "y", "op": "inv", "inputs": ["big"]},
        {"id": "s", "op": "sum", "inputs": ["y"]},
    ]
    reply = _post(server, huge, one)
    assert 400 <= reply.status_code < 500 and "'y'" in reply.text, reply.text
    flat = [{"id": "x", "op": "input"}, {"id": "y", "op": "inv", "inputs": ["x"]}]
    reply = _post(server, flat, [{"name": "x", "shape": [2, 2], "datatype": "FP64", "data": [1.0, 1.0, 1.0, 1.0]}])
    assert 400 <= reply.status_code < 500 and "'y'" in reply.text and "ingular" in reply.text, reply.text
    reply = _post(server, flat, [{"name": "x", "shape": [2, 3], "datatype": "FP64", "data": [0.0] * 6}])
    assert 400 <= reply.status_code < 500 and "square" in reply.text, reply.text
    reply = _post(server, flat, [{"name": "x", "shape": [2, 2], "datatype": "FP64", "data": [2.0, 0.0, 0.0, 4.0]}])
    assert reply.status_code == 200 and reply.json()["outputs"][0]["data"] == [0.5, 0.0, 0.0, 0.25]

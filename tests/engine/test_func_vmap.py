"""`torch.func.vmap`, `functional_call` and `grad` over pytrees on the engine and the client, against PyTorch:
in_dims and out_dims (ints, None, per argument, nested), nested vmaps, vmap of grad, the per-sample-gradients
tutorial (functional_call + vmap(grad)) to 1e-10, and PyTorch's errors."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import client
import engine

torch = pytest.importorskip("torch")

SIDES = {"engine": engine, "client": client, "torch": torch}
RNG = np.random.default_rng(5)
A, B, V = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 4)), RNG.standard_normal(3)


def flat(value, path=""):
    """[(where, array)] of a nested result, in order (dicts by key)."""
    if isinstance(value, dict):
        return [item for k in sorted(value) for item in flat(value[k], f"{path}.{k}")]
    if isinstance(value, (list, tuple)):
        return [item for i, v in enumerate(value) for item in flat(v, f"{path}[{i}]")]
    return [(path, np.asarray(value.detach().numpy()))]


def check(program, side):
    got, want = flat(program(SIDES[side])), flat(program(torch))
    assert [w for w, _ in got] == [w for w, _ in want]
    for (where, g), (_, w) in zip(got, want):
        assert g.shape == w.shape, where
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=where)


@pytest.mark.parametrize("side", ["engine", "client"])
def test_vmap_in_and_out_dims_nesting_and_grad(side):
    def program(m):
        f = importlib.import_module(f"{m.__name__}.func")
        a, b, v = m.tensor(A), m.tensor(B), m.tensor(V)
        return [
            f.vmap(lambda x, y: (x * y).sum())(a, b.T),
            f.vmap(lambda x, y: x * y, in_dims=(0, None))(a, v),
            f.vmap(lambda x: (x, x.sum()), out_dims=(1, 0))(a)[0],
            f.vmap(lambda x: x.exp(), in_dims=1, out_dims=-1)(b),
            f.vmap(f.vmap(lambda x: x * 2))(a),
            f.vmap(f.grad(lambda x: (x.sin() ** 2).sum()))(a),
            f.vmap(lambda pair: pair[0] + pair[1], in_dims=((0, 1),))((a, b)),
        ]

    check(program, side)


@pytest.mark.parametrize("side", ["engine", "client"])
def test_per_sample_gradients_as_the_torch_func_tutorial_computes_them(side):
    def program(m):
        f = importlib.import_module(f"{m.__name__}.func")
        model = m.nn.Sequential(m.nn.Linear(3, 5), m.nn.Tanh(), m.nn.Linear(5, 2)).double()
        rng = np.random.default_rng(1)
        with m.no_grad():
            for p in model.parameters():
                p.copy_(m.tensor(rng.standard_normal(tuple(p.shape))))
        params = {k: v.detach() for k, v in model.named_parameters()}

        def loss(params, sample, target):
            out = f.functional_call(model, (params, {}), (sample.unsqueeze(0),))
            return m.nn.functional.cross_entropy(out, target.unsqueeze(0))

        grads = f.vmap(f.grad(loss), in_dims=(None, 0, 0))(params, m.tensor(A), m.tensor([0, 1, 1, 0]))
        assert model[0].weight is not params["0.weight"]  # put back
        return grads

    check(program, side)


@pytest.mark.parametrize("side", ["engine", "client", "torch"])
def test_pytorchs_errors(side):
    m = SIDES[side]
    f = importlib.import_module(f"{m.__name__}.func")
    with pytest.raises(ValueError, match="Expected all tensors to have the same size in the mapped dimension"):
        f.vmap(lambda x, y: x + y)(m.ones(2, 3), m.ones(3, 3))
    with pytest.raises(ValueError, match="in_dims is not compatible with the structure of `inputs`"):
        f.vmap(lambda x, y: x + y, in_dims=(0,))(m.ones(2), m.ones(2))
    with pytest.raises(ValueError, match="Expected at least one Tensor to vmap over"):
        f.vmap(lambda x: x, in_dims=(None,))(m.ones(2))
    with pytest.raises(ValueError, match="expected `in_dims` to be int or a"):
        f.vmap(lambda x: x, in_dims=None)(m.ones(2))
    model = m.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="appeared in multiple dictionaries"):
        f.functional_call(model, ({"bias": m.zeros(2)}, {"bias": m.zeros(2)}), (m.ones(1, 2),))
    with pytest.raises(RuntimeError, match=r"for Linear:\n\tUnexpected key\(s\): 'zz'.\n\tMissing key\(s\): 'weight'."):
        f.functional_call(model, {"bias": m.zeros(2), "zz": m.ones(1)}, (m.ones(1, 2),), strict=True)

"""torch.nn.utils.parametrizations.orthogonal and spectral_norm, and the hook-based nn.utils.weight_norm and
spectral_norm, on the engine, the embedded client and a live server (`torch_like`), against PyTorch: the
parametrized weights and the gradients of the originals (random state, the trivialization's `base` of a
non-square matrix and spectral norm's `_u`/`_v`, copied from PyTorch's), state_dict keys, training steps that
keep the constraint, gradcheck in float64, and PyTorch's errors."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from tests.client.test_client_nn_optim import values

X = np.random.default_rng(6).standard_normal((6, 6))


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def _utils(t, name):
    return importlib.import_module(f"{t.__name__}.nn.utils" + (f".{name}" if name else ""))


def _module(t, shape):
    """A module whose `weight` (float64) has `shape`: a Linear's, or a batch of matrices."""
    weight = np.random.default_rng(sum(shape)).standard_normal(shape)
    if len(shape) == 2:
        module = t.nn.Linear(shape[1], shape[0], bias=False).double()
        with t.no_grad():
            module.weight.copy_(t.tensor(weight))
        return module
    module = t.nn.Module()
    module.weight = t.nn.Parameter(t.tensor(weight))
    return module


def _orthogonal(t, shape, options, base=None):
    module = _module(t, shape)
    _utils(t, "parametrizations").orthogonal(module, **options)
    chain = module.parametrizations.weight
    if base is not None:  # a non-square matrix is completed into `base` by random columns
        with t.no_grad():
            chain[0].base.copy_(t.tensor(base))
    q = module.weight
    (q @ t.tensor(X[: q.shape[-1], :3])).pow(3).sum().backward()
    gram = q.mT @ q if q.shape[-2] >= q.shape[-1] else q @ q.mT
    out = {"keys": sorted(module.state_dict()), "weight": values(q), "grad": values(chain.original.grad)}
    out["gram"] = values(gram)
    if hasattr(chain[0], "base"):
        out["base"] = values(chain[0].base)
        module.weight = (-q).detach()  # through right_inverse: base becomes -q, completed
        out["assigned"] = values(module.weight)
    return out


ORTHOGONAL = [
    ((4, 4), {}),
    ((4, 4), {"orthogonal_map": "cayley"}),
    ((4, 4), {"orthogonal_map": "householder", "use_trivialization": False}),
    ((6, 3), {}),
    ((3, 6), {"orthogonal_map": "matrix_exp"}),
    ((3, 6), {"orthogonal_map": "cayley", "use_trivialization": False}),
    ((2, 4, 3), {"orthogonal_map": "householder"}),
    ((2, 3, 3), {"use_trivialization": False}),
]


@pytest.mark.parametrize("shape, options", ORTHOGONAL)
def test_orthogonal_equals_torch(torch_like, oracle, shape, options):
    theirs = _orthogonal(oracle, shape, options)
    square = shape[-1] == shape[-2]
    ours = _orthogonal(torch_like, shape, options, None if square or "base" not in theirs else theirs["base"])
    assert ours["keys"] == theirs["keys"]
    assert ("base" in ours) == options.get("use_trivialization", True)
    for key in ("weight", "grad", "base"):
        if key in theirs:
            np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-9, atol=1e-12, err_msg=key)
    eye = np.broadcast_to(np.eye(min(shape[-2:])), ours["gram"].shape)
    np.testing.assert_allclose(ours["gram"], eye, atol=1e-12)
    if "assigned" in ours:  # a random completion: the assigned value, not the new base, is torch's
        np.testing.assert_allclose(ours["assigned"], theirs["assigned"], atol=1e-12)


@pytest.mark.parametrize("shape", [(5, 3), (3, 3)])  # householder, matrix_exp
def test_sgd_steps_keep_the_weight_orthogonal(torch_like, shape):
    module = _utils(torch_like, "parametrizations").orthogonal(_module(torch_like, shape))
    optimizer = torch_like.optim.SGD(module.parameters(), lr=0.5)
    x, before = torch_like.tensor(X[:, :3]), values(module.weight)
    for _ in range(4):
        optimizer.zero_grad()
        (module(x)[:, 0] - 1).pow(2).mean().backward()  # (||Wx|| is constant)
        optimizer.step()
    q = values(module.weight)
    assert np.abs(q - before).max() > 0.05
    np.testing.assert_allclose(q.T @ q, np.eye(3), atol=1e-12)


def _spectral(t, make, dim, state=None):
    module = make(t).double()
    with t.no_grad():
        module.weight.copy_(t.tensor(np.random.default_rng(1).standard_normal(tuple(module.weight.shape))))
        module.bias.zero_()
    _utils(t, "parametrizations").spectral_norm(module, dim=dim)
    norm = module.parametrizations.weight[0]
    if state is not None:  # the power iteration starts from random vectors
        with t.no_grad():
            norm._u.copy_(t.tensor(state[0]))
            norm._v.copy_(t.tensor(state[1]))
    out = {"keys": sorted(module.state_dict()), "state": (values(norm._u).copy(), values(norm._v).copy())}
    train = module.weight  # one power iteration
    train.pow(3).sum().backward()
    out["grad"] = values(module.parametrizations.weight.original.grad)
    module.eval()
    out.update(train=values(train), eval=values(module.weight), after=values(norm._u))
    return out


CONVS = {
    "linear": lambda t: t.nn.Linear(5, 4),
    "conv2d": lambda t: t.nn.Conv2d(3, 4, 2),
    "conv_transpose2d": lambda t: t.nn.ConvTranspose2d(3, 4, 2),
}


@pytest.mark.parametrize("make, dim", [("linear", None), ("conv2d", None), ("conv_transpose2d", None), ("linear", 1)])
def test_spectral_norm_equals_torch(torch_like, oracle, make, dim):
    theirs = _spectral(oracle, CONVS[make], dim)
    ours = _spectral(torch_like, CONVS[make], dim, theirs["state"])
    assert ours["keys"] == theirs["keys"] == ["bias", "parametrizations.weight.0._u", "parametrizations.weight.0._v",
                                              "parametrizations.weight.original"]  # fmt: skip
    assert ours["state"][0].shape == theirs["state"][0].shape
    for key in ("grad", "train", "eval", "after"):
        np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-9, atol=1e-12, err_msg=key)


def test_spectral_norm_training_keeps_the_largest_singular_value_near_one(torch_like):
    module = torch_like.nn.Linear(6, 5).double()
    with torch_like.no_grad():
        module.weight.copy_(torch_like.tensor(X[:5] * 3))  # largest singular value about 10
    _utils(torch_like, "parametrizations").spectral_norm(module)
    optimizer = torch_like.optim.SGD(module.parameters(), lr=0.1)
    for _ in range(5):
        optimizer.zero_grad()
        (module(torch_like.tensor(X)) - 1).pow(2).mean().backward()
        optimizer.step()
    largest = np.linalg.svd(values(module.weight), compute_uv=False)[0]
    assert 1 - 1e-12 < largest < 1.01  # u^T W v is at most the largest singular value


def _hooked(t, which, dim):
    utils = _utils(t, "")
    module = t.nn.Conv1d(3, 4, 2).double()
    with t.no_grad():
        module.weight.copy_(t.tensor(np.random.default_rng(1).standard_normal((4, 3, 2))))
        module.bias.zero_()
    if which == "weight_norm":
        with pytest.warns(FutureWarning, match="`torch.nn.utils.weight_norm` is deprecated in favor of "):
            utils.weight_norm(module, dim=dim)
    else:
        utils.spectral_norm(module, dim=dim)
    return module


@pytest.mark.parametrize("which", ["weight_norm", "spectral_norm"])
@pytest.mark.parametrize("dim", [0, 1, None])
def test_hook_based_norms_equal_torch(torch_like, oracle, which, dim):
    ours, theirs = _hooked(torch_like, which, dim), _hooked(oracle, which, dim)
    if which == "spectral_norm":
        with torch_like.no_grad():
            ours.weight_u.copy_(torch_like.tensor(values(theirs.weight_u)))
            ours.weight_v.copy_(torch_like.tensor(values(theirs.weight_v)))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    x = X.reshape(-1)[:30].reshape(2, 3, 5)
    for t, module in ((torch_like, ours), (oracle, theirs)):
        for _ in range(2):  # spectral_norm: a power iteration each call
            module(t.tensor(x)).pow(2).sum().backward()
    for (name, mine), (_, their) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        np.testing.assert_allclose(values(mine.grad), values(their.grad), rtol=1e-9, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(values(ours.weight), values(theirs.weight), rtol=1e-12, atol=1e-14)
    remove = getattr(_utils(torch_like, ""), f"remove_{which}")
    remove(ours)
    getattr(_utils(oracle, ""), f"remove_{which}")(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(values(ours.weight), values(theirs.weight), rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match=f"{which} of 'weight' not found in Conv1d"):
        remove(ours)


def test_gradcheck_in_float64():
    engine = pytest.importorskip("engine")
    gradcheck = engine.autograd.gradcheck
    rng = np.random.default_rng(3)
    batch = engine.tensor(rng.standard_normal((2, 3, 3)) * np.array([0.2, 4.0])[:, None, None], requires_grad=True)
    assert gradcheck(engine.matrix_exp, (batch,))
    reflectors = engine.tensor(rng.standard_normal((4, 3)), requires_grad=True)
    tau = engine.tensor(rng.standard_normal(3), requires_grad=True)
    assert gradcheck(engine.linalg.householder_product, (reflectors, tau))
    for shape, options in ORTHOGONAL:
        if options.get("orthogonal_map", "matrix_exp" if shape[-1] == shape[-2] else "householder") == "householder":
            continue  # the diagonal's signs, as int(), jump under finite differences (and are not differentiated)
        chain = _utils(engine, "parametrizations").orthogonal(_module(engine, shape), **options).parametrizations
        original = chain.weight.original.detach().clone().requires_grad_(True)
        assert gradcheck(chain.weight[0], (original,)), (shape, options)
    norm = _utils(engine, "parametrizations").spectral_norm(engine.nn.Linear(4, 3).double()).parametrizations
    assert gradcheck(norm.weight[0].eval(), (norm.weight.original.detach().clone().requires_grad_(True),))


def _error(t, call):
    try:
        call(t)
    except Exception as error:  # noqa: BLE001  (compared with torch's)
        return type(error).__name__, str(error)
    return None


ERRORS = {
    "wrong name": lambda t: _utils(t, "parametrizations").orthogonal(t.nn.Linear(3, 3), "nothing"),
    "1-d weight": lambda t: _utils(t, "parametrizations").orthogonal(t.nn.BatchNorm1d(3)),
    "unknown map": lambda t: _utils(t, "parametrizations").orthogonal(t.nn.Linear(3, 3), orthogonal_map="qr"),
    "assign without trivialization": lambda t: setattr(
        _utils(t, "parametrizations").orthogonal(t.nn.Linear(3, 3), use_trivialization=False), "weight", t.eye(3)
    ),
    "assign a wrong shape": lambda t: setattr(
        _utils(t, "parametrizations").orthogonal(t.nn.Linear(3, 3)), "weight", t.eye(2)
    ),
    "spectral wrong name": lambda t: _utils(t, "parametrizations").spectral_norm(t.nn.Linear(3, 3), "nothing"),
    "spectral dim": lambda t: _utils(t, "parametrizations").spectral_norm(t.nn.Linear(3, 3), dim=2),
    "spectral iterations": lambda t: _utils(t, "parametrizations").spectral_norm(
        t.nn.Linear(3, 3), n_power_iterations=0
    ),
    "hooks twice": lambda t: _utils(t, "").spectral_norm(_utils(t, "").spectral_norm(t.nn.Linear(3, 3))),
    "hooks none": lambda t: _utils(t, "").spectral_norm(t.nn.Linear(3, 3, bias=False), "bias"),
    "matrix_exp of a vector": lambda t: t.matrix_exp(t.ones(3)),
    "matrix_exp of a wide matrix": lambda t: t.linalg.matrix_exp(t.ones(2, 3)),
    "householder wide": lambda t: t.linalg.householder_product(t.ones(2, 3), t.ones(2)),
    "householder tau": lambda t: t.linalg.householder_product(t.ones(3, 2), t.ones(3)),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_equal_torch(oracle, name):
    engine = pytest.importorskip("engine")
    ours, theirs = _error(engine, ERRORS[name]), _error(oracle, ERRORS[name])
    assert theirs is not None
    assert ours == theirs

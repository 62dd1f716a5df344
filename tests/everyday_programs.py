"""The everyday PyTorch surface (issue 22, item 4) as small programs: each is Python source run
with `torch` bound to real PyTorch (the oracle), `engine` or `client`, on the same inputs, and
leaves its result in `out`. `run(torch, source)` runs one and returns what the tests compare:
the result's values, dtype (as printed) and requires_grad, and the inputs' gradients of
`out.sum()` (or of the first float output of a tuple).

Inputs: `x` (float32 [3, 4], requires grad), `y` (positive float32 [3, 4], requires grad), `n`
(int64 [3, 4], no zeros), `ys` (int64 [3], a column per row), `ix` (int64 [3], distinct rows of 5).

Where PyTorch has no derivative (`x // y`, `7.5 % y`) the programs divide detached Variables: the
engine's results require no gradient there (tests/engine/test_everyday_surface.py checks that case).
Floats and integer Variables are not mixed in one op: there the engine follows NumPy's promotion
(float32 with int64, or int64 with 2.5, gives float64 where PyTorch gives float32; see README's
known limitations).
"""

from __future__ import annotations

import numpy as np
import pytest

_rng = np.random.default_rng(22)
X = _rng.uniform(-3, 3, (3, 4)).astype(np.float32)
Y = _rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
N = (_rng.integers(1, 9, (3, 4)) * _rng.choice([-1, 1], (3, 4))).astype(np.int64)
YS = np.array([2, 0, 3], dtype=np.int64)
IX = np.array([4, 0, 2], dtype=np.int64)

REDUCTIONS = ("sum", "mean", "prod", "amax", "amin", "std", "var", "logsumexp")
PROGRAMS = {
    # every reduction takes dim/keepdim and NumPy's axis/keepdims
    **{f"{name}(dim=1, keepdim=True)": f"out = x.{name}(dim=1, keepdim=True)" for name in REDUCTIONS},
    **{f"{name}(axis=1, keepdims=True)": f"out = torch.{name}(x, axis=1, keepdims=True)" for name in REDUCTIONS},
    **{f"{name}(axis=0)": f"out = x.{name}(axis=0)" for name in ("argmax", "argmin", "count_nonzero", "all", "any")},
    "argmax(axis=1, keepdims=True)": "out = x.argmax(axis=1, keepdims=True)",
    "all(axis=1, keepdims=True)": "out = (x > -2).all(axis=1, keepdims=True)",
    "norm(dim=1, keepdim=True)": "out = x.norm(dim=1, keepdim=True)",
    "sum(axis=(0, 1))": "out = torch.sum(x, axis=(0, 1))",
    "prod() with zeros": "z = x * (torch.arange(12).reshape(3, 4) % 5 != 0)\nout = z.prod(1) + z.prod()",
    "prod(int)": "out = n.prod(1)",
    # max/min over a dim: (values, indices) with attribute access, NumPy's keywords too
    "max(dim).values": "r = x.max(1)\nout = r.values * 2 + r.indices.float()",
    "min(axis=1, keepdims=True)": "v, i = torch.min(x, axis=1, keepdims=True)\nout = v * i.float()",
    "max(dim=0).indices": "out = x.max(dim=0).indices",
    # elementwise functions and methods
    **{name: f"out = torch.{name}(y)" for name in ("log10", "log2", "log1p", "rsqrt", "reciprocal")},
    **{name: f"out = x.{name}()" for name in ("expm1", "exp2", "square", "floor", "ceil", "round", "trunc")},
    "round(decimals=2)": "out = torch.round(x, decimals=2)",
    "round(decimals=-1)": "out = (x * 40).round(decimals=-1)",
    "floor(int)": "out = torch.floor(n)",
    "fmod": "out = torch.fmod(x, y) + x.fmod(-1.5)",
    "remainder": "out = torch.remainder(x, y) + x.remainder(-1.5)",
    "fmod(int)": "out = torch.fmod(n, 3)",
    "remainder(int)": "out = n.remainder(3)",
    # // and %: floor division and Python's remainder, with PyTorch's dtypes
    "x // y": "out = x.detach() // y.detach()",
    "x % y": "out = x % y",
    "7 // y": "out = 7 // y.detach()",
    "7.5 % y": "out = 7.5 % y.detach()",
    "x % 2": "out = x % 2",
    "n // 2": "out = n // 2",
    "n % 3": "out = n % 3",
    "-17 // n": "out = -17 // n",
    "n.float() % 2.5": "out = n.float() % 2.5",
    "n.float() // 4": "out = n.float() // 4",
    "z //= 2": "z = x.detach() * 3\nz //= 2\nout = z",
    "z %= 2": "z = x * 3\nz %= 2\nout = z",
    "m //= 2 (int)": "m = n.clone()\nm //= 2\nout = m",
    "floor_divide": "out = torch.floor_divide(n, 4)",
    # indexing by range(...), lists and integer tensors, in every position
    "probs[arange, ys]": "probs = x.softmax(1)\nout = probs[torch.arange(3), ys]",
    "x[range(3), ys]": "out = x[range(3), ys]",
    "x[range(3), [0, 1, 2]]": "out = x[range(3), [0, 1, 2]]",
    "x[[0, 2]]": "out = x[[0, 2]]",
    "x[:, [3, 1]]": "out = x[:, [3, 1]]",
    "x[ix % 3][:, range(2)]": "out = x[ix % 3][:, range(2)]",
    "z[range(3), ys] = v": "z = x * 1\nz[range(3), ys] = y[:, 0]\nout = z",
    "z[[0, 2]] = 0": "z = x * 1\nz[[0, 2]] = 0\nout = z",
    "dC[ix] += d": "dC = torch.zeros(5, 4)\ndC[ix] += x\nout = dC",
    "dC[ix] += d (no grad)": "dC = torch.zeros(5, 4)\ndC[ix] += x.detach()\nout = dC",
    "z[range(2)] -= 1": "z = x * 1\nz[range(2)] -= 1\nout = z",
    # index_put / index_add: repeated indices add up where PyTorch says they do
    "index_put(accumulate=True)": (
        "z = torch.zeros(5, 4)\nout = z.index_put((torch.tensor([0, 1, 1]),), x, accumulate=True)"
    ),
    "index_put(accumulate=False)": "out = torch.index_put(x, (torch.tensor([0, 2]), torch.tensor([1, 3])), y[0, :2])",
    "index_put_(accumulate=True)": (
        "z = torch.zeros(5)\nz.index_put_((torch.tensor([0, 1, 1, 4]),), torch.tensor(2.0), accumulate=True)\nout = z"
    ),
    "index_put_ (recorded)": (
        "z = x * 1\nz.index_put_((torch.tensor([0, 0]), torch.tensor([1, 1])), y[0, :2], accumulate=True)\nout = z"
    ),
    "index_add": "out = torch.index_add(x, 0, torch.tensor([0, 2, 0]), y, alpha=2)",
    "index_add(dim=1)": "out = x.index_add(1, torch.tensor([3, 3]), y[:, :2])",
    "index_add_": "z = torch.ones(5, 4)\nz.index_add_(0, ix, x.detach())\nz.index_add_(0, ix, x.detach(), alpha=0.5)\nout = z",
    # casts and predicates
    ".type(float64)": "out = x.type(torch.float64) * 2",
    ".double().float()": "out = x.double().float()",
    ".long()/.int()/.bool()": "out = x.long() + x.int() + x.bool()",
    "all/any": "out = torch.stack([torch.all(x > -5), torch.any(x > 2.9), (n != 0).all()])",
    "isclose": "out = torch.isclose(x, x + 1e-6)",
    "allclose/equal": "out = torch.tensor([torch.allclose(x, x + 1e-7), torch.equal(x, x * 1), torch.equal(x, y)])",
}


def inputs(torch):
    """The programs' inputs on `torch` (fresh leaves each call)."""
    return {
        "torch": torch,
        "x": torch.tensor(X, requires_grad=True),
        "y": torch.tensor(Y, requires_grad=True),
        "n": torch.tensor(N),
        "ys": torch.tensor(YS),
        "ix": torch.tensor(IX),
    }


def _first_float(out):
    if isinstance(out, tuple):
        return next(o for o in out if o.is_floating_point())
    return out


def run(torch, source):
    """(values, str(dtype), requires_grad, x's grad, y's grad) of one program on `torch`."""
    names = inputs(torch)
    exec(source, names)  # noqa: S102  (the sources are the literals above)
    out = _first_float(names["out"])
    if out.requires_grad:
        out.sum().backward()
    grads = tuple(None if names[k].grad is None else np.asarray(names[k].grad.detach().numpy()) for k in ("x", "y"))
    return (np.asarray(out.detach().numpy()), str(out.dtype), out.requires_grad, *grads)


def assert_same_run(got, want, what):
    """Two `run` results agree: values, dtype, shape, requires_grad and gradients (to float32's 2e-5)."""
    (g_out, g_dtype, g_rg, g_gx, g_gy), (w_out, w_dtype, w_rg, w_gx, w_gy) = got, want
    assert g_dtype == w_dtype, f"{what}: dtype {g_dtype} vs torch {w_dtype}"
    assert g_out.shape == w_out.shape, f"{what}: shape {g_out.shape} vs torch {w_out.shape}"
    np.testing.assert_allclose(g_out, w_out, rtol=2e-5, atol=2e-5, err_msg=what)
    assert g_rg == w_rg, f"{what}: requires_grad {g_rg} vs torch {w_rg}"
    for name, g, w in (("x", g_gx, w_gx), ("y", g_gy, w_gy)):
        assert (g is None) == (w is None), f"{what}: {name}.grad {g} vs torch {w}"
        if g is not None:
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=f"{what}: {name}.grad")


def assert_matches_torch(torch, source, what):
    """`source` run with `torch` bound to the engine or the client gives what it gives on PyTorch."""
    assert_same_run(run(torch, source), run(pytest.importorskip("torch"), source), what)


def assert_gradients_check(torch, fn):
    """gradcheck and gradgradcheck (float64, finite differences) of fn(torch, a, b) at two random [3, 4] inputs."""
    rng = np.random.default_rng(7)
    a, b = (torch.tensor(rng.uniform(-2, 2, (3, 4)), requires_grad=True) for _ in range(2))
    assert torch.autograd.gradcheck(lambda a, b: fn(torch, a, b), (a, b))
    assert torch.autograd.gradgradcheck(lambda a, b: fn(torch, a, b), (a, b))  # every vjp is made of registry ops

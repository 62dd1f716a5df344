"""Programs with in-place ops on views (PyTorch's semantics: engine.views, client.views), run on a module `m`
(torch, engine or client): the tables of views and in-place ops, and the brief's program."""

from __future__ import annotations

import numpy as np
import pytest

X = np.linspace(-1.0, 1.2, 12)
C = np.array([0.7, -0.4])
W = np.linspace(0.5, 2.0, 12).reshape(3, 4)

VIEWS = {
    "rows": lambda y: y[1:3],
    "row": lambda y: y[1],
    "columns": lambda y: y[:, 1:3],
    "element": lambda y: y[0, 2],
    "strided": lambda y: y[::2, ::3],
    "view": lambda y: y.view(2, 6),
    "reshape": lambda y: y.reshape(12),
    "t": lambda y: y.t(),
    "T": lambda y: y.T,
    "mT": lambda y: y.mT,
    "transpose": lambda y: y.transpose(0, 1),
    "permute": lambda y: y.permute(1, 0),
    "unsqueeze": lambda y: y.unsqueeze(0),
    "squeeze": lambda y: y.view(3, 1, 4).squeeze(1),
    "narrow": lambda y: y.narrow(1, 1, 2),
    "select": lambda y: y.select(1, 2),
    "flatten": lambda y: y.flatten(),
    "unflatten": lambda y: y.unflatten(1, (2, 2)),
    "movedim": lambda y: y.movedim(0, 1),
    "none": lambda y: y[..., None],
    "view of view": lambda y: y[1:3].view(4, 2)[::2],
    "t of view": lambda y: y.view(4, 3).t()[1],
    "diagonal": lambda y: y.diagonal(),
    "diagonal of t": lambda y: y.t().diagonal(-1),
    "diagonal of view": lambda y: y.view(2, 3, 2).diagonal(1, 2, 0)[1],
    "expand": lambda y: y.expand(2, 3, 4)[1],
    "expand_as": lambda y: y[1:2].expand_as(y[1:2]),
    "as_strided": lambda y: y.as_strided((2, 3), (4, 1), 1),
    "as_strided of view": lambda y: y.view(12)[2:].as_strided((2, 2), (1, 3)),
}
# in-place ops on a view that repeats its base's elements (an expand's): torch refuses (OVERLAP) or writes (fill_
# and zero_: then torch's backward through CopySlices raises OVERLAP, the engine's gives the gradients)
OVERLAPPING = {
    "mul_": lambda e, w: e.mul_(2),
    "iadd": lambda e, w: e.__iadd__(w),
    "copy_": lambda e, w: e.copy_(w * 2),
    "setitem rows": lambda e, w: e.__setitem__(slice(0, 2), 1.0),
    "setitem column": lambda e, w: e.__setitem__((slice(None), 0), w[0]),
    "fill_ tensor": lambda e, w: e.fill_(w[1]),
    "fill_": lambda e, w: e.fill_(2.0),
    "zero_": lambda e, w: e.zero_(),
    "setitem row": lambda e, w: e.__setitem__(1, w * w),
    "row mul_": lambda e, w: e[2].mul_(w),
}
OVERLAP = "more than one element of the written-to tensor refers to a single memory location"
INPLACE = {
    "mul_": lambda v, c: v.mul_(c[0]),
    "exp_": lambda v, c: v.exp_(),
    "add_": lambda v, c: v.add_(c.sum(), alpha=2),
    "iadd": lambda v, c: v.__iadd__(c[1] * c[0]),
    "sigmoid_": lambda v, c: v.sigmoid_(),
    "pow_": lambda v, c: v.pow_(2),
    "clamp_": lambda v, c: v.clamp_(min=0.0),
    "setitem": lambda v, c: v.__setitem__(..., c[1]),
    "fill_": lambda v, c: v.fill_(3.0),
    "zero_": lambda v, c: v.zero_(),
    "copy_": lambda v, c: v.copy_(c[0] * 2),
}


def run(m, view, inplace, x, c):
    y = x * 1
    INPLACE[inplace](VIEWS[view](y), c)
    return y


def case(m, view, inplace):
    x = m.tensor(X.copy().reshape(3, 4), requires_grad=True)
    c = m.tensor(C.copy(), requires_grad=True)
    y = run(m, view, inplace, x, c)
    (y * m.tensor(W)).sum().backward()
    zero = np.zeros_like(C)
    return y.detach().numpy(), x.grad.numpy(), zero if c.grad is None else c.grad.numpy(), type(y.grad_fn).__name__


def brief(m):
    """The brief's program: two in-place ops on views, then a second derivative through them."""
    x = m.tensor([1.0, 2.0, 3.0, 4.0], dtype=m.float64, requires_grad=True)
    y = x * 1
    y[1:3].mul_(x[0:2])
    y.view(2, 2)[0].exp_()
    (g,) = m.autograd.grad((y * m.tensor([1.0, 2.0, 3.0, 4.0], dtype=m.float64)).sum(), x, create_graph=True)
    (gg,) = m.autograd.grad((g * g).sum(), x)
    y.view(2, 2)[1] = 7.0
    return y.detach().numpy(), g.detach().numpy(), gg.numpy(), type(y.grad_fn).__name__


def base_changed(m):
    """An in-place op on the base reaches a view made before it: its values and its history."""
    x = m.tensor(X.copy(), requires_grad=True)
    y = x * 1
    v = y[2:5]
    y.mul_(x)
    y[3] = x[0] * 5
    loss = (v * v).sum()
    loss.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    loss.backward()
    return v.detach().numpy(), first, x.grad.numpy(), y._version, v._version


def saved_view_refuses(m, x):
    """A graph that saved a view of `x * 1` refuses a backward once the base changed in place; -> (view, base)."""
    y = x * 1
    v = y[0:2]
    z = v * v
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    return v, y


def overlapping(m, write):
    """`write` on `y.expand(3, 4)` (y of shape (1, 4), `x * 1`), then a backward: values and gradients."""
    x = m.tensor(X[:4].copy().reshape(1, 4), requires_grad=True)
    w = m.tensor(C.copy().repeat(2), requires_grad=True)
    y = x * 1
    e = y.expand(3, 4)
    OVERLAPPING[write](e, w)
    (e * m.tensor(W)).sum().backward()
    zero = np.zeros(4)
    return y.detach().numpy(), e.detach().numpy(), x.grad.numpy(), zero if w.grad is None else w.grad.numpy()


def detached(m):
    """`detach()` shares its source's version counter (PyTorch's): a graph that saved the source refuses a
    backward after an in-place change of the detached one, and the other way round; -> the versions."""
    x = m.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    y = x * 1
    z = y * y
    d = y.detach()
    v = d[1:3]
    d.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    z = x * x
    x.detach()[0] = 5.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    w = d * x
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        w.sum().backward()
    return y._version, d._version, v._version, x._version, d._base, d._is_view(), v._base is d

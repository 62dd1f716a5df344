"""Programs in today's PyTorch style, the way the current tutorials write them (written for these
tests, not copied): each takes the module it runs on as `torch`, so the same code runs on real
PyTorch (the oracle), `engine` and `client`, exactly as `import client as torch` would run it.

Random draws: `with_numpy_draws(torch)` makes real PyTorch draw what gradserve draws for a seed
(both from NumPy's default_rng), so the oracle starts from the same numbers.
"""

from __future__ import annotations

import math

import numpy as np


class with_numpy_draws:
    """Real `torch`, except that `manual_seed`, `randn` and `rand` draw from NumPy's default_rng
    as gradserve's constructors do (same seed, same float32 values)."""

    def __init__(self, torch):
        self._torch = torch
        self._rng = np.random.default_rng()

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def manual_seed(self, seed):
        self._rng = np.random.default_rng(seed)

    def _drawn(self, values, dtype=None, device=None, requires_grad=False):
        return self._torch.tensor(
            values.astype(np.float32), dtype=dtype or self._torch.float32, device=device, requires_grad=requires_grad
        )

    @staticmethod
    def _shape(size, keywords):
        size = (keywords.pop("size"),) if "size" in keywords else size
        return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)

    def randn(self, *size, **keywords):
        return self._drawn(self._rng.standard_normal(self._shape(size, keywords)), **keywords)

    def rand(self, *size, **keywords):
        return self._drawn(self._rng.random(self._shape(size, keywords)), **keywords)


def two_layer_net_autograd(torch, steps=25, learning_rate=1e-6):
    """A two-layer ReLU net fitted to random data: autograd for the gradients, the update by hand
    in place under no_grad, `.grad` zeroed with `zero_()`."""
    torch.manual_seed(0)
    dtype = torch.float
    device = torch.device("cpu")
    batch, d_in, hidden, d_out = 32, 100, 50, 10
    x = torch.randn(batch, d_in, device=device, dtype=dtype)
    y = torch.randn(batch, d_out, device=device, dtype=dtype)
    w1 = torch.randn(d_in, hidden, device=device, dtype=dtype, requires_grad=True)
    w2 = torch.randn(hidden, d_out, device=device, dtype=dtype, requires_grad=True)
    losses = []
    for _ in range(steps):
        y_pred = x.mm(w1).clamp(min=0).mm(w2)
        loss = (y_pred - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            w1 -= learning_rate * w1.grad
            w2 -= learning_rate * w2.grad
            w1.grad.zero_()
            w2.grad.zero_()
    return losses, (w1, w2)


def legendre_fit(torch, steps=40, learning_rate=4e-5):
    """y = sin(x) fitted by a + b P3(c + d x), with P3 a custom (static) Function; the update in
    place with `a -= lr * a.grad`, the gradients dropped with `a.grad = None`."""

    class LegendrePolynomial3(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input):
            ctx.save_for_backward(input)
            return 0.5 * (5 * input**3 - 3 * input)

        @staticmethod
        def backward(ctx, grad_output):
            (input,) = ctx.saved_tensors
            return grad_output * 1.5 * (5 * input**2 - 1)

    dtype = torch.float
    device = torch.device("cpu")
    x = torch.linspace(-math.pi, math.pi, 500, device=device, dtype=dtype)
    y = torch.sin(x)
    a = torch.full((), 0.0, device=device, dtype=dtype, requires_grad=True)
    b = torch.full((), -1.0, device=device, dtype=dtype, requires_grad=True)
    c = torch.full((), 0.0, device=device, dtype=dtype, requires_grad=True)
    d = torch.full((), 0.3, device=device, dtype=dtype, requires_grad=True)
    losses = []
    for _ in range(steps):
        P3 = LegendrePolynomial3.apply
        y_pred = a + b * P3(c + d * x)
        loss = (y_pred - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            for p in (a, b, c, d):
                p -= learning_rate * p.grad
                p.grad = None
    return losses, [p.item() for p in (a, b, c, d)]


def legacy_relu_net(torch, steps=10, learning_rate=1e-3):
    """The two-layer net with a legacy (instance-style) ReLU Function, `MyReLU()(x)`, and the
    update with the in-place methods `sub_` and `zero_`."""

    class MyReLU(torch.autograd.Function):
        def forward(self, input):
            self.save_for_backward(input)
            return input.clamp(min=0)

        def backward(self, grad_output):
            (input,) = self.saved_tensors
            grad_input = grad_output.clone()
            grad_input[input < 0] = 0
            return grad_input

    torch.manual_seed(1)
    x = torch.randn(16, 8)
    y = torch.randn(16, 2)
    w1 = torch.randn(8, 12, requires_grad=True)
    w2 = torch.randn(12, 2, requires_grad=True)
    losses = []
    for _ in range(steps):
        loss = (MyReLU()(x.mm(w1)).mm(w2) - y).pow(2).mean()
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            for w in (w1, w2):
                w.sub_(learning_rate * w.grad)
                w.grad.zero_()
    return losses, (w1, w2)


def blitz_autograd(torch):
    """The autograd pages: a vector-Jacobian product, what requires grad, no_grad and detach,
    accumulation over two backwards and `x.grad.zero_()`."""
    a = torch.tensor([2.0, 3.0], requires_grad=True)
    b = torch.tensor([6.0, 4.0], requires_grad=True)
    Q = 3 * a**3 - b**2
    external_grad = torch.tensor([1.0, 1.0])
    Q.backward(gradient=external_grad)
    out = {"a.grad": a.grad, "b.grad": b.grad, "check": bool((9 * a**2 == a.grad).all())}

    x = torch.ones(5)
    y = torch.zeros(3)
    w = torch.tensor([[0.1 * (i - j) for j in range(3)] for i in range(5)], requires_grad=True)
    bias = torch.tensor([0.5, -0.5, 0.0], requires_grad=True)
    z = torch.matmul(x, w) + bias
    loss = (z.clamp(min=0) - z * y + torch.log(1 + torch.exp(-z.abs()))).mean()  # BCE with logits
    loss.backward()
    out.update({"loss": loss.item(), "w.grad": w.grad, "bias.grad": bias.grad, "z.requires_grad": z.requires_grad})
    with torch.no_grad():
        z = torch.matmul(x, w) + bias
    out["no_grad z.requires_grad"] = z.requires_grad
    out["detached.requires_grad"] = (torch.matmul(x, w) + bias).detach().requires_grad

    inp = torch.eye(4, 5, requires_grad=True)
    res = (inp + 1).pow(2).t()
    res.backward(torch.ones_like(res), retain_graph=True)
    out["first"] = inp.grad.clone()
    res.backward(torch.ones_like(res), retain_graph=True)
    out["second"] = inp.grad.clone()
    inp.grad.zero_()
    res.backward(torch.ones_like(res), retain_graph=True)
    out["after zero_"] = inp.grad
    return out


def d2l_autograd(torch):
    """The autograd chapter of a textbook: dot products, sums, non-scalar backward, detach, and
    gradients through Python control flow."""
    out = {}
    x = torch.arange(4.0)
    x.requires_grad_(True)
    y = 2 * torch.dot(x, x)
    y.backward()
    out["dot"] = x.grad.clone()
    x.grad.zero_()
    y = x.sum()
    y.backward()
    out["sum"] = x.grad.clone()
    x.grad.zero_()
    y = x * x
    y.backward(gradient=torch.ones(len(y)))
    out["square"] = x.grad.clone()
    x.grad.zero_()
    y = x * x
    u = y.detach()
    z = u * x
    z.sum().backward()
    out["detach"] = bool((x.grad == u).all())

    def f(a):
        b = a * 2
        while b.norm() < 1000:
            b = b * 2
        c = b if b.sum() > 0 else 100 * b
        return c

    torch.manual_seed(3)
    a = torch.randn(size=(), requires_grad=True)
    d = f(a)
    d.backward()
    out["control flow"] = a.grad.item()
    out["ratio"] = (d / a).item()
    return out


def micrograd_sanity(torch):
    """A scalar expression with relu, products and powers, in float64, with its gradients."""
    x = torch.Tensor([-4.0]).double()
    x.requires_grad = True
    z = 2 * x + 2 + x
    q = z.relu() + z * x
    h = (z * z).relu()
    y = h + q + q * x
    y.backward()
    a = torch.Tensor([-4.0]).double()
    b = torch.Tensor([2.0]).double()
    a.requires_grad = True
    b.requires_grad = True
    c = a + b
    d = a * b + b**3
    c = c + c + 1
    c = c + 1 + c + (-a)
    d = d + d * 2 + (b + a).relu()
    d = d + 3 * d + (b - a).relu()
    e = c - d
    f = e**2
    g = f / 2.0
    g = g + 10.0 / f
    g.backward()
    return {
        "y": y.data.item(),
        "x.grad": x.grad.item(),
        "g": g.data.item(),
        "a.grad": a.grad.item(),
        "b.grad": b.grad.item(),
    }

"""A user's training loop, type-checked with `mypy --strict` against the installed packages (tests/test_static.py)."""

from __future__ import annotations

import numpy as np

import client
import engine
from client import Variable


class MyReLU(client.Function):
    @staticmethod
    def forward(ctx: client.FunctionCtx, x: Variable) -> Variable:
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx: client.FunctionCtx, grad_output: Variable) -> Variable:
        x: Variable
        (x,) = ctx.saved_tensors
        return grad_output * (x > 0).float()


def train(steps: int) -> float:
    client.connect()  # in-process: no server configured
    x = client.randn(8, 3)
    y = client.randn(8, 1)
    w1 = client.randn(3, 4, requires_grad=True)
    w2 = Variable(np.zeros((4, 1)), requires_grad=True)
    loss_value = 0.0
    for _ in range(steps):
        hidden = MyReLU.apply(x @ w1)
        loss = ((hidden.mm(w2) - y) ** 2).mean()
        loss.backward()
        loss_value = loss.item()
        with client.no_grad():
            for p in (w1, w2):
                assert p.grad is not None
                p -= 0.01 * p.grad
                p.grad = None
    (g,) = client.grad((w1**3).sum(), w1, create_graph=True)
    print(g.shape, g.sum().item())
    return loss_value


def engine_side() -> engine.Variable:
    v = engine.Variable(np.ones((2, 2)), requires_grad=True)
    out = (v + 2).exp().sum()
    out.backward()
    values, indices = v.max(0)
    with engine.no_grad():
        total = engine.exp(v).t() @ v.reshape(2, 2).T
    return total + values.unsqueeze(0) + indices.float()


if __name__ == "__main__":
    print(train(3), engine_side().shape)

"""Tensor programs: user code that does its own backprop with plain tensor ops (issue 13, section 3).

`two_layer_net_tensor` is the official tutorials' program of that name (the seed net's sizes,
nothing requires grad, gradients written by hand with `clamp`, a boolean-mask assignment and
`.t().mm(...)`), written once against a torch-like module: `torch`, `engine` or `client`.
"""

from __future__ import annotations

import numpy

SEED = (64, 1000, 100, 10)
LEARNING_RATE = 1e-6


def two_layer_net_tensor(mod, seed: int = 0, dims=SEED):
    """`step()` -> the step's loss (a float): one iteration of the tutorial's training loop, on
    weights held across calls. `mod` provides `tensor(ndarray)` and the Tensor methods."""
    n, d_in, h_dim, d_out = dims
    rng = numpy.random.default_rng(seed)
    x = mod.tensor(rng.standard_normal((n, d_in)).astype(numpy.float32))
    y = mod.tensor(rng.standard_normal((n, d_out)).astype(numpy.float32))
    w = [
        mod.tensor(rng.standard_normal((d_in, h_dim)).astype(numpy.float32)),
        mod.tensor(rng.standard_normal((h_dim, d_out)).astype(numpy.float32)),
    ]

    def step():
        w1, w2 = w
        h = x.mm(w1)
        h_relu = h.clamp(min=0)
        y_pred = h_relu.mm(w2)
        loss = (y_pred - y).pow(2).sum().item()
        grad_y_pred = 2.0 * (y_pred - y)
        grad_w2 = h_relu.t().mm(grad_y_pred)
        grad_h_relu = grad_y_pred.mm(w2.t())
        grad_h = grad_h_relu.clone()
        grad_h[h < 0] = 0
        grad_w1 = x.t().mm(grad_h)
        w1 -= LEARNING_RATE * grad_w1
        w2 -= LEARNING_RATE * grad_w2
        w[0], w[1] = w1, w2
        return loss

    return step

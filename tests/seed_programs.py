"""The seed tutorials' custom ReLU, written once for every test that runs it: the engine's,
the client's and PyTorch's (the oracle) `Function` classes all take the same code."""

from __future__ import annotations


def my_relu(base):
    """The seed's `MyReLU`, subclassing `base` (`engine.Function`, `client.Function`,
    `torch.autograd.Function`...)."""

    class MyReLU(base):
        @staticmethod
        def forward(ctx, input):
            ctx.save_for_backward(input)
            return input.clamp(min=0)

        @staticmethod
        def backward(ctx, grad_output):
            (input,) = ctx.saved_tensors
            grad_input = grad_output.clone()
            grad_input[input < 0] = 0
            return grad_input

    return MyReLU

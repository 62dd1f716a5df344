"""The seed tutorial's two-layer network, trained through the gradserve client.

    python examples/two_layer_net.py                    # embedded: computed in-process
    GRADSERVE_URL=http://127.0.0.1:8000 python examples/two_layer_net.py --steps 50
    python examples/two_layer_net.py --url http://127.0.0.1:8000 --relu function

Every loss value is one POST /forward and every backward() one POST /backward; the weights
live here, as NumPy arrays, and are updated in place between steps.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

import client  # noqa: E402
from client import Function, Variable  # noqa: E402


class MyReLU(Function):
    """The seed tutorial's custom ReLU (traced once, sent as a `function` node)."""

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


def train(steps=500, relu="clamp", seed=0, learning_rate=1e-6, report=print, dtype=np.float32):
    """Train the N=64, D_in=1000, H=100, D_out=10 network; returns the losses."""
    N, D_in, H, D_out = 64, 1000, 100, 10
    rng = np.random.default_rng(seed)
    x = Variable(rng.standard_normal((N, D_in)).astype(dtype), requires_grad=False)
    y = Variable(rng.standard_normal((N, D_out)).astype(dtype), requires_grad=False)
    w1 = Variable(rng.standard_normal((D_in, H)).astype(dtype), requires_grad=True)
    w2 = Variable(rng.standard_normal((H, D_out)).astype(dtype), requires_grad=True)
    losses = []
    for t in range(steps):
        h = x.mm(w1)
        h_relu = MyReLU.apply(h) if relu == "function" else h.clamp(min=0)
        y_pred = h_relu.mm(w2)
        loss = (y_pred - y).pow(2).sum()
        losses.append(loss.item())
        if report is not None:
            report(t, losses[-1])
        loss.backward()
        w1.data -= learning_rate * w1.grad.data
        w2.data -= learning_rate * w2.grad.data
        w1.grad.data.fill(0)  # or: w1.grad = None
        w2.grad = None
    return losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument(
        "--url", default=os.environ.get("GRADSERVE_URL"), help="service URL (default: $GRADSERVE_URL, else embedded)"
    )
    parser.add_argument(
        "--relu", choices=("clamp", "function"), default="clamp", help="clamp(min=0) or the MyReLU Function"
    )
    parser.add_argument("--json", action="store_true", help="send tensors as JSON instead of binary")
    args = parser.parse_args(argv)
    with client.connect(args.url, binary=not args.json) as session:
        print(f"# computing on {session.url or 'the embedded engine'}", file=sys.stderr)
        train(args.steps, relu=args.relu)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Helpers of the client tests: the seed programs, written once against a module `m` that is
either `client` or `engine`; a request recorder; free ports.

Not a test module (no `test_` prefix); `conftest.py` puts this folder on `sys.path`.
"""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np

from tests.seed_programs import my_relu as seed_relu

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Recorder:
    """Wraps a session's transport to record every request (method, path, header JSON). An
    embedded session's own calls skip the bytes (`EmbeddedTransport.execute`): their header is
    recorded as it would be sent, tensors reduced to their names."""

    def __init__(self, session):
        import orjson

        from wire.codec import HEADER_LENGTH

        self.calls = []
        transport = session._transport
        original = transport.request

        def request(method, path, content=None, headers=None):
            header = None
            if method == "POST" and content:
                length = (headers or {}).get(HEADER_LENGTH)
                try:
                    header = orjson.loads(content[: int(length)] if length is not None else content)
                except orjson.JSONDecodeError:
                    header = None
            self.calls.append((method, path, header))
            return original(method, path, content, headers)

        transport.request = request
        execute = getattr(transport, "execute", None)
        if execute is not None:

            def execute_call(call, where):
                header = dict(call.header)
                for key, tensors in (("inputs", call.inputs), ("grad_outputs", call.grad_outputs)):
                    if tensors:
                        header[key] = [{"name": name} for name, _ in tensors]
                self.calls.append(("POST", call.path, orjson.loads(orjson.dumps(header))))
                return execute(call, where)

            transport.execute = execute_call

    def paths(self):
        return [path for _, path, _ in self.calls]

    def count(self, path):
        return self.paths().count(path)


def autograd_basics(m, factor=2):
    x = m.Variable(np.ones((2, 2)), requires_grad=True)
    y = x + 2
    z = y * y * factor
    out = z.mean()
    out.backward()
    return x, y, z, out


def doubling_loop(m, start):
    x = m.Variable(start, requires_grad=True)
    y = x * 2
    while y.norm().item() < 1000:
        y = y * 2
    gradients = m.Variable(np.array([0.1, 1.0, 0.0001], dtype=np.float32))
    y.backward(gradients)
    return x, y


def grad_with_grad_outputs(m, xs, ys, zs):
    x = m.Variable(xs, requires_grad=True)
    y = m.Variable(ys, requires_grad=True)
    z = m.Variable(zs, requires_grad=True)
    seed = m.Variable(np.ones((xs.shape[0], ys.shape[1]), dtype=xs.dtype))
    first = m.grad(x.mm(y) + z, [x, y, z], grad_outputs=seed)
    second = m.grad([x.mm(y) / z], [x, y, z], grad_outputs=[seed])
    return first, second


def square_plus(m, xs, ys):
    x = m.Variable(xs, requires_grad=True)
    y = m.Variable(ys, requires_grad=True)
    z = x**2 + 3 * y
    z.backward(m.Variable(np.ones_like(xs)))
    return x, y, z


def two_layer_net(m, steps, relu=None, seed=0, learning_rate=1e-6):
    """The seed's network (N=64, D_in=1000, H=100, D_out=10, float32); returns the losses."""
    N, D_in, H, D_out = 64, 1000, 100, 10
    rng = np.random.default_rng(seed)
    x = m.Variable(rng.standard_normal((N, D_in)).astype(np.float32))
    y = m.Variable(rng.standard_normal((N, D_out)).astype(np.float32))
    w1 = m.Variable(rng.standard_normal((D_in, H)).astype(np.float32), requires_grad=True)
    w2 = m.Variable(rng.standard_normal((H, D_out)).astype(np.float32), requires_grad=True)
    losses = []
    for _ in range(steps):
        h = x.mm(w1)
        y_pred = (relu(h) if relu is not None else h.clamp(min=0)).mm(w2)
        loss = (y_pred - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        w1.data -= learning_rate * w1.grad.data
        w2.data -= learning_rate * w2.grad.data
        w1.grad = None
        w2.grad.zero_()
    return np.array(losses), w1, w2


def my_relu(m, base=None):
    """The seed tutorial's MyReLU, subclassing `base` (default `m.Function`)."""
    return seed_relu(base or m.Function)

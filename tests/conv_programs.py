"""Convolution and pooling programs written once against a module `m` (torch, engine or client):
the calls of `torch.nn.functional` over a grid of strides, paddings, dilations, groups and kernel
shapes (`CASES`), and a LeNet-style CNN trained a few steps by SGD (`train_lenet`).

Not a test module; tests/engine/test_conv.py and tests/client/test_client_conv.py run them and
compare with PyTorch's run of the same program.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Case:
    id: str
    function: str  # the name in torch.nn.functional
    shapes: tuple  # of the float inputs (input, weight, bias...)
    kwargs: dict = field(default_factory=dict)
    integer_values: bool = False  # inputs drawn from a few integers: pooling windows with ties

    def arrays(self, dtype, seed=0):
        rng = np.random.default_rng(seed)
        if self.integer_values:
            return [rng.integers(-2, 3, shape).astype(dtype) for shape in self.shapes]
        return [rng.standard_normal(shape).astype(dtype) for shape in self.shapes]

    def call(self, m, *tensors):
        return getattr(m.nn.functional, self.function)(*tensors, **self.kwargs)


CONV2D = [
    Case("plain", "conv2d", ((2, 3, 7, 8), (4, 3, 3, 3), (4,))),
    Case("stride-pad", "conv2d", ((2, 3, 7, 8), (4, 3, 3, 2), (4,)), {"stride": 2, "padding": 1}),
    Case(
        "groups-dilation",
        "conv2d",
        ((2, 4, 9, 7), (6, 2, 3, 2), (6,)),
        {"groups": 2, "stride": (2, 1), "padding": (1, 0), "dilation": (1, 2)},
    ),
    Case("depthwise-same", "conv2d", ((1, 4, 6, 6), (4, 1, 3, 3)), {"groups": 4, "padding": "same"}),
    Case("even-same", "conv2d", ((2, 2, 7, 6), (3, 2, 4, 2), (3,)), {"padding": "same", "dilation": (2, 1)}),
    Case("valid-whole", "conv2d", ((2, 2, 5, 4), (3, 2, 5, 4), (3,)), {"padding": "valid"}),
    Case("unbatched", "conv2d", ((3, 6, 6), (2, 3, 2, 3), (2,)), {"stride": (1, 2)}),
    Case("pointwise-stride", "conv2d", ((2, 3, 8, 8), (4, 3, 1, 1), (4,)), {"stride": 3}),
]
CONV1D = [
    Case("plain", "conv1d", ((2, 3, 9), (4, 3, 3), (4,))),
    Case("groups-stride", "conv1d", ((2, 4, 10), (6, 2, 4), (6,)), {"groups": 2, "stride": 3, "padding": 2}),
    Case("same-dilated", "conv1d", ((2, 2, 8), (3, 2, 2)), {"padding": "same", "dilation": 3}),
    Case("unbatched", "conv1d", ((3, 7), (2, 3, 3), (2,)), {"padding": 1}),
]
TRANSPOSED = [
    Case("transpose2d", "conv_transpose2d", ((2, 4, 5, 4), (4, 3, 3, 2), (3,)), {"stride": 2, "padding": 1}),
    Case(
        "transpose2d-groups",
        "conv_transpose2d",
        ((2, 4, 4, 5), (4, 2, 2, 3), (4,)),
        {"stride": (2, 3), "output_padding": (1, 0), "groups": 2, "dilation": (1, 2)},
    ),
    Case("transpose1d", "conv_transpose1d", ((2, 3, 6), (3, 2, 3)), {"stride": 2, "output_padding": 1}),
]
MAX_POOL = [
    Case("max2d", "max_pool2d", ((2, 3, 9, 8),), {"kernel_size": 2}),
    Case("max2d-rect", "max_pool2d", ((2, 3, 9, 8),), {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0)}),
    Case("max2d-ceil", "max_pool2d", ((2, 3, 8, 9),), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    Case(
        "max2d-dilated",
        "max_pool2d",
        ((1, 2, 9, 10),),
        {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2, "ceil_mode": True},
    ),
    Case("max2d-unbatched", "max_pool2d", ((3, 6, 7),), {"kernel_size": 2, "stride": 1}),
    Case("max2d-ties", "max_pool2d", ((2, 2, 6, 6),), {"kernel_size": 2, "stride": 1}, integer_values=True),
    Case("max1d", "max_pool1d", ((2, 3, 11),), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    Case("max1d-dilated", "max_pool1d", ((2, 3, 11),), {"kernel_size": 2, "dilation": 3}),
]
AVG_POOL = [
    Case("avg2d", "avg_pool2d", ((2, 3, 8, 9),), {"kernel_size": 2}),
    Case(
        "avg2d-exclude-pad",
        "avg_pool2d",
        ((2, 3, 8, 9),),
        {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
    ),
    Case(
        "avg2d-ceil",
        "avg_pool2d",
        ((2, 3, 8, 9),),
        {"kernel_size": (3, 2), "stride": 2, "padding": 1, "ceil_mode": True},
    ),
    Case(
        "avg2d-ceil-exclude",
        "avg_pool2d",
        ((1, 2, 7, 7),),
        {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
    ),
    Case("avg2d-divisor", "avg_pool2d", ((2, 2, 6, 7),), {"kernel_size": 2, "ceil_mode": True, "divisor_override": 3}),
    Case("avg1d", "avg_pool1d", ((2, 3, 10),), {"kernel_size": 4, "stride": 3, "padding": 2, "ceil_mode": True}),
    Case("adaptive2d-global", "adaptive_avg_pool2d", ((2, 3, 5, 7),), {"output_size": 1}),
    Case("adaptive2d-uneven", "adaptive_avg_pool2d", ((2, 3, 7, 5),), {"output_size": (3, 4)}),
    Case("adaptive1d", "adaptive_avg_pool1d", ((2, 3, 10),), {"output_size": 4}),
]
FOLDING = [
    Case("unfold", "unfold", ((2, 3, 6, 7),), {"kernel_size": (2, 3), "dilation": (1, 2), "padding": 1, "stride": 2}),
    Case(
        "fold",
        "fold",
        ((2, 12, 16),),
        {"output_size": (5, 6), "kernel_size": 2, "padding": (0, 1), "stride": (1, 2)},
    ),
]
CASES = CONV2D + CONV1D + TRANSPOSED + MAX_POOL + AVG_POOL + FOLDING


def run_case(m, case, dtype, seed=0):
    """(output values, gradients of every input) of `case` on module `m`, for a random cotangent."""
    tensors = [m.tensor(a, requires_grad=True) for a in case.arrays(dtype, seed)]
    out = case.call(m, *tensors)
    cotangent = np.random.default_rng(seed + 1).standard_normal(tuple(out.shape)).astype(dtype)
    (out * m.tensor(cotangent)).sum().backward()
    return np.asarray(out.detach().numpy()), [np.asarray(t.grad.numpy()) for t in tensors]


def lenet(m):
    """conv, relu, max_pool2d, conv, relu, avg_pool2d, flatten, linear, relu, linear: for 1 x 16 x 16 images."""
    nn = m.nn
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 6, (3, 2), stride=1, groups=2),
        nn.ReLU(),
        nn.AvgPool2d(2, ceil_mode=True),
        nn.Flatten(),
        nn.Linear(6 * 3 * 4, 10),
        nn.ReLU(),
        nn.Linear(10, 3),
    )


def lenet_data(batch=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, 1, 16, 16)), rng.integers(0, 3, batch)


def train_lenet(m, state, images, labels, dtype=np.float64, steps=3, lr=0.1, network=lenet):
    """The losses of `steps` SGD steps (momentum 0.9) of `network` (`lenet`) from the weights `state` (name -> array)."""
    model = network(m).double() if dtype == np.float64 else network(m).float()
    model.load_state_dict({name: m.tensor(np.asarray(value, dtype)) for name, value in state.items()})
    optimizer = m.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    x, y = m.tensor(images.astype(dtype)), m.tensor(labels)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = m.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.item()))
    return losses, {name: np.asarray(p.detach().numpy()) for name, p in model.state_dict().items()}

"""The models the ONNX tests export with torch.onnx (PyTorch is the oracle, onnxruntime the
second one), and helpers to export them, run them in PyTorch and import them in-process.

Export goes through the TorchScript exporter (`dynamo=False`): about 0.1 s a model against ~5 s
for the dynamo exporter with onnxscript, at opset 20, with a dynamic batch dimension. Weights
are drawn at random (norm weights and biases too), so the exporter shares no initializer between
two parameters and each ONNX initializer's gradient is one PyTorch parameter's.
"""

from __future__ import annotations

import io
import warnings

import numpy as np

OPSET = 20


def models():
    """{name: (module in eval mode, example input)} of the three test models."""
    import torch
    from torch import nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = nn.Linear(4, 16), nn.Linear(16, 3)

        def forward(self, x):
            return torch.log_softmax(self.l2(torch.tanh(self.l1(x))), dim=-1)

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.bn = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4)
            self.c2 = nn.Conv2d(4, 8, 3, stride=2, groups=2)
            self.fc = nn.Linear(8, 5)

        def forward(self, x):
            x = nn.functional.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
            x = nn.functional.avg_pool2d(torch.relu(self.c2(x)), 2)
            return self.fc(x.flatten(1))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, activation="gelu", batch_first=True)

        def forward(self, x):
            return self.layer(x)

    torch.manual_seed(0)
    built = {
        "mlp": (MLP(), torch.randn(2, 4)),
        "lenet": (LeNet(), torch.randn(2, 1, 12, 12)),
        "encoder": (Encoder(), torch.randn(2, 5, 8)),
    }
    randomized([module for module, _ in built.values()])
    return built


def randomized(modules) -> None:
    """Weights N(0, 0.25) and batch-norm statistics of a trained model's spread, each module in eval mode."""
    import torch

    with torch.no_grad():
        for module in modules:
            for p in module.parameters():
                p.copy_(torch.randn_like(p) * 0.5)
            for name, buffer in module.named_buffers():
                if name.endswith("running_var"):
                    buffer.copy_(torch.rand_like(buffer) + 0.5)
                elif name.endswith("running_mean"):
                    buffer.copy_(torch.randn_like(buffer) * 0.1)
            module.eval()


def export(module, example) -> bytes:
    """The module as ONNX bytes, batch dimension dynamic, BatchNormalization kept as a node."""
    import torch

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (example,),
            buffer,
            dynamo=False,
            opset_version=OPSET,
            do_constant_folding=False,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
        )
    return buffer.getvalue()


def torch_grads(module, x: np.ndarray, seed: np.ndarray):
    """(output, d(output . seed)/dx, {parameter name: gradient}) in PyTorch."""
    import torch

    module.zero_grad()
    xt = torch.tensor(x, requires_grad=True)
    y = module(xt)
    y.backward(torch.tensor(seed))
    params = {n: p.grad.numpy().copy() for n, p in module.named_parameters()}
    return y.detach().numpy(), xt.grad.numpy(), params


def onnxruntime_output(data: bytes, x: np.ndarray) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def run_in_process(imported, x: np.ndarray, seed: np.ndarray, wrt=None):
    """(outputs, grads) of an imported model on the wire executor: the path every request takes."""
    from wire.executor import Executor
    from wire.limits import Limits
    from wire.messages import Request

    request = Request(
        graph=imported.graph,
        inputs={"x": x, **imported.parameters},
        grad_outputs={"y": seed},
        wrt=wrt,
    )
    result = Executor(Limits()).backward(request)
    return result.outputs, result.grads


def sample(example, batch: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, *example.shape[1:])).astype(np.float32)

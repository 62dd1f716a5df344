"""Gradients through /v2 against PyTorch in float64: a small network with a non-scalar output
seeded by `grad_output:`, every input differentiated, in JSON and binary."""

from __future__ import annotations

import numpy as np
import pytest

from tests.oip.oip_testkit import config, infer_input, requested

torch = pytest.importorskip("torch")

# logits = sigmoid(x @ w1 + b) @ w2; loss = mean(log_softmax(logits) * y); outputs loss and logits
NET = {
    "version": 1,
    "nodes": [
        {"id": "x", "op": "input", "shape": [4, 3], "dtype": "FP64", "requires_grad": True},
        {"id": "w1", "op": "input", "shape": [3, 5], "dtype": "FP64", "requires_grad": True},
        {"id": "b", "op": "input", "shape": [5], "dtype": "FP64", "requires_grad": True},
        {"id": "w2", "op": "input", "shape": [5, 2], "dtype": "FP64", "requires_grad": True},
        {"id": "y", "op": "input", "shape": [4, 2], "dtype": "FP64"},
        {"id": "h", "op": "matmul", "inputs": ["x", "w1"]},
        {"id": "hb", "op": "add", "inputs": ["h", "b"]},
        {"id": "a", "op": "sigmoid", "inputs": ["hb"]},
        {"id": "logits", "op": "matmul", "inputs": ["a", "w2"]},
        {"id": "lsm", "op": "log_softmax", "inputs": ["logits"], "attrs": {"dim": 1}},
        {"id": "p", "op": "mul", "inputs": ["lsm", "y"]},
        {"id": "loss", "op": "mean", "inputs": ["p"]},
    ],
    "outputs": ["loss", "logits"],
}
WRT = ("x", "w1", "b", "w2")


def torch_reference(arrays, seed):
    t = {n: torch.tensor(a, dtype=torch.float64, requires_grad=n in WRT) for n, a in arrays.items()}
    logits = torch.sigmoid(t["x"] @ t["w1"] + t["b"]) @ t["w2"]
    loss = (torch.log_softmax(logits, dim=1) * t["y"]).mean()
    torch.autograd.backward([loss, logits], [torch.tensor(1.0, dtype=torch.float64), torch.tensor(seed)])
    return loss.item(), logits.detach().numpy(), {n: t[n].grad.numpy() for n in WRT}


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_gradients_match_pytorch(triton, binary):
    rng = np.random.default_rng(11)
    arrays = {
        "x": rng.standard_normal((4, 3)),
        "w1": rng.standard_normal((3, 5)),
        "b": rng.standard_normal(5),
        "w2": rng.standard_normal((5, 2)),
        "y": rng.standard_normal((4, 2)),
    }
    seed = rng.standard_normal((4, 2))
    triton.load_model("net", config=config(NET))
    try:
        inputs = [infer_input(n, a, binary) for n, a in arrays.items()] + [
            infer_input("grad_output:logits", seed, binary)
        ]
        result = triton.infer(
            "net", inputs, outputs=requested("loss", "logits", *(f"grad:{n}" for n in WRT), binary=binary)
        )
    finally:
        triton.unload_model("net")
    loss, logits, grads = torch_reference(arrays, seed)
    assert result.as_numpy("loss").item() == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(result.as_numpy("logits"), logits, rtol=1e-12)
    for name in WRT:
        got = result.as_numpy(f"grad:{name}")
        assert got.dtype == np.float64 and got.shape == arrays[name].shape
        np.testing.assert_allclose(got, grads[name], rtol=1e-10, atol=1e-12)

"""Convolution and pooling through the client (issue 25), embedded and against a live server, against
PyTorch: `torch.nn.functional`'s conv and pool functions over the grid of tests/conv_programs.py
(values and every input's gradient), a LeNet-style CNN built from `client.nn` modules trained 3 SGD
steps, and bad attributes refused at the call with the server's message."""

from __future__ import annotations

import numpy as np
import pytest

import client
from tests import conv_programs as programs

TOLERANCE = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=1.3e-6, atol=1e-5)}


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("case", programs.CASES, ids=[f"{c.function}-{c.id}" for c in programs.CASES])
def test_values_and_gradients_match_torch(session, torch, case, dtype):
    got, got_grads = programs.run_case(client, case, dtype)
    want, want_grads = programs.run_case(torch, case, dtype)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, **TOLERANCE[dtype], err_msg="output")
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        np.testing.assert_allclose(g, w, **TOLERANCE[dtype], err_msg=f"gradient of input {i}")


def test_a_convolution_is_one_node_on_the_wire(session, recorder):
    x = client.tensor(np.ones((1, 2, 5, 5)), requires_grad=True)
    w = client.tensor(np.ones((3, 2, 3, 3)), requires_grad=True)
    out = client.nn.functional.conv2d(x, w, padding="same")
    pooled = client.nn.functional.max_pool2d(out, 2, ceil_mode=True)
    pooled.sum().backward()
    nodes = [n for _, _, header in recorder.calls if header for n in header["graph"]["nodes"]]
    conv = [n for n in nodes if n["op"] == "conv2d"]
    assert len(conv) == 1 and conv[0]["attrs"]["padding"] == "same" and len(conv[0]["inputs"]) == 2
    assert [n["attrs"]["ceil_mode"] for n in nodes if n["op"] == "max_pool2d"] == [True]
    assert x.grad.shape == (1, 2, 5, 5) and float(w.grad.sum().item()) > 0


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_lenet_trains_as_in_torch(session, torch, dtype):
    torch.manual_seed(0)
    state = {k: v.detach().numpy().copy() for k, v in programs.lenet(torch).double().state_dict().items()}
    images, labels = programs.lenet_data()
    losses, weights = programs.train_lenet(client, state, images, labels, dtype)
    want_losses, want_weights = programs.train_lenet(torch, state, images, labels, dtype)
    tolerance = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(losses, want_losses, **tolerance)
    assert losses[-1] < losses[0]
    for name, value in want_weights.items():
        np.testing.assert_allclose(weights[name], value, **tolerance, err_msg=name)


def test_bad_windows_are_refused_at_the_call(session):
    F = client.nn.functional
    x, w = client.tensor(np.zeros((1, 4, 6, 6))), client.tensor(np.zeros((2, 4, 3, 3)))
    with pytest.raises(ValueError, match="stride"):
        F.conv2d(x, w, stride=0)
    with pytest.raises(ValueError, match="expected input.*to have 3 channels"):
        F.conv2d(x, client.tensor(np.zeros((2, 1, 3, 3))), groups=3)
    with pytest.raises(ValueError, match=r"Given input size: \(4x6x6\). Calculated output size: \(4x0x0\). Output"):
        F.max_pool2d(x, kernel_size=7)
    with pytest.raises(ValueError, match="half"):
        F.avg_pool2d(x, kernel_size=2, padding=2)


def test_max_pool_indices_match_torch(session, torch):
    x = np.random.default_rng(3).integers(-2, 3, (2, 3, 7, 8)).astype(np.float64)
    x[0, 0, 1, 1:3] = np.nan
    values, indices = client.nn.functional.max_pool2d(client.tensor(x), 3, 2, 1, ceil_mode=True, return_indices=True)
    want_values, want_indices = torch.nn.functional.max_pool2d(
        torch.tensor(x), 3, 2, 1, ceil_mode=True, return_indices=True
    )
    np.testing.assert_array_equal(values.numpy(), want_values.numpy())
    np.testing.assert_array_equal(indices.numpy(), want_indices.numpy())

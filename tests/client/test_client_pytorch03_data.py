"""The seed tutorials' PyTorch-0.3 idioms on `.data`, as written there, through the engine and
through the client (embedded and against the live server): `loss.data[0]`,
`w.data -= lr * w.grad.data`, `w.grad.data.zero_()`, `y.data.norm()`, `W.data = W.data - ...`."""

from __future__ import annotations

import numpy as np
import pytest
from client_testkit import my_relu

import client
import engine

try:
    import torch
except ImportError:
    torch = None


@pytest.fixture(params=["engine", "client-embedded", "client-remote"])
def m(request):
    if request.param == "engine":
        yield engine
        return
    url = request.getfixturevalue("server").url if request.param == "client-remote" else None
    with client.connect(url):
        yield client


def _seed_net(m, steps, zero_with_data):
    """The seed's manual-backprop loop, its lines kept as the tutorial writes them."""
    N, D_in, H, D_out = 16, 50, 20, 5
    rng = np.random.default_rng(7)
    x = m.Variable(rng.standard_normal((N, D_in)).astype(np.float32), requires_grad=False)
    y = m.Variable(rng.standard_normal((N, D_out)).astype(np.float32), requires_grad=False)
    w1 = m.Variable(rng.standard_normal((D_in, H)).astype(np.float32), requires_grad=True)
    w2 = m.Variable(rng.standard_normal((H, D_out)).astype(np.float32), requires_grad=True)
    learning_rate = 1e-4
    printed = []
    for t in range(steps):
        y_pred = x.mm(w1).clamp(min=0).mm(w2)
        loss = (y_pred - y).pow(2).sum()
        printed.append((t, loss.data[0]))
        loss.backward()
        w1.data -= learning_rate * w1.grad.data
        w2.data -= learning_rate * w2.grad.data
        if zero_with_data:
            w1.grad.data.zero_()
            w2.grad.data.zero_()
        else:
            w1.grad = w2.grad = None
    return printed, w1.data.copy(), w2.data.copy()


def test_seed_loop_with_data_idioms_trains_like_the_reference(m):
    printed, w1, w2 = _seed_net(m, 8, zero_with_data=True)
    ref_printed, ref_w1, ref_w2 = _seed_net(engine, 8, zero_with_data=False)
    losses = [loss for _, loss in printed]
    assert [t for t, _ in printed] == list(range(8))
    assert all(isinstance(float(v), float) for v in losses)
    np.testing.assert_allclose(losses, [loss for _, loss in ref_printed], rtol=1e-5)
    assert losses[-1] < losses[0]
    np.testing.assert_allclose(w1, ref_w1, rtol=1e-5)
    np.testing.assert_allclose(w2, ref_w2, rtol=1e-5)


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed (used as the oracle)")
def test_seed_loop_matches_pytorch(m):
    printed, w1, w2 = _seed_net(m, 5, zero_with_data=True)
    N, D_in, H, D_out = 16, 50, 20, 5
    rng = np.random.default_rng(7)
    x, y = (torch.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in ((N, D_in), (N, D_out)))
    tw1, tw2 = (
        torch.from_numpy(rng.standard_normal(s).astype(np.float32)).requires_grad_() for s in ((D_in, H), (H, D_out))
    )
    losses = []
    for _ in range(5):
        loss = (x.mm(tw1).clamp(min=0).mm(tw2) - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            tw1 -= 1e-4 * tw1.grad
            tw2 -= 1e-4 * tw2.grad
        tw1.grad.zero_()
        tw2.grad.zero_()
    np.testing.assert_allclose([v for _, v in printed], losses, rtol=1e-4)
    np.testing.assert_allclose(w1, tw1.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_grad_data_zero_is_in_place_and_backward_accumulates_from_zero(m):
    w = m.Variable(np.array([1.0, 2.0], np.float32), requires_grad=True)
    (w * 3).sum().backward()
    grad = w.grad
    assert w.grad.data.zero_() is not None
    np.testing.assert_array_equal(w.grad.data, [0.0, 0.0])
    assert w.grad is grad  # zeroed where it is, not replaced
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.data, [2.0, 4.0])


def test_data_of_a_scalar_reads_like_a_one_element_tensor(m):
    x = m.Variable(np.array([1.5, 2.5], np.float32), requires_grad=True)
    loss = (x * x).sum()
    assert loss.data[0] == pytest.approx(8.5) and loss.data[-1] == pytest.approx(8.5)
    assert f"{loss:.2f}" == "8.50" and "%.1f" % loss == "8.5"
    with pytest.raises(IndexError):
        loss.data[1]
    assert isinstance(loss.data, np.ndarray) and loss.data.shape == ()


def test_data_norm_drives_a_while_loop(m):
    x = m.Variable(np.array([0.3, -0.4], np.float32), requires_grad=True)
    y = x * 2
    steps = 0
    while y.data.norm() < 100:
        y = y * 2
        steps += 1
    norm = y.data.norm()
    assert isinstance(norm, float) and 100 <= norm < 200 and steps == 7
    assert m.Variable(np.array([3.0, -4.0])).data.norm(1) == pytest.approx(7.0)


def test_assigning_data_replaces_the_values_for_the_next_step(m):
    W = m.Variable(np.array([[1.0, 2.0]], np.float32), requires_grad=True)
    b = m.Variable(np.array([0.5], np.float32), requires_grad=True)
    loss = (W.mm(m.Variable(np.ones((2, 1), np.float32))) + b).sum()
    loss.backward()
    W.data = W.data - 0.5 * W.grad.data
    b.data = b.data - 0.5 * b.grad.data
    np.testing.assert_allclose(W.data, [[0.5, 1.5]])
    np.testing.assert_allclose(b.data, [0.0])
    assert W.requires_grad and W.is_leaf and W.dtype == np.float32
    out = (W * 2).sum()
    assert out.item() == pytest.approx(4.0)


def test_in_place_tensor_methods_on_data(m):
    p = m.Variable(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
    (p * p).sum().backward()
    p.data.add_(-0.5, p.grad.data)  # PyTorch 0.3's SGD step: p -= 0.5 * grad
    np.testing.assert_allclose(p.data, [0.0, 0.0, 0.0])
    p.data.fill_(2.0).mul_(3).sub_(1).div_(5)
    np.testing.assert_allclose(p.data, [1.0, 1.0, 1.0])
    copy = p.data.clone()
    copy.zero_()
    np.testing.assert_allclose(p.data, [1.0, 1.0, 1.0])
    assert type(p.detach().numpy()) is np.ndarray


def test_values_stored_inside_variables_are_plain_arrays():
    x = engine.Variable(np.ones(3, np.float32))
    y = engine.Variable(x.data * 2)
    z = x + y.data
    for v in (y, z):
        assert type(v.numpy()) is np.ndarray
    x.data = x.data * 4
    assert type(x.numpy()) is np.ndarray
    np.testing.assert_array_equal(z.numpy(), [3.0, 3.0, 3.0])


SEED_PROGRAM = """
dtype = torch.FloatTensor
N, D_in, H, D_out = 64, 1000, 100, 10

x = Variable(torch.randn(N, D_in).type(dtype), requires_grad=False)
y = Variable(torch.randn(N, D_out).type(dtype), requires_grad=False)

w1 = Variable(torch.randn(D_in, H).type(dtype), requires_grad=True)
w2 = Variable(torch.randn(H, D_out).type(dtype), requires_grad=True)

learning_rate = 1e-6
for t in range(12):
    y_pred = x.mm(w1).clamp(min=0).mm(w2)

    loss = (y_pred - y).pow(2).sum()
    print(t, loss.data[0])

    loss.backward()

    w1.data -= learning_rate * w1.grad.data
    w2.data -= learning_rate * w2.grad.data

    w1.grad.data.zero_()
    w2.grad.data.zero_()
"""


def _run_seed_program(module, capsys):
    module.manual_seed(0)
    exec(SEED_PROGRAM, {"torch": module, "Variable": module.Variable})
    lines = capsys.readouterr().out.split("\n")
    return [float(line.split()[1]) for line in lines if line.strip()]


def test_seed_program_runs_with_its_import_changed(m, capsys):
    losses = _run_seed_program(m, capsys)
    reference = _run_seed_program(engine, capsys)
    assert len(losses) == 12 and losses[-1] < losses[0] / 2
    np.testing.assert_allclose(losses, reference, rtol=1e-5)


def test_pytorch03_constructors_types_and_volatile(m):
    x = m.Variable(m.Tensor(3, 5).uniform_(-1, 1), requires_grad=True)
    assert x.shape == (3, 5) and x.type() == "torch.FloatTensor"
    assert float(x.data.min()) >= -1 and float(x.data.max()) <= 1 and float(x.data.std()) > 0
    with pytest.warns(UserWarning, match="volatile"):
        v = m.Variable(m.Tensor([1, 2]), volatile=True)
    assert v.volatile is False and v.dtype == np.float32
    d = m.from_numpy(np.arange(3.0))
    assert d.type() == "torch.DoubleTensor" and d.type(m.FloatTensor).dtype == np.float32
    assert m.LongTensor([1, 2]).type() == "torch.LongTensor" and m.DoubleTensor(2, 2).sum().item() == 0.0
    y = (x.type(m.DoubleTensor) * 2).sum()
    assert y.dtype == np.float64
    y.backward()
    np.testing.assert_allclose(x.grad.data, np.full((3, 5), 2.0))
    assert x.grad.dtype == np.float32
    with pytest.raises(TypeError, match="unexpected keyword"):
        m.Variable(m.Tensor(2), requires_grads=True)


def test_seed_relu_subclasses_autograd_function(m):
    MyReLU = my_relu(m, m.autograd.Function)  # the seed writes `class MyReLU(torch.autograd.Function)`
    x = m.autograd.Variable(np.array([-1.0, 0.5, 2.0], np.float32), requires_grad=True)
    (MyReLU.apply(x) * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.data, [0.0, 3.0, 3.0])

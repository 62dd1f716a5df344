"""Mixed precision as PyTorch programs write it (`torch.autocast`, `torch.amp.GradScaler`, the older
`torch.cpu.amp`/`torch.cuda.amp` spellings) on the engine, the embedded client and a live server
(`torch_like`), against PyTorch's CPU autocast with float16."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.client.test_client_nn_optim import values


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def _inputs(torch):
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.standard_normal((4, 6)).astype(np.float32), requires_grad=True)
    w = torch.tensor(rng.standard_normal((3, 6)).astype(np.float32), requires_grad=True)
    b = torch.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    img = torch.tensor(rng.standard_normal((1, 2, 5, 5)).astype(np.float32))
    k = torch.tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    return x, w, b, img, k


def _dtypes_under_autocast(torch):
    F = torch.nn.functional
    x, w, b, img, k = _inputs(torch)
    with torch.autocast(device_type="cpu", dtype=torch.float16):
        y = x @ w.t()
        out = [
            y,
            x.matmul(w.t()),
            torch.mm(x, w.t()),
            torch.einsum("ij,kj->ik", x, w),
            F.linear(x, w, b),
            F.conv2d(img, k),
            x.double() @ w.double().t(),  # float64 is left alone
            y.softmax(-1),  # runs in its input's dtype
            y + b,  # float16 with float32 promotes
            F.mse_loss(y, y.detach() * 2),  # the losses run in float32
            F.cross_entropy(y, torch.tensor([0, 1, 2, 0])),
            y.prod(),
        ]
        with torch.autocast(device_type="cpu", enabled=False):
            out.append(x @ w.t())
        out.append(torch.is_autocast_enabled("cpu"))
    out.append(torch.is_autocast_enabled("cpu"))
    return out


def test_ops_run_in_the_dtypes_pytorch_autocast_gives(torch_like, oracle):
    ours, theirs = _dtypes_under_autocast(torch_like), _dtypes_under_autocast(oracle)
    assert ours[-2:] == theirs[-2:] == [True, False]
    for i, (a, b) in enumerate(zip(ours[:-2], theirs[:-2], strict=True)):
        assert str(a.dtype) == str(b.dtype), i
        np.testing.assert_allclose(values(a).astype(np.float64), b.detach().double().numpy(), rtol=2e-2, atol=2e-2)


def _mixed_step(torch):
    x, w, b, _, _ = _inputs(torch)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(torch.nn.functional.linear(x, w, b).tanh(), torch.ones(4, 3))
    loss.backward()
    return loss, x.grad, w.grad, b.grad


def test_gradients_reach_float32_leaves_in_float32(torch_like, oracle):
    for ours, theirs in zip(_mixed_step(torch_like), _mixed_step(oracle), strict=True):
        assert str(ours.dtype) == str(theirs.dtype) == "torch.float32"
        np.testing.assert_allclose(values(ours), theirs.detach().numpy(), rtol=2e-2, atol=2e-3)


def test_the_decorator_form_and_the_older_spellings(torch_like):
    @torch_like.autocast("cpu", dtype=torch_like.float16)
    def product(a, b):
        return a @ b

    a = torch_like.ones(2, 2)
    assert str(product(a, a).dtype) == "torch.float16"
    with torch_like.cpu.amp.autocast(dtype=torch_like.float16):
        assert str((a @ a).dtype) == "torch.float16"
    with torch_like.amp.autocast("cpu", dtype=torch_like.float16):
        assert torch_like.get_autocast_dtype("cpu") == torch_like.float16
    assert str((a @ a).dtype) == "torch.float32"


def test_an_unsupported_autocast_warns_and_runs_in_float32(torch_like):
    """bfloat16 (PyTorch's CPU default) does not exist in NumPy; 'cuda' does not compute here."""
    a = torch_like.ones(2, 2)
    for make in (
        lambda: torch_like.autocast("cpu"),
        lambda: torch_like.autocast("cpu", dtype=torch_like.bfloat16),
        lambda: torch_like.autocast("cuda"),
        lambda: torch_like.cuda.amp.autocast(),
    ):
        with pytest.warns(UserWarning, match="Disabling autocast"), make():
            assert str((a @ a).dtype) == "torch.float32"
    with pytest.raises(RuntimeError, match="unsupported autocast device_type"):
        torch_like.autocast("tpu")
    with pytest.raises(TypeError, match="bfloat16"):
        torch_like.zeros(2, dtype=torch_like.bfloat16)


def _scaled_training(torch, init_scale, steps=12):
    """A float32 loop with a GradScaler: with a huge initial scale the first steps overflow (skipped, the
    scale backed off), then it trains."""
    rng = np.random.default_rng(1)
    model = torch.nn.Linear(5, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor(rng.standard_normal((2, 5)).astype(np.float32)))
        model.bias.copy_(torch.tensor(rng.standard_normal(2).astype(np.float32)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=2)
    x = torch.tensor(rng.standard_normal((8, 5)).astype(np.float32))
    y = torch.tensor(rng.standard_normal((8, 2)).astype(np.float32) * 1000)
    scales, results = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        results.append(scaler.step(opt))
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, [values(p) for p in model.parameters()], scaler.state_dict()


@pytest.mark.parametrize("init_scale", [2.0**120, 1024.0])
def test_grad_scaler_skips_overflowing_steps_and_scales_as_pytorch(torch_like, oracle, init_scale):
    ours, theirs = _scaled_training(torch_like, init_scale), _scaled_training(oracle, init_scale)
    assert ours[0] == theirs[0]  # the scale after each update: backoff on overflow, growth every 2 clean steps
    backoffs = sum(later < earlier for earlier, later in zip(ours[0], ours[0][1:]))
    assert backoffs >= 3 if init_scale > 2**100 else backoffs == 0
    for a, b in zip(ours[1], theirs[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert ours[2] == theirs[2]


def test_grad_scaler_errors_and_disabled_pass_through(torch_like):
    w = torch_like.ones(3, requires_grad=True)
    opt = torch_like.optim.SGD([w], lr=0.1)
    scaler = torch_like.amp.GradScaler("cpu")
    scaler.scale((w * 2).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
        scaler.step(opt, closure=lambda: None)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    np.testing.assert_allclose(values(w), [0.8, 0.8, 0.8])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        off = torch_like.cuda.amp.GradScaler()  # no CUDA here: disabled, as PyTorch's is
    loss = (w * 2).sum()
    assert not off.is_enabled() and off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}

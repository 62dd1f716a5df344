"""`x.numpy()` on a Variable that requires grad raises PyTorch's RuntimeError (and so do `numpy.asarray(x)`,
`numpy.array(x)`), on the engine, the embedded client and a live server, unless in no_grad mode or `force=True`;
`detach().numpy()`, `tolist()`, `item()` work, as in torch 2.13. On the client the refusal sends no request."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

VALUES = [1.5, -2.0, 3.25]


def _refusal(call):
    """The exception `call()` raises (pytest fails when it raises none)."""
    with pytest.raises(Exception) as caught:
        call()
    return type(caught.value), str(caught.value)


def _conversions(x):
    """What each conversion of `x` does: its exception (type, message), else its value as a list."""
    calls = {
        "numpy": lambda: x.numpy(),
        "numpy(force=False)": lambda: x.numpy(force=False),
        "asarray": lambda: np.asarray(x),
        "array": lambda: np.array(x),
        "array(dtype)": lambda: np.array(x, dtype=np.float64),
        "__array__": lambda: x.__array__(),
        "numpy(force=1)": lambda: x.numpy(force=1),
        "numpy(force=True)": lambda: x.numpy(force=True).tolist(),
        "detach().numpy()": lambda: x.detach().numpy().tolist(),
        "tolist": lambda: x.tolist(),
        "item": lambda: x[0].item(),
    }
    out = {}
    for name, call in calls.items():
        try:
            out[name] = call()
        except (RuntimeError, TypeError) as error:
            out[name] = (type(error), str(error))
    return out


@pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")  # torch's __array__
@pytest.mark.parametrize("which", ["leaf", "non-leaf"])
def test_the_conversions_of_a_variable_that_requires_grad_are_torchs(torch_like, which):
    results = []
    for m in (torch_like, torch):
        x = m.tensor(VALUES, dtype=m.float64, requires_grad=True)
        results.append(_conversions(x if which == "leaf" else x * 2))
    got, want = results
    assert got == want
    message = "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."
    assert want["numpy"] == want["asarray"] == want["array"] == (RuntimeError, message)
    assert want["numpy(force=True)"] == want["detach().numpy()"] == [v * (1 if which == "leaf" else 2) for v in VALUES]


def test_grad_mode_and_the_flag_decide(torch_like):
    x = torch_like.tensor(VALUES, requires_grad=True)
    torch_x = torch.tensor(VALUES, requires_grad=True)
    with torch_like.no_grad():  # torch checks the flag only in grad mode
        assert x.numpy().tolist() == (x * 1).numpy().tolist() == np.asarray(x).tolist() == torch_x.tolist()
    with torch_like.inference_mode():
        assert x.numpy().tolist() == torch_x.tolist()
    (g,) = torch_like.autograd.grad((x * x).sum(), x, create_graph=True)  # a gradient with a graph requires grad
    (torch_g,) = torch.autograd.grad((torch_x * torch_x).sum(), torch_x, create_graph=True)
    assert _refusal(g.numpy) == _refusal(torch_g.numpy)
    assert g.numpy(force=True).tolist() == torch_g.numpy(force=True).tolist()


def test_a_complex_spectrum_of_a_variable_that_requires_grad_is_refused_too(torch_like):
    x, torch_x = torch_like.tensor(VALUES, requires_grad=True), torch.tensor(VALUES, requires_grad=True)
    z, torch_z = torch_like.fft.fft(x), torch.fft.fft(torch_x)
    assert _refusal(z.numpy) == _refusal(torch_z.numpy)
    np.testing.assert_allclose(z.numpy(force=True), torch_z.numpy(force=True), rtol=1e-6)


def test_force_shares_memory_as_torchs_does():
    import engine

    x = engine.tensor(VALUES, requires_grad=True)
    forced = x.numpy(force=True)
    assert np.shares_memory(forced, x.detach().numpy())
    assert x.data.numpy(force=True).tolist() == VALUES  # `.data` is a tensor in torch: its numpy() takes force


def test_the_client_refuses_before_any_request(recorder):
    import client

    x = client.tensor(VALUES, requires_grad=True)
    y = (x * 2).exp().sum()  # recorded, not computed
    assert not y._has_value
    for call in (y.numpy, lambda: np.asarray(y), lambda: np.array(x)):
        with pytest.raises(RuntimeError, match=r"^Can't call numpy\(\) on Tensor that requires grad"):
            call()
    assert recorder.calls == []
    assert y.numpy(force=True) == pytest.approx(np.exp(np.array(VALUES) * 2).sum())
    assert len(recorder.calls) == 1


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True to a scalar")  # torch's
def test_a_tensor_made_from_a_list_of_values_that_require_grad_reads_them_as_torchs_does(torch_like):
    made = []
    for m in (torch_like, torch):
        y = m.tensor(VALUES, requires_grad=True) * 2
        made.append([m.tensor([y[0], y[2]]), m.as_tensor([[y[1]], [y[0]]]), y.new_tensor((y[2], 1.0))])
    for got, want in zip(*made):
        assert got.tolist() == want.tolist() and not got.requires_grad and str(got.dtype) == str(want.dtype)
    with pytest.raises(RuntimeError, match=r"^Can't call numpy\(\) on Tensor that requires grad"):
        np.asarray([made[0][0].requires_grad_(), 1.0])  # NumPy's own conversion of such a list refuses, as torch's

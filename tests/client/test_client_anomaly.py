"""torch.autograd's anomaly mode through the client: a backward whose node returns NaN is refused with PyTorch's
message on the engine, the embedded client and a live server (the client sends `parameters.detect_anomaly`, the
executor checks that request's walk on its thread only), and without the mode the NaN comes back as PyTorch's does."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _nan_backward(m):
    x = m.zeros(2, dtype=m.float64, requires_grad=True)
    (x.sqrt() * 0).sum().backward()  # sqrt's derivative at 0 is inf: 0 * inf
    return x


def _refused(m):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        mode = m.autograd.detect_anomaly()
    with mode, pytest.raises(RuntimeError) as caught:
        _nan_backward(m)
    return str(caught.value)


def test_a_nan_gradient_is_refused_with_torchs_message(torch_like):
    want = _refused(torch)
    assert want == "Function 'SqrtBackward0' returned nan values in its 0th output."
    for _ in range(4):  # a repeated graph is compiled from its third request on: anomaly requests are not
        assert _refused(torch_like).endswith(want)
    assert not torch_like.is_anomaly_enabled()


def test_without_the_mode_the_nan_comes_back(torch_like):
    assert np.isnan(_nan_backward(torch_like).grad.numpy()).all()
    with torch_like.autograd.set_detect_anomaly(True, check_nan=False):
        assert np.isnan(_nan_backward(torch_like).grad.numpy()).all()
    with torch_like.autograd.set_detect_anomaly(True):  # the mode stays on for later steps, as PyTorch's
        with pytest.raises(RuntimeError, match="returned nan values"):
            _nan_backward(torch_like)
        x = torch_like.tensor([1.0, 4.0], dtype=torch_like.float64, requires_grad=True)
        x.sqrt().sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), [0.5, 0.25])


def test_the_check_is_one_threads_not_the_processes():
    """What a server does with a client's request: the walk of the thread that asked checks, another's does not."""
    import engine
    from engine.api import anomaly_mode

    seen = {}

    def other():
        seen["other"] = np.isnan(_nan_backward(engine).grad.numpy()).all()

    with anomaly_mode.checking_nan():
        with pytest.raises(RuntimeError, match="'SqrtBackward0' returned nan values"):
            _nan_backward(engine)
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen["other"]
    assert np.isnan(_nan_backward(engine).grad.numpy()).all()

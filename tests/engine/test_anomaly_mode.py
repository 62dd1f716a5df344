"""torch.autograd's anomaly mode on the engine, against PyTorch: a backward node that returns NaN stops the
backward with PyTorch's message (the node named as the engine names it), only while the mode is on."""

from __future__ import annotations

import numpy as np
import pytest

import engine

torch = pytest.importorskip("torch")


def _nan_backward(m):
    x = m.zeros(2, dtype=m.float64, requires_grad=True)
    (x.sqrt() * 0).sum().backward()  # sqrt's derivative at 0 is inf: 0 * inf
    return x


def test_a_nan_gradient_stops_the_backward_naming_its_node_as_torch_does():
    messages = []
    for m in (engine, torch):
        with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
            mode = m.autograd.detect_anomaly()
        with mode, pytest.raises(RuntimeError) as caught:
            _nan_backward(m)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] == "Function 'SqrtBackward0' returned nan values in its 0th output."


def test_without_the_mode_or_its_nan_check_the_nan_goes_through():
    assert np.isnan(_nan_backward(engine).grad.numpy()).all()
    with engine.autograd.set_detect_anomaly(True, check_nan=False):
        assert engine.is_anomaly_enabled() and not engine.is_anomaly_check_nan_enabled()
        assert np.isnan(_nan_backward(engine).grad.numpy()).all()
    assert not engine.is_anomaly_enabled() and engine.is_anomaly_check_nan_enabled()


def test_decorator_and_set_detect_anomaly_as_a_call():
    with pytest.warns(UserWarning):

        @engine.autograd.detect_anomaly()
        def run():
            return _nan_backward(engine)

    with pytest.raises(RuntimeError, match="returned nan values"):
        run()
    assert not engine.is_anomaly_enabled()
    engine.autograd.set_detect_anomaly(True)
    try:
        with pytest.raises(RuntimeError, match="returned nan values"):
            _nan_backward(engine)
    finally:
        engine.autograd.set_detect_anomaly(False)


def test_a_custom_functions_nan_is_named_by_its_node():
    class Half(engine.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x / 2

        @staticmethod
        def backward(ctx, g):
            return g * float("nan")

    x = engine.ones(3, requires_grad=True)
    with engine.autograd.set_detect_anomaly(True):
        with pytest.raises(RuntimeError, match=r"Function '\w*Backward\d*' returned nan values in its 0th output"):
            Half.apply(x).sum().backward()

"""PyTorch's warnings point at the program's line, whichever of the package's frames lie between (the
functional's, a module's, autocast's casting wrapper, the client's): they pointed at
engine/mixed_precision.py for every function autocast wraps."""

from __future__ import annotations

import warnings

import pytest

CALLS = {
    "kl_div 'mean'": (lambda t, x, y: t.nn.functional.kl_div(x, y), "reduction: 'mean' divides"),
    "legacy size_average": (lambda t, x, y: t.nn.functional.mse_loss(x, y, size_average=True), "size_average"),
    "target size": (lambda t, x, y: t.nn.functional.mse_loss(x, y[0]), "Using a target size"),
    "implicit softmax dim": (lambda t, x, y: t.nn.functional.softmax(x), "Implicit dimension"),
    "module": (lambda t, x, y: t.nn.KLDivLoss()(x, y), "reduction: 'mean' divides"),
    "module softmax": (lambda t, x, y: t.nn.Softmax()(x), "Implicit dimension"),
}


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_warning_points_at_the_programs_line(torch_like, name, autocast):
    call, message = CALLS[name]
    x = torch_like.randn(3, 4).log_softmax(1)
    y = torch_like.randn(3, 4).softmax(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if autocast:
            with torch_like.autocast("cpu", dtype=torch_like.float16):
                call(torch_like, x, y)
        else:
            call(torch_like, x, y)
    found = [w for w in caught if message in str(w.message)]
    assert found, [str(w.message) for w in caught]
    assert {w.filename for w in found} == {__file__}, [(w.filename, w.lineno) for w in found]

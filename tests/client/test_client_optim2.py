"""`torch.optim.NAdam`, `RAdam`, `Adamax` and `Adadelta` through the engine, the embedded client and a live
server (`torch_like`), against PyTorch in float64: parameters and state over 5 steps across their options
(on the client as ordinary optimizers, with its lazy gradients), state_dict round trips, argument errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.client.test_client_nn_optim import EXACT, least_squares, least_squares_from, oracle, values  # noqa: F401

OPTIMIZERS = [
    ("NAdam", dict()),
    ("NAdam", dict(lr=0.1, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.1, weight_decay=0.2, decoupled_weight_decay=True, maximize=True)),
    ("RAdam", dict()),
    ("RAdam", dict(lr=0.1, betas=(0.5, 0.6), weight_decay=0.1)),
    ("RAdam", dict(lr=0.1, weight_decay=0.2, decoupled_weight_decay=True, maximize=True)),
    ("Adamax", dict()),
    ("Adamax", dict(lr=0.1, betas=(0.8, 0.9), eps=1e-3, weight_decay=0.1, maximize=True)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.7, eps=1e-4, weight_decay=0.1, maximize=True)),
]


@pytest.mark.parametrize("name, options", OPTIMIZERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OPTIMIZERS)])
def test_optimizer_steps_and_state_match_torch(torch_like, oracle, name, options):  # noqa: F811
    got, optimizer = least_squares(torch_like, name, options)
    want, theirs = least_squares(oracle, name, options)
    np.testing.assert_allclose(got, want, **EXACT)
    assert optimizer.defaults == theirs.defaults and repr(optimizer) == repr(theirs)
    ours_state, their_state = optimizer.state_dict(), theirs.state_dict()
    assert ours_state["param_groups"] == their_state["param_groups"]
    for index, entries in their_state["state"].items():
        assert list(ours_state["state"][index]) == list(entries)
        for key, value in entries.items():
            mine = ours_state["state"][index][key]
            assert np.asarray(mine).dtype == value.numpy().dtype, key
            np.testing.assert_allclose(values(mine), value.numpy(), **EXACT, err_msg=key)


@pytest.mark.parametrize("name, options", [OPTIMIZERS[1], OPTIMIZERS[4], OPTIMIZERS[7], OPTIMIZERS[9]])
def test_state_dict_round_trip_resumes_exactly(torch_like, name, options):
    straight, _ = least_squares(torch_like, name, options, steps=5)
    first, optimizer = least_squares(torch_like, name, options, steps=3)
    resumed, _ = least_squares_from(torch_like, name, options, first[-1], optimizer.state_dict())
    np.testing.assert_allclose(np.concatenate([first, resumed]), straight, **EXACT)


@pytest.mark.parametrize(
    "name, options",
    [
        ("NAdam", dict(lr=-1)),
        ("NAdam", dict(momentum_decay=-1)),
        ("RAdam", dict(betas=(0.9, 1.0))),
        ("Adamax", dict(eps=-1)),
        ("Adadelta", dict(rho=1.5)),
        ("Adadelta", dict(weight_decay=-0.1)),
    ],
)
def test_argument_errors_like_torch(torch_like, oracle, name, options):  # noqa: F811
    with pytest.raises(ValueError) as theirs:
        getattr(oracle.optim, name)([oracle.zeros(2, requires_grad=True)], **options)
    with pytest.raises(ValueError, match=f"^{str(theirs.value)}$".replace("(", r"\(").replace(")", r"\)")):
        getattr(torch_like.optim, name)([torch_like.zeros(2, requires_grad=True)], **options)
    with pytest.raises(NotImplementedError, match="differentiable"):
        getattr(torch_like.optim, name)([torch_like.zeros(2, requires_grad=True)], differentiable=True)

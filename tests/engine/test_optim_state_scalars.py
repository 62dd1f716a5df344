"""The optimizers' state scalars (`step`, NAdam's `mu_product`, ASGD's `eta` and `mu`) are read without a device
read when the optimizer made them (`engine.optim.optimizer.state_value`); one the user changed in place, or a
loaded one, is read as it is now, as `torch.optim` reads it (the oracle)."""

from __future__ import annotations

import numpy
import pytest

import engine

torch = pytest.importorskip("torch")


def _run(lib, name, change):
    """The parameter after 2 steps, `change(optimizer)`, and 2 more steps, on `lib` (engine or torch)."""
    rng = numpy.random.default_rng(5)
    w = rng.standard_normal((4, 3))
    grads = [rng.standard_normal((4, 3)) for _ in range(4)]
    param = lib.tensor(w.copy(), requires_grad=True)
    optimizer = getattr(lib.optim, name)([param], lr=0.05)
    for i, grad in enumerate(grads):
        if i == 2:
            change(lib, optimizer, param)
        param.grad = lib.tensor(grad)
        optimizer.step()
    return param.detach().numpy()


def _fill_step(lib, optimizer, param):
    with lib.no_grad():
        optimizer.state[param]["step"].fill_(10.0)


def _load_later_state(lib, optimizer, param):
    state = optimizer.state_dict()
    state["state"][0]["step"] = lib.tensor(20.0)
    optimizer.load_state_dict(state)


def _add_to_eta(lib, optimizer, param):
    if "eta" in optimizer.state[param]:
        with lib.no_grad():
            optimizer.state[param]["eta"].mul_(0.5)


READ_STEP = ("Adam", "NAdam", "RAdam", "Adamax", "ASGD")  # (Adagrad without lr_decay and RMSprop don't read `step`)


@pytest.mark.parametrize("name", ["Adam", "NAdam", "RAdam", "Adagrad", "RMSprop", "ASGD", "Adamax"])
@pytest.mark.parametrize("change", [_fill_step, _load_later_state, _add_to_eta])
def test_a_changed_or_loaded_state_scalar_is_read_as_torch_reads_it(name, change):
    ours, theirs = _run(engine, name, change), _run(torch, name, change)
    numpy.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)
    untouched = _run(engine, name, lambda *_: None)
    if name in READ_STEP if change is not _add_to_eta else name == "ASGD":
        assert not numpy.array_equal(ours, untouched)  # the change mattered: the read saw it

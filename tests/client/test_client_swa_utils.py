"""torch.optim.swa_utils (AveragedModel with its averaging functions and use_buffers, SWALR, update_bn) through the
engine, the embedded client and a live server (`torch_like`), against torch in float64: the averaged parameters and
buffers after a few SGD steps, the learning rates SWALR anneals to, the BatchNorm statistics update_bn recomputes,
state_dict names, and torch's errors."""

from __future__ import annotations

import numpy as np
import pytest
from client_testkit import Recorder

import client
from tests.client.test_client_nn_sequence import _raises_like

torch = pytest.importorskip("torch")

CLOSE = dict(rtol=1e-12, atol=1e-14)


def _values(v):
    return np.array(v.detach().numpy())  # a copy: torch's numpy() aliases a buffer the next forward updates


def _model(m):
    rng = np.random.default_rng(0)
    model = m.nn.Sequential(m.nn.Linear(3, 4), m.nn.BatchNorm1d(4), m.nn.Tanh(), m.nn.Linear(4, 2)).double()
    model.load_state_dict(
        {
            k: m.tensor(rng.uniform(-0.5, 0.5, tuple(v.shape)) + 1.0 * ("running_var" in k))
            for k, v in model.state_dict().items()
        }
        | {"1.num_batches_tracked": m.tensor(0)}
    )
    return model


AVERAGERS = {
    "swa": lambda su: {},
    "ema_multi_buffers": lambda su: {"multi_avg_fn": su.get_ema_multi_avg_fn(0.75), "use_buffers": True},
    "ema_avg_fn": lambda su: {"avg_fn": su.get_ema_avg_fn(0.9)},
    "swa_multi": lambda su: {"multi_avg_fn": su.get_swa_multi_avg_fn()},
    "swa_avg_fn_buffers": lambda su: {"avg_fn": su.get_swa_avg_fn(), "use_buffers": True},
    "own_avg_fn": lambda su: {"avg_fn": lambda averaged, current, n: averaged * 0.5 + current * 0.5 + n * 0.01},
}


def _train(m, averager):
    """SGD steps on a BatchNorm model, the averaged model updated after each from the second on, SWALR
    stepped from the third; (averaged state, lrs, outputs of the averaged model, state after update_bn)."""
    su = m.optim.swa_utils
    model = _model(m)
    averaged = su.AveragedModel(model, **AVERAGERS[averager](su))
    optimizer = m.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    scheduler = su.SWALR(optimizer, swa_lr=0.02, anneal_epochs=3, anneal_strategy="cos")
    rng = np.random.default_rng(1)
    batches = [m.tensor(rng.standard_normal((5, 3))) for _ in range(6)]
    lrs = []
    for step, x in enumerate(batches):
        optimizer.zero_grad()
        (model(x) ** 2).mean().backward()
        optimizer.step()
        if step >= 1:
            averaged.update_parameters(model)
        if step >= 2:
            scheduler.step()
        lrs.append(scheduler.get_last_lr())
    state = {k: _values(v) for k, v in averaged.state_dict().items()}
    out = _values(averaged(batches[0]))
    su.update_bn([(x, None) for x in batches[:3]], averaged)
    after = {k: _values(v) for k, v in averaged.state_dict().items()}
    return state, lrs, out, after, averaged.training, averaged.module[1].momentum


@pytest.mark.parametrize("averager", sorted(AVERAGERS))
def test_averaged_model_swalr_and_update_bn_are_torchs(torch_like, averager):
    got, want = _train(torch_like, averager), _train(torch, averager)
    for ours, theirs in ((got[0], want[0]), (got[3], want[3])):
        assert list(ours) == list(theirs)
        for key in ours:
            np.testing.assert_allclose(ours[key], theirs[key], **CLOSE, err_msg=key)
    assert got[0]["n_averaged"] == 5
    np.testing.assert_allclose(got[1], want[1], **CLOSE)
    np.testing.assert_allclose(got[2], want[2], **CLOSE)
    assert got[4:] == want[4:] == (True, 0.1)


def test_swalr_schedules_and_state_as_torch(torch_like):
    def lrs(m, **options):
        params = [m.zeros(2, requires_grad=True)]
        optimizer = m.optim.SGD([{"params": params}, {"params": [m.zeros(1, requires_grad=True)], "lr": 0.3}], lr=1.0)
        scheduler = m.optim.swa_utils.SWALR(optimizer, **options)
        seen = []
        for _ in range(6):
            optimizer.step()
            scheduler.step()
            seen.append(scheduler.get_last_lr())
        state = scheduler.state_dict()
        assert "anneal_func" not in state and state["_anneal_strategy"] == options.get("anneal_strategy", "cos")
        scheduler.load_state_dict(state)
        return seen + [[group["swa_lr"] for group in optimizer.param_groups]]

    for options in (
        {"swa_lr": 0.05},
        {"swa_lr": [0.1, 0.2], "anneal_epochs": 4, "anneal_strategy": "linear"},
        {"swa_lr": 0.5, "anneal_epochs": 0},
    ):
        np.testing.assert_allclose(lrs(torch_like, **options), lrs(torch, **options), rtol=1e-15)


def test_swa_errors_are_torchs(torch_like):
    def bad_calls(m):
        su = m.optim.swa_utils
        optimizer = m.optim.SGD([m.zeros(1, requires_grad=True)], lr=0.1)
        return [
            lambda: su.AveragedModel(
                m.nn.Linear(1, 1), avg_fn=su.get_swa_avg_fn(), multi_avg_fn=su.get_swa_multi_avg_fn()
            ),
            lambda: su.get_ema_multi_avg_fn(1.5),
            lambda: su.get_ema_avg_fn(-0.1),
            lambda: su.SWALR(optimizer, swa_lr=0.1, anneal_strategy="exp"),
            lambda: su.SWALR(optimizer, swa_lr=0.1, anneal_epochs=-1),
            lambda: su.SWALR(optimizer, swa_lr=[0.1, 0.2]),
        ]

    for ours, theirs in zip(bad_calls(torch_like), bad_calls(torch), strict=True):
        _raises_like(ours, theirs)


def test_swa_utils_imports_by_torchs_path(torch_like):
    import importlib

    module = importlib.import_module(f"{torch_like.__name__}.optim.swa_utils")
    assert module.AveragedModel is torch_like.optim.swa_utils.AveragedModel
    assert issubclass(module.AveragedModel, torch_like.nn.Module)
    assert module.update_bn([], torch_like.nn.Linear(1, 1)) is None


def test_an_update_of_the_averaged_model_is_one_request(remote):
    """The averaged values, the model's buffers and n_averaged are computed together, as an optimizer step's."""
    model = _model(client)
    averaged = client.optim.swa_utils.AveragedModel(model)
    recorder = Recorder(remote)
    for _ in range(3):
        model(client.randn(5, 3, dtype=client.float64)).sum().backward()
        averaged.update_parameters(model)
    paths = [path for _, path, _ in recorder.calls]
    assert paths == ["/backward", "/forward"] * 3 and int(averaged.n_averaged) == 3

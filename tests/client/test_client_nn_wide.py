"""The breadth of `torch.nn`, `torch.nn.utils` and `torch.optim.lr_scheduler` that tutorials use, through the
engine, the embedded client and a live server (`torch_like`), against PyTorch in float64: BatchNorm2d/3d's
input checks, the ModuleDict/ParameterList/ParameterDict containers, gradient clipping and parameter
vectors, ReduceLROnPlateau and OneCycleLR's momenta, and a CIFAR-shaped training loop (Conv2d, BatchNorm2d,
ReLU, MaxPool2d, Linear, CrossEntropyLoss, an optimizer, a scheduler, clip_grad_norm_) printing PyTorch's
losses. The modules' values and gradients, Adagrad's steps and the other schedulers' learning rates are
in the tables of test_client_nn_optim."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest

from tests.client import test_client_nn_optim as base
from tests.client.test_client_nn_optim import EXACT, copy_into, values

oracle = base.oracle


def test_batch_norms_refuse_other_dimensions_as_torch_does(torch_like, oracle):
    for name, good, bad in [("BatchNorm1d", (4, 3), (4, 3, 2, 2)), ("BatchNorm2d", (2, 3, 4, 4), (2, 3, 4))]:
        for dims in (bad, (2, 3, 2, 2, 2)):
            with pytest.raises(ValueError) as want:
                getattr(oracle.nn, name)(3)(oracle.zeros(dims))
            with pytest.raises(ValueError, match=f"^{re.escape(str(want.value))}$"):
                getattr(torch_like.nn, name)(3)(torch_like.zeros(dims))
        assert tuple(getattr(torch_like.nn, name)(3)(torch_like.randn(good)).shape) == good
    with pytest.raises(ValueError, match=r"^expected 5D input \(got 4D input\)$"):
        torch_like.nn.BatchNorm3d(3)(torch_like.zeros(2, 3, 2, 2))
    assert list(torch_like.nn.BatchNorm2d(3).state_dict()) == list(oracle.nn.BatchNorm2d(3).state_dict())


class Containers:
    @staticmethod
    def build(m):
        class Net(m.nn.Module):
            def __init__(self):
                super().__init__()
                self.heads = m.nn.ModuleDict({"left": m.nn.Linear(3, 2), "right": m.nn.Linear(3, 4)})
                self.scales = m.nn.ParameterList([m.nn.Parameter(m.ones(2)), m.ones(4)])
                self.extra = m.nn.ParameterDict({"shift": m.zeros(2)})

            def forward(self, x):
                return self.heads["left"](x) * self.scales[0] + self.extra["shift"], self.heads["right"](
                    x
                ) * self.scales[-1]

        return Net().double()


def test_module_and_parameter_containers_register_like_torch(torch_like, oracle):
    ours, theirs = Containers.build(torch_like), Containers.build(oracle)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [k for k, _ in ours.named_parameters()] == [k for k, _ in theirs.named_parameters()]
    assert [k for k, _ in ours.named_modules()] == [k for k, _ in theirs.named_modules()]
    assert repr(ours) == repr(theirs)
    copy_into(theirs, ours, oracle)
    x = np.random.default_rng(0).standard_normal((5, 3))
    for model, m in ((ours, torch_like), (theirs, oracle)):
        left, right = model(m.tensor(x))
        (left.sum() + (right * right).sum()).backward()
    for (name, mine), (_, their) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(values(mine.grad), their.grad.numpy(), **EXACT, err_msg=name)
    heads, scales, extra = ours.heads, ours.scales, ours.extra
    assert list(heads) == ["left", "right"] and "left" in heads and len(heads) == 2
    assert isinstance(scales[1], torch_like.nn.Parameter) and isinstance(extra["shift"], torch_like.nn.Parameter)
    assert len(scales) == 2 and len(scales[1:]) == 1 and [tuple(p.shape) for p in scales] == [(2,), (4,)]
    heads["middle"] = torch_like.nn.ReLU()
    assert list(heads.keys()) == ["left", "right", "middle"] and isinstance(heads.pop("right"), torch_like.nn.Linear)
    scales.append(torch_like.zeros(1))
    extra.update({"bias": torch_like.ones(3)})
    assert [k for k, _ in ours.named_parameters()][-3:] == ["scales.2", "extra.shift", "extra.bias"]
    with pytest.raises(IndexError, match="index 3 is out of range"):
        scales[3]
    with pytest.raises(RuntimeError, match="ParameterList should not be called."):
        scales(1)
    with pytest.raises(TypeError, match="int is not a Module subclass"):
        heads["bad"] = 3


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, 3])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(torch_like, oracle, norm_type, max_norm):
    def clipped(m):
        rng = np.random.default_rng(0)
        params = [m.nn.Parameter(m.tensor(rng.standard_normal(shape))) for shape in [(3, 4), (4,), (2,)]]
        for p in params[:2]:
            p.grad = m.tensor(rng.standard_normal(tuple(p.shape)) * 3)
        total = m.nn.utils.clip_grad_norm_(iter(params), max_norm, norm_type=norm_type)
        return float(total), [values(p.grad) for p in params[:2]], params[2].grad

    total, grads, untouched = clipped(torch_like)
    want_total, want_grads, _ = clipped(oracle)
    assert untouched is None and abs(total - want_total) <= 1e-12 * want_total
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, **EXACT)


def test_clip_grad_value_vectors_and_clipping_errors_as_torch(torch_like, oracle):
    def program(m):
        rng = np.random.default_rng(1)
        params = [m.nn.Parameter(m.tensor(rng.standard_normal(shape))) for shape in [(2, 3), (3,)]]
        params[0].grad = m.tensor(rng.standard_normal((2, 3)))
        m.nn.utils.clip_grad_value_(params, 0.4)
        vector = m.nn.utils.parameters_to_vector(params)
        m.nn.utils.vector_to_parameters(vector * 2 + 1, params)
        return [values(params[0].grad), values(vector), *(values(p) for p in params)]

    for got, want in zip(program(torch_like), program(oracle), strict=True):
        np.testing.assert_allclose(got, want, **EXACT)
    p = torch_like.nn.Parameter(torch_like.ones(2))
    p.grad = torch_like.tensor([1.0, math.inf])
    with pytest.raises(RuntimeError, match="The total norm of order 2.0 for gradients from `parameters` is non-finite"):
        torch_like.nn.utils.clip_grad_norm_(p, 1.0, error_if_nonfinite=True)
    with pytest.warns(UserWarning, match="`parameters` is an empty generator, no gradient clipping will occur."):
        assert float(torch_like.nn.utils.clip_grad_norm_((q for q in []), 1.0)) == 0.0
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        torch_like.nn.utils.vector_to_parameters([1.0], [p])


PLATEAU = [
    dict(),
    dict(patience=1, factor=0.5, threshold=0.05),
    dict(patience=0, cooldown=2, factor=0.5, min_lr=[0.02, 0.1]),
    dict(mode="max", threshold_mode="abs", threshold=0.1, patience=1, eps=0.3),
]


@pytest.mark.parametrize("options", PLATEAU, ids=[str(o) for o in PLATEAU])
def test_reduce_lr_on_plateau_follows_the_metric_as_torch_does(oracle, options):
    metrics = [5.0, 4.0, 4.0, 4.0, 3.99, 4.0, 4.2, 4.0, 4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]

    def run(m, resume_at=None):
        p, q = m.nn.Parameter(m.ones(1)), m.nn.Parameter(m.ones(1))
        optimizer = m.optim.SGD([{"params": [p]}, {"params": [q], "lr": 0.5}], lr=0.1)
        scheduler = m.optim.lr_scheduler.ReduceLROnPlateau(optimizer, **options)
        seen = []
        for i, metric in enumerate(metrics):
            if i == resume_at:
                saved = scheduler.state_dict()
                scheduler = m.optim.lr_scheduler.ReduceLROnPlateau(optimizer, **options)
                scheduler.load_state_dict(saved)
            optimizer.step()
            scheduler.step(metric)
            seen.append(scheduler.get_last_lr())
        return seen, scheduler

    want, theirs = run(oracle)
    for m in (base.engine, base.client):
        got, scheduler = run(m)
        assert got == want and set(scheduler.state_dict()) == set(theirs.state_dict())
        assert run(m, resume_at=7)[0] == want
    with pytest.raises(ValueError, match="Factor should be < 1.0."):
        base.engine.optim.lr_scheduler.ReduceLROnPlateau(base.engine.optim.SGD([base.engine.ones(1)]), factor=1.0)


def test_one_cycle_cycles_adams_beta1_and_closed_forms_as_torch(oracle):
    def run(m):
        p = m.nn.Parameter(m.ones(1))
        optimizer = m.optim.Adam([p], lr=0.1, betas=(0.9, 0.99))
        scheduler = m.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.5, total_steps=8)
        seen = []
        for _ in range(8):
            optimizer.step()
            scheduler.step()
            seen.append((scheduler.get_last_lr(), optimizer.param_groups[0]["betas"]))
        cosine = m.optim.lr_scheduler.CosineAnnealingLR(m.optim.SGD([p], lr=1.0), T_max=5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cosine.step(7)
        return seen + [cosine.get_last_lr()]

    want = run(oracle)
    for m in (base.engine, base.client):
        assert run(m) == want
    with pytest.raises(ValueError, match="Tried to step 3 times. The specified number of total steps is 2"):
        opt = base.engine.optim.SGD([base.engine.ones(1)], lr=0.1)
        scheduler = base.engine.optim.lr_scheduler.OneCycleLR(opt, 1.0, total_steps=2)
        for _ in range(3):
            scheduler.step()


# --- a tutorial's training loop ---------------------------------------------------------------------------


def cifar_program(torch, model_state, optimizer_name):
    """A CIFAR-10 tutorial's loop in miniature: a conv net with batch norm, cross entropy, an optimizer with a
    scheduler and gradient clipping, 3 steps; prints each step's loss and lr."""
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 10),
    ).double()
    model.load_state_dict({k: torch.tensor(v) for k, v in model_state.items()})
    rng = np.random.default_rng(3)
    criterion = nn.CrossEntropyLoss()
    if optimizer_name == "SGD":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=3)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.02, total_steps=3)
    model.train()
    for step in range(3):
        inputs = torch.tensor(rng.standard_normal((6, 3, 8, 8)))
        labels = torch.tensor(rng.integers(0, 10, 6))
        optimizer.zero_grad()
        loss = criterion(model(inputs), labels)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        scheduler.step()
        print(f"step {step}  loss {loss.item():.12f}  norm {norm.item():.9f}  lr {scheduler.get_last_lr()[0]:.9f}")
    model.eval()
    with torch.no_grad():
        print(f"eval {model(inputs).sum().item():.9f}")
    return model


@pytest.mark.parametrize("optimizer_name", ["SGD", "Adam"])
def test_a_cifar_tutorial_loop_prints_torch_losses(torch_like, oracle, optimizer_name):
    rng = np.random.default_rng(0)
    shapes = {
        k: tuple(v.shape)
        for k, v in oracle.nn.Sequential(
            oracle.nn.Conv2d(3, 4, 3, padding=1),
            oracle.nn.BatchNorm2d(4),
            oracle.nn.ReLU(),
            oracle.nn.MaxPool2d(2),
            oracle.nn.Flatten(),
            oracle.nn.Linear(64, 10),
        )
        .state_dict()
        .items()
    }
    state = {k: (rng.uniform(-0.3, 0.3, s) if s else np.array(0)) for k, s in shapes.items()}
    got = base.printed(lambda torch: cifar_program(torch, state, optimizer_name), torch_like)
    want = base.printed(lambda torch: cifar_program(torch, state, optimizer_name), oracle)
    assert got.count("loss") == 3
    for mine, theirs in zip(got.split(), want.split(), strict=True):
        if mine != theirs:
            assert abs(float(mine) - float(theirs)) <= 1e-9, (got, want)

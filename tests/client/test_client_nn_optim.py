"""`torch.nn` modules, `torch.nn.init` and `torch.optim` (issue 22) through the engine, the embedded client
and a live server (the `torch_like` fixture), against PyTorch in float64: each module's forward, parameter
gradients and buffers; each optimizer's parameters over 5 steps across its options; state_dict round
trips; the schedulers' learning rates (their momenta); an nn.Module MLP trained with AdamW and StepLR printing PyTorch's
losses; what a training step costs in requests; and the names that are missing."""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np
import pytest

import client
import engine

EXACT = dict(rtol=1e-12, atol=1e-12)


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def values(v):
    return np.asarray(v.detach().numpy())


def copy_into(theirs, ours, oracle):
    """PyTorch's module `theirs` given the parameters and buffers of gradserve's `ours`."""
    theirs.load_state_dict({k: oracle.tensor(values(v)) for k, v in ours.state_dict().items()})


# --- modules: forward, parameter gradients, buffers -------------------------------------------------------


def _mlp(m):
    nn = m.nn
    return nn.Sequential(
        nn.Linear(4, 8),
        nn.ReLU(),
        nn.Linear(8, 8),
        nn.Tanh(),
        nn.Linear(8, 6),
        nn.Sigmoid(),
        nn.Linear(6, 3),
        nn.GELU(),
    )


def _floats(*shape):
    return lambda rng: rng.standard_normal(shape)


def _classes(n, classes):
    return lambda rng: rng.integers(0, classes, n)


def _uniform(*shape):
    return lambda rng: rng.uniform(0.05, 0.95, shape)


def _activations(m):
    nn = m.nn
    return nn.Sequential(
        nn.Linear(4, 6),
        nn.LeakyReLU(0.2),
        nn.Linear(6, 6),
        nn.ELU(0.5),
        nn.Linear(6, 6),
        nn.SiLU(),
        nn.Linear(6, 5),
        nn.Softplus(2.0, 1.0),
    )


# name -> (module builder on a package, input makers, train mode)
MODULES = {
    "linear": (lambda m: m.nn.Linear(4, 3), [_floats(5, 4)], True),
    "linear without bias": (lambda m: m.nn.Linear(4, 3, bias=False), [_floats(2, 5, 4)], True),
    "mlp of every activation": (_mlp, [_floats(5, 4)], True),
    "gelu tanh": (lambda m: m.nn.Sequential(m.nn.Linear(3, 4), m.nn.GELU("tanh")), [_floats(5, 3)], True),
    "layer norm": (lambda m: m.nn.LayerNorm(4), [_floats(5, 4)], True),
    "layer norm of 2 dims": (lambda m: m.nn.LayerNorm((3, 4), eps=1e-3), [_floats(2, 3, 4)], True),
    "layer norm without bias": (lambda m: m.nn.LayerNorm(4, bias=False), [_floats(5, 4)], True),
    "batch norm training": (lambda m: m.nn.BatchNorm1d(4), [_floats(6, 4)], True),
    "batch norm of 3d input": (lambda m: m.nn.BatchNorm1d(4, momentum=0.3), [_floats(5, 4, 3)], True),
    "batch norm cumulative": (lambda m: m.nn.BatchNorm1d(4, momentum=None), [_floats(6, 4)], True),
    "batch norm eval": (lambda m: m.nn.BatchNorm1d(4), [_floats(6, 4)], False),
    "batch norm untracked": (
        lambda m: m.nn.BatchNorm1d(4, affine=False, track_running_stats=False),
        [_floats(6, 4)],
        True,
    ),
    "embedding": (lambda m: m.nn.Embedding(10, 3, padding_idx=1), [lambda rng: rng.integers(0, 10, (2, 5))], True),
    "dropout in eval": (lambda m: m.nn.Sequential(m.nn.Linear(4, 3), m.nn.Dropout(0.3)), [_floats(5, 4)], False),
    "cross entropy": (lambda m: m.nn.CrossEntropyLoss(label_smoothing=0.1), [_floats(6, 5), _classes(6, 5)], True),
    "cross entropy weighted sum": (
        lambda m: m.nn.CrossEntropyLoss(weight=m.tensor(np.linspace(0.5, 2.0, 5)), reduction="sum"),
        [_floats(6, 5), _classes(6, 5)],
        True,
    ),
    "nll ignore index": (lambda m: m.nn.NLLLoss(ignore_index=2), [_floats(6, 5), _classes(6, 5)], True),
    "mse none": (lambda m: m.nn.MSELoss(reduction="none"), [_floats(4, 3), _floats(4, 3)], True),
    "batch norm 2d training": (lambda m: m.nn.BatchNorm2d(3), [_floats(4, 3, 5, 5)], True),
    "batch norm 2d cumulative eval": (lambda m: m.nn.BatchNorm2d(3, momentum=None), [_floats(2, 3, 4, 4)], False),
    "batch norm 3d": (lambda m: m.nn.BatchNorm3d(2, affine=False), [_floats(3, 2, 3, 3, 3)], True),
    "activations": (_activations, [_floats(5, 4)], True),
    "softmax": (lambda m: m.nn.Sequential(m.nn.Linear(4, 5), m.nn.Softmax(dim=1)), [_floats(3, 4)], True),
    "log softmax": (lambda m: m.nn.Sequential(m.nn.Linear(4, 5), m.nn.LogSoftmax(-1)), [_floats(2, 3, 4)], True),
    "bce weighted": (
        lambda m: m.nn.BCELoss(weight=m.tensor(np.linspace(0.5, 2.0, 3))),
        [_uniform(4, 3), _uniform(4, 3)],
        True,
    ),
    "bce with logits pos_weight": (
        lambda m: m.nn.BCEWithLogitsLoss(pos_weight=m.tensor(np.linspace(0.5, 2.0, 3)), reduction="sum"),
        [_floats(4, 3), _uniform(4, 3)],
        True,
    ),
    "l1": (lambda m: m.nn.L1Loss(), [_floats(4, 3), _floats(4, 3)], True),
    "smooth l1 beta": (lambda m: m.nn.SmoothL1Loss(beta=0.5, reduction="none"), [_floats(4, 3), _floats(4, 3)], True),
    "huber delta": (lambda m: m.nn.HuberLoss(delta=0.7), [_floats(4, 3), _floats(4, 3)], True),
    "adaptive avg pool 1d": (lambda m: m.nn.AdaptiveAvgPool1d(3), [_floats(2, 3, 7)], True),
    "unflatten": (lambda m: m.nn.Sequential(m.nn.Linear(4, 6), m.nn.Unflatten(-1, (2, 3))), [_floats(5, 4)], True),
}


def build_module(m, name, table=MODULES):
    m.manual_seed(0)
    return table[name][0](m).double()


def run_module(m, name, module, table=MODULES):
    """(output, {parameter (and input): gradient}, {buffer: value}) of `module`, table[name]'s, on package `m`."""
    _, makers, train = table[name]
    rng = np.random.default_rng(1)
    arrays = [make(rng) for make in makers]
    module.train(train)
    inputs = [m.tensor(a, requires_grad=i == 0 and a.dtype.kind == "f") for i, a in enumerate(arrays)]
    out = module(*inputs)
    cotangent = np.random.default_rng(2).standard_normal(tuple(out.shape))
    (out * m.tensor(cotangent)).sum().backward()
    grads = {k: values(p.grad) for k, p in module.named_parameters()}
    if inputs[0].requires_grad:
        grads["input"] = values(inputs[0].grad)
    return values(out), grads, {k: values(b) for k, b in module.named_buffers()}


def module_matches_torch(torch_like, oracle, name, table=MODULES):
    """table[name]'s module on `torch_like` and on PyTorch (given its state_dict): the same repr, output,
    gradients and buffers."""
    ours, theirs = build_module(torch_like, name, table), build_module(oracle, name, table)
    copy_into(theirs, ours, oracle)
    assert repr(ours) == repr(theirs)
    out, grads, buffers = run_module(torch_like, name, ours, table)
    want_out, want_grads, want_buffers = run_module(oracle, name, theirs, table)
    np.testing.assert_allclose(out, want_out, **EXACT)
    assert sorted(grads) == sorted(want_grads)
    for key in grads:
        np.testing.assert_allclose(grads[key], want_grads[key], **EXACT, err_msg=key)
    assert sorted(buffers) == sorted(want_buffers)
    for key in buffers:
        np.testing.assert_allclose(buffers[key], want_buffers[key], **EXACT, err_msg=key)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_matches_torch(torch_like, oracle, name):
    module_matches_torch(torch_like, oracle, name)


def test_module_reprs_match_torch(oracle):
    def every_module(m):
        nn = m.nn
        return nn.Sequential(
            nn.Linear(2, 3),
            nn.ReLU(),
            nn.GELU(),
            nn.Dropout(),
            nn.LayerNorm(4),
            nn.BatchNorm1d(3),
            nn.Embedding(10, 3, padding_idx=0),
            nn.CrossEntropyLoss(),
            nn.MSELoss(),
            nn.NLLLoss(),
            nn.Tanh(),
            nn.Sigmoid(),
            nn.Sequential(nn.Linear(3, 1, bias=False), nn.ReLU(inplace=True)),
            nn.BatchNorm2d(3, momentum=None),
            nn.BatchNorm3d(2, affine=False),
            *(nn.LeakyReLU(0.2, inplace=True), nn.ELU(), nn.SiLU(), nn.Softplus(beta=2.0)),
            *(nn.Softmax(dim=1), nn.LogSoftmax(), nn.BCELoss(), nn.BCEWithLogitsLoss(pos_weight=m.ones(2))),
            *(nn.L1Loss(), nn.SmoothL1Loss(beta=0.5), nn.HuberLoss(delta=2.0), nn.AdaptiveAvgPool1d(4)),
            nn.Unflatten(1, (2, 3)),
            nn.ModuleDict({"a": nn.Linear(2, 3), "b": nn.ReLU()}),
            nn.ParameterList([nn.Parameter(m.ones(2)), m.ones(2, 3, dtype=m.float64)]),
            nn.ParameterDict({"x": nn.Parameter(m.ones(2))}),
        )

    for m in (engine, client):
        assert repr(every_module(m)) == repr(every_module(oracle))
        assert str(m.nn.Parameter(m.ones(2))) == str(oracle.nn.Parameter(oracle.ones(2)))


class Net:
    """A module written the way tutorials write them: layers and a raw Parameter assigned in __init__."""

    @staticmethod
    def build(m):
        class TwoLayer(m.nn.Module):
            def __init__(self):
                super().__init__()
                self.hidden = m.nn.Linear(3, 4)
                self.norm = m.nn.BatchNorm1d(4)
                self.out = m.nn.Linear(4, 2)
                self.scale = m.nn.Parameter(m.ones(2))
                self.register_buffer("calls", m.zeros(1))
                self.register_buffer("scratch", m.zeros(1), persistent=False)
                self.note = "plain attribute"

            def forward(self, x):
                return self.out(self.norm(self.hidden(x)).relu()) * self.scale

        return TwoLayer()


def test_module_registration_and_traversal_match_torch(torch_like, oracle):
    ours, theirs = Net.build(torch_like), Net.build(oracle)
    assert [k for k, _ in ours.named_parameters()] == [k for k, _ in theirs.named_parameters()]
    assert [k for k, _ in ours.named_buffers()] == [k for k, _ in theirs.named_buffers()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [k for k, _ in ours.named_children()] == [k for k, _ in theirs.named_children()]
    assert [k for k, _ in ours.named_modules()] == [k for k, _ in theirs.named_modules()]
    assert len(list(ours.parameters())) == 7 and all(p.requires_grad for p in ours.parameters())
    assert isinstance(ours.scale, torch_like.nn.Parameter) and isinstance(ours.scale, torch_like.Variable)
    assert isinstance(ours.hidden, torch_like.nn.Module) and ours.note == "plain attribute"
    assert ours.training and ours.norm.training
    ours.eval()
    assert not ours.training and not ours.norm.training and not ours.hidden.training
    ours.train()
    assert ours.norm.training
    with pytest.raises(TypeError, match="cannot assign 'Variable' as parameter 'scale'"):
        ours.scale = torch_like.ones(2)
    del ours.note
    with pytest.raises(AttributeError, match="'TwoLayer' object has no attribute 'note'"):
        ours.note  # noqa: B018


def test_zero_grad_train_eval_and_dtype_conversion(torch_like):
    torch = torch_like
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    assert model[0].weight.dtype == np.float32 and model[1].running_mean.dtype == np.float32
    weight = model[0].weight
    model.double()
    assert model[0].weight is weight and weight.dtype == np.float64 and model[1].running_var.dtype == np.float64
    assert model[1].num_batches_tracked.dtype == np.int64
    model(torch.randn(4, 3, dtype=torch.float64)).sum().backward()
    assert weight.grad is not None
    model.zero_grad(set_to_none=False)
    assert np.all(values(weight.grad) == 0)
    model.zero_grad()
    assert weight.grad is None
    model.float()
    assert weight.dtype == np.float32 and weight.requires_grad and weight.is_leaf
    assert len(model) == 2 and isinstance(model[-1], torch.nn.BatchNorm1d) and len(model[:1]) == 1
    assert [type(layer).__name__ for layer in model] == ["Linear", "BatchNorm1d"]


def test_load_state_dict_copies_in_place_and_refuses_like_torch(torch_like, oracle):
    torch = torch_like
    torch.manual_seed(0)
    source, target = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    weight = target.weight
    result = target.load_state_dict(source.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert target.weight is weight and weight.requires_grad
    np.testing.assert_array_equal(values(weight), values(source.weight))
    with torch.no_grad():
        source.weight.add_(1.0)
    assert not np.array_equal(values(weight), values(source.weight))  # a copy, not the same storage
    bad = {"weight": np.ones((2, 2)), "extra": np.zeros(1)}
    want = None
    try:
        oracle.nn.Linear(3, 2).load_state_dict({k: oracle.tensor(v) for k, v in bad.items()})
    except RuntimeError as err:
        want = str(err)
    with pytest.raises(RuntimeError) as got:
        target.load_state_dict({k: torch.tensor(v) for k, v in bad.items()})
    assert str(got.value) == want
    loose = target.load_state_dict({"weight": torch.zeros(2, 3)}, strict=False)
    assert loose.missing_keys == ["bias"] and np.all(values(target.weight) == 0)


# --- nn.init --------------------------------------------------------------------------------------------


def test_init_follows_torch_formulas(torch_like, oracle):
    torch = torch_like
    init, their_init = torch.nn.init, oracle.nn.init
    for name in ("linear", "sigmoid", "tanh", "relu", "selu", "conv2d"):
        assert init.calculate_gain(name) == their_init.calculate_gain(name)
    assert init.calculate_gain("leaky_relu", 0.2) == their_init.calculate_gain("leaky_relu", 0.2)
    with pytest.raises(ValueError, match="Unsupported nonlinearity gelu"):
        init.calculate_gain("gelu")
    torch.manual_seed(0)
    w = torch.empty(200, 300, dtype=torch.float64, requires_grad=True)
    fan_in, fan_out = 300, 200
    bounds = {
        "kaiming_uniform_": math.sqrt(3) * math.sqrt(2 / (1 + 5)) / math.sqrt(fan_in),  # a=sqrt(5) as Linear
        "xavier_uniform_": math.sqrt(6 / (fan_in + fan_out)),
        "uniform_": 0.25,
    }
    init.kaiming_uniform_(w, a=math.sqrt(5))
    assert w.is_leaf and w.requires_grad
    for name, bound in bounds.items():
        if name == "xavier_uniform_":
            init.xavier_uniform_(w)
        elif name == "uniform_":
            init.uniform_(w, -0.25, 0.25)
        array = values(w)
        assert np.abs(array).max() <= bound and np.abs(array).max() > 0.99 * bound, name
    stds = {"kaiming_normal_": math.sqrt(2 / fan_in), "xavier_normal_": math.sqrt(2 / (fan_in + fan_out))}
    for name, std in stds.items():
        getattr(init, name)(w)
        assert abs(values(w).std() / std - 1) < 0.02, name
    init.normal_(w, 3.0, 0.5)
    assert abs(values(w).mean() - 3.0) < 0.01 and abs(values(w).std() - 0.5) < 0.01
    for fill, want in ((init.zeros_, 0.0), (init.ones_, 1.0), (lambda t: init.constant_(t, 0.3), 0.3)):
        fill(w)
        assert np.all(values(w) == want)
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_uniform_(w, mode="fan_avg")
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(torch.empty(3))


def test_linear_default_init_bounds_and_seeding(torch_like):
    torch = torch_like
    torch.manual_seed(3)
    layer = torch.nn.Linear(50, 40)
    bound = 1 / math.sqrt(50)  # kaiming_uniform_(a=sqrt(5)) gives the weight the bias's bound
    for p in (layer.weight, layer.bias):
        assert np.abs(values(p)).max() <= bound and np.abs(values(p)).max() > 0.9 * bound
    torch.manual_seed(3)
    again = torch.nn.Linear(50, 40)
    np.testing.assert_array_equal(values(again.weight), values(layer.weight))
    embedding = torch.nn.Embedding(20, 4, padding_idx=-1)
    assert embedding.padding_idx == 19 and np.all(values(embedding.weight)[19] == 0)
    assert abs(values(embedding.weight)[:19].std() - 1) < 0.3


# --- optimizers -----------------------------------------------------------------------------------------

OPTIMIZERS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    ("Adam", dict()),
    ("Adam", dict(lr=0.1, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1, amsgrad=True)),
    ("Adam", dict(lr=0.1, maximize=True)),
    ("AdamW", dict(lr=0.1)),
    ("AdamW", dict(lr=0.1, weight_decay=0.3, amsgrad=True, betas=(0.5, 0.6))),
    ("RMSprop", dict()),
    ("RMSprop", dict(lr=0.01, alpha=0.9, eps=1e-4, weight_decay=0.1, momentum=0.9, centered=True)),
    ("RMSprop", dict(lr=0.01, centered=True, maximize=True)),
    ("Adagrad", dict()),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.2, eps=1e-6)),
    ("Adagrad", dict(lr=0.1, maximize=True)),
]


def least_squares(m, name, options, steps=5, state=None):
    """Parameters after each step of optimizer `name` on a least-squares problem (two groups: the bias's
    with its own lr), and the optimizer."""
    rng = np.random.default_rng(0)
    w = m.nn.Parameter(m.tensor(rng.standard_normal((3, 4))))
    b = m.nn.Parameter(m.tensor(rng.standard_normal(3)))
    x, y = m.tensor(rng.standard_normal((5, 4))), m.tensor(rng.standard_normal((5, 3)))
    optimizer = getattr(m.optim, name)([{"params": [w]}, {"params": [b], "lr": 0.05}], **options)
    if state is not None:
        optimizer.load_state_dict(state)
    trace = []
    for _ in range(steps):
        optimizer.zero_grad()
        ((x @ w.t() + b - y) ** 2).mean().backward()
        optimizer.step()
        trace.append(np.concatenate([values(w).ravel(), values(b).ravel()]))
    return np.array(trace), optimizer


@pytest.mark.parametrize(
    "name, options", OPTIMIZERS, ids=[f"{n}-{'-'.join(map(str, o.items())) or 'defaults'}" for n, o in OPTIMIZERS]
)
def test_optimizer_steps_match_torch(torch_like, oracle, name, options):
    got, optimizer = least_squares(torch_like, name, options)
    want, theirs = least_squares(oracle, name, options)
    np.testing.assert_allclose(got, want, **EXACT)
    assert optimizer.defaults == theirs.defaults
    assert repr(optimizer) == repr(theirs)
    ours_state, their_state = optimizer.state_dict(), theirs.state_dict()
    assert ours_state["param_groups"] == their_state["param_groups"]
    assert list(ours_state["state"]) == list(their_state["state"])
    for index, entries in their_state["state"].items():
        assert list(ours_state["state"][index]) == list(entries)
        for key, value in entries.items():
            mine = ours_state["state"][index][key]
            assert np.asarray(mine).dtype == value.numpy().dtype, key
            np.testing.assert_allclose(values(mine), value.numpy(), **EXACT, err_msg=key)


@pytest.mark.parametrize(
    "name, options",
    [OPTIMIZERS[1], OPTIMIZERS[4], OPTIMIZERS[9], OPTIMIZERS[12]],
    ids=["SGD", "Adam", "RMSprop", "Adagrad"],
)
def test_optimizer_state_dict_round_trip_resumes_exactly(torch_like, name, options):
    straight, _ = least_squares(torch_like, name, options, steps=5)
    first, optimizer = least_squares(torch_like, name, options, steps=3)
    saved = optimizer.state_dict()
    resumed, _ = least_squares_from(torch_like, name, options, first[-1], saved)
    np.testing.assert_allclose(np.concatenate([first, resumed]), straight, **EXACT)


def least_squares_from(m, name, options, start, state):
    """Two more steps of least_squares, from parameters `start` and optimizer state `state`."""
    rng = np.random.default_rng(0)
    rng.standard_normal((3, 4)), rng.standard_normal(3)
    w = m.nn.Parameter(m.tensor(start[:12].reshape(3, 4)))
    b = m.nn.Parameter(m.tensor(start[12:]))
    x, y = m.tensor(rng.standard_normal((5, 4))), m.tensor(rng.standard_normal((5, 3)))
    optimizer = getattr(m.optim, name)([{"params": [w]}, {"params": [b], "lr": 0.05}], **options)
    optimizer.load_state_dict(state)
    trace = []
    for _ in range(2):
        optimizer.zero_grad()
        ((x @ w.t() + b - y) ** 2).mean().backward()
        optimizer.step()
        trace.append(np.concatenate([values(w).ravel(), values(b).ravel()]))
    return np.array(trace), optimizer


def test_optimizer_bookkeeping_like_torch(torch_like, oracle):
    torch = torch_like
    a, b, c = (torch.nn.Parameter(torch.ones(2)) for _ in range(3))
    optimizer = torch.optim.SGD([a], lr=0.1, momentum=0.5)
    optimizer.add_param_group({"params": b, "lr": 0.01})
    assert [g["lr"] for g in optimizer.param_groups] == [0.1, 0.01]
    assert optimizer.param_groups[1]["momentum"] == 0.5
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter group"):
        optimizer.add_param_group({"params": [a]})
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        torch.optim.Adam([])
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        torch.optim.Adam([a * 2])
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1: 1.5"):
        torch.optim.Adam([c], betas=(0.9, 1.5))
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero dampening"):
        torch.optim.SGD([c], nesterov=True)
    with pytest.raises(TypeError, match="params argument given to the optimizer should be an iterable"):
        torch.optim.SGD(c)
    (a.sum() + b.sum()).backward()
    optimizer.step()
    assert c.grad is None and optimizer.state[a]["momentum_buffer"] is not None and c not in optimizer.state
    optimizer.zero_grad(set_to_none=False)
    assert np.all(values(a.grad) == 0)
    optimizer.zero_grad()
    assert a.grad is None and b.grad is None
    closure_calls = []

    def closure():
        closure_calls.append(torch.is_grad_enabled())
        optimizer.zero_grad()
        loss = (a * a).sum()
        loss.backward()
        return loss

    with torch.no_grad():
        loss = optimizer.step(closure)
    assert closure_calls == [True] and float(loss) > 0


# --- schedulers -----------------------------------------------------------------------------------------


def lr_sequence(m, make, epochs=10):
    p, q = m.nn.Parameter(m.ones(1)), m.nn.Parameter(m.ones(1))
    optimizer = m.optim.SGD([{"params": [p]}, {"params": [q], "lr": 0.5}], lr=0.1)
    scheduler = make(m.optim.lr_scheduler, optimizer)
    seen = [scheduler.get_last_lr()]
    for _ in range(epochs):
        optimizer.step()
        scheduler.step()
        seen.append(scheduler.get_last_lr())
    return seen, [g["lr"] for g in optimizer.param_groups], scheduler


SCHEDULERS = {
    "StepLR": lambda s, o: s.StepLR(o, step_size=3, gamma=0.5),
    "StepLR default gamma": lambda s, o: s.StepLR(o, 4),
    "LambdaLR": lambda s, o: s.LambdaLR(o, lambda epoch: 0.95**epoch),
    "LambdaLR per group": lambda s, o: s.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: 1.0 + e]),
    "MultiplicativeLR": lambda s, o: s.MultiplicativeLR(o, lambda epoch: 0.9 if epoch % 2 else 1.05),
    "MultiStepLR": lambda s, o: s.MultiStepLR(o, milestones=[2, 5, 5, 8], gamma=0.5),
    "ExponentialLR": lambda s, o: s.ExponentialLR(o, gamma=0.8),
    "LinearLR": lambda s, o: s.LinearLR(o, start_factor=0.25, total_iters=4),
    "LinearLR decaying": lambda s, o: s.LinearLR(o, 0.9, 0.1, 12),
    "CosineAnnealingLR": lambda s, o: s.CosineAnnealingLR(o, T_max=4, eta_min=0.01),
    "OneCycleLR": lambda s, o: s.OneCycleLR(o, max_lr=[1.0, 2.0], total_steps=10),
    "OneCycleLR three phases linear": lambda s, o: s.OneCycleLR(
        o, 1.0, epochs=2, steps_per_epoch=6, pct_start=0.25, anneal_strategy="linear", three_phase=True
    ),
}


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_scheduler_learning_rates_match_torch(oracle, name):
    for m in (engine, client):
        got, got_groups, scheduler = lr_sequence(m, SCHEDULERS[name])
        want, want_groups, theirs = lr_sequence(oracle, SCHEDULERS[name])
        assert got == want and got_groups == want_groups
        assert scheduler.last_epoch == theirs.last_epoch == 10
        assert scheduler.base_lrs == theirs.base_lrs
        state = scheduler.state_dict()
        assert set(state) == set(theirs.state_dict())
        momenta = [g["momentum"] for g in scheduler.optimizer.param_groups]
        assert momenta == [g["momentum"] for g in theirs.optimizer.param_groups]  # (OneCycleLR cycles them)


# --- a training program ---------------------------------------------------------------------------------


def mlp_adamw_program(torch, epochs=8):
    """An nn.Module MLP trained with AdamW and a StepLR schedule, printing its loss and lr each epoch; the
    weights start from NumPy draws (loaded through load_state_dict) so PyTorch starts from them too."""
    rng = np.random.default_rng(0)

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = torch.nn.Linear(4, 16)
            self.norm = torch.nn.LayerNorm(16)
            self.out = torch.nn.Linear(16, 3)

        def forward(self, x):
            return self.out(torch.nn.functional.gelu(self.norm(self.hidden(x))))

    model = MLP().double()
    model.load_state_dict(
        {k: torch.tensor(rng.uniform(-0.5, 0.5, tuple(v.shape))) for k, v in model.state_dict().items()}
    )
    x = torch.tensor(rng.standard_normal((32, 4)))
    y = torch.tensor(rng.integers(0, 3, 32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(epochs):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        print(f"epoch {epoch}  loss {loss.item():.12f}  lr {scheduler.get_last_lr()[0]:.5f}")
    model.eval()
    with torch.no_grad():
        accuracy = (model(x).argmax(dim=1) == y).double().mean().item()
    print(f"accuracy {accuracy:.4f}")


def printed(program, torch) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        program(torch)
    return out.getvalue()


def test_mlp_with_adamw_and_steplr_prints_torch_losses(torch_like, oracle):
    got, want = printed(mlp_adamw_program, torch_like), printed(mlp_adamw_program, oracle)
    assert got == want
    assert got.count("loss") == 8 and "lr 0.01250" in got


def test_a_remote_training_step_is_one_backward_and_one_forward(server):
    with client.connect(server.url) as session:
        torch = client
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).double()
        assert not session.stats  # initialising parameters sends nothing
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
        x, y = torch.randn(8, 4, dtype=torch.float64), torch.randint(0, 3, (8,))
        losses = []
        for step in range(1, 4):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())  # the /backward's answer carried it
            assert dict(session.stats) == {"/backward": step, "/forward": step}
        assert losses[2] < losses[0]


def test_an_embedded_optimizer_step_sends_nothing_and_records_no_graph():
    with client.connect() as session:
        torch = client
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        model(torch.randn(4, 3)).sum().backward()
        weight = model.weight
        optimizer.step()
        assert dict(session.stats) == {"/backward": 1}  # the step was computed at once, in-process
        assert model.weight is weight and weight.is_leaf and weight.requires_grad
        assert optimizer.state[weight]["exp_avg"].grad_fn is None


# --- missing names --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["nn.FractionalMaxPool2d", "nn.LazyConv2d", "nn.utils.skip_init", "optim.SparseAdam"],
)
def test_missing_names_raise_not_implemented_naming_them(path):
    for package in (engine, client):
        owner_path, _, name = path.rpartition(".")
        owner = package
        for part in owner_path.split("."):
            owner = getattr(owner, part)
        with pytest.raises(NotImplementedError, match=f"torch.{path} is not provided by gradserve"):
            getattr(owner, name)
        assert not hasattr(owner, name)


def batchnorm_training(m, model=None, steps=4):
    """A Linear-BatchNorm-ReLU-Linear net trained by SGD with momentum: its state_dict after each step."""
    if model is None:
        m.manual_seed(0)
        model = m.nn.Sequential(m.nn.Linear(4, 8), m.nn.BatchNorm1d(8), m.nn.ReLU(), m.nn.Linear(8, 2)).double()
    rng = np.random.default_rng(5)
    x, y = m.tensor(rng.standard_normal((16, 4))), m.tensor(rng.standard_normal((16, 2)))
    optimizer = m.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    states = []
    for _ in range(steps):
        optimizer.zero_grad()
        m.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        states.append({k: values(v).copy() for k, v in model.state_dict().items()})  # PyTorch's alias the model
    return states, model


def test_batchnorm_running_statistics_train_like_torch_and_ride_the_step_request(torch_like, oracle):
    torch_like.manual_seed(0)
    start = torch_like.nn.Sequential(
        torch_like.nn.Linear(4, 8), torch_like.nn.BatchNorm1d(8), torch_like.nn.ReLU(), torch_like.nn.Linear(8, 2)
    ).double()
    theirs = oracle.nn.Sequential(
        oracle.nn.Linear(4, 8), oracle.nn.BatchNorm1d(8), oracle.nn.ReLU(), oracle.nn.Linear(8, 2)
    )
    theirs = theirs.double()
    copy_into(theirs, start, oracle)
    session = client.current_session() if torch_like is client else None
    got, model = batchnorm_training(torch_like, start)
    if session is not None:  # the running statistics were computed with each step's parameters
        assert dict(session.stats) == {"/backward": 4, "/forward": 4}
        model[1].running_mean.numpy(), model[1].num_batches_tracked.item()
        assert dict(session.stats) == {"/backward": 4, "/forward": 4}  # their values are at hand
    want, _ = batchnorm_training(oracle, theirs)
    for step, (mine, their) in enumerate(zip(got, want)):
        assert list(mine) == list(their)
        for key in mine:
            np.testing.assert_allclose(mine[key], their[key], **EXACT, err_msg=f"step {step}: {key}")

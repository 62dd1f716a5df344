"""torch.nn.utils.prune as PyTorch's pruning tutorial uses it, on the engine, the embedded client and a live server
(`torch_like`), against PyTorch: the deterministic methods' masks, pruned values, state_dict keys and the gradients
of `weight_orig`; iterative pruning through a PruningContainer; global pruning; remove; the random methods by the
counts they prune; torch's errors; a pruned LeNet trained a few steps."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import engine
from tests.client.test_client_nn_optim import values

W = np.random.default_rng(7).standard_normal((6, 4))
B = np.random.default_rng(8).standard_normal(6)
X = np.random.default_rng(9).standard_normal((3, 4))


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def _prune(t):
    return importlib.import_module(f"{t.__name__}.nn.utils.prune")


def _linear(t, weight=W, bias=B):
    module = t.nn.Linear(weight.shape[1], weight.shape[0]).double()
    with t.no_grad():
        module.weight.copy_(t.tensor(weight))
        module.bias.copy_(t.tensor(bias))
    return module


def _observed(t, module, names=("weight", "bias")):
    """The module's state_dict (keys and values), its pruned tensors, and the gradients after a forward/backward."""
    out = module(t.tensor(X))
    (out * out).sum().backward()
    state = {k: values(v) for k, v in module.state_dict().items()}
    grads = {n: values(p.grad) for n, p in module.named_parameters()}
    return state, {n: values(getattr(module, n)) for n in names}, grads


def _assert_same(ours, theirs):
    for got, want in zip(ours, theirs):
        assert list(got) == list(want)
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-12, atol=1e-12)


def _iterative(t):
    prune, module = _prune(t), _linear(t)
    prune.l1_unstructured(module, name="weight", amount=0.25)
    prune.ln_structured(module, name="weight", amount=2, n=2, dim=0)
    prune.ln_structured(module, name="weight", amount=0.25, n=1, dim=1)
    prune.l1_unstructured(module, "weight", amount=3, importance_scores=t.tensor(W[::-1].copy()))
    prune.l1_unstructured(module, "bias", amount=2)
    container = next(h for h in module._forward_pre_hooks.values() if h._tensor_name == "weight")
    kinds = [type(method).__name__ for method in container]
    return _observed(t, module), kinds, type(container).__name__, len(module._forward_pre_hooks)


def test_iterative_pruning_composes_masks_as_torch(torch_like, oracle):
    ours, theirs = _iterative(torch_like), _iterative(oracle)
    _assert_same(ours[0], theirs[0])
    assert (
        ours[1:]
        == theirs[1:]
        == (["L1Unstructured", "LnStructured", "LnStructured", "L1Unstructured"], "PruningContainer", 2)
    )
    state = ours[0][0]
    assert list(state) == ["weight_orig", "bias_orig", "weight_mask", "bias_mask"]
    assert (state["weight_orig"] == W).all() and (ours[0][2]["weight_orig"][state["weight_mask"] == 0] == 0).all()


def _global_and_custom(t):
    prune = _prune(t)
    first, second = _linear(t), _linear(t, W[:, ::-1].copy() * 0.9, B)
    prune.l1_unstructured(first, "weight", amount=4)
    parameters = [(first, "weight"), (second, "weight"), (second, "bias")]
    prune.global_unstructured(parameters, pruning_method=prune.L1Unstructured, amount=0.3)
    mask = t.tensor((np.arange(6) % 4 != 1).astype(np.float64))
    prune.custom_from_mask(first, "bias", mask=mask)
    return _observed(t, first), _observed(t, second), prune.is_pruned(first)


def test_global_unstructured_and_custom_from_mask_are_torchs(torch_like, oracle):
    ours, theirs = _global_and_custom(torch_like), _global_and_custom(oracle)
    for got, want in zip(ours[:2], theirs[:2]):
        _assert_same(got, want)
    assert ours[2] is theirs[2] is True
    assert int((ours[1][0]["weight_mask"] == 0).sum() + (ours[1][0]["bias_mask"] == 0).sum()) > 0


def _removed(t):
    prune, module = _prune(t), _linear(t)
    prune.ln_structured(module, "weight", amount=0.5, n=float("inf"), dim=-1)
    prune.remove(module, "weight")
    kept = [n for n, _ in module.named_parameters()], [n for n, _ in module.named_buffers()]
    weight_is_parameter = isinstance(module.weight, t.nn.Parameter)
    return _observed(t, module), kept, weight_is_parameter, prune.is_pruned(module), len(module._forward_pre_hooks)


def test_remove_makes_the_pruning_permanent(torch_like, oracle):
    ours, theirs = _removed(torch_like), _removed(oracle)
    _assert_same(ours[0], theirs[0])
    assert ours[1:] == theirs[1:] == ((["bias", "weight"], []), True, False, 0)
    assert (ours[0][0]["weight"] == 0).sum() == 12


def test_random_methods_prune_their_counts(torch_like):
    prune, module = _prune(torch_like), _linear(torch_like)
    prune.random_unstructured(module, "weight", amount=0.25)
    assert int((module.weight_mask == 0).sum()) == 6 and values(module.weight_orig).tolist() == W.tolist()
    prune.random_unstructured(module, "weight", amount=5)  # five more, among the eighteen left
    assert int((module.weight_mask == 0).sum()) == 11
    other = _linear(torch_like)
    prune.random_structured(other, "weight", amount=2, dim=0)
    rows = values(other.weight_mask).sum(axis=1)
    assert sorted(rows.tolist()) == [0, 0, 4, 4, 4, 4]
    assert values(other.weight).tolist() == (W * values(other.weight_mask)).tolist()
    pruned = prune.RandomUnstructured(amount=3).prune(torch_like.tensor(W))
    assert int((pruned == 0).sum()) == 3


def test_torchs_errors(torch_like, oracle):
    names = []
    for t in (torch_like, oracle):
        prune, module = _prune(t), _linear(t)
        with pytest.raises(ValueError, match=r"amount=1.5 should either be a float in the range \[0, 1\]"):
            prune.l1_unstructured(module, "weight", amount=1.5)
        with pytest.raises(TypeError, match="Invalid type for amount"):
            prune.l1_unstructured(module, "weight", amount="1")
        with pytest.raises(ValueError, match="amount=30 should be smaller than the number of parameters to prune=24"):
            prune.l1_unstructured(module, "weight", amount=30)
        names.append([n for n, _ in module.named_parameters()])  # `weight` a parameter again after the failure
        with pytest.raises(ValueError, match="Structured pruning can only be applied to multidimensional tensors"):
            prune.ln_structured(module, "bias", amount=1, n=2, dim=0)
        with pytest.raises(ValueError, match="Parameter 'weight' of module .* has to be pruned before"):
            prune.remove(module, "weight")
    assert names[0] == names[1] == ["bias", "weight"]


def _lenet(t):
    nn, F = t.nn, t.nn.functional

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 6, 3)
            self.conv2 = nn.Conv2d(6, 16, 3)
            self.fc1 = nn.Linear(16 * 5 * 5, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), (2, 2))
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = x.view(-1, int(x.nelement() / x.shape[0]))
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    return LeNet()


def _trained_lenet(t, state):
    prune, model = _prune(t), _lenet(t)
    model.load_state_dict({k: t.tensor(v) for k, v in state.items() if k not in ("x", "mask")})
    prune.custom_from_mask(model.conv1, "weight", mask=t.tensor(state["mask"]))
    prune.ln_structured(model.conv2, name="weight", amount=0.5, n=2, dim=0)
    prune.l1_unstructured(model.conv2, name="bias", amount=3)
    for name in ("fc1", "fc2", "fc3"):
        prune.l1_unstructured(getattr(model, name), name="weight", amount=0.4)
    optimizer = t.optim.SGD(model.parameters(), lr=0.05)
    x, y = t.tensor(state["x"]), t.tensor([1, 2, 3, 4])
    for _ in range(3):
        optimizer.zero_grad()
        loss = t.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    model(x)  # the pre-hooks recompute each weight from the stepped weight_orig
    return float(loss.item()), {k: values(v) for k, v in model.state_dict().items()}, values(model.conv2.weight)


def test_the_pruning_tutorials_lenet_trains_as_torchs(torch_like, oracle):
    rng = np.random.default_rng(3)
    state = {k: values(v) for k, v in _lenet(engine).state_dict().items()}
    state["x"] = rng.standard_normal((4, 1, 28, 28)).astype(np.float32)
    state["mask"] = (rng.random((6, 1, 3, 3)) > 0.5).astype(np.float32)
    ours, theirs = _trained_lenet(torch_like, state), _trained_lenet(oracle, state)
    assert ours[0] == pytest.approx(theirs[0], rel=1e-5)
    assert list(ours[1]) == list(theirs[1])
    for key in ours[1]:
        np.testing.assert_allclose(ours[1][key], theirs[1][key], rtol=1e-4, atol=1e-5)
    assert (ours[2][ours[1]["conv2.weight_mask"] == 0] == 0).all() and (ours[1]["conv2.weight_mask"] == 0).any()


def test_the_pruned_weights_gradient_by_finite_differences():
    method = _prune(engine).L1Unstructured(amount=0.5)
    assert engine.autograd.gradcheck(method.prune, (engine.tensor(W, requires_grad=True),))
    assert engine.autograd.gradcheck(
        lambda w: method.prune(w, importance_scores=engine.tensor(W[::-1].copy())),
        (engine.tensor(W, requires_grad=True),),
    )

"""`nn.AdaptiveLogSoftmaxWithLoss` against torch on the engine, the embedded client and a live server, with torch's
parameters loaded: the target log-probabilities, the loss and every gradient (None for the clusters no target falls
in, as torch's), batched and unbatched, `log_prob`, `predict`, a few training steps, the repr and torch's errors."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(5)
X = RNG.standard_normal((7, 8))
TARGETS = np.array([0, 3, 5, 9, 14, 2, 11])  # every cluster: [0, 4) head, [4, 8), [8, 12), [12, 15)


def _module(m, head_bias=True):
    torch.manual_seed(0)
    theirs = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 15, [4, 8, 12], div_value=2.0, head_bias=head_bias).double()
    if m is torch:
        return theirs
    ours = m.nn.AdaptiveLogSoftmaxWithLoss(8, 15, [4, 8, 12], div_value=2.0, head_bias=head_bias).double()
    ours.load_state_dict({k: m.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours


def _values(v):
    return None if v is None else np.asarray(v.detach().numpy())


def _run(m, x, targets, head_bias):
    module = _module(m, head_bias)
    leaf = m.tensor(x, requires_grad=True)
    output, loss = module(leaf, m.tensor(targets))
    loss.backward()
    grads = [_values(p.grad) for p in module.parameters()]
    return [_values(output), _values(loss), _values(leaf.grad), *grads, _values(module.log_prob(m.tensor(X)))]


@pytest.mark.parametrize(
    "x, targets, head_bias",
    [(X, TARGETS, True), (X[:3], TARGETS[:3], False), (X[2], np.array(5), True), (X[:2], np.array([13, 12]), True)],
    ids=["every-cluster", "head-and-first", "unbatched", "last-cluster-only"],
)
def test_outputs_loss_and_gradients_are_torchs(torch_like, x, targets, head_bias):
    got, want = _run(torch_like, x, targets, head_bias), _run(torch, x, targets, head_bias)
    assert len(got) == len(want)
    for i, (ours, theirs) in enumerate(zip(got, want)):
        assert (ours is None) == (theirs is None), f"item {i}"
        if ours is not None:
            assert ours.shape == theirs.shape, f"item {i}"
            np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12, err_msg=f"item {i}")


def test_predict_training_and_repr(torch_like):
    results = []
    for m in (torch_like, torch):
        module = _module(m)
        optimizer = m.optim.Adam(module.parameters(), lr=0.05)
        losses = []
        for _ in range(3):
            optimizer.zero_grad()
            loss = module(m.tensor(X), m.tensor(TARGETS)).loss
            loss.backward()
            optimizer.step()
            losses.append(float(loss.item()))
        results.append((losses, np.asarray(module.predict(m.tensor(X)).numpy()), repr(module)))
    (losses, predicted, text), (want_losses, want_predicted, want_text) = results
    np.testing.assert_allclose(losses, want_losses, rtol=1e-10)
    assert losses[-1] < losses[0] and predicted.tolist() == want_predicted.tolist() and text == want_text


ERRORS = [
    (lambda m: m.nn.AdaptiveLogSoftmaxWithLoss(8, 15, []), ValueError),
    (lambda m: m.nn.AdaptiveLogSoftmaxWithLoss(8, 15, [4, 15]), ValueError),
    (lambda m: m.nn.AdaptiveLogSoftmaxWithLoss(8, 15, [8, 4]), ValueError),
    (lambda m: _module(m)(m.tensor(X), m.tensor(TARGETS[:3])), RuntimeError),
    (lambda m: _module(m)(m.tensor(X[None]), m.tensor(np.zeros(1, np.int64))), RuntimeError),
    (lambda m: _module(m)(m.tensor(X), m.tensor(np.array(3))), RuntimeError),
    (lambda m: _module(m)(m.tensor(X), m.tensor(TARGETS[None])), RuntimeError),
    (lambda m: _module(m)(m.tensor(X[:2]), m.tensor(np.array([3, 15]))), RuntimeError),
    (lambda m: _module(m)(m.tensor(X[:2]), m.tensor(np.array([-1, 2]))), RuntimeError),
]


@pytest.mark.parametrize("make, kind", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_torchs_errors(torch_like, make, kind):
    messages = []
    for m in (torch_like, torch):
        with pytest.raises(kind) as caught:
            make(m)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]

"""`F.embedding_bag` and `nn.EmbeddingBag` (the text classification tutorial's model) against torch, on the engine,
the embedded client and a live server: values and gradients of the weight and of per_sample_weights in every mode,
2-d inputs, include_last_offset, padding_idx, empty bags, and torch's errors."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

WEIGHT = np.arange(30.0).reshape(10, 3) / 7 - 1
INDICES = [1, 2, 4, 5, 4, 3, 2, 9]
SEEDS = np.linspace(-1, 1, 9).reshape(3, 3)


def _bagged(m, mode, **options):
    weight = m.tensor(WEIGHT.copy(), requires_grad=True)
    offsets = m.tensor(options.pop("offsets", [0, 4, 4]))
    per_sample = options.pop("per_sample", None)
    if per_sample is not None:
        per_sample = m.tensor(np.asarray(per_sample, dtype=np.float64), requires_grad=True)
    out = m.nn.functional.embedding_bag(
        m.tensor(INDICES), weight, offsets, mode=mode, per_sample_weights=per_sample, **options
    )
    rows = out.shape[0]
    leaves = [weight] if per_sample is None else [weight, per_sample]
    grads = m.autograd.grad((out * m.tensor(SEEDS[:rows])).sum(), leaves)
    return [np.asarray(out.detach().numpy())] + [np.asarray(g.numpy()) for g in grads]


@pytest.mark.parametrize(
    "mode, options",
    [
        ("sum", {}),
        ("mean", {}),
        ("max", {}),
        ("mean", {"padding_idx": 2}),
        ("max", {"padding_idx": 4}),
        ("sum", {"per_sample": [0.5, 1, 2, -1, 3, 0.25, 1.5, 2]}),
        ("sum", {"offsets": [0, 3, 5, 8], "include_last_offset": True}),
        ("mean", {"offsets": [0, 0, 6], "include_last_offset": False}),
    ],
)
def test_embedding_bag_is_torchs(torch_like, mode, options):
    got, want = _bagged(torch_like, mode, **dict(options)), _bagged(torch, mode, **dict(options))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_a_2d_input_is_a_batch_of_equal_bags_and_the_module_trains(torch_like):
    results = []
    for m in (torch_like, torch):
        bag = m.nn.EmbeddingBag.from_pretrained(m.tensor(WEIGHT.copy()), freeze=False, mode="mean")
        linear = m.nn.Linear(3, 2).double()
        with m.no_grad():
            linear.weight.copy_(m.tensor([[0.5, -1.0, 0.25], [1.0, 0.5, -0.5]], dtype=m.float64))
            linear.bias.zero_()
        optimizer = m.optim.SGD([*bag.parameters(), *linear.parameters()], lr=0.1)
        for _ in range(3):
            optimizer.zero_grad()
            logits = linear(bag(m.tensor([[1, 2, 3], [4, 4, 9]])))
            loss = m.nn.functional.cross_entropy(logits, m.tensor([0, 1]))
            loss.backward()
            optimizer.step()
        results.append((float(loss.item()), np.asarray(bag.weight.detach().numpy()).copy()))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-12)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-12)
    assert repr(torch_like.nn.EmbeddingBag(10, 3, mode="sum")) == repr(torch.nn.EmbeddingBag(10, 3, mode="sum"))


def test_torchs_errors(torch_like):
    weight = torch_like.tensor(WEIGHT.copy())
    F = torch_like.nn.functional
    with pytest.raises(ValueError, match="if input is 2D, then offsets has to be None"):
        F.embedding_bag(torch_like.tensor([[1, 2]]), weight, torch_like.tensor([0]))
    with pytest.raises(NotImplementedError, match="per_sample_weights is only supported for mode='sum'"):
        F.embedding_bag(torch_like.tensor([1, 2]), weight, torch_like.tensor([0]), per_sample_weights=weight[0, :2])
    with pytest.raises(RuntimeError, match="argument #1 'indices' to have one of the following scalar types"):
        F.embedding_bag(torch_like.tensor([1.0, 2.0]), weight, torch_like.tensor([0]))

"""`F.embedding(max_norm=, norm_type=)` and `nn.Embedding(max_norm=)` against torch on the engine, the embedded
client and a live server: the looked-up rows of the weight renormalised in place under no_grad (PyTorch's
`embedding_renorm_`: scaled by max_norm / (norm + 1e-7) where the norm is over max_norm), the lookup's values and
the weight's gradient (the renormalisation is not differentiated, as in PyTorch: no finite-difference check), the
weight's version, and a module trained a few steps."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

WEIGHT = np.arange(30.0).reshape(10, 3) / 7 - 1
INDICES = [[1, 2, 4], [4, 9, 1]]


def _looked_up(m, dtype="float64", **options):
    weight = m.tensor(WEIGHT.copy(), dtype=getattr(m, dtype), requires_grad=True)
    version = weight._version
    out = m.nn.functional.embedding(m.tensor(INDICES), weight, **options)
    seed = m.arange(float(out.numel()), dtype=out.dtype).reshape(tuple(out.shape))
    (grad,) = m.autograd.grad((out * seed).sum(), [weight])
    arrays = [np.asarray(v.detach().numpy()) for v in (out, weight, grad)]
    return arrays, weight._version > version


@pytest.mark.parametrize(
    "options",
    [
        {"max_norm": 1.0},
        {"max_norm": 0.5, "norm_type": 1.0},
        {"max_norm": 0.75, "norm_type": 3.0},
        {"max_norm": 1.0, "norm_type": float("inf")},
        {"max_norm": 100.0},
        {"max_norm": 1.0, "padding_idx": 4},
        {"max_norm": 1.0, "dtype": "float32"},
    ],
    ids=str,
)
def test_embedding_max_norm_renormalises_the_rows_as_torch(torch_like, options):
    (got, got_bumped), (want, want_bumped) = _looked_up(torch_like, **options), _looked_up(torch, **options)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    assert got_bumped and want_bumped  # (an in-place update of the weight, even where no row changed)
    untouched = [i for i in range(10) if i not in (1, 2, 4, 9)]
    np.testing.assert_array_equal(got[1][untouched], WEIGHT[untouched].astype(got[1].dtype))


def test_an_embedding_module_with_max_norm_trains_as_torch(torch_like):
    results = []
    for m in (torch_like, torch):
        embedding = m.nn.Embedding.from_pretrained(m.tensor(WEIGHT.copy()), freeze=False, max_norm=1.5)
        optimizer = m.optim.SGD(embedding.parameters(), lr=0.5)
        for _ in range(3):
            optimizer.zero_grad()
            loss = (embedding(m.tensor(INDICES)) ** 2).sum()
            loss.backward()
            optimizer.step()
        results.append((loss.item(), np.asarray(embedding.weight.detach().numpy()).copy()))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-12)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-12)
    assert repr(torch_like.nn.Embedding(10, 3, max_norm=2.0)) == repr(torch.nn.Embedding(10, 3, max_norm=2.0))

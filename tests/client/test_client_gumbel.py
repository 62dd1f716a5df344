"""F.gumbel_softmax on the engine, the embedded client and a live server (`torch_like`): draws follow
softmax(logits) (PyTorch's Gumbel-max property; the noise is this project's stream, so values are not torch's),
`hard` gives one-hot rows whose gradient is the soft sample's (straight-through)."""

from __future__ import annotations

import numpy as np

from tests.client.test_client_nn_optim import values

LOGITS = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]])
W = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])


def _sample(t, hard, seed):
    t.manual_seed(seed)
    logits = t.tensor(LOGITS, requires_grad=True)
    y = t.nn.functional.gumbel_softmax(logits, tau=0.7, hard=hard)
    (y * t.tensor(W)).sum().backward()
    return values(y), values(logits.grad)


def test_hard_is_the_one_hot_of_the_soft_sample_with_its_gradient(torch_like):
    hard, hard_grad = _sample(torch_like, True, 3)
    soft, soft_grad = _sample(torch_like, False, 3)  # the same noise
    np.testing.assert_allclose(soft.sum(-1), 1.0, rtol=1e-12)
    assert ((hard == 0) | (hard == 1)).all() and (hard.sum(-1) == 1).all()
    assert (hard.argmax(-1) == soft.argmax(-1)).all()
    np.testing.assert_allclose(hard_grad, soft_grad, rtol=1e-10, atol=1e-12)


def test_hard_samples_follow_the_softmax_of_the_logits(torch_like):
    torch_like.manual_seed(0)
    logits = torch_like.tensor(np.repeat(LOGITS[:1], 4000, axis=0))
    counts = values(torch_like.nn.functional.gumbel_softmax(logits, tau=1.0, hard=True)).mean(0)
    expected = np.exp(LOGITS[0]) / np.exp(LOGITS[0]).sum()
    np.testing.assert_allclose(counts, expected, atol=0.03)
